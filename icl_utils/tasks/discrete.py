"""Orthonormal discrete features (Huang, Cheng and Liang, 2024): chapter 6's task family.

There are ``K`` orthonormal features ``v_1..v_K`` in ``R^d``; every input (context or query) equals ``v_k`` with
probability ``p_k``; a task is ``w ~ N(0, I_d)`` and ``y = <w, x>``, noiseless.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import Distribution, Fraction, Seed, Width, checked
from icl_utils.prompts import Prompt

#: two or more features, at most config.MAX_WIDTH
FeatureCount = checks.declare(
    int,
    lambda v: not isinstance(v, bool) and 2 <= v <= config.MAX_WIDTH,
    f"in [2, {config.MAX_WIDTH}] (config.MAX_WIDTH)",
)


@checked
def imbalanced_probs(n_features: FeatureCount, dominant: Fraction) -> Tensor:
    """``p_1 = dominant`` and the rest share ``1 - dominant`` equally; ``dominant = 1/K`` is the balanced case."""
    rest = (1 - dominant) / (n_features - 1)
    return torch.tensor([dominant] + [rest] * (n_features - 1), dtype=torch.float64)


@checked
@dataclass(frozen=True)
class DiscreteFeatures:
    """``K = len(probs)`` orthonormal features in ``R^dim`` drawn with probabilities ``probs``.

    The features are the columns of ``features`` (shape ``(dim, K)``): a random orthonormal frame drawn with
    ``seed``, so nothing depends on the features being coordinate vectors.
    """

    dim: Width
    probs: Distribution
    seed: Seed = 0
    features: Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dim = self.dim
        probs = self.probs.double().cpu()
        if probs.numel() > dim:
            raise ValueError(f"at most dim={dim} orthonormal features fit in R^{dim}, got K={probs.numel()}")
        object.__setattr__(self, "probs", probs)
        # the random frame: a dim x dim QR, which holds about three matrices of that size
        checks.allocation("3 * dim * dim (a QR of the random frame)", 3 * dim * dim, torch.float64)
        checks.work(f"a QR of the random frame at dim = {dim} (5 dim^3)", 5 * dim**3)
        gen = torch.Generator().manual_seed(self.seed)
        frame, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
        object.__setattr__(self, "features", frame[:, : probs.numel()])

    @property
    def n_features(self) -> int:
        return self.probs.numel()

    def sample(self, batch: int, n: int, generator: torch.Generator) -> Prompt:
        """``batch`` prompts of ``n`` examples and a query on the generator's device."""
        prompt, _ = self.sample_with_labels(batch, n, generator)
        return prompt

    def sample_with_labels(self, batch: int, n: int, generator: torch.Generator) -> tuple[Prompt, Tensor]:
        """Prompts and the feature index of every point, shape ``(batch, n + 1)`` (the query last)."""
        batch, n, generator = checks.sample_sizes(batch, n, generator, self.dim)
        dev = generator.device
        idx = torch.multinomial(
            self.probs.to(dev, torch.float32), batch * (n + 1), replacement=True, generator=generator
        ).view(batch, n + 1)
        xs = self.features.to(dev, torch.float32).T[idx]
        w = torch.randn(batch, self.dim, generator=generator, device=dev)
        ys = torch.einsum("bnd,bd->bn", xs, w)
        return Prompt.from_points(xs, ys), idx
