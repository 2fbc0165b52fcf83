"""Gaussian single-index tasks on a hidden low-dimensional subspace: the task family of chapter 4.

A task is ``f(x) = sum_{i=k}^{P} c_i He_i(<x, beta>)`` with ``x ~ N(0, I_d)``, a direction ``beta`` uniform on the
unit sphere of a fixed ``r``-dimensional subspace ``S`` of ``R^d``, and random link coefficients ``c`` with
``sum_i c_i^2 = 1`` and ``E[c_k] != 0``: the information exponent is ``k`` (Oko, Song, Suzuki and Wu 2024).
``He_i`` are the probabilists' Hermite polynomials normalized so that ``E[He_i(z) He_j(z)] = 1{i = j}``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Annotated

import torch
from beartype.vale import Is
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks
from icl_utils.checks import (
    Columns,
    Count,
    Finite,
    Offset,
    Pair,
    Scale,
    Seed,
    Width,
    checked,
    finite_flag,
    values_checked,
)
from icl_utils.prompts import Prompt

MAX_DEGREE = 170  # He_i is divided by sqrt(i!), and 171! overflows a float64
#: a Hermite degree within MAX_DEGREE
Degree = Annotated[int, Is[lambda v: not isinstance(v, bool) and 0 <= v <= MAX_DEGREE]]
checks.describe(Degree, "an int", f"in [0, {MAX_DEGREE}] (MAX_DEGREE: sqrt(degree!) overflows a float64 above)")


@checked
def hermite_coefficients(degree: Degree) -> Tensor:
    """Monomial coefficients of the normalized Hermite polynomials: row ``i`` holds ``a_j`` with
    ``He_i(z) = sum_j a_j z^j``, shape ``(degree + 1, degree + 1)``, float64 (the recurrence of :func:`hermite`)."""
    monic = torch.zeros(degree + 1, degree + 1, dtype=torch.float64)
    monic[0, 0] = 1.0
    if degree >= 1:
        monic[1, 1] = 1.0
    for i in range(1, degree):
        monic[i + 1, 1:] = monic[i, :-1]
        monic[i + 1] -= i * monic[i - 1]
    norms = torch.tensor([math.sqrt(math.factorial(i)) for i in range(degree + 1)], dtype=torch.float64)
    return monic / norms[:, None]


@checked
def hermite(z: Annotated[Float[Tensor, "*shape"], Finite], degree: Degree) -> Float[Tensor, "*shape {degree+1}"]:
    """Normalized Hermite polynomials ``He_0(z), ..., He_degree(z)``, stacked on a new last axis.

    The recurrence ``H_{i+1} = z H_i - i H_{i-1}`` gives the monic polynomials; dividing by ``sqrt(i!)`` makes them
    orthonormal under ``N(0, 1)``. Values past the dtype's range (degree 170 at ``z = 10`` in float32) are an error.
    """
    out = _hermite(z, degree)
    if values_checked() and bool(finite_flag(z)) and not bool(finite_flag(out)):  # z^degree past the dtype's range
        raise ValueError(f"degree {degree} overflows {z.dtype} at |z| up to {z.abs().max().item():.3g}; lower degree")
    return out


def _hermite(z: Tensor, degree: int) -> Tensor:
    """:func:`hermite` without its checks: the sampler's, at every step (no host sync)."""
    polys = [torch.ones_like(z)]
    if degree >= 1:
        polys.append(z)
    for i in range(1, degree):
        polys.append(z * polys[i] - i * polys[i - 1])
    return torch.stack([p / math.sqrt(math.factorial(i)) for i, p in enumerate(polys)], dim=-1)


#: the largest degree of a sampled link: past it the monic Hermite polynomials of float32 inputs a few standard
#: deviations out (z^30 at z = 19) overflow, and labels come out inf or NaN (degree 60 did at z = 5)
LinkDegree = checks.declare(int, lambda v: not isinstance(v, bool) and 0 <= v <= 30, "in [0, 30] (float32's range)")


@checked
@dataclass(frozen=True)
class SingleIndexTasks:
    """Single-index tasks ``sum_{i=k}^{P} c_i He_i(<x, beta>)`` with ``beta`` in a hidden ``r``-dim subspace.

    ``subspace_seed`` fixes the subspace ``S`` (a uniformly random ``r``-dimensional subspace of ``R^d``, its
    orthonormal basis in the attribute ``basis``, shape ``(d, r)``). Link coefficients are ``c = g / ||g||`` with
    independent ``g_i ~ N(0, 1)``, except ``g_k ~ N(lead_mean, 1)``, so that ``E[c_k] != 0``.
    """

    dim: Width
    subspace_dim: Width
    min_degree: Count = 2
    max_degree: LinkDegree = 3
    noise_std: Scale = 0.0
    lead_mean: Offset = 2.0
    subspace_seed: Seed = 0
    basis: Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dim, r, k = self.dim, self.subspace_dim, self.min_degree
        if r > dim:
            raise ValueError(f"subspace_dim must be <= dim={dim}, got {r}")
        if self.max_degree < k:
            raise ValueError(f"max_degree must be >= min_degree={k}, got {self.max_degree}")
        object.__setattr__(self, "noise_std", float(self.noise_std))
        if self.lead_mean == 0:
            raise ValueError(f"lead_mean must be a non-zero number (E[c_k] != 0), got {self.lead_mean}")
        g = torch.Generator().manual_seed(self.subspace_seed)
        checks.allocation("3 * dim * subspace_dim (a QR of the subspace)", 3 * dim * r, torch.float64)
        checks.work(f"a QR of the subspace at dim = {dim}, subspace_dim = {r} (5 dim subspace_dim^2)", 5 * dim * r**2)
        basis, _ = torch.linalg.qr(torch.randn(dim, r, generator=g, dtype=torch.float64))
        object.__setattr__(self, "basis", basis)

    @property
    def n_coefficients(self) -> int:
        """``P - k + 1``, the number of link coefficients ``c_k, ..., c_P``."""
        return self.max_degree - self.min_degree + 1

    @checked
    def sample_directions(self, batch: Count, generator: torch.Generator) -> Tensor:
        """``batch`` directions uniform on the unit sphere of ``S``, shape ``(batch, d)``."""
        checks.allocation("batch * dim", batch * self.dim)
        z = torch.randn(batch, self.subspace_dim, generator=generator, device=generator.device)
        z = z / z.norm(dim=1, keepdim=True)
        return z @ self.basis.T.to(generator.device, torch.float32)

    @checked
    def sample_links(self, batch: Count, generator: torch.Generator) -> Tensor:
        """Coefficients ``c_k, ..., c_P`` of ``batch`` links, shape ``(batch, P - k + 1)``, unit norm."""
        checks.allocation("batch * n_coefficients", batch * self.n_coefficients)
        g = torch.randn(batch, self.n_coefficients, generator=generator, device=generator.device)
        g[:, 0] += self.lead_mean
        return g / g.norm(dim=1, keepdim=True)

    @checks.finite_result("z")
    @checked
    def link(
        self,
        z: Annotated[Float[Tensor, " B *rest"], Finite],
        coeffs: Annotated[Float[Tensor, "B {self.n_coefficients}"], Finite],
    ) -> Tensor:
        """``sum_i c_i He_i(z)`` for ``z`` of shape ``(B, ...)`` and coefficients ``(B, P - k + 1)``, one row of
        ``c_k, ..., c_P`` per row of ``z``."""
        he = _hermite(z, self.max_degree)[..., self.min_degree :]
        return (he * coeffs.view(coeffs.shape[0], *([1] * (z.ndim - 1)), -1)).sum(-1)

    @property
    def lead_coefficient_mean(self) -> float:
        """``E[c_k]``, the mean of the lowest-degree link coefficient, by Monte Carlo over ``2^22`` links from a fixed
        seed (float64; standard error below ``2e-4``). The higher coefficients have mean zero (``g_i`` is symmetric).
        """
        return _lead_coefficient_mean(self.n_coefficients, self.lead_mean)

    @checks.finite_result("x")
    @checked
    def conditional_mean(self, x: Annotated[Float[Tensor, "*batch {self.dim}"], checks.Finite]) -> Tensor:
        """The prompt-free predictor ``E[y | x]``, averaged over the task (direction and link), shape ``x.shape[:-1]``.

        Only ``c_k`` has a non-zero mean, so ``E[y | x] = E[c_k] E_beta[He_k(<x, beta>)]``; for ``beta`` uniform on
        the unit sphere of ``S`` and ``u`` the coordinates of ``x`` in ``S``, ``<x, beta>^j`` averages to
        ``|u|^j E[beta_1^j]`` with ``E[beta_1^(2l)] = (2l - 1)!! / (r (r + 2) ... (r + 2l - 2))`` (odd moments 0). It
        knows the subspace and ignores the prompt: the best a model can do from its weights alone.
        """
        s = (x.double() @ self.basis.to(x.device)).square().sum(-1)  # |u|^2
        poly = self._mean_link_in_s()
        return sum(a * s**j for j, a in enumerate(poly.tolist())).to(x.dtype)

    def prompt_free_risk(self) -> float:
        """The risk ``E (y - E[y | x])^2`` of :meth:`conditional_mean`, in closed form: ``E y^2 = 1 + noise^2`` less
        ``E[m(x)^2]``, where ``m`` is a polynomial in ``s = |u|^2 ~ chi^2_r`` and ``E[s^j] = r (r + 2) ... (r + 2j -
        2)``."""
        poly = self._mean_link_in_s()
        r = self.subspace_dim
        moments = [math.prod(r + 2 * i for i in range(j)) for j in range(2 * len(poly) - 1)]
        second = sum(a * b * moments[i + j] for i, a in enumerate(poly.tolist()) for j, b in enumerate(poly.tolist()))
        return 1.0 + self.noise_std**2 - second

    def _mean_link_in_s(self) -> Tensor:
        """Coefficients ``p_j`` of ``E[y | x] = sum_j p_j s^j`` with ``s = |u|^2``."""
        k, r = self.min_degree, self.subspace_dim
        he = hermite_coefficients(k)[k]
        poly = torch.zeros(k // 2 + 1, dtype=torch.float64)
        for l in range(k // 2 + 1):  # even powers z^(2l) only
            sphere = math.prod(2 * i + 1 for i in range(l)) / math.prod(r + 2 * i for i in range(l))
            poly[l] = he[2 * l] * sphere
        return self.lead_coefficient_mean * poly

    def sample(self, batch: int, n: int, generator: torch.Generator) -> Prompt:
        """``batch`` prompts of ``n`` examples and a query from new tasks, on the generator's device."""
        batch, n, generator = checks.sample_sizes(batch, n, generator, self.dim)
        dev = generator.device
        beta = self.sample_directions(batch, generator)
        coeffs = self.sample_links(batch, generator)
        xs = torch.randn(batch, n + 1, self.dim, generator=generator, device=dev)
        ys = self.link(torch.einsum("bnd,bd->bn", xs, beta), coeffs)
        if self.noise_std > 0:
            ys = ys + self.noise_std * torch.randn(ys.shape, generator=generator, device=dev)
        return Prompt.from_points(xs, ys)


@functools.cache
def _lead_coefficient_mean(width: int, lead_mean: float) -> float:
    """``E[g_1 / ||g||]`` for ``g ~ N(lead_mean e_1, I_width)``, by Monte Carlo from a fixed seed."""
    g = torch.Generator().manual_seed(0)
    total = 0.0
    for _ in range(4):
        draws = torch.randn(2**20, width, generator=g, dtype=torch.float64)
        draws[:, 0] += lead_mean
        total += (draws[:, 0] / draws.norm(dim=1)).sum().item()
    return total / 2**22


@checks.finite_result("weights")
@checked
def projection_mass(
    weights: Annotated[Float[Tensor, "m d"], Finite], basis: Annotated[Float[Tensor, "d r"], Finite, Columns]
) -> float:
    """The fraction ``||W U||_F^2 / ||W||_F^2`` of the rows' squared norm that lies in ``span(U)``."""
    w, u = _weights_and_basis(weights, basis)
    return ((w @ u).square().sum() / w.square().sum()).item()


def _weights_and_basis(weights: Tensor, basis: Tensor) -> tuple[Tensor, Tensor]:
    """``weights`` (m, d), not all zero, and ``basis`` (d, r) with orthonormal columns (both declared finite), as
    float64."""
    w, u = weights.detach().double().cpu(), basis.detach().double().cpu()
    if not bool(w.abs().sum() > 0):
        raise ValueError("weights must not be all zero: the fraction of their norm in span(U) is undefined")
    if not torch.allclose(u.T @ u, torch.eye(u.shape[1], dtype=u.dtype), atol=1e-6):
        raise ValueError("basis must have orthonormal columns (U^T U = I)")
    return w, u


@checked
def tasks_to_recover(
    chunk_gradients: Annotated[Float[Tensor, "K m d"], Pair, Finite],
    tasks_per_chunk: Count,
    basis: Annotated[Float[Tensor, "d r"], Finite, Columns],
) -> float:
    """The number of stage-1 tasks at which the gradient's noise outside ``S = span(U)`` matches its signal inside:
    ``T* = tr(P_perp Cov(g_t) P_perp) / ||P_S E g_t||^2``, for ``g_t`` one task's gradient in ``W`` (all neurons
    together).

    ``chunk_gradients`` holds ``K >= 2`` independent means of ``tasks_per_chunk`` tasks' gradients each, shape
    ``(K, m, d)``. ``||P_S E g||^2`` is estimated without bias from the pairs of different chunks, and the noise
    as ``tasks_per_chunk`` times the variance of the chunk means outside ``S``. (Tasks differ mostly in their
    direction inside ``S``; that part of the noise does not move weights out of ``S``.) After ``T`` tasks the noise
    outside ``S`` has energy ``tr(P_perp Cov P_perp) / T``, so for ``T`` well above ``T*`` the noise no longer moves
    the step's weights out of ``S``; ``T*``'s growth with ``d`` is the stage-1 requirement. (The mean gradient's
    own part outside ``S``, along each initial row for instance, is not noise and is not counted: it caps the mass
    in ``S`` below one at any ``T``.)
    """
    k = chunk_gradients.shape[0]
    if not bool(chunk_gradients[0].abs().sum() > 0):
        raise ValueError("chunk_gradients must not be all zero: there is no signal to compare the noise with")
    _, u = _weights_and_basis(chunk_gradients[0], basis)
    g = chunk_gradients.detach().double().cpu()
    inside = g @ u  # (K, m, r)
    total = inside.sum(0)
    signal = (total.square().sum() - inside.square().sum()) / (k * (k - 1))
    outside = g - inside @ u.T
    noise = tasks_per_chunk * (outside - outside.mean(0)).square().sum() / (k - 1)
    if not (math.isfinite(signal) and math.isfinite(noise)):  # a NaN signal would read as "never"
        raise ValueError("chunk_gradients or tasks_per_chunk made the squares overflow float64: rescale them")
    if not bool(signal > 0):
        return math.inf
    return float(noise / signal)


@checked
def principal_angles(
    weights: Annotated[Float[Tensor, "m d"], Finite], basis: Annotated[Float[Tensor, "d r"], Finite, Columns]
) -> Tensor:
    """Principal angles (radians) between ``S = span(U)`` and the top-``r`` right singular space of ``W``."""
    m, d = weights.shape
    checks.work(f"an SVD of weights of shape ({m}, {d}) (30 m d min(m, d))", checks.svd_flops(m, d))
    w, u = _weights_and_basis(weights, basis)
    r = u.shape[1]
    _, svals, vh = torch.linalg.svd(w, full_matrices=False)
    if len(svals) < r or svals[r - 1] <= 1e-10 * svals[0]:
        raise ValueError(
            f"weights must have rank >= r={r} for a top-{r} singular space, got singular values {svals.tolist()}"
        )
    cosines = torch.linalg.svdvals(u.T @ vh[:r].T).clamp(max=1.0)
    return torch.arccos(cosines)
