"""Chapter 2's student: a mean-field MLP of sigmoid neurons feeding linear attention (Kim and Suzuki 2024).

The student is a set of ``M`` particles ``(a_m, w_m, b_m)`` (rows of one tensor), its features the mean-field
network ``h_mu(x) = (1/M) sum_m a_m sigmoid(w_m^T x + b_m)`` in ``R^k``
(:func:`icl_utils.tasks.features.sigmoid_network`). For tasks ``y = v^T f(x)`` with ``v ~ N(0, I_k)`` and
infinitely long prompts, linear attention predicts ``E[y h(x)]^T Gamma h(x_q) = v^T Sigma_{o,mu} Gamma h(x_q)``, so the
ICL loss averaged over tasks is (the paper's eq. 2)

    L(mu, Gamma) = E_x || f(x) - Sigma_{o,mu} Gamma h_mu(x) ||^2,

with ``Sigma_{o,mu} = E f h_mu^T`` and ``Sigma_{mu,mu} = E h_mu h_mu^T`` (uncentered). Minimizing over ``Gamma`` (a
least-squares problem, the fast timescale) gives ``Gamma = Sigma_{mu,mu}^-1`` and the two-timescale objective

    L(mu) = E ||f||^2 - tr(Sigma_{o,mu} Sigma_{mu,mu}^-1 Sigma_{mu,o}),

the *static* model's loss. The *modified* dynamics add the birth-death and Gaussian-process perturbation steps of
the paper's Algorithm 1 (:class:`BirthDeathPerturbation`). Expectations are averages over a fixed sample of inputs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from icl_utils import checks
from icl_utils.tasks.features import sigmoid_network


def init_particles(width: int, dim: int, k: int, generator: torch.Generator, scale: float = 1.0) -> Tensor:
    """``width`` particles from the initial distribution ``rho_0``: ``a ~ N(0, I_k)``, ``w ~ N(0, (scale^2/d) I)``,
    ``b ~ N(0, 1)``; shape ``(width, k + d + 1)``, on the generator's device."""
    width, dim, k = (checks.positive_int(n, v) for n, v in (("width", width), ("dim", dim), ("k", k)))
    scale = checks.nonnegative_float("scale", scale, strict=True)
    generator = checks.generator(generator)
    z = torch.randn(width, k + dim + 1, generator=generator, device=generator.device)
    z[:, k:-1] *= scale / dim**0.5
    return z


def _moments(particles: Tensor, targets: Tensor, x: Tensor, k: int,
             centered: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(targets, h, Sigma_{o,mu}, Sigma_{mu,mu})`` on the sample ``x`` with teacher features ``targets`` (shape
    ``(K, k_o)``); with ``centered`` both have their sample means removed first."""
    if not isinstance(targets, Tensor) or targets.ndim != 2 or not isinstance(x, Tensor) or len(targets) != len(x):
        raise ValueError("targets and x must be tensors with one row per sample input")
    h = sigmoid_network(particles, x, k)
    if centered:
        h, targets = h - h.mean(0), targets - targets.mean(0)
    return targets, h, targets.T @ h / len(x), h.T @ h / len(x)


def attention_loss(particles: Tensor, gamma: Tensor, targets: Tensor, x: Tensor) -> Tensor:
    """``L(mu, Gamma) = E || f - Sigma_{o,mu} Gamma h_mu ||^2``, the ICL loss of the attention model with infinitely
    long prompts, averaged over tasks ``v ~ N(0, I)``; ``targets = f(x)`` on the sample ``x``."""
    k = gamma.shape[0] if isinstance(gamma, Tensor) and gamma.ndim == 2 else 0
    if k == 0 or tuple(gamma.shape) != (k, k):
        raise ValueError("gamma must be a square (k, k) tensor")
    _, h, cross, _ = _moments(particles, targets, x, k)
    return (targets - h @ (cross @ gamma).T).square().sum(1).mean()


def optimal_gamma(particles: Tensor, x: Tensor, k: int, ridge: float = 1e-8) -> Tensor:
    """The fast timescale's limit ``Gamma = (Sigma_{mu,mu} + ridge * tr(Sigma_{mu,mu})/k I)^-1``."""
    h = sigmoid_network(particles, x, k)
    cov = h.T @ h / len(x)
    return torch.linalg.inv(_regularized(cov, ridge))


def _regularized(cov: Tensor, ridge: float) -> Tensor:
    ridge = checks.nonnegative_float("ridge", ridge, strict=True)
    k = cov.shape[0]
    evals = torch.linalg.eigvalsh(cov.detach())
    if evals.min() < 1e3 * ridge * evals.max().clamp(min=1e-30):
        warnings.warn(
            f"Sigma_mu,mu is nearly singular (eigenvalues {evals.min().item():.2e} to {evals.max().item():.2e}): the "
            f"student's features are nearly collinear; the inverse uses a ridge of {ridge:g} times the mean eigenvalue",
            RuntimeWarning, stacklevel=3)
    return cov + ridge * torch.trace(cov) / k * torch.eye(k, dtype=cov.dtype, device=cov.device)


def static_loss(particles: Tensor, targets: Tensor, x: Tensor, k: int, ridge: float = 1e-8,
                centered: bool = False) -> Tensor:
    """The two-timescale objective ``L(mu) = E ||f||^2 - tr(Sigma_{o,mu} Sigma_{mu,mu}^-1 Sigma_{mu,o})``: the
    attention loss at the optimal ``Gamma``, which is the error of the best linear readout of ``targets`` from the
    student's features. With ``centered`` the readout may also add a constant (means removed from both). A (nearly)
    singular ``Sigma_{mu,mu}`` gets a small ridge and a warning instead of a NaN."""
    targets, _, cross, cov = _moments(particles, targets, x, k, centered)
    explained = torch.trace(cross @ torch.linalg.solve(_regularized(cov, ridge), cross.T))
    return targets.square().sum(1).mean() - explained


def gp_perturbation(particles: Tensor, generator: torch.Generator, size: float, bandwidth: float) -> Tensor:
    """A displacement of every particle drawn from a vector-valued Gaussian process ``xi ~ GP(0, K(theta, theta') I)``
    with the Gaussian kernel of ``bandwidth``, evaluated at the particles: nearby particles move together, as a
    smooth velocity field on parameter space would move them (the paper's Definition E.8). Scaled by ``size``."""
    size = checks.nonnegative_float("size", size, strict=True)
    bandwidth = checks.nonnegative_float("bandwidth", bandwidth, strict=True)
    p = particles.detach().double()
    kernel = torch.exp(-torch.cdist(p, p).square() / (2 * bandwidth**2))
    root = torch.linalg.cholesky(kernel + 1e-6 * torch.eye(len(p), dtype=p.dtype, device=p.device))
    z = torch.randn(p.shape, generator=generator, device=generator.device, dtype=p.dtype)
    return (size * root @ z).to(particles.dtype)


@dataclass
class BirthDeathPerturbation:
    """The modified dynamics of the paper's Algorithm 1, as a ``hook`` for
    :func:`icl_utils.train.gradient_descent`: when the loss has not dropped by ``threshold`` (relative) over the last
    ``patience`` steps, a ``fraction`` of the particles, chosen at random, are replaced by fresh draws from the
    initial distribution (birth-death) and every particle is displaced by a Gaussian-process perturbation; then the
    dynamics wait another ``patience`` steps. Once the loss is below ``tolerance`` (the algorithm's convergence
    error epsilon) it no longer intervenes: near a minimum the loss always stalls, and a perturbation there only
    undoes progress. ``events`` records the steps at which it intervened."""

    sample_init: Callable[[int], Tensor]  # count -> fresh particles from rho_0
    generator: torch.Generator
    patience: int = 100
    threshold: float = 0.01
    fraction: float = 0.05
    size: float = 0.1
    bandwidth: float = 1.0
    tolerance: float = 0.0
    events: list[int] = field(default_factory=list)
    _losses: list[float] = field(default_factory=list, repr=False)
    _last: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.patience = checks.positive_int("patience", self.patience)
        self.threshold = checks.nonnegative_float("threshold", self.threshold)
        self.tolerance = checks.nonnegative_float("tolerance", self.tolerance)
        self.fraction = checks.nonnegative_float("fraction", self.fraction)
        if self.fraction > 1:
            raise ValueError(f"fraction must be in [0, 1], got {self.fraction}")

    def __call__(self, step: int, particles: Tensor, loss: float) -> None:
        self._losses.append(loss)
        if step - self._last < self.patience or len(self._losses) <= self.patience or loss < self.tolerance:
            return
        before = self._losses[-self.patience - 1]
        if loss > (1 - self.threshold) * before:
            count = math.ceil(self.fraction * len(particles))
            dev = particles.device
            idx = torch.randperm(len(particles), generator=self.generator, device=self.generator.device)[:count].to(dev)
            particles[idx] = self.sample_init(count).to(particles.dtype)
            particles += gp_perturbation(particles, self.generator, self.size, self.bandwidth)
            self.events.append(step)
            self._last = step
