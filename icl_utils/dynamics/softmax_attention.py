"""One-layer softmax attention in the (nu, Q) reparametrization of Huang, Cheng and Liang (2024).

With the value weight fixed (``nu = 1``) and key and query merged into ``Q``, the prediction at the query is

    y_hat = sum_i attn_i y_i,    attn_i = softmax_i(x_i^T Q x_query)    (softmax over the context only).

On orthonormal features ``v_1..v_K`` the score ``x_i^T Q x_query`` depends only on which features ``x_i`` and
``x_query`` are, through the ``K x K`` matrix ``W[m, k] = v_m^T Q v_k``: ``A_k = W[k, k]`` weighs a query on
``v_k`` against its own feature and ``B_{k,m} = W[m, k]`` against an off-target one. Given the feature counts
``c`` of a context, a query on ``v_k`` puts ``Attn_{k,m} = c_m e^{W[m,k]} / sum_j c_j e^{W[j,k]}`` on feature
``m``, and since ``<w, v_m>`` are independent ``N(0, 1)``, the error on ``v_k`` averaged over tasks is exact:

    L_k = 1/2 E_c [ (1 - Attn_{k,k})^2 + sum_{m != k} Attn_{k,m}^2 ].

Only the expectation over the counts is left to Monte Carlo (a fixed sample of count vectors).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Annotated

import numpy as np
import torch
from beartype.door import is_bearable
from beartype.vale import Is
from jaxtyping import Float, Int, Real
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import (
    Count,
    Counts,
    Distribution,
    Draws,
    Fraction,
    Positive,
    Positives,
    Reps,
    Size,
    Steps,
    checked,
    sequence_of,
)
from icl_utils.config import progress_bar
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.prompts import Prompt
from icl_utils.tasks.discrete import DiscreteFeatures


@checks.finite_result("q")
@checked
def predict(prompt: Prompt, q: Annotated[Float[Tensor, "{prompt.dim} {prompt.dim}"], checks.Finite]) -> Tensor:
    """Token-level prediction ``sum_i softmax_i(x_i^T Q x_query) y_i``, shape ``(B,)``."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        raise ValueError("prompt must hold at least one context example: softmax attention averages over them")
    scores = torch.einsum("bnd,de,be->bn", prompt.x, q.to(prompt.x), prompt.x_query)
    return (scores.softmax(dim=1) * prompt.y).sum(1)


@checked
def feature_weights(
    q: Annotated[Float[Tensor, "d d"], checks.Finite], features: Annotated[Float[Tensor, "d K"], checks.Finite]
) -> Tensor:
    """``W = V^T Q V`` (``W[m, k] = v_m^T Q v_k``) for features ``V`` of shape ``(d, K)``."""
    return features.T.to(q) @ q @ features.to(q)


@checked
def sample_counts(probs: Distribution, n_context: Count, n_samples: Draws, generator: torch.Generator) -> Tensor:
    """``n_samples`` multinomial count vectors of ``n_context`` draws with ``probs``: shape ``(n_samples, K)``."""
    probs = probs.double().cpu()
    if probs.numel() > 2**24:  # torch.multinomial's limit
        raise ValueError(f"probs must have at most 2^24 categories (torch.multinomial's limit), got {probs.numel()}")
    # the draws (int64), (n_samples, n_context), and the counts (float64), (n_samples, K): 8 bytes a value
    checks.allocation("n_samples * max(n_context, K)", n_samples * max(n_context, len(probs)), torch.float64)
    dev = generator.device
    idx = torch.multinomial(
        probs.to(dev, torch.float32), n_samples * n_context, replacement=True, generator=generator
    ).view(n_samples, n_context)
    counts = torch.zeros(n_samples, probs.numel(), device=dev, dtype=torch.float64)
    return counts.scatter_add_(1, idx, torch.ones_like(idx, dtype=counts.dtype))


# The weights W (..., K, K) of a batch of problems and their count samples (..., S, K), integer counts allowed.
#: probabilities >= 0 summing to 1 (within 1e-6, in float64) along the last axis
_Distributions = Is[lambda p: bool((p >= 0).all()) and bool(((p.double().sum(-1) - 1).abs() <= 1e-6).all())]
Probs = Annotated[Float[Tensor, "*B K"], _Distributions]
checks.describe(
    Probs, "a float tensor", "a float tensor of shape (*B, K), probabilities >= 0 summing to 1 along the last axis"
)
# Counts are >= 0, and every context holds at least one token (its attention is a softmax over its tokens).
Weights = Annotated[Float[Tensor, "*B K K"], checks.Finite]
_Tokens = checks.says(
    Is[lambda c: bool((c >= 0).all()) and bool((c.sum(-1) > 0).all())], "with counts >= 0 and no context empty"
)
CountSample = Annotated[Float[Tensor, "*B S K"] | Int[Tensor, "*B S K"], checks.Rows, _Tokens]
checks.describe(
    CountSample,
    "a float or integer tensor",
    "a float or integer tensor of shape (*B, S, K), S >= 1, counts >= 0, no context empty",
)


@checks.finite_result("w", "counts")
@checked
def feature_attention(w: Weights, counts: CountSample) -> Tensor:
    """``Attn[..., s, k, m]``: the attention a query on ``v_k`` pays to
    feature ``m`` in context ``s``.

    ``w``: shape ``(..., K, K)``, floating point; ``counts``: shape
    ``(..., S, K)``, with the same leading (batch) shape (integer counts are
    taken in ``w``'s dtype, so that they never round ``w``)."""
    return _feature_attention(w, counts)


def _feature_attention(w: Tensor, counts: Tensor) -> Tensor:
    """:func:`feature_attention` on checked arguments (the training loop's)."""
    if not counts.is_floating_point():
        counts = counts.to(w.dtype)
    checks.allocation("counts' samples x K x K (the attention logits)", counts[..., 0].numel() * w.shape[-1] ** 2)
    logits = counts.log()[..., :, None, :] + w.transpose(-1, -2).to(counts)[..., None, :, :]  # log c_m + W[m, k]
    return logits.softmax(dim=-1)


@checked
def per_feature_loss(w: Weights, counts: CountSample) -> Tensor:
    """``L_k`` for every query feature ``k``, shape ``(..., K)``, averaged
    over the count sample."""
    return _per_feature_loss(w, counts)


def _per_feature_loss(w: Tensor, counts: Tensor) -> Tensor:
    """:func:`per_feature_loss` on checked arguments (the training loop's)."""
    attn = _feature_attention(w, counts)
    target = torch.eye(w.shape[-1], dtype=attn.dtype, device=attn.device)
    return 0.5 * (attn - target).square().sum(-1).mean(-2)


@checked
def population_loss(w: Weights, counts: CountSample, probs: Probs) -> Tensor:
    """``L = sum_k p_k L_k``: the training objective (summed over a batch of independent problems, whose
    gradients then do not interact)."""
    return _population_loss(w, counts, probs)


def _population_loss(w: Tensor, counts: Tensor, probs: Tensor) -> Tensor:
    """:func:`population_loss` on checked arguments (the training loop's)."""
    losses = _per_feature_loss(w, counts)
    return (probs.to(losses) * losses).sum()


@checked
def run_gradient_descent(
    probs: Float[Tensor, " K"] | Float[Tensor, "R K"] | Float[np.ndarray, " K"] | Float[np.ndarray, "R K"],
    n_context: Count | Counts,
    *,
    steps: Steps,
    lr: Positive,
    n_samples: Draws,
    generator: torch.Generator,
    record_every: Count = 10,
    stop_below: Positive | None = None,
    stop_on: Size | None = None,
    progress: bool = True,
) -> tuple[Tensor, GDHistory]:
    """Gradient descent on ``L(W)`` from ``W = 0`` (``Q = 0``), recording ``W``, every ``L_k`` and the expected
    attention matrix ``E Attn[k, m]``. Returns the final ``W`` and the :class:`~icl_utils.gd.GDHistory`.
    With ``stop_below``, the descent stops at the first record where every ``L_k`` (of every run; only feature
    ``stop_on`` if given) is at most that level; ``steps`` is then a budget.

    ``probs`` of shape ``(R, K)`` runs ``R`` independent problems at once (seeds when the rows repeat, or other
    frequencies), each with its own count sample drawn from ``generator`` in row order and, if ``n_context`` is a
    sequence, its own context length; every result then has a leading axis of length ``R`` (after the steps'
    axis in the history). Their losses are summed, so each row follows its own gradient descent exactly.
    """
    probs = torch.as_tensor(probs, dtype=torch.float64)
    rows = probs.unsqueeze(0) if probs.ndim == 1 else probs
    if isinstance(n_context, (tuple, list, np.ndarray)):
        if probs.ndim == 1 or len(n_context) != len(rows):
            raise ValueError(f"n_context must be one int or one per row of probs ({len(rows)}), got {n_context!r}")
        lengths = [int(v) for v in n_context]
    else:
        lengths = [n_context] * len(rows)
    # the logits of every row, sample and pair of features, before the samples are drawn
    checks.allocation("rows * n_samples * K * K (the attention logits)", len(rows) * n_samples * rows.shape[-1] ** 2)
    counts = torch.stack([sample_counts(p, n, n_samples, generator) for p, n in zip(rows, lengths)])
    if probs.ndim == 1:
        counts = counts[0]
    k = rows.shape[1]

    def record(w: Tensor) -> dict[str, Tensor]:
        return {"W": w, "loss_k": _per_feature_loss(w, counts), "attn": _feature_attention(w, counts).mean(-3)}

    if stop_on is not None and stop_below is None:
        raise ValueError("stop_on names the feature stop_below watches: give stop_below too")
    if stop_on is not None and stop_on >= rows.shape[1]:
        raise ValueError(f"stop_on must be a feature index below K = {rows.shape[1]}, got {stop_on}")
    watched = slice(None) if stop_on is None else stop_on
    init = torch.zeros(*probs.shape[:-1], k, k, dtype=torch.float64, device=counts.device)
    w, hist = gradient_descent(
        lambda w: _population_loss(w, counts, probs),
        init,
        steps=steps,
        lr=lr,
        record=record,
        record_every=record_every,
        progress=progress,
        until=None if stop_below is None else (lambda rec: bool((rec["loss_k"][..., watched] <= stop_below).all())),
        desc=f"GD on softmax attention, K={k}" + (f", {len(rows)} runs" if probs.ndim == 2 else ""),
    )
    return w, (replace(hist, runs=len(rows)) if probs.ndim == 2 else hist)


def _first_steps(steps: np.ndarray, events: np.ndarray) -> np.ndarray:
    """For every column of the boolean ``events`` (recorded steps first), the first step where it holds, as a
    float (``inf`` where it never does)."""
    first = np.where(events.any(0), events.argmax(0), -1)
    return np.where(first >= 0, steps[first].astype(float), np.inf)


# A history's recorded steps (at least one) and what was recorded at them, one row per step: numpy arrays of real
# numbers (numpy would cut a complex value to its real part, and compares complex values by their real parts first).
# recorded steps: finite and increasing (a search by step, and a step of each phase, read them in order)
RecordedSteps = Annotated[
    Real[np.ndarray, " T"],
    checks.NonEmpty,
    checks.Finite,
    checks.says(Is[lambda s: bool(np.all(np.diff(s) > 0))], "increasing"),
]
Recorded = Real[np.ndarray, "T *K"]
# numbers, or arrays of them (one per point of a fit, of the shape T of its times)
Points = float | Real[np.ndarray, ""] | Real[np.ndarray, "*T"]


def _without_nan(name: str, value: np.ndarray) -> np.ndarray:
    """``value``, or a ValueError naming it when it holds a NaN (NaN <= eps is False: "never")."""
    if np.isnan(value).any():
        raise ValueError(f"{name} must be numbers without NaN (a diverged run has no convergence step)")
    return value


@checked
def convergence_steps(steps: RecordedSteps, loss_k: Recorded, eps: Positive) -> np.ndarray:
    """For every feature, the first recorded step with ``L_k <= eps`` (``inf`` if it never gets there).

    ``steps``: shape ``(T,)``, the recorded steps; ``loss_k``: shape ``(T, K)``. Returns floats, shape ``(K,)``.
    """
    return _first_steps(steps, _without_nan("loss_k", loss_k) <= eps)


@checked
def phase_boundaries(
    steps: RecordedSteps,
    w: Real[np.ndarray, "T K K"],
    loss_k: Real[np.ndarray, "T K"],
    *,
    feature: Count,
    eps: Positive,
) -> np.ndarray:
    """The steps that end the first three of the four phases of feature ``feature`` (an index ``k >= 1``; feature
    0 is the dominant one), read off the recorded bilinear weights ``w`` (shape ``(T, K, K)``, ``w[t, m, k] =
    B_{k,m}`` and ``w[t, k, k] = A_k``) and errors ``loss_k`` (shape ``(T, K)``), from the change of the weights
    between records:

    I ends when the target weight ``A_k`` first grows faster than the off-target weight ``B_{k,1}`` to the
    dominant feature falls; II when the growth of ``A_k`` peaks; III when ``L_k <= eps``; IV is the slow
    convergence after. Returns the three steps as floats, shape ``(3,)`` (``inf`` for an event that never
    happens: phase II never ends if I does not, or if ``A_k`` never grows). Phase I is empty (its end is the first
    step) when ``A_k`` wins from the start, as in the balanced case.
    """
    w, loss_k, n_features = _without_nan("w", w), _without_nan("loss_k", loss_k), loss_k.shape[1]
    if len(steps) < 3:
        raise ValueError(f"steps must hold at least 3 records (two changes of the weights), got {len(steps)}")
    if feature >= n_features:
        raise ValueError(f"feature must be an under-represented feature's index in 1..{n_features - 1}, got {feature}")
    rate_a = np.diff(w[:, feature, feature]) / np.diff(steps)
    rate_b = np.diff(w[:, 0, feature]) / np.diff(steps)
    first_end = _first_steps(steps[:-1], (rate_a > -rate_b)[:, None])[0]
    peak = np.inf
    if np.isfinite(first_end):  # II: the peak of A_k's growth from the end of phase I on, if it grows at all
        after = np.flatnonzero(steps[:-1] >= first_end)
        top = after[np.argmax(rate_a[after])]
        peak = float(steps[top]) if rate_a[top] > 0 else np.inf
    return np.array([first_end, peak, _first_steps(steps, loss_k[:, feature : feature + 1] <= eps)[0]])


@checked
def bound_terms(
    n_features: float | Real[np.ndarray, "..."], eps: float | Real[np.ndarray, "..."], lr: Positive
) -> tuple[np.ndarray | float, np.ndarray | float]:
    """The two terms of the bound on ``T_k`` (broadcast over ``n_features`` and ``eps``): ``K^2 log K / eta`` and
    ``K log(K eps^(-1/2)) / (eps eta)``; numbers for numbers."""
    k, eps = np.asarray(n_features, dtype=float), np.asarray(eps, dtype=float)
    if (k > config.MAX_WIDTH).any():  # K^2 log K overflows far before float64 does
        raise ValueError(f"n_features must be at most {config.MAX_WIDTH} (config.MAX_WIDTH), got {k.max():g}")
    if not (np.all(np.isfinite(k)) and np.all(k >= 2)) or not (np.all(eps > 0) and np.all(eps < 1)):
        raise ValueError("n_features must be at least 2 and eps in (0, 1)")
    try:
        np.broadcast_shapes(k.shape, eps.shape)
    except ValueError:
        raise ValueError(f"n_features and eps must broadcast together, got shapes {k.shape} and {eps.shape}") from None
    with np.errstate(over="ignore"):  # an overflow is refused below, naming lr
        first, second = k**2 * np.log(k) / lr, k * np.log(k / np.sqrt(eps)) / (eps * lr)
    if not (np.all(np.isfinite(first)) and np.all(np.isfinite(second))):
        raise ValueError(f"lr must be large enough for the bound to be finite, got {lr}")
    return first, second


@checked
def fit_bound(
    times: Real[np.ndarray, "*T"], n_features: Points, eps: Points, lr: Positive, *, eps_term_only: bool = False
) -> np.ndarray:
    """Non-negative constants ``(a, b)`` of ``T ~ a K^2 log K / eta + b K log(K eps^(-1/2)) / (eps eta)`` by least
    squares on the relative error ``1 - bound / T`` over the points given (same shapes, finite ``times``).
    ``eps_term_only`` fits ``b`` alone, with ``a = 0``: the bound without its first term."""
    times = times.astype(float)
    if times.size < 2 or not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ValueError("times must hold at least two finite positive convergence times")
    t1, t2 = (np.broadcast_to(t, times.shape).ravel() for t in bound_terms(n_features, eps, lr))
    design, target = np.stack([t1, t2], 1) / times.ravel()[:, None], np.ones(times.size)
    best, best_err = None, np.inf
    for cols in [[1]] if eps_term_only else ([0, 1], [0], [1]):
        # the unconstrained fit, else the best fit on one term: a 2-variable non-negative least squares
        coef = np.zeros(2)
        coef[cols] = np.linalg.lstsq(design[:, cols], target, rcond=None)[0]
        err = np.square(design @ coef - target).sum()
        if np.all(coef >= 0) and err < best_err:
            best, best_err = coef, err
    return best


@checked
def concentration_quantile(
    w: Annotated[Float[Tensor, "K K"], checks.Finite],
    probs: Float[Tensor, " K"],
    n_context: Count,
    *,
    n_samples: Draws,
    quantile: Fraction,
    generator: torch.Generator,
) -> Tensor:
    """The ``quantile`` over ``n_samples`` fresh contexts of ``(1 - Attn_k)^2`` for a query on every feature
    ``k``, shape ``(K,)``: the high-probability attention concentration of the theorem (its mean is at most
    ``2 L_k`` whatever ``W`` is, since ``L_k >= E (1 - Attn_k)^2 / 2``)."""
    checks.allocation("n_samples * K * K (the attention logits)", n_samples * len(probs) ** 2)
    counts = sample_counts(probs, n_context, n_samples, generator)
    own = _feature_attention(w, counts).diagonal(dim1=-2, dim2=-1)  # (S, K)
    return torch.quantile((1 - own).square(), quantile, dim=0)


@checked
@dataclass(frozen=True)
class ConvergenceTimes:
    """Steps to convergence of a set of problems (one row of ``probs`` and a context length each), every problem
    run with ``n_seeds`` count samples. Arrays have shape ``(problems, seeds, len(eps))``: ``first`` is the first
    recorded step with ``L_1 <= eps``; ``rest`` the last of the other features' first steps with ``L_k <= eps``
    (the latest of their first crossings); ``concentration`` the largest over those features of a quantile of
    ``(1 - Attn_k)^2`` on fresh contexts at the step where feature ``k`` reached ``eps`` (``nan`` if it never did)."""

    eps: Real[np.ndarray, " E"]
    first: Real[np.ndarray, "P S E"]
    rest: Real[np.ndarray, "P S E"]
    concentration: Real[np.ndarray, "P S E"]


def _pair(p: object) -> bool:
    """A ``(probs, n_context)`` pair; each pair has its own number of features (no axis shared between pairs)."""
    probs = Annotated[Float[Tensor, " _"], checks.SumsToOne]
    if type(p) not in (tuple, list) or len(p) != 2:
        return False
    n = p[1].item() if isinstance(p[1], np.generic) else p[1]  # a NumPy int is the int it holds
    return is_bearable(p[0], probs) and is_bearable(n, Count)


#: ``(probs, n_context)`` pairs, every one checked
Problems = sequence_of(_pair, "(probs, n_context) pairs: probabilities summing to 1, an int >= 1", base=tuple | list)


@checked
def convergence_times(
    problems: Problems,
    *,
    eps: Positives,
    n_seeds: Reps,
    steps: Steps,
    lr: Positive,
    n_samples: Draws,
    generator: torch.Generator,
    record_every: Count = 5,
    quantile: Fraction | None = 0.9,
    first_only: bool = False,
    progress: bool = True,
) -> ConvergenceTimes:
    """Run every problem ``(probs, n_context)`` of ``problems`` with ``n_seeds`` count samples at once
    (:func:`run_gradient_descent`), until every feature reaches the smallest ``eps`` or ``steps`` run out, and
    measure its :class:`ConvergenceTimes` at every level of ``eps`` (the concentration as the ``quantile`` of
    ``(1 - Attn_k)^2``; ``None`` skips it, leaving ``nan``). Draws from ``generator`` in problem order.

    ``first_only`` measures ``T_1`` alone: every run stops once ``L_1`` is below the smallest ``eps`` (the rare
    features, far slower in the imbalanced case, are not waited for), and ``rest`` is left ``inf``."""
    problems, levels = [(p.double().cpu(), n) for p, n in problems], np.array([float(e) for e in eps])
    if levels.max() >= 1:
        raise ValueError(f"eps must hold levels in (0, 1), got {list(eps)}")
    shape = (len(problems), n_seeds, levels.size)
    first, rest, conc = np.full(shape, np.inf), np.full(shape, np.inf), np.full(shape, np.nan)
    for i, (probs, n_context) in enumerate(progress_bar(problems, desc="convergence times", enabled=progress)):
        _, hist = run_gradient_descent(
            probs.expand(n_seeds, -1),
            n_context,
            steps=steps,
            lr=lr,
            n_samples=n_samples,
            generator=generator,
            record_every=record_every,
            stop_below=levels.min(),
            stop_on=0 if first_only else None,
            progress=False,
        )
        for r in range(n_seeds):
            for j, level in enumerate(levels):
                t = convergence_steps(hist.steps, hist.records["loss_k"][:, r], level)
                first[i, r, j] = t[0]
                if first_only:
                    continue
                rest[i, r, j] = t[1:].max()
                if quantile is not None and np.isfinite(t[1:]).all():
                    at = np.searchsorted(hist.steps, t[1:])
                    q = [
                        concentration_quantile(
                            torch.as_tensor(hist.records["W"][a, r]),
                            probs,
                            n_context,
                            n_samples=n_samples,
                            quantile=quantile,
                            generator=generator,
                        )[k + 1]
                        for k, a in enumerate(at)
                    ]
                    conc[i, r, j] = max(float(v) for v in q)
    return ConvergenceTimes(eps=levels, first=first, rest=rest, concentration=conc)


@checked
def doubling_increments(n_features: Counts | np.ndarray, times: Real[np.ndarray, "{len(n_features)} S"]) -> np.ndarray:
    """How ``T`` grows per doubling of ``K``: the last increment ``T(K_max) - T(K_max / 2)`` over the first
    ``T(2 K_0) - T(K_0)``, per seed, along the unbroken chain ``K_0, 2 K_0, 4 K_0, ...`` of ``n_features``. ``times``
    has shape ``(len(n_features), seeds)``. A law that saturates gives a ratio well below 1, ``log K`` gives 1, any
    power of ``K`` more than 1; a seed whose first increment is not positive gives 0 if its last is not either (no
    growth), else ``inf``."""
    ks = _increasing_ks(n_features)
    times = times.astype(float)
    if not np.isfinite(times).all():  # inf - inf would read as "no growth"
        raise ValueError("times must be finite: a run that never converged has no increment (raise its budget)")
    chain = [0]
    while ks[0] * 2 ** len(chain) in ks:
        chain.append(ks.index(ks[0] * 2 ** len(chain)))
    if len(chain) < 3:
        raise ValueError(f"n_features must hold at least two doublings of its first value in a row, got {ks}")
    first, last = times[chain[1]] - times[chain[0]], times[chain[-1]] - times[chain[-2]]
    grown = first > 0
    return np.where(grown, last / np.where(grown, first, 1.0), np.where(last > 0, np.inf, 0.0))


def _increasing_ks(n_features: tuple | list | np.ndarray) -> list[int]:
    """``n_features`` as a list of strictly increasing integers of at least 1, or an error naming it (an array's
    items are checked here)."""
    ks = [checks.positive_int("n_features", int(k) if isinstance(k, np.integer) else k) for k in n_features]
    if any(b <= a for a, b in itertools.pairwise(ks)):
        raise ValueError(f"n_features must be strictly increasing, got {ks}")
    return ks


@checked
@dataclass(frozen=True)
class CalibratedBound:
    """The bound on ``T_k`` with constants fitted on the smallest ``K`` (:func:`calibrate_bound`): the constants
    ``(a, b)``, the bound and ``T_k / bound`` (medians over seeds) at every ``(K, eps)``, and the allowance: the fit's
    largest relative residual on the ``K`` it saw plus the largest relative spread of ``T_k`` over seeds at any
    ``(K, eps)``, both measured in the run."""

    a: checks.Real
    b: checks.Real
    # one row per K, and one column per eps or none (ruff reads the axis names as Python names)
    bound: Real[np.ndarray, "Ks *E"]  # noqa: F821
    ratio: Annotated[Real[np.ndarray, "Ks *E"], checks.Finite]  # noqa: F821
    allowance: checks.NonNegative
    n_fit: Count

    def __post_init__(self) -> None:
        if not self.n_fit < len(self.ratio):  # the fit saw some K and left at least one out
            raise ValueError(f"n_fit must be below the {len(self.ratio)} K of ratio, got {self.n_fit}")

    @property
    def held_out(self) -> float:
        """The largest ``T_k / bound`` at the ``K`` the fit did not see."""
        return float(self.ratio[self.n_fit :].max())


@checked
def calibrate_bound(
    times: ConvergenceTimes, n_features: Counts | np.ndarray, n_fit: Count, lr: Positive, *, eps_term_only: bool = False
) -> CalibratedBound:
    """Fit the bound's constants (:func:`fit_bound`) to the median ``T_k`` at the first ``n_fit`` values of
    ``n_features`` over every level of ``times``, and compare the bound so calibrated with ``T_k`` everywhere."""
    ks = np.asarray(_increasing_ks(n_features), dtype=float)
    if not ((times.eps > 0) & (times.eps < 1)).all():
        raise ValueError(f"times.eps must hold levels in (0, 1), got {times.eps.tolist()}")
    if ks.shape != (times.rest.shape[0],):
        raise ValueError(f"n_features must give one K per problem of times ({times.rest.shape[0]}), got {ks.shape}")
    if not np.isfinite(times.rest).all():  # an infinite T_k would make the allowance infinite
        raise ValueError("times.rest must be finite: some run never converged (raise its budget)")
    if n_fit >= len(ks):
        raise ValueError(f"n_fit must leave at least one K out of the fit, got {n_fit} of {len(ks)}")
    kk, ee = np.meshgrid(ks, times.eps, indexing="ij")
    med = np.median(times.rest, 1)
    a, b = fit_bound(med[:n_fit], kk[:n_fit], ee[:n_fit], lr, eps_term_only=eps_term_only)
    t1, t2 = bound_terms(kk, ee, lr)
    bound = a * t1 + b * t2
    allowance = np.abs(med[:n_fit] / bound[:n_fit] - 1).max() + (times.rest.max(1) / times.rest.min(1) - 1).max()
    return CalibratedBound(float(a), float(b), bound, med / bound, float(allowance), n_fit)


@checked
def empirical_loss(
    w: Annotated[Float[Tensor, "K K"], checks.Finite],
    counts: Annotated[Float[Tensor, "M K"] | Int[Tensor, "M K"], _Tokens],
    queries: Annotated[Int[Tensor, " M"], checks.NonEmpty, checks.Finite],
    coords: Annotated[Float[Tensor, "M K"], checks.Finite],
) -> Tensor:
    """The squared error on fixed prompts, ``1/(2M) sum_i (y_hat_i - y_i)^2``, in the feature coordinates: prompt
    ``i`` has context counts ``counts[i]`` (shape ``(M, K)``), a query on feature ``queries[i]`` (shape ``(M,)``)
    and task coordinates ``coords[i] = (<w_i, v_m>)_m`` (shape ``(M, K)``), so that ``y_hat_i - y_i = sum_m
    (Attn_{k_i, m} - 1{m = k_i}) <w_i, v_m>``: the token-level loss of the same prompts, exactly."""
    if len(queries) and (queries.min() < 0 or queries.max() >= len(w)):
        raise ValueError(f"queries must be feature indices in 0..{len(w) - 1}, got {queries.min()}..{queries.max()}")
    return _empirical_loss(w, counts, queries.long(), coords)


def _empirical_loss(w: Tensor, counts: Tensor, queries: Tensor, coords: Tensor) -> Tensor:
    """:func:`empirical_loss` on checked arguments (the training loop's)."""
    n_prompts = len(counts)
    attn = _feature_attention(w, counts)[torch.arange(n_prompts), queries]  # (M, K): the query's row
    target = torch.nn.functional.one_hot(queries, w.shape[-1]).to(attn)
    return 0.5 * ((attn - target) * coords.to(attn)).sum(-1).square().mean()


@checked
def run_empirical_gradient_descent(
    task: DiscreteFeatures,
    n_prompts: Count,
    n_context: Count,
    *,
    steps: Steps,
    lr: Positive,
    n_samples: Draws,
    generator: torch.Generator,
    record_every: Count = 10,
    progress: bool = True,
) -> tuple[Tensor, GDHistory]:
    """Gradient descent from ``W = 0`` on the empirical objective of the paper's experiments: the squared error
    on ``n_prompts`` fixed prompts of ``task``, each with its own task vector (:func:`empirical_loss`), rather
    than its expectation. On orthonormal features, gradient descent on ``Q`` moves ``W = V^T Q V`` by exactly
    the gradient in ``W``, so this is the token-level model's descent. Records ``W``, the population errors
    ``L_k`` on a fresh sample of ``n_samples`` count vectors, and the empirical loss ``train``."""
    checks.allocation("n_prompts * (n_context + 1) * dim", n_prompts * (n_context + 1) * task.dim)
    _, idx = task.sample_with_labels(n_prompts, n_context, generator)
    k = task.n_features
    counts = torch.nn.functional.one_hot(idx[:, :-1], k).sum(1).double()
    coords = torch.randn(len(idx), k, generator=generator, device=idx.device, dtype=torch.float64)
    population = sample_counts(task.probs, n_context, n_samples, generator)

    def loss(w: Tensor) -> Tensor:
        return _empirical_loss(w, counts, idx[:, -1], coords)

    def record(w: Tensor) -> dict[str, Tensor]:
        return {"W": w, "loss_k": _per_feature_loss(w, population), "train": loss(w)}

    return gradient_descent(
        loss,
        torch.zeros(k, k, dtype=torch.float64, device=counts.device),
        steps=steps,
        lr=lr,
        record=record,
        record_every=record_every,
        progress=progress,
        desc=f"GD on {len(idx)} prompts, K={k}",
    )
