"""ICL risk estimated on sampled prompts: squared errors at every prefix length, and their mean with a band.

The ICL risk after ``k`` examples is ``E (f_hat(x_query; first k examples) - y_query)^2``. Sampling ``B`` prompts
of ``n`` context points gives, for every ``k = 0..n``, ``B`` squared errors: :func:`prefix_errors` for an estimator
(one call per prefix), :func:`model_errors` for a transformer (one forward pass reads every prefix).
"""

from __future__ import annotations

import math
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


@torch.no_grad()
def model_errors(model: nn.Module, prompt: Prompt, chunk_size: int = 4096) -> Tensor:
    """Squared errors ``(B, n+1)`` of a model that predicts at every x position, in chunks of prompts."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    chunk_size = checks.positive_int("chunk_size", chunk_size)
    was_training = model.training
    model.eval()
    ys = prompt.points()[1]
    out = []
    for start in range(0, prompt.batch_size, chunk_size):
        part = prompt.take(slice(start, start + chunk_size))
        out.append((model(part).float() - ys[start : start + chunk_size]).square())
    model.train(was_training)
    return torch.cat(out, dim=0)


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
