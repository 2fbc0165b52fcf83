"""ICL risk estimated on sampled prompts: squared errors at every prefix length, their mean with a band, slopes.

The ICL risk after ``k`` examples is ``E (f_hat(x_query; first k examples) - y_query)^2``. Sampling ``B`` prompts
of ``n`` context points gives, for every ``k = 0..n``, ``B`` squared errors: :func:`prefix_errors` for an estimator
(one call per prefix), :func:`model_errors` for a model (one forward pass reads every prefix of a causal
transformer; a model that predicts only the query gives one error per prompt). :func:`query_risk` estimates the
risk at one context length on as many fresh prompts as asked, a bounded number of values at a time. Closed-form
risks are in :mod:`icl_utils.exact`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from icl_utils import checks, config
from icl_utils.exact import attention_risk
from icl_utils.models.base import evaluating
from icl_utils.models.feature_attention import AttentionOnFeatures, fit_gamma
from icl_utils.prompts import Prompt, TaskFamily, squared_errors
from icl_utils.tasks.pool import PromptPool

Estimator = Callable[[Prompt], Tensor]


def _scored(preds: object, prompt: Prompt, *, query_only: bool) -> Tensor:
    """The squared errors of ``preds`` on ``prompt`` behind every scorer here: the shape-checked pairing of
    :func:`~icl_utils.prompts.squared_errors` (per point or per query, never a broadcast), restricted to one
    prediction per prompt for an estimator (``query_only``), and the predictions checked to be finite."""
    if query_only and (not isinstance(preds, Tensor) or tuple(preds.shape) != (prompt.batch_size,)):
        shape = tuple(preds.shape) if isinstance(preds, Tensor) else type(preds).__name__
        raise ValueError(f"an estimator must return one prediction per prompt, shape ({prompt.batch_size},), got "
                         f"{shape}; for a GPT, pass model.predict")
    errors = squared_errors(preds, prompt)
    checks.finite("predictions", preds)
    return errors


def prefix_errors(estimator: Estimator, prompt: Prompt) -> Tensor:
    """Squared errors ``(B, n+1)``: column ``k`` is the estimator's error at point ``k`` given the ``k`` before it."""
    if not callable(estimator):
        raise TypeError(f"estimator must be callable on a Prompt, got {type(estimator).__name__}")
    prompt = checks.prompt(prompt)
    cols = []
    for k in range(prompt.n_context + 1):
        sub = prompt.prefix(k)
        cols.append(_scored(estimator(sub), sub, query_only=True))
    return torch.stack(cols, dim=1)


def _chunk(chunk_size: object, n: int, dim: int) -> int:
    """Prompts per chunk: ``chunk_size`` if given, else as many prompts of ``n`` examples in ``dim`` dimensions as
    hold :data:`~icl_utils.config.CHUNK_ELEMENTS` values, so that memory is bounded in values, not prompts."""
    if chunk_size is None:
        return config.prompts_per_chunk((n + 1) * (dim + 1))
    return checks.positive_int("chunk_size", chunk_size)


@torch.no_grad()
def model_errors(model: nn.Module, prompt: Prompt, chunk_size: int | None = None) -> Tensor:
    """Squared errors of a model on ``prompt`` in eval mode: ``(B, n+1)`` for a model that predicts at every point,
    ``(B,)`` for one that predicts the query. Prompts go through the model ``chunk_size`` at a time (default: a
    bounded number of values at a time), which bounds the memory."""
    checks.module("model", model)
    prompt = checks.prompt(prompt)
    chunk_size = _chunk(chunk_size, prompt.n_context, prompt.dim)
    with evaluating(model):
        return torch.cat([_scored(model(part), part, query_only=False) for part in prompt.split(chunk_size)])


def mean_and_band(errors: Tensor, z: float = 1.96) -> tuple[Tensor, Tensor]:
    """Mean over prompts (dim 0) and the half-width ``z * std / sqrt(B)`` of its normal confidence band."""
    if not isinstance(errors, Tensor) or errors.ndim < 1 or errors.shape[0] < 2:
        raise ValueError("errors must be a tensor with at least two prompts along dim 0")
    z = checks.nonnegative_float("z", z, strict=True)
    errors = checks.finite("errors", errors.double().cpu())
    return errors.mean(0), z * errors.std(0) / math.sqrt(errors.shape[0])


@torch.no_grad()
def query_risk(
    predict: Estimator, task: TaskFamily, n: int, n_prompts: int, generator: torch.Generator,
    chunk_size: int | None = None,
) -> tuple[float, float]:
    """Monte Carlo ICL risk ``E (predict(prompt) - y_query)^2`` on ``n_prompts`` fresh prompts of ``n`` examples
    from ``task``, and its standard error. Prompts are drawn and scored ``chunk_size`` at a time (default: as many
    as hold :data:`~icl_utils.config.CHUNK_ELEMENTS` values; the last chunk holds the rest), which bounds the
    memory. ``predict`` is an estimator or a model's ``predict``: one prediction
    per prompt, shape ``(B,)``.
    """
    if not callable(predict):
        raise TypeError(f"predict must be callable on a Prompt, got {type(predict).__name__}")
    checks.task_family(task)
    n = checks.positive_int("n", n, minimum=0)
    n_prompts = checks.positive_int("n_prompts", n_prompts, minimum=2)
    chunk_size = _chunk(chunk_size, n, task.dim)
    checks.generator(generator)
    total, total_sq = 0.0, 0.0
    for start in range(0, n_prompts, chunk_size):
        prompt = task.sample(min(chunk_size, n_prompts - start), n, generator)
        errors = _scored(predict(prompt), prompt, query_only=True).double()
        total, total_sq = total + errors.sum().item(), total_sq + errors.square().sum().item()
    mean = total / n_prompts
    return mean, math.sqrt(max(total_sq / n_prompts - mean * mean, 0.0) / (n_prompts - 1))


def _log_log(ns: Sequence[float], risks: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``(log n, log risk)`` of a curve, checked: two sequences of one length (at least 2), positive and finite,
    with at least two distinct ``n`` (a slope needs them)."""
    try:
        ns, risks = np.asarray(ns, dtype=float), np.asarray(risks, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError("ns and risks must be sequences of numbers") from err
    if ns.shape != risks.shape or ns.ndim != 1 or len(ns) < 2:
        raise ValueError("ns and risks must be sequences of the same length, at least 2")
    if not (np.isfinite(ns).all() and np.isfinite(risks).all() and (ns > 0).all() and (risks > 0).all()):
        raise ValueError("ns and risks must be positive and finite")
    if len(np.unique(ns)) < 2:
        raise ValueError(f"ns must hold at least two distinct values to fit a slope, got {ns.tolist()}")
    return np.log(ns), np.log(risks)


def fit_slope(ns: Sequence[float], risks: Sequence[float]) -> float:
    """The slope of ``log risk`` against ``log n`` by least squares: the empirical rate exponent."""
    log_n, log_risk = _log_log(ns, risks)
    return float(np.polyfit(log_n, log_risk, 1)[0])


def first_n_below(ns: Sequence[int], risks: Sequence[float], level: float) -> int | None:
    """The empirical sample complexity on a grid: the first ``n`` in ``ns`` whose risk is at most ``level``, or
    ``None`` if no risk on the grid reaches it (``ns`` and ``risks`` pair up in order)."""
    ns, risks = list(ns), np.asarray(risks, dtype=float)
    if risks.ndim != 1 or len(ns) != len(risks):
        raise ValueError(f"ns and risks must be sequences of the same length, got {len(ns)} and {risks.shape}")
    if any(a >= b for a, b in zip(ns, ns[1:])):
        raise ValueError(f"ns must increase (the first n below the level is then the smallest), got {ns}")
    if np.isnan(risks).any():
        raise ValueError("risks must not be nan")
    level = checks.nonnegative_float("level", level)
    return next((n for n, value in zip(ns, risks) if value <= level), None)


def query_risk_curves(
    predictors: dict[str, Estimator], task: TaskFamily, ns: Sequence[int], n_prompts: int,
    generator: torch.Generator, chunk_size: int | None = None,
) -> dict[str, np.ndarray]:
    """:func:`query_risk` of several estimators at every context length in ``ns``: a dict from each name of
    ``predictors`` to an array of shape ``(len(ns), 2)`` (mean, standard error). For each ``n`` in turn, each
    estimator in the given order gets its own ``n_prompts`` fresh prompts from ``generator``."""
    if not isinstance(predictors, dict) or not predictors:
        raise TypeError("predictors must be a non-empty dict from names to estimators")
    checks.sequence("ns", ns)
    curves: dict[str, list] = {name: [] for name in predictors}
    for n in ns:
        for name, predict in predictors.items():
            curves[name].append(query_risk(predict, task, n, n_prompts, generator, chunk_size=chunk_size))
    return {name: np.array(values) for name, values in curves.items()}


def local_slopes(ns: Sequence[float], risks: Sequence[float]) -> np.ndarray:
    """The slopes of ``log risk`` against ``log n`` between consecutive points, shape ``(len(ns) - 1,)``: how the
    empirical rate exponent drifts along a curve (:func:`fit_slope` fits one over the whole curve)."""
    log_n, log_risk = _log_log(ns, risks)
    if not np.all(np.diff(log_n) != 0):
        raise ValueError("ns must not repeat between consecutive points: a local slope needs two distinct n")
    return np.diff(log_risk) / np.diff(log_n)


def empirical_and_expected_risk(model: nn.Module, pool: object, task: object) -> tuple[float, float]:
    """A feature-attention model's ICL risk on the ``T`` prompts it was pretrained on (a
    :class:`~icl_utils.tasks.pool.PromptPool`: the empirical risk, their mean squared error) and on new tasks of
    ``task`` at the pool's context length (the expected risk, exact by :func:`~icl_utils.exact.attention_risk` with the model's own
    ``Gamma``). Their gap measures memorization."""
    if not isinstance(model, AttentionOnFeatures):
        raise TypeError(f"model must be linear attention on features (an AttentionOnFeatures), got "
                        f"{type(model).__name__}")
    if not isinstance(pool, PromptPool):
        raise TypeError(f"pool must be a PromptPool, got {type(pool).__name__}")
    empirical = model_errors(model, pool.prompts).mean().item()
    return empirical, attention_risk(model.features, task, pool.prompts.n_context, model.gamma).item()


def gamma_erm_risks(
    model: nn.Module, task: object, n: int, sizes: Sequence[int], repeats: int, generator: torch.Generator, *,
    lam: float = 1e-6,
) -> np.ndarray:
    """The empirical and expected ICL risk (:func:`empirical_and_expected_risk`) of ``Gamma`` fitted by empirical
    risk minimization (:func:`~icl_utils.models.feature_attention.fit_gamma`, penalty ``lam``) on a pool of ``T``
    prompts of ``n`` examples, for every ``T`` in ``sizes`` and ``repeats`` independent pools each: shape
    ``(len(sizes), repeats, 2)``. The features of ``model`` stay fixed; its ``Gamma`` is left at the last fit."""
    if not isinstance(model, AttentionOnFeatures):
        raise TypeError(f"model must be linear attention on features (an AttentionOnFeatures), got "
                        f"{type(model).__name__}")
    checks.task_family(task)
    n = checks.positive_int("n", n)
    sizes = [checks.positive_int("sizes", t) for t in checks.sequence("sizes", sizes)]
    repeats = checks.positive_int("repeats", repeats)
    checks.generator(generator)
    out = np.empty((len(sizes), repeats, 2))
    for i, t in enumerate(sizes):
        for r in range(repeats):
            pool = PromptPool(task.sample(t, n, generator))
            fit_gamma(model, pool.prompts, lam=lam)
            out[i, r] = empirical_and_expected_risk(model, pool, task)
    return out
