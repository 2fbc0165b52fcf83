"""Noisy linear regression with a Gaussian prior: the task family of chapters 1 and 5.

A task is a weight vector ``w ~ N(prior_mean, prior_cov)``; inputs are ``x ~ N(0, x_cov)``; labels are
``y = <w, x> + noise_std * N(0, 1)``. ``LinearRegression(dim=20)`` is Garg et al.'s setting (isotropic, noiseless);
``x_range=0.5`` draws inputs from ``U(-0.5, 0.5)^d`` instead, as von Oswald et al.'s code does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks
from icl_utils.checks import Count, PositiveScale, Scale, Size, Width, checked
from icl_utils.estimators import bayes_linear_regression
from icl_utils.prompts import Prompt


@checked
@dataclass(frozen=True)
class LinearRegression:
    """A Gaussian-prior linear-regression task family; ``None`` means zero mean or identity covariance. Inputs are
    ``N(0, x_cov)``, or uniform on ``[-x_range, x_range]^d`` when ``x_range`` is given."""

    dim: Width
    noise_std: Scale = 0.0
    prior_mean: Annotated[Float[Tensor, " {dim}"], checks.Finite, checks.WithinScale] | None = None
    prior_cov: Float[Tensor, " {dim} {dim}"] | None = None
    x_cov: Float[Tensor, " {dim} {dim}"] | None = None
    x_range: PositiveScale | None = None
    _prior_sqrt: Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _x_sqrt: Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_std", float(self.noise_std))
        if self.prior_mean is not None:
            object.__setattr__(self, "prior_mean", self.prior_mean.double().cpu())
        # a covariance's eigenvalues, then its square root: refused before either runs
        for name, cov in (("prior_cov", self.prior_cov), ("x_cov", self.x_cov)):
            if cov is not None:
                checks.work(f"{name}'s eigenvalues and square root at dim = {self.dim} (18 dim^3)", 18 * self.dim**3)
        if self.prior_cov is not None:
            cov = checks.psd_matrix("prior_cov", self.prior_cov, self.dim)
            object.__setattr__(self, "prior_cov", cov)
            object.__setattr__(self, "_prior_sqrt", checks.psd_sqrt(cov, "prior_cov"))
        if self.x_cov is not None:
            cov = checks.psd_matrix("x_cov", self.x_cov, self.dim)
            object.__setattr__(self, "x_cov", cov)
            object.__setattr__(self, "_x_sqrt", checks.psd_sqrt(cov, "x_cov"))
        if self.x_range is not None:
            if self.x_cov is not None:
                raise ValueError("give x_cov (Gaussian inputs) or x_range (uniform inputs), not both")
            object.__setattr__(self, "x_range", float(self.x_range))

    @property
    def gaussian_inputs(self) -> bool:
        """Whether the inputs are Gaussian, as the closed forms of :mod:`icl_utils.exact` assume."""
        return self.x_range is None

    @property
    def noise_var(self) -> float:
        return self.noise_std**2

    def mean(self) -> Tensor:
        """The prior mean as a float64 CPU tensor."""
        return self.prior_mean if self.prior_mean is not None else torch.zeros(self.dim, dtype=torch.float64)

    def cov(self) -> Tensor:
        """The prior covariance as a float64 CPU tensor."""
        return self.prior_cov if self.prior_cov is not None else torch.eye(self.dim, dtype=torch.float64)

    def input_cov(self) -> Tensor:
        """The covariance ``H`` of the inputs as a float64 CPU tensor."""
        if self.x_range is not None:
            return self.x_range**2 / 3 * torch.eye(self.dim, dtype=torch.float64)
        return self.x_cov if self.x_cov is not None else torch.eye(self.dim, dtype=torch.float64)

    @checked
    def sample_weights(self, batch: Count, generator: torch.Generator) -> Tensor:
        """``batch`` task vectors ``w`` of shape ``(batch, dim)`` on the generator's device."""
        checks.allocation("batch * dim", batch * self.dim)
        dev = generator.device
        w = torch.randn(batch, self.dim, generator=generator, device=dev)
        if self._prior_sqrt is not None:
            w = w @ self._prior_sqrt.to(dev, torch.float32)
        if self.prior_mean is not None:
            w = w + self.prior_mean.to(dev, torch.float32)
        return w

    @checked
    def sample(
        self,
        batch: Count,
        n: Size,
        generator: torch.Generator,
        active_dims: Count | None = None,
        weights: Annotated[Float[Tensor, "{batch} {self.dim}"], checks.Finite, checks.WithinScale] | None = None,
    ) -> Prompt:
        """``batch`` prompts of ``n`` context examples and a query, on the generator's device.

        ``active_dims`` keeps only the first coordinates of x (the others are zero), as in Garg et al.'s
        curriculum. ``weights`` fixes the tasks (shape ``(batch, dim)``) instead of drawing them from the prior.
        """
        checks.allocation("batch * (n + 1) * dim", batch * (n + 1) * self.dim)
        dev = generator.device
        if weights is None:
            weights = self.sample_weights(batch, generator)
        weights = weights.to(dev, torch.float32)
        if self.x_range is not None:
            xs = (2 * torch.rand(batch, n + 1, self.dim, generator=generator, device=dev) - 1) * self.x_range
        else:
            xs = torch.randn(batch, n + 1, self.dim, generator=generator, device=dev)
        if self._x_sqrt is not None:
            xs = xs @ self._x_sqrt.to(dev, torch.float32)
        if active_dims is not None:
            if active_dims > self.dim:
                raise ValueError(f"active_dims must be <= dim={self.dim}, got {active_dims}")
            xs[:, :, active_dims:] = 0
        ys = torch.einsum("bnd,bd->bn", xs, weights)
        if self.noise_std > 0:
            ys = ys + self.noise_std * torch.randn(ys.shape, generator=generator, device=dev)
        return Prompt.from_points(xs, ys)

    def posterior_mean(self, prompt: Prompt) -> Tensor:
        """The Bayes-optimal prediction at the query for this prior: the posterior mean of ``<w, x_query>``."""
        if isinstance(prompt, Prompt) and prompt.dim != self.dim:
            raise ValueError(f"prompt must have dim = {self.dim} (the task's), got {prompt.dim}")
        return bayes_linear_regression(prompt, self.mean(), self.cov(), self.noise_var)
