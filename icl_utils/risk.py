"""ICL risk estimated on sampled prompts: squared errors at every prefix length, and their mean with a band.

The ICL risk after ``k`` examples is ``E (f_hat(x_query; first k examples) - y_query)^2``. Sampling ``B`` prompts
of ``n`` context points gives, for every ``k = 0..n``, ``B`` squared errors: :func:`prefix_errors` for an estimator
(one call per prefix), :func:`model_errors` for a transformer (one forward pass reads every prefix; a model that
predicts only the query gives one error per prompt).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from icl_utils import checks
from icl_utils.prompts import Prompt

Estimator = Callable[[Prompt], Tensor]


def prefix_errors(estimator: Estimator, prompt: Prompt) -> Tensor:
    """Squared errors ``(B, n+1)``: column ``k`` is the estimator's error at point ``k`` given the ``k`` before it."""
    if not callable(estimator):
        raise TypeError(f"estimator must be callable on a Prompt, got {type(estimator).__name__}")
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be an icl_utils.Prompt, got {type(prompt).__name__}")
    cols = []
    for k in range(prompt.n_context + 1):
        sub = prompt.prefix(k)
        cols.append((estimator(sub) - sub.y_query).square())
    return torch.stack(cols, dim=1)


def squared_errors(preds: Tensor, prompt: Prompt) -> Tensor:
    """Squared errors of a model's output on ``prompt``: at every x position for ``(B, n+1)`` outputs (a causal
    transformer), at the query for ``(B,)`` outputs (a model that predicts the query only)."""
    targets = prompt.points()[1] if preds.ndim == 2 else prompt.y_query
    if preds.shape != targets.shape:
        raise ValueError(f"a model's output must have shape {tuple(prompt.points()[1].shape)} (every x position) or "
                         f"{tuple(prompt.y_query.shape)} (the query), got {tuple(preds.shape)}")
    return (preds.to(torch.promote_types(preds.dtype, targets.dtype)) - targets).square()


@torch.no_grad()
def model_errors(model: nn.Module, prompt: Prompt, chunk_size: int = 4096) -> Tensor:
    """Squared errors of a model on ``prompt``, ``chunk_size`` prompts at a time (which bounds the memory), in
    eval mode: ``(B, n+1)`` for a model that predicts at every x position, ``(B,)`` for one that predicts the query."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be an icl_utils.Prompt, got {type(prompt).__name__}")
    chunk_size = checks.positive_int("chunk_size", chunk_size)
    was_training = model.training
    model.eval()
    try:
        return torch.cat([squared_errors(model(part), part) for part in prompt.split(chunk_size)])
    finally:
        model.train(was_training)


def mean_and_band(errors: Tensor, z: float = 1.96) -> tuple[Tensor, Tensor]:
    """Mean over prompts (dim 0) and the half-width ``z * std / sqrt(B)`` of its normal confidence band."""
    if not isinstance(errors, Tensor) or errors.ndim < 1 or errors.shape[0] < 2:
        raise ValueError("errors must be a tensor with at least two prompts along dim 0")
    errors = errors.double().cpu()
    return errors.mean(0), z * errors.std(0) / math.sqrt(errors.shape[0])


def _gaussian_task(task: object) -> tuple[Tensor, Tensor, Tensor, float]:
    """``(beta*, Psi, H, sigma^2)`` of a Gaussian linear-regression task family, in float64."""
    from icl_utils.tasks.linear import LinearRegression

    if not isinstance(task, LinearRegression):
        raise TypeError(f"task must be a LinearRegression, got {type(task).__name__}")
    return task.mean(), task.cov(), task.input_cov(), task.noise_var


def gd_beta_risk(task: object, n: int, beta0: Tensor, gamma: Tensor) -> Tensor:
    """The exact ICL risk of one GD step from ``beta0`` with matrix step ``gamma`` (chapter 4's GD-beta).

    For ``beta ~ N(beta*, Psi)``, ``x ~ N(0, H)``, noise variance ``sigma^2`` and ``n`` examples, with
    ``A = Gamma^T H Gamma`` and ``M = Psi + (beta* - beta0)(beta* - beta0)^T``, Wishart moments give::

        R = sigma^2 + tr[(H - H Gamma^T H - H Gamma H + (1 + 1/n) H A H) M] + tr(A H) (tr(H M) + sigma^2) / n.

    Differentiable in ``beta0`` and ``gamma`` (float64), so gradient flow on it is exact.
    """
    mean, psi, h, noise = _gaussian_task(task)
    n = checks.positive_int("n", n)
    d = mean.shape[0]
    if not isinstance(beta0, Tensor) or tuple(beta0.shape) != (d,):
        raise ValueError(f"beta0 must be a tensor of shape ({d},)")
    if not isinstance(gamma, Tensor) or tuple(gamma.shape) != (d, d):
        raise ValueError(f"gamma must be a tensor of shape ({d}, {d})")
    beta0, gamma = beta0.double().cpu(), gamma.double().cpu()
    shift = mean - beta0
    m = psi + torch.outer(shift, shift)
    a = gamma.T @ h @ gamma
    bias = torch.trace((h - h @ gamma.T @ h - h @ gamma @ h + (1 + 1 / n) * h @ a @ h) @ m)
    return noise + bias + torch.trace(a @ h) * (torch.trace(h @ m) + noise) / n


def optimal_gd_step(task: object, n: int, beta0: Tensor | None = None) -> Tensor:
    """The matrix step minimizing :func:`gd_beta_risk` for a fixed initialization (the task mean by default).

    Setting the gradient in ``Gamma`` to zero gives ``Gamma H ((1 + 1/n) H M H + c H) = M H`` with
    ``c = (tr(H M) + sigma^2) / n``; for invertible ``H``, ``Gamma = M ((1 + 1/n) H M + c I)^{-1}`` (Theorem 5.2's
    optimum when ``beta0 = beta*``, the best GD-0 step when ``beta0 = 0``). Solved with a pseudo-inverse, so a
    singular ``H`` or ``Psi`` is allowed.
    """
    mean, psi, h, noise = _gaussian_task(task)
    n = checks.positive_int("n", n)
    beta0 = mean if beta0 is None else checks.vector("beta0", beta0, mean.shape[0])
    shift = mean - beta0
    m = psi + torch.outer(shift, shift)
    c = (torch.trace(h @ m) + noise) / n
    return m @ h @ torch.linalg.pinv((1 + 1 / n) * h @ m @ h + c * h, hermitian=True)


@dataclass(frozen=True)
class AttentionMoments:
    """The input and prior moments that fix the ICL risk of linear attention on a feature map ``phi`` over a
    nonparametric task family (:func:`attention_risk`), computed once, in float64: ``E y^2``, ``C = B Lambda B^T``,
    ``G = E phi phi^T`` and ``W = E[(f^T Lambda f + sigma^2) phi phi^T]``. Only ``S(n) = (1 - 1/n) C + W / n``
    depends on the context length, so one set of moments serves a whole risk-against-``n`` curve."""

    second: Tensor
    c: Tensor
    g: Tensor
    w: Tensor

    @classmethod
    def of(cls, features: Callable[[Tensor], Tensor], task: object, *, prior_cov: Tensor | None = None,
           points: int | None = None) -> AttentionMoments:
        """Moments of ``features`` (a map from ``(K, dim)`` inputs to ``(K, N)`` features: the true basis
        ``task.features`` or a model's ``model.features``) under ``task``'s inputs and labels, with the coefficients'
        second moment ``prior_cov`` (default: the task's diagonal prior). Expectations over the uniform inputs use
        ``points`` nodes: the midpoint rule in one dimension (default 4096, exact for the Fourier basis below that
        frequency), a scrambled Sobol sequence otherwise (default 2^15)."""
        from icl_utils.tasks.nonparametric import NonparametricTasks

        if not isinstance(task, NonparametricTasks):
            raise TypeError(f"task must be a NonparametricTasks, got {type(task).__name__}")
        if not callable(features):
            raise TypeError(f"features must be callable on inputs of shape (..., dim), got {type(features).__name__}")
        prior = (torch.diag(task.prior_var()) if prior_cov is None
                 else checks.psd_matrix("prior_cov", prior_cov, task.n_basis))
        points = checks.positive_int("points", points) if points is not None else (4096 if task.dim == 1 else 2**15)
        if task.dim == 1:  # the midpoint rule: exact for trigonometric polynomials of degree < points
            nodes = ((torch.arange(points, dtype=torch.float64) + 0.5) / points)[:, None]
        else:  # a scrambled Sobol sequence (quasi-Monte Carlo), the same nodes at every call
            nodes = torch.quasirandom.SobolEngine(task.dim, scramble=True, seed=0).draw(points, dtype=torch.float64)
        basis = task.features(nodes)  # (K, N_true)
        owner = getattr(features, "__self__", None)  # a model's bound method reads inputs of its parameters' dtype
        param = next(owner.parameters(), None) if isinstance(owner, nn.Module) else None
        with torch.no_grad():
            phi = features(nodes if param is None else nodes.to(param.device, param.dtype)).double().cpu()
        if phi.ndim != 2 or phi.shape[0] != nodes.shape[0]:
            raise ValueError(f"features must map inputs of shape (K, dim) to (K, N), got shape {tuple(phi.shape)}")
        k = nodes.shape[0]
        second = ((basis @ prior) * basis).sum(1) + task.noise_var  # E[y^2 | x]
        b = phi.T @ basis / k
        return cls(second.mean(), b @ prior @ b.T, phi.T @ phi / k, (phi * second[:, None]).T @ phi / k)

    def s(self, n: int) -> Tensor:
        """``E u u^T`` for ``u = (1/n) sum_i y_i phi(x_i)``."""
        n = checks.positive_int("n", n)
        return self.c * (1 - 1 / n) + self.w / n

    def gamma(self, n: int, rtol: float = 1e-9) -> Tensor:
        """The minimizer ``Gamma* = S^-1 C G^-1`` of the risk at ``n`` examples, computed on the directions of
        feature space whose variance (eigenvalue of ``G``) exceeds ``rtol`` times the largest, so that redundant or
        nearly collinear features are allowed."""
        rtol = checks.nonnegative_float("rtol", rtol, strict=True)
        # Solve in whitened coordinates psi = phi V D^(-1/2) (G = I there): learned features are often nearly
        # collinear, and S^+ C G^+ is then dominated by rounding errors.
        evals, evecs = torch.linalg.eigh(self.g)
        keep = evals > rtol * evals.max()
        white = evecs[:, keep] / evals[keep].sqrt()
        return white @ torch.linalg.solve(white.T @ self.s(n) @ white, white.T @ self.c @ white) @ white.T

    def risk(self, n: int, gamma: Tensor) -> Tensor:
        """``R(Gamma) = E y^2 - 2 tr(Gamma C) + tr(Gamma G Gamma^T S(n))``."""
        size = self.c.shape[0]
        if not isinstance(gamma, Tensor) or tuple(gamma.shape) != (size, size):
            raise ValueError(f"gamma must be a tensor of shape ({size}, {size}) to match the {size} features")
        gamma = gamma.detach().double().cpu()
        return self.second - 2 * torch.trace(gamma @ self.c) + torch.trace(gamma @ self.g @ gamma.T @ self.s(n))


def attention_gamma(features: Callable[[Tensor], Tensor], task: object, n: int, *, prior_cov: Tensor | None = None,
                    points: int | None = None) -> Tensor:
    """The ``Gamma`` that minimizes :func:`attention_risk` (see :meth:`AttentionMoments.gamma`). It is what
    pretraining on infinitely many tasks from ``prior_cov`` (default: the task's prior) converges to for a fixed
    feature map, and the limit of stage-2 ridge fitting as the number of prompts grows and the penalty vanishes."""
    return AttentionMoments.of(features, task, prior_cov=prior_cov, points=points).gamma(n)


def attention_risk(features: Callable[[Tensor], Tensor], task: object, n: int, gamma: Tensor, *,
                   prior_cov: Tensor | None = None, points: int | None = None) -> Tensor:
    """The exact ICL risk of linear attention on a feature map, ``E (y_q - (1/n) sum_i y_i phi(x_i)^T Gamma
    phi(x_q))^2``, for tasks ``F = beta^T f`` of a :class:`~icl_utils.tasks.nonparametric.NonparametricTasks`.

    The prediction is linear in the labels, so the risk involves ``beta`` only through ``Lambda = E beta beta^T``
    (``prior_cov``, default the task's diagonal prior; a pool of tasks gives its second-moment matrix). With
    ``u = (1/n) sum_i y_i phi(x_i)``, ``G = E phi phi^T``, ``B = E phi f^T``, ``C = B Lambda B^T`` and
    ``W = E[(f^T Lambda f + sigma^2) phi phi^T]``::

        E u u^T = S = (1 - 1/n) C + W / n,       R(Gamma) = E y^2 - 2 tr(Gamma C) + tr(Gamma G Gamma^T S).

    For a curve over ``n``, compute :class:`AttentionMoments` once and call its ``risk`` and ``gamma``.
    """
    return AttentionMoments.of(features, task, prior_cov=prior_cov, points=points).risk(n, gamma)


def bayes_risk(
    task: object, n: int, generator: torch.Generator, n_mc: int = 20_000, chunk_size: int = 1024
) -> tuple[float, float]:
    """The Bayes ICL risk ``sigma^2 + E_X tr(H Sigma_post(X))`` and its Monte Carlo standard error.

    The posterior covariance ``Psi - Psi X^T (X Psi X^T + sigma^2 I)^{-1} X Psi`` does not depend on the labels or
    on ``beta*``, so only the inputs ``X`` are sampled (``n_mc`` draws, on the CPU in float64), ``chunk_size`` at a
    time: memory grows with ``chunk_size * n^2``, not with ``n_mc``.
    """
    mean, psi, h, noise = _gaussian_task(task)
    n = checks.positive_int("n", n)
    n_mc = checks.positive_int("n_mc", n_mc, minimum=2)
    chunk_size = checks.positive_int("chunk_size", chunk_size)
    checks.generator(generator)
    d = mean.shape[0]
    h_sqrt = checks.psd_sqrt(h)
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


@torch.no_grad()
def query_risk(
    predict: Estimator, task: object, n: int, n_prompts: int, generator: torch.Generator, chunk_size: int = 4096
) -> tuple[float, float]:
    """Monte Carlo ICL risk ``E (predict(prompt) - y_query)^2`` on ``n_prompts`` fresh prompts of ``n`` examples
    from ``task``, and its standard error. Prompts are drawn and scored ``chunk_size`` at a time, which bounds the
    memory; ``n_prompts`` is rounded down to whole chunks. ``predict`` is an estimator or a model's ``predict``.
    """
    if not callable(predict):
        raise TypeError(f"predict must be callable on a Prompt, got {type(predict).__name__}")
    if not hasattr(task, "sample"):
        raise TypeError(f"task must be a task family with a sample method, got {type(task).__name__}")
    n = checks.positive_int("n", n)
    chunk_size = min(checks.positive_int("chunk_size", chunk_size), checks.positive_int("n_prompts", n_prompts, 2))
    total, total_sq, count = 0.0, 0.0, 0
    for _ in range(n_prompts // chunk_size):
        prompt = task.sample(chunk_size, n, generator)
        errors = (predict(prompt) - prompt.y_query).double().square()
        total, total_sq, count = total + errors.sum().item(), total_sq + errors.square().sum().item(), count + len(errors)
    mean = total / count
    return mean, math.sqrt(max(total_sq / count - mean * mean, 0.0) / (count - 1))


def fit_slope(ns: Sequence[float], risks: Sequence[float]) -> float:
    """The slope of ``log risk`` against ``log n`` by least squares: the empirical rate exponent."""
    ns, risks = np.asarray(ns, dtype=float), np.asarray(risks, dtype=float)
    if ns.shape != risks.shape or ns.ndim != 1 or len(ns) < 2:
        raise ValueError("ns and risks must be sequences of the same length, at least 2")
    if not (np.isfinite(ns).all() and np.isfinite(risks).all() and (ns > 0).all() and (risks > 0).all()):
        raise ValueError("ns and risks must be positive and finite")
    return float(np.polyfit(np.log(ns), np.log(risks), 1)[0])
