"""Nonparametric regression tasks over a fixed basis: the task family of chapter 2 (Kim, Nakamaki and Suzuki 2024).

A task is ``F(x) = sum_j beta_j f_j(x)`` over the first ``N`` functions of a basis of ``L^2([0, 1]^d)``, with
independent ``beta_j ~ N(0, j^(-2s-1))``; inputs are uniform on ``[0, 1]^d`` and labels carry Gaussian noise. The
decay of the coefficients' variances is the smoothness: ``F`` lies in a Sobolev (Fourier basis) or Besov (B-spline
basis) ball of order ``s``, where the minimax rate of regression from ``n`` examples is ``n^(-2s/(2s+1))``.

* ``fourier``: products ``prod_k e_{j_k}(x_k)`` of the trigonometric basis ``e_1 = 1``,
  ``e_{2k} = sqrt(2) cos(2 pi k x)``, ``e_{2k+1} = sqrt(2) sin(2 pi k x)``, ordered by total frequency; orthonormal.
* ``bspline``: dyadic tensor-product B-splines ``prod_k N_m(2^a x_k - b_k)``, level ``a = 0, 1, ...`` first, every
  shift whose support meets ``[0, 1]`` (at each level, the B-spline basis of the splines on ``[0, 1]`` with knots at
  ``b / 2^a``), each divided by its norm in ``L^2`` of uniform inputs on ``[0, 1]^d``; the cardinal B-spline ``N_m``
  is the ``(m+1)``-fold convolution of the indicator of ``[0, 1]``. Normalized because the shifts at the boundary
  barely meet the cube: unnormalized, ``N_2(x + 2)`` restricted to ``[0, 1]`` has norm 0.22 per axis, so in
  ``d = 8`` the first functions have norms of order ``1e-6`` and the tasks almost no signal. Not orthonormal:
  neighbouring shifts and levels overlap (the Gram matrix under uniform inputs is banded), which the oracle's
  posterior mean takes into account. Nor linearly independent: a level's splines span the previous level's.
  ``orthonormal=True`` runs Gram-Schmidt on them in order, under the exact Gram matrix, and drops each function in
  the span of those before it, so that the ``N`` functions are orthonormal and the prior's decay is that of an
  orthonormal basis, as the rate theorem assumes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

import numpy as np
import torch
from beartype.vale import Is
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import Count, Finite, Positive, Scale, Size, Width, checked
from icl_utils.estimators import bayes_linear_regression
from icl_utils.prompts import Prompt

MAX_BASIS = 2**16  # the basis is enumerated in Python
MAX_CANDIDATES = 4096  # splines that orthonormal=True may examine
MAX_ORDER = 10  # the recursion of cardinal_bspline costs 2^order tensor operations (order 18: 18 s; chapters use <= 3)
#: a B-spline order within MAX_ORDER; a number of basis functions within MAX_BASIS
Order = Annotated[int, Is[lambda v: not isinstance(v, bool) and 0 <= v <= MAX_ORDER]]
BasisSize = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= MAX_BASIS]]
checks.describe(Order, "an int", f"in [0, {MAX_ORDER}] (MAX_ORDER: the B-spline costs 2^order operations)")
checks.describe(BasisSize, "an int", f"in [1, {MAX_BASIS}] (MAX_BASIS: the basis is enumerated in Python)")


@checked
def cardinal_bspline(x: Annotated[Float[Tensor, "*shape"], Finite], order: Order) -> Float[Tensor, "*shape"]:
    """The cardinal B-spline ``N_m(x)`` of order ``m``: the ``(m+1)``-fold convolution of ``1[0, 1)``, supported on
    ``[0, m+1]``, by the recursion ``N_m(x) = (x N_{m-1}(x) + (m+1-x) N_{m-1}(x-1)) / m``."""
    return _cardinal_bspline(x, order)


def _cardinal_bspline(x: Tensor, order: int) -> Tensor:
    """:func:`cardinal_bspline` without the checks of its arguments (it recurses ``2^order`` times)."""
    if order == 0:
        return ((x >= 0) & (x < 1)).to(x.dtype)
    return (x * _cardinal_bspline(x, order - 1) + (order + 1 - x) * _cardinal_bspline(x - 1, order - 1)) / order


def _trig_table(x: Tensor, count: int) -> Tensor:
    """``e_1(x_k), ..., e_count(x_k)`` for every coordinate ``k`` of ``x`` (shape ``(..., d)``): ``(..., d, count)``."""
    j = torch.arange(1, count + 1, device=x.device)
    angle = 2 * math.pi * x[..., None] * (j // 2).to(x.dtype)
    table = math.sqrt(2) * torch.where(j % 2 == 1, torch.sin(angle), torch.cos(angle))
    table[..., 0] = 1.0
    return table


def _fourier_indices(dim: int, count: int) -> list[tuple[int, ...]]:
    """The first ``count`` multi-indices ``(j_1, ..., j_d)``, ordered by total frequency ``sum_k j_k // 2``, then
    lexicographically. Built one frequency level at a time: a full grid would hold ``8^8`` tuples (3.5 GB) for
    chapter 2's full mode (``d = 8``, 256 functions)."""

    def level(total: int) -> list[tuple[int, ...]]:
        """Every ``(j_1, ..., j_dim)`` of total frequency ``total``: ``j = 1`` at frequency 0, else ``2k, 2k + 1``.
        Only the axes of non-zero frequency are chosen, at most ``total`` of them, so the recursion is ``total``
        deep and the work is the output's size whatever ``dim`` (``dim = 1000`` works)."""
        out: list[tuple[int, ...]] = []

        def place(start: int, remaining: int, chosen: list[tuple[int, int]]) -> None:
            if remaining == 0:
                index = [1] * dim
                for axis, j in chosen:
                    index[axis] = j
                out.append(tuple(index))
                return
            for axis in range(start, dim):
                # the last axis must take all that remains (a loop over every k there made dim = 1 quadratic)
                for k in range(remaining, remaining + 1) if axis == dim - 1 else range(1, remaining + 1):
                    for j in (2 * k, 2 * k + 1):
                        place(axis + 1, remaining - k, [*chosen, (axis, j)])

        place(0, total, [])
        return out

    indices: list[tuple[int, ...]] = []
    total = 0
    while len(indices) < count:
        # the level's size before it is built (m axes of non-zero frequency, two functions each, frequencies a
        # composition of total into m parts): a huge dim makes the second level alone too large to hold
        size = (
            1
            if total == 0
            else sum(math.comb(dim, m) * 2**m * math.comb(total - 1, m - 1) for m in range(1, min(total, dim) + 1))
        )
        checks.allocation(
            "n_basis * dim (the Fourier basis' index table, built a level at a time)",
            (len(indices) + size) * dim,
            torch.int64,
        )
        indices.extend(sorted(level(total)))
        total += 1
    return indices[:count]


def _bspline_norms(index: list[tuple[int, tuple[int, ...]]], order: int) -> Tensor:
    """The norms in ``L^2`` of uniform inputs on ``[0, 1]^d`` of ``prod_k N_m(2^a x_k - b_k)``, float64, one per
    (level, shifts): per axis ``2^-a`` times the integral of ``N_m^2`` over ``[-b, 2^a - b]``, by Gauss-Legendre on
    each unit piece, where ``N_m^2`` is a polynomial of degree ``2m`` (``m + 1`` nodes are exact)."""
    nodes, weights = (torch.from_numpy(v) for v in np.polynomial.legendre.leggauss(order + 1))
    pieces = torch.arange(order + 1, dtype=torch.float64)  # N_m on [k, k + 1], k = 0..m
    u = pieces[:, None] + (nodes + 1) / 2  # (m + 1, nodes) points in each piece
    piece_sq = (_cardinal_bspline(u, order).square() * weights / 2).sum(-1)  # integral of N_m^2 on each piece
    # An axis's integral covers the pieces lo..hi-1 of its spline: one sum per (lo, hi), gathered for every axis of
    # every function at once (a loop over them took 5 us an entry: 21 s for 4,096 splines in 1,024 dims).
    sums = torch.tensor(
        [[piece_sq[lo:hi].sum().item() for hi in range(order + 2)] for lo in range(order + 1)], dtype=torch.float64
    )
    levels = torch.tensor([a for a, _ in index])[:, None]
    shifts = torch.tensor([b for _, b in index])
    lo = (-shifts).clamp(min=0)
    hi = torch.minimum(torch.full_like(shifts, order + 1), 2**levels - shifts).clamp(min=0)
    factors = sums[lo, hi] / 2.0**levels
    return torch.cumprod(factors, 1)[:, -1].sqrt()  # cumprod multiplies in axis order, as a loop would


def _bspline_indices(dim: int, count: int, order: int) -> list[tuple[int, tuple[int, ...]]]:
    """The first ``count`` (level, shifts) pairs: levels in order, shifts ``b`` with ``2^a x - b`` in the support."""
    # the shifts as tuples, then as tensors for the norms and the table: about five count x dim arrays of int64
    checks.allocation("5 * n_basis * dim (the B-spline index)", 5 * count * dim, torch.int64)
    out: list[tuple[int, tuple[int, ...]]] = []
    level = 0
    while len(out) < count:
        shifts = itertools.product(range(-order, 2**level), repeat=dim)
        out.extend((level, b) for b in itertools.islice(shifts, count - len(out)))  # (m + 2^a)^dim shifts in all
        level += 1
    return out[:count]


def _bspline_gram(index: list[tuple[int, tuple[int, ...]]], order: int) -> Tensor:
    """The exact Gram matrix ``E f_i f_j`` (float64) of the unnormalized tensor-product B-splines ``index`` under
    uniform inputs on ``[0, 1]^d``: the product over axes of one-dimensional integrals, each by Gauss-Legendre on
    the pieces of the finest level's knots, where a product of two splines is a polynomial of degree ``2m``."""
    finest = max(a for a, _ in index)
    nodes, weights = (torch.from_numpy(v) for v in np.polynomial.legendre.leggauss(order + 1))
    pieces = torch.arange(2**finest, dtype=torch.float64)
    x = ((pieces[:, None] + (nodes + 1) / 2) / 2**finest).reshape(-1)  # every node on [0, 1]
    w = (weights / 2).repeat(2**finest) / 2**finest
    axes = sorted({(a, b) for a, shifts in index for b in shifts})  # the one-dimensional splines used
    row = {key: i for i, key in enumerate(axes)}
    values = torch.stack([_cardinal_bspline(2.0**a * x - b, order) for a, b in axes])
    gram_1d = (values * w) @ values.T
    gram = torch.ones(len(index), len(index), dtype=torch.float64)
    for axis in range(len(index[0][1])):
        rows = torch.tensor([row[a, shifts[axis]] for a, shifts in index])
        gram = gram * gram_1d[rows[:, None], rows[None, :]]
    return gram


def _orthonormal_bsplines(
    dim: int, count: int, order: int, rtol: float = 1e-9
) -> tuple[list[tuple[int, tuple[int, ...]]], Tensor]:
    """Gram-Schmidt on the B-splines in their order: the first ``count`` of them not in the span of those before
    (a squared residual norm above ``rtol`` times the function's squared norm), and the matrix ``M`` (float64,
    ``count x count``) such that ``f_kept @ M`` is orthonormal under uniform inputs (``M = L^-T`` for the Cholesky
    factor ``L`` of their Gram matrix). Levels ``0..a`` span the ``(m + 2^a)^d`` splines of level ``a``, so the
    candidates are every spline up to the first level whose span holds ``count`` functions."""
    last = next(a for a in itertools.count() if (order + 2**a) ** dim >= count)
    size = sum((order + 2**a) ** dim for a in range(last + 1))
    if size > MAX_CANDIDATES:  # the Gram matrix of the candidates is size x size
        raise ValueError(
            f"n_basis={count} orthonormal B-splines in dim={dim} need more than "
            f"{MAX_CANDIDATES} candidate splines; ask for fewer"
        )
    candidates = _bspline_indices(dim, size, order)
    gram = _bspline_gram(candidates, order)
    chol = torch.zeros(count, count, dtype=torch.float64)
    kept: list[int] = []
    for j in range(size):
        k = len(kept)
        w = torch.linalg.solve_triangular(chol[:k, :k], gram[kept, j][:, None], upper=False)[:, 0]
        residual = gram[j, j] - w @ w
        if residual > rtol * gram[j, j]:
            chol[k, :k], chol[k, k] = w, residual.sqrt()
            kept.append(j)
            if len(kept) == count:
                break
    inverse = torch.linalg.solve_triangular(chol, torch.eye(count, dtype=torch.float64), upper=False)
    return [candidates[k] for k in kept], inverse.T


@checked
@dataclass(frozen=True)
class NonparametricTasks:
    """Tasks ``F = sum_{j <= n_basis} beta_j f_j`` with ``beta_j ~ N(0, j^(-2s-1))`` on inputs uniform in
    ``[0, 1]^dim``; see the module docstring for the bases. ``order`` is the B-spline order ``m``;
    ``orthonormal`` (B-splines only) orthonormalizes them in order, dropping the redundant ones. With
    ``noiseless_query`` the query's label is ``F(x_query)`` itself, so that a squared error is the excess risk (the
    risk above the noise level) without the noise's Monte Carlo variance: :meth:`noiseless` gives that view."""

    dim: Width
    smoothness: Positive
    basis: Literal["fourier", "bspline"] = "fourier"
    n_basis: BasisSize = 64
    order: Order = 2
    noise_std: Scale = 0.1
    noiseless_query: bool = False
    orthonormal: bool = False
    _index: list = field(default=None, init=False, repr=False, compare=False)
    _fourier_table: Tensor = field(default=None, init=False, repr=False, compare=False)
    _fourier_count: int = field(default=0, init=False, repr=False, compare=False)
    _bspline_table: tuple = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dim, count, order = self.dim, self.n_basis, self.order
        if self.orthonormal and self.basis != "bspline":
            raise ValueError(f"orthonormal applies to the bspline basis (the {self.basis} basis is orthonormal)")
        transform = None
        if self.basis == "fourier":
            index = _fourier_indices(dim, count)
        elif self.orthonormal:
            index, transform = _orthonormal_bsplines(dim, count, order)
        else:
            index = _bspline_indices(dim, count, order)
        object.__setattr__(self, "_index", index)
        if self.basis == "fourier":
            count = max(max(js) for js in index)  # e_1..e_count are needed along each axis
            flat = torch.tensor(index) - 1 + count * torch.arange(dim)
            object.__setattr__(self, "_fourier_count", count)
            object.__setattr__(self, "_fourier_table", flat)
        else:
            levels = torch.tensor([a for a, _ in index], dtype=torch.float64)
            norms = _bspline_norms(index, order)
            if transform is not None:  # normalized splines in, orthonormal functions out
                transform = norms[:, None] * transform
            object.__setattr__(
                self, "_bspline_table", (2.0**levels, torch.tensor([b for _, b in index]), norms, transform)
            )

    @property
    def noise_var(self) -> float:
        return self.noise_std**2

    def noiseless(self) -> NonparametricTasks:
        """The same tasks with noiseless query labels (contexts stay noisy)."""
        return replace(self, noiseless_query=True)

    def levels(self) -> Tensor:
        """The level ``a`` of each B-spline basis function, shape ``(n_basis,)`` (int64): a level has ``(m + 2^a)^d``
        functions, so in high ``d`` the first ones all belong to level 0, which on ``[0, 1]^d`` (no knot inside) are
        the tensor-product polynomials of degree ``m``."""
        if self.basis != "bspline":
            raise ValueError(f"levels are defined for the bspline basis, not {self.basis!r}")
        return torch.tensor([a for a, _ in self._index])

    def active_axes(self) -> Tensor:
        """How many coordinates each Fourier basis function depends on, shape ``(n_basis,)`` (int64): 0 for the
        constant, 1 for a function of one coordinate (the additive part of the basis), and so on."""
        if self.basis != "fourier":
            raise ValueError(f"active_axes is defined for the fourier basis, not {self.basis!r}")
        return (torch.tensor(self._index) > 1).sum(1)

    @checked
    def prompt_mean_excess(self, n: Count) -> float:
        """The exact excess risk of the prompt mean (:func:`~icl_utils.estimators.prompt_mean`) on ``n`` examples,
        for the Fourier basis: ``f_1 = 1`` and every other function has mean zero, so ``E (F(x_q) - y_bar)^2 =
        (sum_j lambda_j - lambda_1)(1 + 1/n) + sigma^2 / n``."""
        if self.basis != "fourier":
            raise ValueError(f"prompt_mean_excess is computed for the fourier basis, not {self.basis!r}")
        lam = self.prior_var()
        return ((lam.sum() - lam[0]) * (1 + 1 / n)).item() + self.noise_var / n

    def prior_var(self) -> Tensor:
        """The variances ``j^(-2s-1)`` of the coefficients, float64, shape ``(n_basis,)``."""
        j = torch.arange(1, self.n_basis + 1, dtype=torch.float64)
        return j ** (-2 * self.smoothness - 1)

    @checked
    def coefficients(self, batch: Count, generator: torch.Generator) -> Tensor:
        """``batch`` coefficient vectors ``beta ~ N(0, diag(prior_var))`` drawn on the generator's device, float32,
        shape ``(batch, n_basis)``: the tasks that :meth:`sample` draws when no ``weights`` are given."""
        checks.allocation("batch * n_basis", batch * self.n_basis)
        dev = generator.device
        std = self.prior_var().sqrt().to(dev, torch.float32)
        return torch.randn(batch, self.n_basis, generator=generator, device=dev) * std

    @checked
    def features(self, x: Annotated[Float[Tensor, "*batch {self.dim}"], Finite]) -> Tensor:
        """The basis functions at ``x`` (shape ``(..., dim)``): shape ``(..., n_basis)``."""
        self._fits_features("x's points * the values of a point's basis", x.numel() // self.dim, x.dtype)
        return self._features(x)

    def _fits_features(self, what: str, points: int, dtype: torch.dtype) -> None:
        """Refuse the basis at ``points`` points above one tensor's limit (B-splines hold a value per axis for each
        function and point, and the recursion of order m about 3 m + 2 such tensors at once)."""
        per_point = self.n_basis * (self.dim * (3 * self.order + 2) if self.basis == "bspline" else 1)
        checks.allocation(what, points * per_point, dtype)

    def _features(self, x: Tensor) -> Tensor:
        """:meth:`features` without its checks: the sampler's, on inputs it drew."""
        if self.basis == "fourier":
            # Every one-dimensional function e_1..e_J at every coordinate, then one gather and a product over axes.
            index = self._fourier_table.to(x.device)  # (N, d): row of e_{j_k}(x_k) in the table below
            table = _trig_table(x, self._fourier_count).reshape(-1, self.dim * self._fourier_count)
            # Row gathers from a contiguous (d J, P) table are contiguous copies, far faster than gathers along the
            # last axis or from the transposed view (see the performance appendix).
            table = table.T.contiguous()
            out = table.index_select(0, index[:, 0])
            for k in range(1, self.dim):
                out = out * table.index_select(0, index[:, k])
            return out.T.reshape(*x.shape[:-1], len(index))
        # Every function at once: the recursion of cardinal_bspline is elementwise, so it runs on the (..., N, d)
        # tensor of arguments 2^a x_k - b_k; a loop over the functions costs thousands of small ops per call.
        scale, shift, norm, transform = self._bspline_table
        arg = scale.to(x.device, x.dtype)[:, None] * x[..., None, :] - shift.to(x.device, x.dtype)
        out = _cardinal_bspline(arg, self.order).prod(-1) / norm.to(x.device, x.dtype)
        return out if transform is None else out @ transform.to(x.device, x.dtype)

    @checked
    def sample(
        self,
        batch: Count,
        n: Size,
        generator: torch.Generator,
        weights: Annotated[Float[Tensor, "{batch} {self.n_basis}"], checks.Finite, checks.WithinScale] | None = None,
    ) -> Prompt:
        """``batch`` prompts of ``n`` examples and a query on the generator's device; ``weights`` (shape
        ``(batch, n_basis)``) fixes the coefficients instead of drawing them from the prior."""
        checks.allocation("batch * (n + 1) * dim", batch * (n + 1) * self.dim)
        dev = generator.device
        if weights is None:
            weights = self.coefficients(batch, generator)
        xs = torch.rand(batch, n + 1, self.dim, generator=generator, device=dev)
        weights = weights.to(dev, torch.float32)
        # Labelled a chunk of prompts at a time, so that the basis-function values of a large pool never
        # materialize at once; B-splines hold a value per axis and 2^order temporaries per function and point.
        per_point = self.n_basis * (self.dim * 2**self.order if self.basis == "bspline" else 1)
        chunk = config.prompts_per_chunk((n + 1) * per_point)
        ys = torch.cat(
            [
                torch.einsum("bnj,bj->bn", self._features(xs[i : i + chunk]), weights[i : i + chunk])
                for i in range(0, batch, chunk)
            ]
        )
        if self.noise_std > 0:
            noise = self.noise_std * torch.randn(ys.shape, generator=generator, device=dev)
            if self.noiseless_query:
                noise[:, n] = 0
            ys = ys + noise
        return Prompt.from_points(xs, ys)

    @checked
    def feature_prompt(self, prompt: Prompt) -> Prompt:
        """The same prompt with every input replaced by its basis functions: a linear-regression prompt."""
        prompt = checks.prompt(prompt)
        if prompt.dim != self.dim:
            raise ValueError(f"prompt must have the task's dim={self.dim}, got dimension {prompt.dim}")
        self._fits_features(
            "prompt's B * (n + 1) points * the values of a point's basis",
            prompt.batch_size * (prompt.n_context + 1),
            prompt.x.dtype,
        )
        return Prompt(self._features(prompt.x), prompt.y, self._features(prompt.x_query), prompt.y_query)

    def posterior_mean(self, prompt: Prompt) -> Tensor:
        """The oracle: the Bayes posterior mean of ``F(x_query)`` for a learner that knows the basis and the prior
        (Bayesian linear regression on the basis functions)."""
        # the prior's covariance, then its eigenvalues in bayes_linear_regression: refused before the features
        count = self.n_basis
        checks.allocation("task.n_basis^2 (the prior's covariance)", count**2, torch.float64)
        checks.work(
            f"posterior_mean at task.n_basis = {count} functions (the prior's eigenvalues, 4 N^3)", 4 * count**3
        )
        var = self.prior_var()
        return bayes_linear_regression(
            self.feature_prompt(prompt), torch.zeros_like(var), torch.diag(var), self.noise_var
        )
