"""ICL risk estimated on sampled prompts: squared errors at every prefix length, their mean with a band, slopes.

The ICL risk after ``k`` examples is ``E (f_hat(x_query; first k examples) - y_query)^2``. Sampling ``B`` prompts
of ``n`` context points gives, for every ``k = 0..n``, ``B`` squared errors: :func:`prefix_errors` for an estimator
(one call per prefix), :func:`model_errors` for a model (one forward pass reads every prefix of a causal
transformer; a model that predicts only the query gives one error per prompt). :func:`query_risk` estimates the
risk at one context length on as many fresh prompts as asked, a bounded number of values at a time. Closed-form
risks are in :mod:`icl_utils.exact`.

For chapter 4's sample complexities: :func:`attention_risk_terms` gives a linear attention's whole risk curve
``floor + spread / n`` from per-task estimates; :func:`held_out_errors` scores a learner fitted to each prompt on
many held-out queries; :func:`paired_query_errors` scores several predictors on the same prompts;
:func:`examples_to_reach` reads the ``n`` that reaches an error level off a curve; :func:`scaling_exponent` and
:func:`exponent_difference` fit how such an ``n`` grows with a problem size, with bootstrap intervals
(:func:`bootstrap_interval`) over seeds or prompts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch
from beartype.vale import Is
from jaxtyping import Float
from torch import Tensor, nn

from icl_utils import checks, config
from icl_utils.checks import (
    Count,
    Counts,
    Finite,
    Fraction,
    Pair,
    Positive,
    Positives,
    Reps,
    Samples,
    Seed,
    Size,
    Task,
    checked,
    mapping_of,
    sequence_of,
    takes,
)
from icl_utils.estimators import ridge
from icl_utils.exact import attention_risk
from icl_utils.models.base import evaluating
from icl_utils.models.feature_attention import AttentionOnFeatures, fit_gamma
from icl_utils.prompts import Prompt, unchecked_squared_errors
from icl_utils.tasks.pool import PromptPool

Estimator = Callable[[Prompt], Tensor]
Predictors = mapping_of(Callable, "estimators")
ProblemSizes = sequence_of(Positive, "problem sizes (numbers > 0 and finite)", base=Sequence | np.ndarray)
ContextLengths = sequence_of(Size, "context lengths (ints >= 0)", base=Sequence | np.ndarray)


def _scored(preds: object, prompt: Prompt, *, query_only: bool, name: str) -> Tensor:
    """The squared errors of ``preds``, made by the argument ``name``, on ``prompt`` behind every scorer here: the
    shape-checked pairing of :func:`~icl_utils.prompts.squared_errors` (per point or per query, never a broadcast),
    restricted to one prediction per prompt for an estimator (``query_only``), and the predictions checked to be
    finite."""
    if query_only and (not isinstance(preds, Tensor) or tuple(preds.shape) != (prompt.batch_size,)):
        shape = tuple(preds.shape) if isinstance(preds, Tensor) else type(preds).__name__
        raise ValueError(
            f"{name} must return one prediction per prompt, shape ({prompt.batch_size},), got "
            f"{shape}; for a GPT, pass model.predict"
        )
    try:
        errors = unchecked_squared_errors(preds, prompt)
    except (TypeError, ValueError) as err:  # the predictions' type, dtype, shape or device: what name returned
        raise type(err)(f"{name} returned bad predictions: {err}") from None
    checks.finite(f"{name}'s predictions", preds)
    checks.finite(f"{name}'s squared errors (of finite predictions, overflowing)", errors)
    return errors


@checked
def prefix_errors(estimator: Estimator, prompt: Prompt) -> Tensor:
    """Squared errors ``(B, n+1)``: column ``k`` is the estimator's error at point ``k`` given the ``k`` before it."""
    prompt = checks.prompt(prompt)
    cols = []
    for k in range(prompt.n_context + 1):
        sub = prompt.prefix(k)
        cols.append(_scored(estimator(sub), sub, query_only=True, name="estimator"))
    return torch.stack(cols, dim=1)


def _chunk(chunk_size: int | None, n: int, dim: int) -> int:
    """Prompts per chunk: ``chunk_size`` if given, else as many prompts of ``n`` examples in ``dim`` dimensions as
    hold :data:`~icl_utils.config.CHUNK_ELEMENTS` values, so that memory is bounded in values, not prompts."""
    return config.prompts_per_chunk((n + 1) * (dim + 1)) if chunk_size is None else chunk_size


@torch.no_grad()
@checked
def model_errors(model: nn.Module, prompt: Prompt, chunk_size: Count | None = None) -> Tensor:
    """Squared errors of a model on ``prompt`` in eval mode: ``(B, n+1)`` for a model that predicts at every point,
    ``(B,)`` for one that predicts the query. Prompts go through the model ``chunk_size`` at a time (default: a
    bounded number of values at a time), which bounds the memory."""
    prompt = checks.prompt(prompt)
    chunk_size = _chunk(chunk_size, prompt.n_context, prompt.dim)
    with evaluating(model):
        return torch.cat(
            [
                _scored(checks.predictions_of(model, part, "model"), part, query_only=False, name="model")
                for part in prompt.split(chunk_size)
            ]
        )


@checks.finite_result("errors")
@checked
def mean_and_band(
    errors: Annotated[Float[Tensor, " B *rest"], Pair, checks.Finite], z: Positive = 1.96
) -> tuple[Tensor, Tensor]:
    """Mean over prompts (dim 0) and the half-width ``z * std / sqrt(B)`` of its normal confidence band."""
    errors = errors.detach().double().cpu()
    return errors.mean(0), z * errors.std(0) / math.sqrt(errors.shape[0])


@checks.finite_result("curve")
@torch.no_grad()
@checked
def effective_ridge(
    curve: Annotated[Float[Tensor, " {prompt.n_context+1}"], Finite], prompt: Prompt, lams: Positives
) -> tuple[float, float]:
    """The penalty ``lam`` in ``lams`` whose ridge regression, on the same ``prompt``, has the mean error curve
    closest to ``curve`` (``n + 1`` values, one per prefix length, as :func:`prefix_errors` averages them), and
    that closest distance (root mean square over the prefixes).

    A learner between least squares (``lam -> 0``) and predicting zero (``lam -> inf``) is placed on that scale:
    chapter 1 reads off how far short of least squares a briefly trained transformer is.
    """
    prompt = checks.prompt(prompt)
    curve = curve.double().cpu()
    lams = [float(lam) for lam in lams]
    distances = [
        float(
            (prefix_errors(lambda p, lam=lam: ridge(p, lam=lam), prompt).double().mean(0).cpu() - curve)
            .square()
            .mean()
            .sqrt()
        )
        for lam in lams
    ]
    best = int(np.argmin(distances))
    return lams[best], distances[best]


@torch.no_grad()
@checked
def query_risk(
    predict: Estimator,
    task: Task,
    n: Size,
    n_prompts: Samples,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> tuple[float, float]:
    """Monte Carlo ICL risk ``E (predict(prompt) - y_query)^2`` on ``n_prompts`` fresh prompts of ``n`` examples
    from ``task``, and its standard error. Prompts are drawn and scored ``chunk_size`` at a time (default: as many
    as hold :data:`~icl_utils.config.CHUNK_ELEMENTS` values; the last chunk holds the rest), which bounds the
    memory. ``predict`` is an estimator or a model's ``predict``: one prediction
    per prompt, shape ``(B,)``.
    """
    chunk_size = _chunk(chunk_size, n, task.dim)
    total, total_sq = 0.0, 0.0
    for start in range(0, n_prompts, chunk_size):
        prompt = task.sample(min(chunk_size, n_prompts - start), n, generator)
        if not isinstance(prompt, Prompt):
            raise TypeError(f"task must sample Prompts (task.sample(batch, n, generator)), got {type(prompt).__name__}")
        errors = _scored(predict(prompt), prompt, query_only=True, name="predict").double()
        total, total_sq = total + errors.sum().item(), total_sq + errors.square().sum().item()
    mean = total / n_prompts
    return mean, math.sqrt(max(total_sq / n_prompts - mean * mean, 0.0) / (n_prompts - 1))


def _log_log(ns: Sequence[float], risks: Sequence[float], said: str = "ns and risks") -> tuple[np.ndarray, np.ndarray]:
    """``(log n, log risk)`` of a curve, checked: two sequences of one length (at least 2), positive and finite,
    with at least two distinct ``n`` (a slope needs them); ``said`` names the two in the errors."""
    names, arrays = said.split(" and "), []
    for name, values in zip(names, (ns, risks)):
        if isinstance(values, (str, bytes)):
            raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
        arrays.append(checks.real_array(name, values))
    ns, risks = arrays
    if ns.shape != risks.shape or ns.ndim != 1 or len(ns) < 2:
        raise ValueError(
            f"{said} must be sequences of the same length, at least 2, got shapes {ns.shape}, {risks.shape}"
        )
    for name, values in zip(names, arrays):
        if not (np.isfinite(values).all() and (values > 0).all()):
            raise ValueError(f"{name} must be positive and finite, got {values.tolist()}")
    if len(np.unique(ns)) < 2:
        raise ValueError(f"{names[0]} must hold at least two distinct values to fit a slope, got {ns.tolist()}")
    return np.log(ns), np.log(risks)


def fit_slope(ns: Sequence[float], risks: Sequence[float]) -> float:
    """The slope of ``log risk`` against ``log n`` by least squares: the empirical rate exponent."""
    return _slope(ns, risks)


def _slope(ns: Sequence[float], risks: Sequence[float], said: str = "ns and risks") -> float:
    """:func:`fit_slope`, with ``said`` naming the two sequences in its errors."""
    return float(np.polyfit(*_log_log(ns, risks, said), 1)[0])


def fit_slopes(xs: Sequence[float], ys: np.ndarray) -> np.ndarray:
    """:func:`fit_slope` of every column of ``ys`` (shape ``(len(xs), S)``, one column per seed): the spread of an
    exponent over seeds."""
    xs = checks.real_array("xs", xs)  # a sequence, an array or a tensor, as fit_slope takes
    if xs.ndim != 1:
        raise ValueError(f"xs must be a sequence of numbers (1-D), got shape {xs.shape}")
    ys = checks.real_array("ys", ys)
    if ys.ndim != 2 or ys.shape[0] != len(xs) or not 1 <= ys.shape[1] <= config.MAX_SERIES:
        raise ValueError(
            f"ys must have shape (len(xs), S) = ({len(xs)}, S) with 1 <= S <= {config.MAX_SERIES} "
            f"(config.MAX_SERIES, one fit each), got {ys.shape}"
        )
    return np.array([_slope(xs, ys[:, r], "xs and ys") for r in range(ys.shape[1])])


@checked
def query_risk_curves(
    predictors: Predictors,
    task: Task,
    ns: ContextLengths,
    n_prompts: Samples,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> dict[str, np.ndarray]:
    """:func:`query_risk` of several estimators at every context length in ``ns``: a dict from each name of
    ``predictors`` to an array of shape ``(len(ns), 2)`` (mean, standard error). For each ``n`` in turn, each
    estimator in the given order gets its own ``n_prompts`` fresh prompts from ``generator``."""
    curves: dict[str, list] = {name: [] for name in predictors}
    for n in ns:
        for name, predict in predictors.items():
            try:
                curves[name].append(query_risk(predict, task, n, n_prompts, generator, chunk_size=chunk_size))
            except (TypeError, ValueError) as err:  # query_risk names its own argument, predict
                raise type(err)(f"predictors[{name!r}]: {err}") from err
    return {name: np.array(values) for name, values in curves.items()}


def local_slopes(ns: Sequence[float], risks: Sequence[float]) -> np.ndarray:
    """The slopes of ``log risk`` against ``log n`` between consecutive points, shape ``(len(ns) - 1,)``: how the
    empirical rate exponent drifts along a curve (:func:`fit_slope` fits one over the whole curve)."""
    log_n, log_risk = _log_log(ns, risks)
    if not np.all(np.diff(log_n) != 0):
        raise ValueError("ns must not repeat between consecutive points: a local slope needs two distinct n")
    return np.diff(log_risk) / np.diff(log_n)


@checked
def empirical_and_expected_risk(model: AttentionOnFeatures, pool: PromptPool, task: Task) -> tuple[float, float]:
    """A feature-attention model's ICL risk on the ``T`` prompts it was pretrained on (a
    :class:`~icl_utils.tasks.pool.PromptPool`: the empirical risk, their mean squared error) and on new tasks of
    ``task`` at the pool's context length (the expected risk, exact by :func:`~icl_utils.exact.attention_risk` with
    the model's own
    ``Gamma``). Their gap measures memorization."""
    checks.task_fits(model, task)
    if pool.prompts.dim != model.dim:
        raise ValueError(f"pool must hold prompts of the model's dim={model.dim}, got {pool.prompts.dim}")
    empirical = model_errors(model, pool.prompts).mean().item()
    return empirical, attention_risk(model.features, task, pool.prompts.n_context, model.gamma).item()


@checked
def gamma_erm_risks(
    model: AttentionOnFeatures,
    task: Task,
    n: Count,
    sizes: Counts,
    repeats: Reps,
    generator: torch.Generator,
    *,
    lam: float = 1e-6,
) -> np.ndarray:
    """The empirical and expected ICL risk (:func:`empirical_and_expected_risk`) of ``Gamma`` fitted by empirical
    risk minimization (:func:`~icl_utils.models.feature_attention.fit_gamma`, penalty ``lam``) on a pool of ``T``
    prompts of ``n`` examples, for every ``T`` in ``sizes`` and ``repeats`` independent pools each: shape
    ``(len(sizes), repeats, 2)``. The features of ``model`` stay fixed; its ``Gamma`` is left at the last fit."""
    checks.allocation("max(sizes) * (n + 1) * task.dim (the largest pool)", max(sizes) * (n + 1) * task.dim)
    checks.task_fits(model, task)
    out = np.empty((len(sizes), repeats, 2))
    for i, t in enumerate(sizes):
        for r in range(repeats):
            pool = PromptPool(task.sample(t, n, generator))
            fit_gamma(model, pool.prompts, lam=lam)
            out[i, r] = empirical_and_expected_risk(model, pool, task)
    return out


def _lengths(n: object) -> np.ndarray:
    """``n`` (a number or an array) as positive, finite context lengths."""
    lengths = checks.real_array("n", n)
    if not (np.isfinite(lengths).all() and (lengths > 0).all()):
        raise ValueError(f"n must hold positive context lengths, got {n}")
    return lengths


@checked
@dataclass(frozen=True)
class RiskTerms:
    """The ICL risk of linear attention on features as an exact function of the context length,
    ``R(n) = floor + spread / n``, from per-task estimates (:func:`attention_risk_terms`).

    The prediction ``a^T Gamma f(x_q)`` is linear in the context's mean ``a = (1/n) sum_i y_i f(x_i)``, so for a task
    with ``mu = E[y f(x)]`` the risk is ``E (y_q - mu^T Gamma f_q)^2`` (the floor, what an infinitely long prompt
    leaves) plus ``tr(Gamma G Gamma^T Cov(y f(x))) / n``. ``floors`` and ``spreads`` hold one unbiased estimate of
    each term per task, so every ``n`` is scored on the same tasks and the standard errors come from their spread.

    ``swapped_floors`` is the floor when the context comes from another, independent task of the family (the
    control for an in-context gain): ``E y_q^2 - 2 mu_bar^T Gamma mu_t + E mu^T K mu`` with ``mu_bar`` the mean of
    ``mu`` over tasks, estimated per task with the other tasks' mean.
    """

    # one estimate per task each (the axis T), at least two, finite
    floors: Annotated[Float[np.ndarray, " T"], Pair, Finite]
    spreads: Annotated[Float[np.ndarray, " T"], Pair, Finite]
    swapped_floors: Annotated[Float[np.ndarray, " T"], Pair, Finite]

    @property
    def floor(self) -> float:
        """The risk as ``n -> infinity``."""
        return float(self.floors.mean())

    @property
    def spread(self) -> float:
        """The coefficient of ``1/n``."""
        return float(self.spreads.mean())

    @property
    def swapped_floor(self) -> float:
        """The risk as ``n -> infinity`` on contexts from other tasks."""
        return float(self.swapped_floors.mean())

    @property
    @checks.finite_result("floors")
    def floor_se(self) -> float:
        """The standard error of :attr:`floor` over the tasks."""
        return float(self.floors.std(ddof=1) / math.sqrt(self.floors.size))

    @checks.finite_result("n")
    def risk(self, n: object) -> np.ndarray:
        """``R(n)`` at every context length in ``n`` (a number or an array)."""
        return self.floor + self.spread / _lengths(n)

    def standard_error(self, n: object) -> np.ndarray:
        """The standard error of :meth:`risk` over the tasks, at every ``n``."""
        n = _lengths(n)
        if n.ndim > 1:  # a second axis would broadcast into the tasks'
            raise ValueError(f"n must be a number or a 1-D array of context lengths, got shape {n.shape}")
        n = np.atleast_1d(n)
        per_task = self.floors[None, :] + self.spreads[None, :] / n[:, None]
        return per_task.std(axis=1, ddof=1) / math.sqrt(self.floors.size)

    def examples_needed(self, level: float) -> float:
        """The sample complexity: the context length at which ``R(n) = level`` (:func:`examples_needed`)."""
        if not self.spread >= 0:  # each task's estimate may be negative, their mean (a variance's) may not
            raise ValueError(f"spreads must have a mean >= 0 (the 1/n term is a variance), got {self.spread:.3g}")
        return examples_needed(self.floor, self.spread, level)


@checked
def examples_needed(
    floor: checks.Real | list | tuple | np.ndarray | Tensor,
    spread: checks.Real | list | tuple | np.ndarray | Tensor,
    level: checks.Real,
) -> float | np.ndarray:
    """The context length ``n = spread / (level - floor)`` at which ``floor + spread / n = level``, elementwise over
    ``floor`` and ``spread`` (numbers or arrays of one shape, e.g. one per pretraining run); ``inf`` where ``level``
    is at or below the floor. A NaN or a negative spread (a variance term) is refused: it would read as a sample
    complexity, "never reached" or negative."""
    try:
        floor, spread = checks.real_array("floor", floor), checks.real_array("spread", spread)
    except (TypeError, ValueError) as err:
        raise TypeError(f"floor and spread must be numbers or arrays of numbers: {err}") from None
    if floor.shape != spread.shape:
        raise ValueError(f"floor and spread must have one shape, got {floor.shape} and {spread.shape}")
    if not (np.isfinite(floor).all() and np.isfinite(spread).all() and (spread >= 0).all()):
        raise ValueError(f"floor must be finite and spread finite and >= 0, got {floor} and {spread}")
    gap = level - floor
    with np.errstate(over="ignore"):
        out = np.where(gap > 0, spread / np.where(gap > 0, gap, 1.0), np.inf)
    if np.isinf(out[gap > 0]).any():  # an overflow, not a level that is never reached
        raise ValueError(
            f"spread / (level - floor) must be a finite count where level is above floor, got spread {spread}"
        )
    return float(out) if out.ndim == 0 else out


@torch.no_grad()
@checked
def attention_risk_terms(
    model: AttentionOnFeatures,
    task: Task,
    n_tasks: Samples,
    n_points: Samples,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> RiskTerms:
    """:class:`RiskTerms` of a linear attention on features (an ``AttentionOnFeatures``) on ``n_tasks`` tasks of
    ``task``, each seen through ``n_points`` inputs (the points of one prompt of that length; at least 2).

    Per task, with ``z_i = y_i f(x_i)``: ``mu^T M mu`` is estimated without bias by ``sum_{i != j} z_i^T M z_j /
    (N (N - 1))``, ``E y^2`` and ``E z^T K z`` by means over the points, with ``K = Gamma G Gamma^T`` and
    ``G = E f f^T`` from ``2^16`` further inputs. The query's label is a context label of the same task (the
    same distribution, noise included).
    """
    checks.task_fits(model, task)
    m = model.gamma.shape[0]
    # a prompt's points and features, and the products of a chunk: about four tensors that size at once
    checks.allocation("4 * n_points * (m + task.dim)", 4 * n_points * (m + task.dim))
    chunk_size = config.prompts_per_chunk(n_points * (m + task.dim)) if chunk_size is None else chunk_size
    with evaluating(model):
        inputs = task.sample(2**16 // n_points + 1, n_points, generator).x.reshape(-1, task.dim)
        feats = model.features(inputs).double()
        gamma = model.gamma.detach().double()
        k = gamma @ (feats.T @ feats / feats.shape[0]) @ gamma.T
        floors, spreads, second, means = [], [], [], []
        for start in range(0, n_tasks, chunk_size):
            prompt = task.sample(min(chunk_size, n_tasks - start), n_points, generator)
            y = prompt.y.double()
            z = y[..., None] * model.features(prompt.x).double()
            total = z.sum(1)

            def off_diagonal(mat: Tensor, z: Tensor = z, total: Tensor = total) -> tuple[Tensor, Tensor]:
                diagonal = ((z @ mat) * z).sum(-1)  # z_i^T M z_i
                pairs = ((total @ mat) * total).sum(-1) - diagonal.sum(1)
                return pairs / (n_points * (n_points - 1)), diagonal.mean(1)

            mu_gamma_mu, _ = off_diagonal(gamma)
            mu_k_mu, z_k_z = off_diagonal(k)
            floors.append(y.square().mean(1) - 2 * mu_gamma_mu + mu_k_mu)
            spreads.append(z_k_z - mu_k_mu)
            second.append(y.square().mean(1) + mu_k_mu)
            means.append(total / n_points)
        mu = torch.cat(means)
        others = (mu.sum(0) - mu) / (n_tasks - 1)  # the other tasks' mean, independent of each task's estimate
        swapped = torch.cat(second) - 2 * ((others @ gamma) * mu).sum(1)
    return RiskTerms(torch.cat(floors).cpu().numpy(), torch.cat(spreads).cpu().numpy(), swapped.cpu().numpy())


@torch.no_grad()
@checked
def held_out_errors(
    fit: Callable[[Prompt], Callable[[Tensor], Tensor]],
    task: Task,
    n: Count,
    n_prompts: checks.Draws,
    n_queries: checks.Draws,
    generator: torch.Generator,
) -> np.ndarray:
    """Each prompt's mean squared error over ``n_queries`` held-out queries, shape ``(n_prompts,)``, for a learner
    that fits the prompt's ``n`` examples: ``fit(prompt)`` returns a predictor from inputs ``(B, Q, d)`` to
    ``(B, Q)`` (:func:`~icl_utils.estimators.kernel_ridge_fit`). Many queries per fitted prompt leave only the
    spread over tasks and prompts in the mean."""
    checks.allocation("n_prompts * (n + n_queries) * task.dim", n_prompts * (n + n_queries) * task.dim)
    points = task.sample(n_prompts, n + n_queries - 1, generator)
    xs, ys = points.points()
    predict = fit(Prompt.from_points(xs[:, : n + 1], ys[:, : n + 1]))  # the queries are points n, n + 1, ...
    if not callable(predict):  # an estimator, which returns predictions, where a fitter is asked for
        raise TypeError(f"fit must return a predictor (a callable of inputs (B, Q, d)), got {type(predict).__name__}")
    checks.takes(predict, ["inputs (B, Q, d)"], "fit(prompt)")
    preds = predict(xs[:, n:])
    if isinstance(preds, Tensor) and (preds.is_complex() or not preds.is_floating_point()):
        raise TypeError(f"fit(prompt) must predict real numbers, got {preds.dtype}")
    if not isinstance(preds, Tensor) or tuple(preds.shape) != (n_prompts, n_queries):
        raise ValueError(
            f"fit(prompt) must predict shape ({n_prompts}, {n_queries}) from the queries, got "
            f"{tuple(preds.shape) if isinstance(preds, Tensor) else type(preds).__name__}"
        )
    if checks.values_checked() and not bool(checks.finite_flag(preds.detach())):
        raise ValueError("fit(prompt) must predict finite values, got a NaN or an infinity")
    return (preds.double() - ys[:, n:].double()).square().mean(1).cpu().numpy()


@checked
def examples_to_reach(ns: Sequence[float] | np.ndarray, risks: Sequence[float] | np.ndarray, level: Positive) -> float:
    """The sample complexity read off a curve measured on a grid: the ``n`` at which the risk falls to ``level``,
    interpolated linearly in ``(log n, log risk)`` between the last grid point above the level and the next one
    (``ns[0]`` if the first is already at or below it, ``inf`` if no point reaches it)."""
    log_n, log_risk = _log_log(ns, risks)
    if np.any(np.diff(log_n) <= 0):
        raise ValueError(f"ns must increase, got {list(ns)}")
    below = np.flatnonzero(log_risk <= math.log(level))
    if below.size == 0:
        return math.inf
    i = int(below[0])
    if i == 0:
        return float(ns[0])
    t = (math.log(level) - log_risk[i - 1]) / (log_risk[i] - log_risk[i - 1])
    return float(math.exp(log_n[i - 1] + t * (log_n[i] - log_n[i - 1])))


#: bootstrap resamples: 10 at least for an interval, at most config.MAX_REPS
Resamples = Annotated[int, Is[lambda v: not isinstance(v, bool) and 10 <= v <= config.MAX_REPS]]
checks.describe(Resamples, "an int", f"in [10, {config.MAX_REPS:.0e}] (config.MAX_REPS)")
Groups = sequence_of(
    lambda g: np.ndim(g) >= 1 and len(g) >= 2, "arrays of at least 2 replicates along their first axis"
)


@checked
def bootstrap_interval(
    statistic: Callable[..., float], groups: Groups, *, reps: Resamples = 1000, level: Fraction = 0.9, seed: Seed = 0
) -> tuple[float, float, float]:
    """``statistic(*groups)`` and its bootstrap interval: each group (an array of independent replicates along its
    first axis: seeds, prompts) is resampled with replacement, independently of the others, ``reps`` times; returns
    ``(estimate, low, high)`` with the central ``level`` of the resampled statistics. Infinite statistics are
    order statistics like any other; if one resample's statistic is nan (it cannot be computed), the interval is
    ``(nan, nan)``, which no claim passes."""
    groups = [checks.real_array(f"groups[{i}]", g) for i, g in enumerate(groups)]
    takes(statistic, ["an array"] * len(groups), "statistic")  # one argument per group
    values = sum(g.size for g in groups)
    # each resample copies every value, and a statistic reads them at least once: about 100 products' time each
    checks.work(
        f"bootstrap_interval's reps = {reps} resamples of groups' {values} values (100 each)", 100 * reps * values
    )
    rng = np.random.default_rng(seed)
    estimate = _real(statistic(*groups))
    draws = np.array([_real(statistic(*_resample(groups, rng))) for _ in range(reps)])
    if np.isnan(draws).any():
        return estimate, math.nan, math.nan
    # Order statistics, not interpolation: an infinite draw must not turn a quantile into nan.
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return estimate, float(low), float(high)


def _real(value: object, name: str = "statistic") -> float:
    """The value that the argument ``name`` (a callable) returned, as a float, or a TypeError naming ``name``."""
    if value is None or isinstance(value, (str, bytes, bool, complex)) or np.ndim(value) != 0 or np.iscomplexobj(value):
        raise TypeError(f"{name} must return one real number, got {value!r:.80}")
    return float(value)


@torch.no_grad()
@checked
def paired_query_errors(
    predictors: Predictors,
    task: Task,
    n: Size,
    n_prompts: Samples,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> dict[str, np.ndarray]:
    """Squared errors at the query of several predictors on the same ``n_prompts`` prompts of ``n`` examples: a
    dict from each name to an array of shape ``(n_prompts,)``. Differences between predictors are then paired,
    so the spread of the tasks and the query's label noise cancel in them."""
    chunk_size = _chunk(chunk_size, n, task.dim)
    out: dict[str, list] = {name: [] for name in predictors}
    for start in range(0, n_prompts, chunk_size):
        prompt = task.sample(min(chunk_size, n_prompts - start), n, generator)
        for name, predict in predictors.items():
            out[name].append(
                _scored(predict(prompt), prompt, query_only=True, name=f"predictors[{name!r}]").double().cpu()
            )
    return {name: torch.cat(values).numpy() for name, values in out.items()}


def _exponent(xs: Sequence[float], values: Sequence[float]) -> float:
    """The log-log slope of ``values`` against increasing ``xs``: ``+inf`` if the first value is finite and a later
    one infinite (the sample complexity grows without bound), nan if the first is infinite or a value is not
    positive (nothing is measured)."""
    values = np.asarray(values, dtype=float)
    if np.isnan(values).any() or not np.isfinite(values[0]) or (values <= 0).any():
        return math.nan
    return fit_slope(xs, values) if np.isfinite(values).all() else math.inf


def _resample(groups: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    return [g[rng.integers(0, g.shape[0], g.shape[0])] for g in groups]


def scaling_exponent(
    xs: Sequence[float],
    replicates: Sequence[np.ndarray],
    needed: Callable[[np.ndarray], float],
    *,
    reps: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float, float]:
    """How a sample complexity scales with a problem size: ``needed(replicates[i])`` at each ``xs[i]`` (from an
    array of replicates along its first axis: seeds, prompts, with whatever columns ``needed`` reads), fitted as
    a power of ``x`` in log-log; returns ``(exponent, low, high)`` with a bootstrap interval that resamples each
    size's replicates. If the smallest size's sample complexity is finite and a larger one's infinite (never
    reached), the exponent is ``+inf``; if the smallest's is infinite, nothing is measured and the interval is nan
    (:func:`bootstrap_interval`)."""
    groups = _replicate_groups(xs, replicates, needed)
    return bootstrap_interval(
        lambda *g: _exponent(xs, [_real(needed(r), "needed") for r in g]), groups, reps=reps, level=level, seed=seed
    )


@checked
def exponent_difference(
    first: tuple[Sequence | np.ndarray, Sequence, Callable],
    second: tuple[Sequence | np.ndarray, Sequence, Callable],
    *,
    reps: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The :func:`scaling_exponent` of ``first`` minus that of ``second`` (each ``(xs, replicates, needed)``),
    with one bootstrap interval over both sets of replicates. An unbounded exponent (``+inf``) of ``first`` counts
    as ``+inf``, one of ``second`` as ``-inf``, and one that cannot be measured makes the interval nan: a claim
    that ``first`` grows faster fails unless both are measured or ``first`` alone grows without bound."""
    (xs_a, reps_a, needed_a), (xs_b, reps_b, needed_b) = first, second
    groups_a = _replicate_groups(xs_a, reps_a, needed_a, "first's replicates")
    groups_b = _replicate_groups(xs_b, reps_b, needed_b, "second's replicates")
    k = len(groups_a)

    def gap(*g: np.ndarray) -> float:
        a = _exponent(xs_a, [_real(needed_a(r), "needed") for r in g[:k]])
        b = _exponent(xs_b, [_real(needed_b(r), "needed") for r in g[k:]])
        if math.isnan(a) or math.isnan(b):
            return math.nan
        return -math.inf if math.isinf(b) else a - b  # inf - finite = inf

    return bootstrap_interval(gap, groups_a + groups_b, reps=reps, level=level, seed=seed)


@checked
def _replicate_groups(
    xs: ProblemSizes, replicates: Sequence[np.ndarray], needed: Callable[[np.ndarray], float], said: str = "replicates"
) -> list[np.ndarray]:
    """``replicates`` as arrays, one per size in ``xs`` (at least two distinct), each of at least 2 replicates along
    its first axis, checked, with ``needed``; ``said`` names the replicates in the errors."""
    if len(set(np.asarray(xs, dtype=float).tolist())) < 2:
        raise ValueError(f"xs must hold at least two distinct sizes to fit an exponent, got {list(xs)}")
    groups = [np.asarray(r) for r in replicates]
    if len(groups) != len(list(xs)) or len(groups) < 2:
        raise ValueError(
            f"{said} must hold one array per size in xs (at least 2), got {len(groups)} for {len(list(xs))} sizes"
        )
    for i, g in enumerate(groups):
        if g.ndim < 1 or len(g) < 2:  # a bootstrap resamples at least two
            raise ValueError(f"{said}[{i}] must hold at least 2 replicates along its first axis, got shape {g.shape}")
    return groups
