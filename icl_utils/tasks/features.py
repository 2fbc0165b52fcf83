"""Regression over a teacher's nonlinear features: the task family of chapter 3 (Kim and Suzuki 2024).

A task is ``y = v^T f(x)`` with ``v ~ N(0, I_k)`` and inputs ``x ~ N(0, I_d)``, where the features are a teacher
two-layer network of sigmoid neurons with ``k`` outputs, a *mean-field* network

    h(x) = (1/M) sum_m a_m sigmoid(w_m^T x + b_m),      a_m in R^k,

whitened, ``f = L^-1 h`` with ``L L^T = E h h^T``, so that ``E f f^T = I_k`` (the paper's normalization; second
moments are uncentered throughout, as in the paper's ``Sigma``). The whitened teacher is again a mean-field network,
with output weights ``L^-1 a_m``, so that it can be mixed with a student's neurons. A *degenerate* teacher
(``rank < k``) has features of rank ``r``: ``f = P g`` for ``r`` whitened features ``g`` and a ``k x r`` matrix ``P``
with orthonormal columns, so ``E f f^T = P P^T`` is a projection of rank ``r``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

import torch
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks
from icl_utils.checks import Count, PositiveScale, Samples, Scale, Seed, Width, checked
from icl_utils.prompts import Prompt


def sigmoid_network(particles: Tensor, x: Tensor, k: int) -> Tensor:
    """The mean-field network ``(1/M) sum_m a_m sigmoid(w_m^T x + b_m)`` of ``M`` neurons, each a row
    ``(a_m, w_m, b_m)`` of ``particles`` (shape ``(..., M, k + d + 1)``), at inputs ``x`` (shape ``(..., K, d)``):
    ``(..., K, k)``. Leading dimensions broadcast: particles ``(S, M, p)`` are ``S`` networks (seeds trained
    together), evaluated on shared inputs ``(K, d)`` or on their own ``(S, K, d)``."""
    if isinstance(particles, Tensor) and not particles.is_floating_point():
        raise TypeError(f"particles must be a float tensor, got {particles.dtype}")
    if isinstance(particles, Tensor) and (particles.ndim < 2 or particles.shape[-2] == 0):  # a mean over M neurons
        raise ValueError(
            f"particles must hold at least one neuron, shape (..., M >= 1, p), got {tuple(particles.shape)}"
        )
    if checks.values_checked() and isinstance(particles, Tensor) and isinstance(x, Tensor):
        checks.finite("particles", particles.detach())  # a NaN neuron would make every output NaN
        checks.finite("x", x)
    return _sigmoid_network(particles, x, k)


def _sigmoid_network(particles: Tensor, x: Tensor, k: int) -> Tensor:
    """:func:`sigmoid_network` without its checks of values: the mean-field dynamics call it at every step, under
    torch.func transforms too, where a check of values cannot run."""
    k = checks.positive_int("k", k)
    if not isinstance(particles, Tensor) or particles.ndim < 2:
        raise ValueError("particles must be a tensor of shape (..., M, k + d + 1)")
    dim = particles.shape[-1] - k - 1
    if not isinstance(x, Tensor) or x.ndim < 1 or dim < 1 or x.shape[-1] != dim:
        raise ValueError(f"x must have last dimension d = {dim} to match particles of width k + d + 1 with k = {k}")
    if x.dtype != particles.dtype:
        raise TypeError(f"x must have the particles' dtype {particles.dtype}, got {x.dtype}")
    try:  # the networks' leading axes (S students) and the inputs' broadcast
        networks = math.prod(torch.broadcast_shapes(particles.shape[:-2], x.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"x must have leading axes that broadcast with the particles', {tuple(particles.shape[:-2])}, got "
            f"{tuple(x.shape[:-2])}"
        ) from None
    inputs, neurons = (x.shape[-2] if x.ndim > 1 else 1), particles.shape[-2]
    checks.allocation(  # one tensor of it (before the sigmoid, then after) for every network, input and neuron
        f"the hidden layer of particles and x: {networks} networks (leading axes) * {inputs} inputs * {neurons} "
        "neurons",
        networks * inputs * neurons,
        x.dtype,
    )
    a, w, b = particles[..., :k], particles[..., k:-1], particles[..., -1]
    squeeze = x.ndim == 1
    x = x[None] if squeeze else x
    h = torch.sigmoid(x @ w.mT + b[..., None, :]) @ a / particles.shape[-2]
    return h[..., 0, :] if squeeze else h


@checked
@dataclass(frozen=True)
class TeacherFeatures:
    """Tasks ``y = v^T f(x) + noise`` over whitened teacher features ``f`` (see the module docstring). The teacher's
    ``width`` neurons have ``w ~ N(0, (scale^2 / d) I)``, ``b ~ N(0, 1)``, ``a ~ N(0, I_k)``, drawn from ``seed``;
    the whitening is computed on ``n_whiten`` inputs from the same seed."""

    dim: Width
    k: Width
    width: Width = 16
    rank: Width | None = None
    scale: PositiveScale = 2.0
    noise_std: Scale = 0.0
    seed: Seed = 0
    n_whiten: Samples = 2**16
    _particles: Tensor = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dim, k, width, scale, n_whiten = self.dim, self.k, self.width, float(self.scale), self.n_whiten
        rank = k if self.rank is None else self.rank
        if rank > k:
            raise ValueError(f"rank must be at most k = {k}, got {rank}")
        # the whitening inputs, their pre-activations and the teacher's weights, before torch tries to allocate them
        checks.allocation("n_whiten * dim", n_whiten * dim, torch.float64)
        checks.allocation("3 * n_whiten * width (x w^T, plus b, the sigmoid)", 3 * n_whiten * width, torch.float64)
        checks.allocation("width * dim", width * dim, torch.float64)
        checks.allocation("n_whiten * k (the features to whiten)", n_whiten * rank, torch.float64)
        checks.work(
            f"TeacherFeatures' whitening at n_whiten = {n_whiten}, width = {width}, dim = {dim}, k = {rank} "
            "(2 n_whiten width (dim + k) + 2 n_whiten k^2 + 10 k^3)",
            2 * n_whiten * width * (dim + rank) + 2 * n_whiten * rank**2 + 10 * rank**3,
        )
        checks.allocation("3 * width * k (the output weights, whitened)", 3 * width * k, torch.float64)
        g = torch.Generator().manual_seed(self.seed)
        a = torch.randn(width, rank, generator=g, dtype=torch.float64)
        w = torch.randn(width, dim, generator=g, dtype=torch.float64) * scale / dim**0.5
        b = torch.randn(width, 1, generator=g, dtype=torch.float64)
        x = torch.randn(n_whiten, dim, generator=g, dtype=torch.float64)
        h = _sigmoid_network(torch.cat([a, w, b], 1), x, rank)
        evals, evecs = torch.linalg.eigh(h.T @ h / n_whiten)
        if evals.min() < 1e-10 * evals.max():
            raise ValueError("the teacher's features are degenerate before whitening; use more neurons (width)")
        whiten = evecs / evals.sqrt()  # rank x rank, L^-1 in the row convention: g = h @ whiten
        embed = torch.linalg.qr(torch.randn(k, rank, generator=g, dtype=torch.float64))[0]  # k x r, orthonormal cols
        a_out = a @ whiten @ embed.T  # the whitened teacher's output weights, (width, k)
        object.__setattr__(self, "_particles", torch.cat([a_out, w, b], 1))

    @property
    def particles(self) -> Tensor:
        """The whitened teacher as neurons ``(a_m, w_m, b_m)``, float64, shape ``(width, k + d + 1)``: its
        :func:`sigmoid_network` is ``f``."""
        return self._particles.clone()

    @checked
    def features(self, x: Annotated[Float[Tensor, "*batch {self.dim}"], checks.Finite]) -> Tensor:
        """The teacher features ``f(x)``, shape ``(..., k)``, in the dtype and on the device of ``x``."""
        return _sigmoid_network(self._particles.to(x.device, x.dtype), x, self.k)

    @checked
    def inputs(self, count: Count, generator: torch.Generator) -> Tensor:
        """``count`` inputs ``x ~ N(0, I_d)`` on the generator's device."""
        checks.allocation("count * dim", count * self.dim)
        return torch.randn(count, self.dim, generator=generator, device=generator.device)

    def sample(self, batch: int, n: int, generator: torch.Generator) -> Prompt:
        """``batch`` prompts of ``n`` examples and a query, each with its own ``v ~ N(0, I_k)``."""
        batch, n, generator = checks.sample_sizes(batch, n, generator, self.dim)
        dev = generator.device
        v = torch.randn(batch, self.k, generator=generator, device=dev)
        xs = torch.randn(batch, n + 1, self.dim, generator=generator, device=dev)
        ys = (self.features(xs) * v[:, None, :]).sum(-1)
        if self.noise_std > 0:
            ys = ys + self.noise_std * torch.randn(ys.shape, generator=generator, device=dev)
        return Prompt.from_points(xs, ys)
