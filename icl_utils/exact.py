"""Closed-form risks and optimal parameters, in float64: what the experiments are measured against.

* Linear regression with a Gaussian prior (chapters 1 and 5): :func:`bayes_risk`, the risk of one gradient step
  (:func:`optimal_gd_lr`, and GD-beta's :func:`gd_beta_risk` with its optimum :func:`optimal_gd_step` and the risk
  there, :func:`best_gd_beta_risk`), and linear self-attention's :func:`lsa_risk` with its best weights
  :func:`optimal_lsa` and the risk there, :func:`best_lsa_risk` (chapter 5's approximation gap);
* linear attention on a feature map over nonparametric tasks (chapter 2): :class:`AttentionMoments`,
  :func:`attention_risk` and its minimizer :func:`attention_gamma`; the Bayes oracle's excess risk given the design,
  :func:`basis_bayes_excess`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch
from jaxtyping import Float, Float64
from torch import Tensor, nn

from icl_utils import checks, config
from icl_utils.checks import (
    Count,
    Counts,
    Fraction,
    NonNegative,
    Positive,
    PositiveVariance,
    Samples,
    Seed,
    Steps,
    Variance,
    Width,
    checked,
)
from icl_utils.tasks.linear import LinearRegression
from icl_utils.tasks.nonparametric import NonparametricTasks

#: restarts of an optimization, each a full run
Starts = checks.declare(int, lambda v: not isinstance(v, bool) and 1 <= v <= 1000, "in [1, 1000]")


@checked
def optimal_gd_lr(n: Count, dim: Width, noise_var: Variance, prior_var: PositiveVariance = 1.0) -> float:
    """The step size minimizing the risk of :func:`~icl_utils.estimators.one_step_gd` for ``x ~ N(0, I)``, ``w ~ N(0,
    prior_var I)``.

    The risk is ``prior_var d (lr^2 (n+d+1)/n - 2 lr + 1) + lr^2 noise_var d / n`` (Wishart moments), minimized at
    ``lr = prior_var n / (prior_var (n+d+1) + noise_var)``.
    """
    return prior_var * n / (prior_var * (n + dim + 1) + noise_var)


def _gaussian_task(task: object) -> tuple[Tensor, Tensor, Tensor, float]:
    """``(beta*, Psi, H, sigma^2)`` of a Gaussian linear-regression task family, in float64."""
    if not task.gaussian_inputs:
        raise ValueError("task has uniform inputs (x_range); these closed forms assume Gaussian inputs")
    return task.mean(), task.cov(), task.input_cov(), task.noise_var


@checks.finite_result("beta0", "gamma")
@checked
def gd_beta_risk(
    task: LinearRegression,
    n: Count,
    beta0: Annotated[Float[Tensor, " {task.dim}"], checks.Finite],
    gamma: Annotated[Float[Tensor, "{task.dim} {task.dim}"], checks.Finite],
) -> Tensor:
    r"""The exact ICL risk of one GD step from ``beta0`` with matrix step ``gamma`` (chapter 5's GD-beta).

    For ``beta ~ N(beta*, Psi)``, ``x ~ N(0, H)``, noise variance ``sigma^2`` and ``n`` examples, with
    ``A = Gamma^T H Gamma`` and ``M = Psi + (beta* - beta0)(beta* - beta0)^T``, Wishart moments give

    .. math::

        R &= \sigma^2 + \operatorname{tr}\big[(H - H \Gamma^\top H - H \Gamma H + (1 + \tfrac1n) H A H) M\big] \\
          &\quad + \tfrac1n \operatorname{tr}(A H) \big(\operatorname{tr}(H M) + \sigma^2\big).

    Differentiable in ``beta0`` and ``gamma`` (float64), so gradient flow on it is exact.
    """
    checks.work(
        f"gd_beta_risk at task.dim = {task.dim} (12 products of dim x dim matrices, 24 dim^3)", 24 * task.dim**3
    )
    mean, psi, h, noise = _gaussian_task(task)
    beta0, gamma = beta0.double().cpu(), gamma.double().cpu()
    shift = mean - beta0
    m = psi + torch.outer(shift, shift)
    a = gamma.T @ h @ gamma
    bias = torch.trace((h - h @ gamma.T @ h - h @ gamma @ h + (1 + 1 / n) * h @ a @ h) @ m)
    return noise + bias + torch.trace(a @ h) * (torch.trace(h @ m) + noise) / n


@checks.finite_result("beta0")
@checked
def optimal_gd_step(
    task: LinearRegression, n: Count, beta0: Annotated[Float[Tensor, " {task.dim}"], checks.Finite] | None = None
) -> Tensor:
    """The matrix step minimizing :func:`gd_beta_risk` for a fixed initialization (the task mean by default).

    Setting the gradient in ``Gamma`` to zero gives ``Gamma H ((1 + 1/n) H M H + c H) = M H`` with
    ``c = (tr(H M) + sigma^2) / n``; for invertible ``H``, ``Gamma = M ((1 + 1/n) H M + c I)^{-1}`` (Theorem 5.2's
    optimum when ``beta0 = beta*``, the best GD-0 step when ``beta0 = 0``). Solved with a pseudo-inverse, so a
    singular ``H`` or ``Psi`` is allowed.
    """
    checks.work(
        f"optimal_gd_step at task.dim = {task.dim} (a pseudo-inverse and 5 products, 22 dim^3)", 22 * task.dim**3
    )
    mean, psi, h, noise = _gaussian_task(task)
    beta0 = mean if beta0 is None else beta0.double().cpu()
    shift = mean - beta0
    m = psi + torch.outer(shift, shift)
    c = (torch.trace(h @ m) + noise) / n
    return m @ h @ torch.linalg.pinv((1 + 1 / n) * h @ m @ h + c * h, hermitian=True)


@checked
@dataclass(frozen=True)
class AttentionMoments:
    """The input and prior moments that fix the ICL risk of linear attention on a feature map ``phi`` over a
    nonparametric task family (:func:`attention_risk`), computed once, in float64: ``E y^2``, ``C = B Lambda B^T``,
    ``G = E phi phi^T`` and ``W = E[(f^T Lambda f + sigma^2) phi phi^T]``. Only ``S(n) = (1 - 1/n) C + W / n``
    depends on the context length, so one set of moments serves a whole risk-against-``n`` curve."""

    second: Annotated[Float64[Tensor, ""], checks.Finite]
    c: Annotated[Float64[Tensor, "N N"], checks.Finite]
    g: Annotated[Float64[Tensor, "N N"], checks.Finite]
    w: Annotated[Float64[Tensor, "N N"], checks.Finite]

    def __post_init__(self) -> None:
        if self.second < 0:  # a second moment; a negative one gives negative risks
            raise ValueError(f"second must be E y^2 >= 0, got {float(self.second)}")
        if not bool((self.g.diagonal() > 0).any()):  # G = E phi phi^T; with none of it, every Gamma reads as 0
            raise ValueError("g must be E phi phi^T, with a positive diagonal entry, got no positive one")

    @classmethod
    @checked
    def of(
        cls,
        features: Callable[[Tensor], Tensor],
        task: NonparametricTasks,
        *,
        prior_cov: Tensor | None = None,
        points: Count | None = None,
    ) -> AttentionMoments:
        """Moments of ``features`` (a map from ``(K, dim)`` inputs to ``(K, N)`` features: the true basis
        ``task.features`` or a model's ``model.features``) under ``task``'s inputs and labels (the query's without noise
        for a task with ``noiseless_query``), with the coefficients'
        second moment ``prior_cov`` (default: the task's diagonal prior). Expectations over the uniform inputs use
        ``points`` nodes: the midpoint rule in one dimension (default 4096, exact for the Fourier basis below that
        frequency), a scrambled Sobol sequence otherwise (default 2^15)."""
        with torch.no_grad():
            moments = _moments(features, task, prior_cov, points)
            if not bool((moments[2].diagonal() > 0).any()):  # G = E phi phi^T of the features given
                raise ValueError("features must not vanish on the task's inputs: E phi phi^T has no positive entry")
            return cls(*moments)

    @checked
    def s(self, n: Count) -> Tensor:
        """``E u u^T`` for ``u = (1/n) sum_i y_i phi(x_i)``."""
        return self.c * (1 - 1 / n) + self.w / n

    @checked
    def gamma(self, n: Count, rtol: Fraction = 1e-9) -> Tensor:
        """The minimizer ``Gamma* = S^-1 C G^-1`` of the risk at ``n`` examples, computed on the directions of
        feature space whose variance (eigenvalue of ``G``) exceeds ``rtol`` times the largest, so that redundant or
        nearly collinear features are allowed."""
        features = len(self.c)
        checks.work(
            f"AttentionMoments.gamma on moments c, g, w of {features} features (an eigendecomposition, a solve, 6 "
            "products: 26 N^3)",
            26 * features**3,
        )
        # Solve in whitened coordinates psi = phi V D^(-1/2) (G = I there): learned features are often nearly
        # collinear, and S^+ C G^+ is then dominated by rounding errors.
        evals, evecs = torch.linalg.eigh(self.g)
        keep = evals > rtol * evals.max()
        white = evecs[:, keep] / evals[keep].sqrt()
        try:
            return white @ torch.linalg.solve(white.T @ self.s(n) @ white, white.T @ self.c @ white) @ white.T
        except torch.linalg.LinAlgError:  # S(n) = C (1 - 1/n) + W / n vanishes on a direction G keeps
            raise ValueError(
                f"n = {n} and the moments c and w give a singular S(n) on the features' directions: no unique Gamma*"
            ) from None

    @checks.finite_result("gamma")
    @checked
    def risk(self, n: Count, gamma: Annotated[Float[Tensor, "{len(self.c)} {len(self.c)}"], checks.Finite]) -> Tensor:
        """``R(Gamma) = E y^2 - 2 tr(Gamma C) + tr(Gamma G Gamma^T S(n))``, for ``gamma`` of one row and column per
        feature."""
        gamma = gamma.detach().double().cpu()
        return self.second - 2 * torch.trace(gamma @ self.c) + torch.trace(gamma @ self.g @ gamma.T @ self.s(n))


def _default_points(task: NonparametricTasks) -> int:
    """Quadrature nodes of :class:`AttentionMoments` and :func:`basis_bayes_excess`: the midpoint rule's 4096 in one
    dimension, 2^15 Sobol points otherwise."""
    return 4096 if task.dim == 1 else 2**15


@functools.lru_cache(maxsize=4)
def _quadrature(task: NonparametricTasks, points: int) -> tuple[Tensor, Tensor]:
    """The quadrature nodes (float64, ``(points, dim)``) and the true basis on them (``(points, N_true)``), kept for
    the next call: pretraining evaluates the moments at every L-BFGS step, and the B-spline basis costs more than the
    MLP. Callers must not modify them in place."""
    if task.dim == 1:  # the midpoint rule: exact for trigonometric polynomials of degree < points
        nodes = ((torch.arange(points, dtype=torch.float64) + 0.5) / points)[:, None]
    else:  # a scrambled Sobol sequence (quasi-Monte Carlo), the same nodes at every call
        nodes = torch.quasirandom.SobolEngine(task.dim, scramble=True, seed=0).draw(points, dtype=torch.float64)
    return nodes, task.features(nodes)


def _moments(
    features: Callable[[Tensor], Tensor], task: object, prior_cov: Tensor | None, points: int | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``E y^2``, ``C``, ``G`` and ``W`` of :class:`AttentionMoments`, in float64 on the CPU, differentiable in the
    parameters of ``features`` where autograd is on."""
    points = _default_points(task) if points is None else points
    # E[y^2 | x] through the prior, a product of (points, N) by (N, N) features, then B Lambda B^T (as many features)
    true = task.n_basis
    checks.work(
        f"the moments of task.n_basis = {true} functions at {points} points (2 (points + N) N^2)",
        2 * (points + true) * true**2,
    )
    checks.allocation("task.n_basis^2 (the prior's covariance)", true**2, torch.float64)
    prior = torch.diag(task.prior_var()) if prior_cov is None else checks.psd_matrix("prior_cov", prior_cov, true)
    # the features at the nodes, their weighted copies and products: about four such tensors at once
    checks.allocation("4 * points * n_basis (quadrature features)", 4 * points * task.n_basis, torch.float64)
    nodes, basis = _quadrature(task, points)
    owner = getattr(features, "__self__", None)  # a model's bound method reads inputs of its parameters' dtype
    param = next(owner.parameters(), None) if isinstance(owner, nn.Module) else None
    if isinstance(getattr(owner, "dim", None), int) and owner.dim != task.dim:
        raise ValueError(f"features must read inputs of task.dim = {task.dim}, but its model reads dim={owner.dim}")
    # A copy: the nodes are kept for later calls, and a feature map may write into its input.
    try:
        phi = features(nodes.clone() if param is None else nodes.to(param.device, param.dtype, copy=True))
    except (TypeError, ValueError, RuntimeError, IndexError) as err:  # a map of another dim, say
        raise ValueError(f"features must map inputs (K, task.dim={task.dim}) to features: {err}") from err
    if not isinstance(phi, Tensor):
        raise TypeError(f"features must return a torch.Tensor, got {type(phi).__name__}")
    if phi.is_complex() or not phi.is_floating_point():  # a complex one would lose its imaginary part below
        raise TypeError(f"features must return real floating-point features, got {phi.dtype}")
    if not bool(checks.finite_flag(phi.detach())):
        raise ValueError("features must return finite values, but gave a NaN or an infinity on the quadrature nodes")
    phi = phi.double().cpu()
    if phi.ndim == 2 and phi.shape[1] == 0:
        raise ValueError("features must give at least one feature per input, got none")
    if phi.ndim != 2 or phi.shape[0] != nodes.shape[0]:
        raise ValueError(f"features must map inputs of shape (K, dim) to (K, N), got shape {tuple(phi.shape)}")
    k, count = phi.shape
    checks.work(
        f"the moments of the {count} features at {k} points (6 points N^2 + 2 N^2 task.n_basis)",
        (6 * k + 2 * true) * count**2,
    )
    second = ((basis @ prior) * basis).sum(1) + task.noise_var  # E[y^2 | x]
    b = phi.T @ basis / k
    # A noiseless query's label carries no noise; the context's labels always do.
    query_second = second - task.noise_var if task.noiseless_query else second
    return query_second.mean(), b @ prior @ b.T, phi.T @ phi / k, (phi * second[:, None]).T @ phi / k


@checked
def profiled_attention_risk(
    features: Callable[[Tensor], Tensor],
    task: NonparametricTasks,
    n: Count,
    *,
    points: Count | None = None,
    rtol: Positive = 1e-10,
) -> Tensor:
    """The ICL risk of linear attention on ``features`` with its best ``Gamma``, ``R(Gamma*) = E y^2 -
    tr(S^-1 C G^-1 C)`` (:class:`AttentionMoments`), as a float64 scalar that autograd differentiates through the
    parameters of ``features``: the pretraining loss on infinitely many tasks, with ``Gamma`` profiled out. ``G``
    and ``S`` get a ridge of ``rtol`` times their mean eigenvalue, so that collinear features are allowed."""
    second, c, g, w = _moments(features, task, None, points)
    s = c * (1 - 1 / n) + w / n

    def ridged(m: Tensor) -> Tensor:
        return m + rtol * torch.trace(m) / m.shape[0] * torch.eye(m.shape[0], dtype=m.dtype)

    return second - torch.trace(torch.linalg.solve(ridged(s), c) @ torch.linalg.solve(ridged(g), c))


def attention_gamma(
    features: Callable[[Tensor], Tensor],
    task: object,
    n: int,
    *,
    prior_cov: Tensor | None = None,
    points: int | None = None,
) -> Tensor:
    """The ``Gamma`` that minimizes :func:`attention_risk` (see :meth:`AttentionMoments.gamma`). It is what
    pretraining on infinitely many tasks from ``prior_cov`` (default: the task's prior) converges to for a fixed
    feature map, and the limit of stage-2 ridge fitting as the number of prompts grows and the penalty vanishes."""
    return AttentionMoments.of(features, task, prior_cov=prior_cov, points=points).gamma(n)


def attention_risk(
    features: Callable[[Tensor], Tensor],
    task: object,
    n: int,
    gamma: Tensor,
    *,
    prior_cov: Tensor | None = None,
    points: int | None = None,
) -> Tensor:
    r"""The exact ICL risk of linear attention on a feature map, ``E (y_q - (1/n) sum_i y_i phi(x_i)^T Gamma
    phi(x_q))^2``, for tasks ``F = beta^T f`` of a :class:`~icl_utils.tasks.nonparametric.NonparametricTasks`.

    The prediction is linear in the labels, so the risk involves ``beta`` only through ``Lambda = E beta beta^T``
    (``prior_cov``, default the task's diagonal prior; a pool of tasks gives its second-moment matrix). With
    ``u = (1/n) sum_i y_i phi(x_i)``, ``G = E phi phi^T``, ``B = E phi f^T``, ``C = B Lambda B^T`` and
    ``W = E[(f^T Lambda f + sigma^2) phi phi^T]``,

    .. math::

        \mathbb{E}\, u u^\top &= S = (1 - \tfrac1n) C + \tfrac1n W, \\
        R(\Gamma) &= \mathbb{E}\, y^2 - 2 \operatorname{tr}(\Gamma C) + \operatorname{tr}(\Gamma G \Gamma^\top S).

    For a curve over ``n``, compute :class:`AttentionMoments` once and call its ``risk`` and ``gamma``.
    """
    return AttentionMoments.of(features, task, prior_cov=prior_cov, points=points).risk(n, gamma)


@checked
def bayes_risk(
    task: LinearRegression,
    n: Count,
    generator: torch.Generator,
    n_mc: Samples = 20_000,
    chunk_size: Count | None = None,
) -> tuple[float, float]:
    """The Bayes ICL risk ``sigma^2 + E_X tr(H Sigma_post(X))`` and its Monte Carlo standard error.

    The posterior covariance ``Psi - Psi X^T (X Psi X^T + sigma^2 I)^{-1} X Psi`` does not depend on the labels or
    on ``beta*``, so only the inputs ``X`` are sampled (``n_mc`` draws, on the CPU in float64), ``chunk_size`` at a
    time (default: as many as hold :data:`~icl_utils.config.CHUNK_ELEMENTS` values, ``n (n + d)`` a draw): memory
    grows with ``chunk_size * n^2``, not with ``n_mc``.
    """
    d = task.dim
    checks.allocation("4 * n * n (the noiseless kernel of one draw, its solve)", 4 * n * n, torch.float64)
    # H's square root, then per draw products of (n, d) by (d, d) and (n, n) matrices and an n x n solve
    checks.work(
        f"bayes_risk at task.dim = {d}, n = {n}, n_mc = {n_mc} (14 d^3 + n_mc (8 n d^2 + 4 n^2 d + 4 n^3 + 1e5), "
        "12 n^3 noiseless)",
        # a draw's batched small factorizations cost at least 1e5 products' time (1e8 draws of n = 5 took 100 s)
        14 * d**3 + n_mc * (8 * n * d**2 + 4 * n**2 * d + (4 if task.noise_var > 0 else 12) * n**3 + 100_000),
    )
    _, psi, h, noise = _gaussian_task(task)  # d x d matrices, after the checks
    chunk_size = config.prompts_per_chunk(n * (n + d)) if chunk_size is None else chunk_size
    h_sqrt = checks.psd_sqrt(h, "task's x_cov")
    solve = torch.linalg.solve if noise > 0 else (lambda a, b: torch.linalg.pinv(a, hermitian=True) @ b)
    total, total_sq = 0.0, 0.0
    for start in range(0, n_mc, chunk_size):
        draws = min(chunk_size, n_mc - start)
        x = torch.randn(draws, n, d, generator=generator, device=generator.device).double().cpu() @ h_sqrt
        kernel = x @ psi @ x.transpose(1, 2) + noise * torch.eye(n, dtype=torch.float64)
        xpsi = x @ psi
        post = psi - xpsi.transpose(1, 2) @ solve(kernel, xpsi)
        excess = torch.einsum("ij,bji->b", h, post)
        total, total_sq = total + excess.sum().item(), total_sq + excess.square().sum().item()
    mean_excess = total / n_mc
    var = max(total_sq / n_mc - mean_excess**2, 0.0) * n_mc / (n_mc - 1)
    return noise + mean_excess, math.sqrt(var / n_mc)


@checked
def basis_bayes_excess(
    task: NonparametricTasks, n: Count, designs: Samples, generator: torch.Generator
) -> tuple[float, float]:
    """The excess ICL risk of the Bayes oracle that knows the basis and the prior of a nonparametric ``task``,
    exactly given each design: ``tr(Sigma_post(X) G)``, with the posterior covariance of the coefficients given the
    ``n`` inputs ``X``, ``Sigma_post = (Lambda^-1 + Phi^T Phi / sigma^2)^-1``, and ``G = E f f^T`` (the identity for
    an orthonormal basis). The posterior covariance does not involve the labels, so only the inputs are sampled:
    ``designs`` draws; returns the mean and its standard error, from the spread over designs alone."""
    if task.noise_var <= 0:
        raise ValueError("task must have label noise (noise_std > 0): the posterior is then a proper Gaussian")
    count, points = task.n_basis, _default_points(task)
    # the target E f f^T, then per design A^T A (n x N by N x N), a Cholesky factor and its inverse
    checks.work(
        f"basis_bayes_excess of task.n_basis = {count} at n = {n}, designs = {designs} "
        "(2 points N^2 + designs (2 n N^2 + 5 N^3))",
        2 * points * count**2 + designs * (2 * n * count**2 + 5 * count**3),
    )
    nodes, basis = _quadrature(task, points)
    root = task.prior_var().sqrt()
    # In the prior's coordinates, Sigma_post = root (I + A^T A / sigma^2)^-1 root with A = Phi root: eigenvalues at
    # least one, where Lambda^-1 would reach j^(2s+1).
    target = root[:, None] * (basis.T @ basis / nodes.shape[0]) * root
    eye = torch.eye(task.n_basis, dtype=torch.float64)
    # A design holds its n x N features (B-splines: a value per axis and 2^order temporaries each) and N x N matrices.
    per_point = task.n_basis * (task.dim * 2**task.order if task.basis == "bspline" else 1)
    checks.allocation("n * the features of a point (one design's features)", n * per_point, torch.float64)
    chunk = config.prompts_per_chunk(n * per_point + task.n_basis**2)
    excess = []
    for start in range(0, designs, chunk):
        x = torch.rand(min(chunk, designs - start), n, task.dim, generator=generator, device=generator.device)
        a = task.features(x.double().cpu()) * root
        inverse = torch.cholesky_inverse(torch.linalg.cholesky(eye + a.transpose(1, 2) @ a / task.noise_var))
        excess.append((inverse * target).sum((1, 2)))  # tr(K^-1 target), both symmetric
    excess = torch.cat(excess)
    return excess.mean().item(), (excess.std() / math.sqrt(designs)).item()


@checked
def best_attention_excess(moments: AttentionMoments, ns: Counts, noise_var: NonNegative) -> np.ndarray:
    """The excess ICL risk ``R(Gamma*(n)) - sigma^2`` of linear attention with the best ``Gamma`` for each context
    length ``n`` in ``ns`` (:meth:`AttentionMoments.gamma`), from one set of moments: a numpy array of shape
    ``(len(ns),)``. ``noise_var`` is ``sigma^2``, the label noise of the task the moments describe."""
    if len(ns) > config.MAX_SERIES:  # a curve's points, each a solve
        raise ValueError(f"ns must hold at most {config.MAX_SERIES} (config.MAX_SERIES) lengths, got {len(ns)}")
    checks.allocation("ns (one solve each)", len(ns) * len(moments.c) ** 2 * 64)  # a solve of N x N per n
    risks = np.array([moments.risk(n, moments.gamma(n)).item() for n in ns], dtype=float)
    if (risks < noise_var * (1 - 1e-9)).any():  # the risk includes sigma^2: an excess is never negative
        raise ValueError(f"noise_var must be at most the risk ({risks.min():.4g}), got {noise_var}")
    return risks - noise_var


@checked
def best_gd_beta_risk(
    task: LinearRegression, n: Count, beta0: Annotated[Float[Tensor, " {task.dim}"], checks.Finite] | None = None
) -> float:
    """The ICL risk of GD-beta from ``beta0`` with its best step (:func:`gd_beta_risk` at :func:`optimal_gd_step`).

    The default ``beta0`` is the task mean, where the risk is smallest (Theorem 5.2); ``beta0 = 0`` gives the best
    GD-0 step, the function an optimal linear self-attention computes when the task mean is zero.
    """
    mean = _gaussian_task(task)[0]
    beta0 = mean if beta0 is None else beta0.double().cpu()
    return gd_beta_risk(task, n, beta0, optimal_gd_step(task, n, beta0)).item()


# ---- linear self-attention (chapter 5) -----------------------------------------------------------------------------
#
# An LSA predicts u^T S B x_q with S = Z M Z^T / n. Given the task beta, the tokens z_i are N(0, C) with
# C(beta) = Q H Q^T + sigma^2 e e^T, Q = [I; beta^T], e the last unit vector, and Wishart moments give
#   E[u^T S A S u | beta] = (1 + 1/n) u^T C A C u + tr(A C) u^T C u / n       (A = B H B^T),
#   E[u^T S B x_q y_q | beta] = u^T C B H beta.
# Averaging over beta needs the Gaussian moments of C (quadratic in beta) up to order two, i.e. of beta up to order
# four: every entry of C is a quadratic form in beta~ = (beta, 1), whose products Isserlis' theorem averages.


def _lsa_moments(task: object) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(E y_q^2, E[C_ab C_ce], E[C_ab beta_k], H)`` of a Gaussian task, shapes ``()``, ``(D, D, D, D)``,
    ``(D, D, d)`` and ``(d, d)`` with ``D = d + 1``: all that the LSA's risk reads, at every ``n``."""
    mean, psi, h, noise = _gaussian_task(task)
    d = mean.shape[0]
    # several fourth-moment tensors of the tokens at once
    checks.allocation("6 * (task.dim + 1)^4 (the tokens' fourth moments)", 6 * (d + 1) ** 4, torch.float64)
    # beta~ = (beta, 1) is Gaussian (degenerate in its last coordinate), so a polynomial of degree <= 2 in beta is
    # a quadratic form in beta~, and products of two of them average by Isserlis' theorem.
    mu = torch.cat([mean, torch.ones(1, dtype=torch.float64)])
    cov = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    cov[:d, :d] = psi
    # Q = [I; beta^T] = sum_i beta~_i E_i: E_i puts beta_i in the last row (i < d); the constant carries the I.
    e = torch.zeros(d + 1, d + 1, d, dtype=torch.float64)
    e[torch.arange(d), d, torch.arange(d)] = 1.0
    e[d, :d, :] = torch.eye(d, dtype=torch.float64)
    # C_ab = beta~^T K_ab beta~, K[i, j, a, b] symmetric in (i, j)
    k = torch.einsum("iak,kl,jbl->ijab", e, h, e)
    k[d, d, d, d] += noise
    k = (k + k.transpose(0, 1)) / 2
    # For q_F = x^T F x with x ~ N(mu, Sigma): E q_F = tr(F Sigma) + mu^T F mu,
    # Cov(q_F, q_G) = 2 tr(F Sigma G Sigma) + 4 mu^T F Sigma G mu and Cov(q_F, x_l) = 2 (Sigma F mu)_l.
    mean_c = torch.einsum("ijab,ij->ab", k, cov + torch.outer(mu, mu))
    k_cov = torch.einsum("ijab,jl->ilab", k, cov)  # K_ab Sigma
    k_mu = torch.einsum("ijab,j->iab", k, mu)  # K_ab mu
    cov_k_mu = torch.einsum("li,iab->lab", cov, k_mu)  # Sigma K_ab mu
    c2 = (
        torch.einsum("ab,ce->abce", mean_c, mean_c)
        + 2 * torch.einsum("ijab,jice->abce", k_cov, k_cov)
        + 4 * torch.einsum("iab,ice->abce", k_mu, cov_k_mu)
    )
    c3 = torch.einsum("ab,l->abl", mean_c, mu[:d]) + 2 * cov_k_mu[:d].permute(1, 2, 0)
    second = torch.trace(h @ (psi + torch.outer(mean, mean))) + noise
    return second, c2, c3, h


def _lsa_quadratic(c2: Tensor, c3: Tensor, n: int, u: Tensor) -> tuple[Tensor, Tensor]:
    """``(N, W)`` of the risk ``E y_q^2 - 2 tr(B H W^T) + tr(B H B^T N)`` at a fixed ``u``: ``N = (1 + 1/n)
    E[C u u^T C] + E[(u^T C u) C] / n`` and ``W = E[C u beta^T]``."""
    outer = torch.einsum("bade,a,d->be", c2, u, u)  # E[C u u^T C]
    trace = torch.einsum("adbe,a,d->be", c2, u, u)  # E[(u^T C u) C]
    return (1 + 1 / n) * outer + trace / n, torch.einsum("abl,a->bl", c3, u)


@checks.finite_result("u", "b")
@checked
def lsa_risk(
    task: LinearRegression,
    n: Count,
    u: Annotated[Float[Tensor, " {task.dim+1}"], checks.Finite],
    b: Annotated[Float[Tensor, "{task.dim+1} {task.dim}"], checks.Finite],
) -> Tensor:
    r"""The exact ICL risk ``E (u^T S B x_q - y_q)^2`` of linear self-attention (chapter 5's LSA), for Gaussian tasks.


    An :func:`~icl_utils.models.linear_attention.LSA` predicts ``u^T S B x_q`` with ``S = Z M Z^T / n`` the context
    tokens'
    second-moment matrix, ``u`` (shape ``(d+1,)``) the last row of ``W_P W_V`` and ``b`` (shape ``(d+1, d)``) the
    first ``d`` columns of ``W_K^T W_Q``. Given the task ``beta``, the tokens are ``N(0, C)`` with
    ``C = [[H, H beta], [beta^T H, beta^T H beta + sigma^2]]``, so ``E[S] = C`` and, for ``A = B H B^T``,
    ``E[S A S] = (1 + 1/n) C A C + tr(A C) C / n``. Averaging over ``beta ~ N(beta*, Psi)`` (Isserlis' theorem on
    the quadratic forms that make up ``C``)

    .. math::

        R &= \mathbb{E}\, y_q^2 - 2 \operatorname{tr}(B H W^\top) + \operatorname{tr}(B H B^\top N), \\
        W &= \mathbb{E}[C u \beta^\top], \\
        N &= (1 + \tfrac1n) \mathbb{E}[C u u^\top C] + \tfrac1n \mathbb{E}[(u^\top C u) C], \\
        \mathbb{E}\, y_q^2 &= \operatorname{tr}\big(H (\Psi + \beta^* \beta^{*\top})\big) + \sigma^2.

    Any ``H``, ``Psi`` (positive semi-definite), ``beta*`` and ``sigma``. Differentiable in ``u`` and ``b``
    (float64). With ``u = e_{d+1}`` and ``b = [Gamma^T; 0]`` it is GD-0's :func:`gd_beta_risk`.
    """
    second, c2, c3, h = _lsa_moments(task)
    u, b = u.double().cpu(), b.double().cpu()
    n_mat, w = _lsa_quadratic(c2, c3, n, u)
    return second - 2 * torch.trace(b @ h @ w.T) + torch.trace(b @ h @ b.T @ n_mat)


def _profiled_lsa_risk(second: Tensor, c2: Tensor, c3: Tensor, h: Tensor, n: int, u: Tensor) -> Tensor:
    """``min_B`` of the LSA risk at a fixed ``u``: it is quadratic in ``B``, minimized where ``N B = W``, so
    ``R*(u) = E y_q^2 - tr(N^-1 W H W^T)``. Invariant to the scale of ``u``."""
    n_mat, w = _lsa_quadratic(c2, c3, n, u)
    return second - torch.trace(torch.linalg.solve(n_mat, w) @ h @ w.T)


def _newton(
    fn: Callable[[Tensor], Tensor], start: Tensor, max_iter: int, tol: float, rounding: float
) -> tuple[float, Tensor]:
    """Minimize a smooth function of a few variables by Newton's method on the Hessian with its eigenvalues made
    positive (a descent direction at saddles too) and a backtracking line search; returns the value and the point."""
    x = start.clone()
    value = fn(x).item()
    gradient = torch.func.grad(fn)
    # Reverse over reverse: torch.func.hessian's forward mode loads torch.jit decompositions on first use, which
    # costs a second and warns of deprecation.
    hessian = torch.func.jacrev(gradient)
    for _ in range(max_iter):
        grad = gradient(x)
        if grad.norm().item() <= tol:
            break
        evals, evecs = torch.linalg.eigh(hessian(x))
        floor = 1e-10 * max(evals.abs().max().item(), 1.0)
        step = -evecs @ ((evecs.T @ grad) / evals.abs().clamp_min(floor))
        slope = (grad @ step).item()
        t = 1.0
        while t > 1e-9:
            trial = fn(x + t * step).item()
            if trial <= value + 1e-4 * t * slope:
                break
            t /= 2
        else:  # no decrease left that float64 resolves
            break
        x, value, decrease = x + t * step, trial, value - trial
        # A step that gains nothing float64 resolves: the minimum, up to rounding (the gradient stalls above tol
        # where rounding dominates it, or where the minimum is degenerate, a circle of them in an isotropic task).
        if decrease <= rounding:
            break
    return value, x


@checked
def optimal_lsa(
    task: LinearRegression, n: Count, *, starts: Starts = 8, seed: Seed = 0, max_iter: Steps = 200
) -> tuple[Tensor, Tensor]:
    """The weights ``(u, b)`` (shapes ``(d+1,)`` and ``(d+1, d)``, ``|u| = 1``) of the LSA with the smallest
    :func:`lsa_risk`: the infimum over all LSAs, with no finite-sample excess.

    The risk is quadratic in ``b`` for fixed ``u``, so ``b`` is profiled out exactly (``N b = W``) and the
    scale-free profile ``R*(u)`` is minimized by Newton's method with a line search from ``starts`` directions:
    ``u = e_{d+1}`` (GD-0's) and ``starts - 1`` drawn from ``N(0, I)`` with ``seed``, the same at every call. The
    penalty ``(|u|^2 - 1)^2`` fixes the scale that ``R*`` ignores, so the minimum is an isolated point. Needs a
    positive-definite ``H`` and either ``sigma > 0`` or a positive-definite ``Psi`` (then ``N`` is invertible).
    """
    # each Newton step: a Hessian of the profile in u, d + 1 backward passes through contractions of (d+1)^4 values;
    # counted for every step allowed (Newton often stops far sooner, but a call cannot know that before it starts)
    checks.work(
        f"optimal_lsa at task.dim = {task.dim}, starts = {starts}, max_iter = {max_iter} "
        "(starts max_iter 16 (dim + 1)^5)",
        starts * max_iter * 16 * (task.dim + 1) ** 5,
    )
    second, c2, c3, h = _lsa_moments(task)
    d = h.shape[0]
    psi, noise = task.cov(), task.noise_var
    if torch.linalg.eigvalsh(h).min().item() <= 1e-12 * max(h.abs().max().item(), 1.0):
        raise ValueError("task must have a positive-definite input covariance H (x_cov) for optimal_lsa")
    if noise == 0 and torch.linalg.eigvalsh(psi).min().item() <= 1e-12 * max(psi.abs().max().item(), 1.0):
        raise ValueError("task must have noise_std > 0 or a positive-definite prior_cov for optimal_lsa")

    def objective(u: Tensor) -> Tensor:
        return _profiled_lsa_risk(second, c2, c3, h, n, u) + (u @ u - 1) ** 2

    gen = torch.Generator().manual_seed(seed)
    first = torch.zeros(d + 1, dtype=torch.float64)
    first[d] = 1.0
    inits = [first] + [torch.randn(d + 1, generator=gen, dtype=torch.float64) for _ in range(starts - 1)]
    # Rounding floors of the gradient and of the value: the profile is a difference of terms of size E y_q^2.
    scale = max(second.item(), 1.0)
    _, best_u = min(
        (_newton(objective, init / init.norm(), max_iter, 1e-13 * scale, 1e-15 * scale) for init in inits),
        key=lambda pair: pair[0],
    )
    u = best_u / best_u.norm()
    n_mat, w = _lsa_quadratic(c2, c3, n, u)
    return u, torch.linalg.solve(n_mat, w)


def best_lsa_risk(task: object, n: int, *, starts: int = 8, seed: int = 0, max_iter: int = 200) -> float:
    """The ICL risk of the best linear self-attention, :func:`lsa_risk` at :func:`optimal_lsa` (same arguments).

    An LSA computes GD-0 (``u = e_{d+1}``, ``b = [Gamma^T; 0]``) and an LTB contains every LSA, so
    ``best_gd_beta_risk(task, n) <= best_lsa_risk(task, n) <= best_gd_beta_risk(task, n, zeros)``, with equality on
    the left when ``beta* = 0``; ``best_lsa_risk - best_gd_beta_risk`` is Theorem 4.1's approximation gap.
    """
    u, b = optimal_lsa(task, n, starts=starts, seed=seed, max_iter=max_iter)
    return lsa_risk(task, n, u, b).item()
