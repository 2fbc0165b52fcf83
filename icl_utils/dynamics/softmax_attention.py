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

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from icl_utils import checks
from icl_utils.prompts import Prompt
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.tasks.discrete import imbalanced_probs


def predict(prompt: Prompt, q: Tensor) -> Tensor:
    """Token-level prediction ``sum_i softmax_i(x_i^T Q x_query) y_i``, shape ``(B,)``."""
    prompt = checks.prompt(prompt)
    if not isinstance(q, Tensor) or tuple(q.shape) != (prompt.dim, prompt.dim):
        raise ValueError(f"q must be a ({prompt.dim}, {prompt.dim}) tensor")
    if prompt.n_context == 0:
        raise ValueError("softmax attention needs at least one context example")
    scores = torch.einsum("bnd,de,be->bn", prompt.x, q.to(prompt.x), prompt.x_query)
    return (scores.softmax(dim=1) * prompt.y).sum(1)


def feature_weights(q: Tensor, features: Tensor) -> Tensor:
    """``W = V^T Q V`` (``W[m, k] = v_m^T Q v_k``) for features ``V`` of shape ``(d, K)``."""
    return features.T.to(q) @ q @ features.to(q)


def sample_counts(probs: Tensor, n_context: int, n_samples: int, generator: torch.Generator) -> Tensor:
    """``n_samples`` multinomial count vectors of ``n_context`` draws with ``probs``: shape ``(n_samples, K)``."""
    n_context = checks.positive_int("n_context", n_context)
    n_samples = checks.positive_int("n_samples", n_samples)
    probs = checks.probabilities("probs", probs)
    checks.generator(generator)
    dev = generator.device
    idx = torch.multinomial(probs.to(dev, torch.float32), n_samples * n_context, replacement=True,
                            generator=generator).view(n_samples, n_context)
    counts = torch.zeros(n_samples, probs.numel(), device=dev, dtype=torch.float64)
    return counts.scatter_add_(1, idx, torch.ones_like(idx, dtype=counts.dtype))


def feature_attention(w: Tensor, counts: Tensor) -> Tensor:
    """``Attn[s, k, m]``: the attention a query on ``v_k`` pays to feature ``m`` in context ``s``."""
    if w.ndim != 2 or w.shape[0] != w.shape[1] or counts.ndim != 2 or counts.shape[1] != w.shape[0]:
        raise ValueError(f"w must be (K, K) and counts (S, K) with the same K; got {tuple(w.shape)}, "
                         f"{tuple(counts.shape)}")
    logits = counts.log()[:, None, :] + w.T.to(counts)[None]  # [s, k, m] = log c_m + W[m, k]
    return logits.softmax(dim=2)


def per_feature_loss(w: Tensor, counts: Tensor) -> Tensor:
    """``L_k`` for every query feature ``k``, shape ``(K,)``, averaged over the count sample."""
    attn = feature_attention(w, counts)
    target = torch.eye(w.shape[0], dtype=attn.dtype, device=attn.device)
    return 0.5 * (attn - target).square().sum(2).mean(0)


def population_loss(w: Tensor, counts: Tensor, probs: Tensor) -> Tensor:
    """``L = sum_k p_k L_k``: the training objective."""
    return (torch.as_tensor(probs).to(counts) * per_feature_loss(w, counts)).sum()


def run_gradient_descent(
    probs: Tensor,
    n_context: int,
    *,
    steps: int,
    lr: float,
    n_samples: int,
    generator: torch.Generator,
    record_every: int = 10,
    progress: bool = True,
) -> tuple[Tensor, GDHistory]:
    """Gradient descent on ``L(W)`` from ``W = 0`` (``Q = 0``), recording ``W``, every ``L_k`` and the expected
    attention matrix ``E Attn[k, m]``. Returns the final ``W`` and the :class:`~icl_utils.gd.GDHistory`."""
    probs = torch.as_tensor(probs, dtype=torch.float64)
    counts = sample_counts(probs, n_context, n_samples, generator)
    k = probs.numel()

    def record(w: Tensor) -> dict[str, Tensor]:
        return {"W": w, "loss_k": per_feature_loss(w, counts), "attn": feature_attention(w, counts).mean(0)}

    return gradient_descent(
        lambda w: population_loss(w, counts, probs), torch.zeros(k, k, dtype=torch.float64, device=counts.device),
        steps=steps, lr=lr, record=record, record_every=record_every, progress=progress,
        desc=f"GD on softmax attention, K={k}",
    )


def _first_steps(steps: np.ndarray, events: np.ndarray) -> np.ndarray:
    """For every column of the boolean ``events`` (recorded steps first), the first step where it holds, as a
    float (``inf`` where it never does)."""
    first = np.where(events.any(0), events.argmax(0), -1)
    return np.where(first >= 0, steps[first].astype(float), np.inf)


def _history_arrays(steps: object, **arrays: object) -> tuple[np.ndarray, ...]:
    """``steps`` and the recorded ``arrays`` as numpy arrays, checked to have one row per recorded step."""
    steps = np.asarray(steps)
    if steps.ndim != 1 or len(steps) == 0:
        raise ValueError(f"steps must be a non-empty 1-D array of recorded steps, got shape {steps.shape}")
    out = [steps]
    for name, value in arrays.items():
        value = np.asarray(value)
        if value.ndim < 1 or value.shape[0] != len(steps):
            raise ValueError(f"{name} must have one row per recorded step ({len(steps)}), got shape {value.shape}")
        out.append(value)
    return tuple(out)


def convergence_steps(steps: np.ndarray, loss_k: np.ndarray, eps: float) -> np.ndarray:
    """For every feature, the first recorded step with ``L_k <= eps`` (``inf`` if it never gets there).

    ``steps``: shape ``(T,)``, the recorded steps; ``loss_k``: shape ``(T, K)``. Returns floats, shape ``(K,)``.
    """
    steps, loss_k = _history_arrays(steps, loss_k=loss_k)
    eps = checks.nonnegative_float("eps", eps, strict=True)
    return _first_steps(steps, loss_k <= eps)


def phase_boundaries(steps: np.ndarray, attn: np.ndarray, loss_k: np.ndarray, *, feature: int,
                     eps: float) -> np.ndarray:
    """The steps that end the first three of the four phases of the under-represented feature ``feature``
    (an index ``k >= 1``; feature 0 is the dominant one), measured on the recorded expected attention
    ``attn`` (shape ``(T, K, K)``, ``attn[t, k, m]`` a query on ``v_k`` to feature ``m``) and errors ``loss_k``
    (shape ``(T, K)``):

    I ends when the query's attention to its own feature overtakes its attention to the dominant feature,
    II when it exceeds one half, III when ``L_k <= eps``; IV is the slow convergence after.
    Returns the three first recorded steps as floats, shape ``(3,)`` (``inf`` for an event that never happens).
    """
    steps, attn, loss_k = _history_arrays(steps, attn=attn, loss_k=loss_k)
    n_features = loss_k.shape[1] if loss_k.ndim == 2 else -1
    if attn.shape[1:] != (n_features, n_features):
        raise ValueError(f"attn must be (T, K, K) and loss_k (T, K); got {attn.shape} and {loss_k.shape}")
    if isinstance(feature, bool) or not isinstance(feature, (int, np.integer)) or not 1 <= feature < n_features:
        raise ValueError(f"feature must be an under-represented feature's index in 1..{n_features - 1}, "
                         f"got {feature!r}")
    eps = checks.nonnegative_float("eps", eps, strict=True)
    own = attn[:, feature, feature]
    events = np.stack([own > attn[:, feature, 0], own > 0.5, loss_k[:, feature] <= eps], axis=1)
    return _first_steps(steps, events)


def convergence_time_sweep(
    n_features: Sequence[int],
    *,
    dominant: float,
    context_per_feature: int,
    steps: int,
    lr: float,
    n_samples: int,
    eps: float,
    generator: torch.Generator,
    record_every: int = 5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The time to learn a feature against the number of features ``K``.

    For every ``K`` in ``n_features``, in order, runs :func:`run_gradient_descent` on the imbalanced case
    (``p_1 = dominant``, see :func:`~icl_utils.tasks.discrete.imbalanced_probs`) with ``N = context_per_feature
    * K`` context examples, drawing its count sample from ``generator``. Returns ``(ks, dominant_steps,
    slowest_steps)``: the ``K`` values (ints) and, for each, the first recorded step with ``L_1 <= eps`` and the
    first step by which every under-represented feature has ``L_k <= eps`` (floats, ``inf`` if never).
    """
    if isinstance(n_features, (str, bytes)) or not isinstance(n_features, Sequence) or not n_features:
        raise TypeError(f"n_features must be a non-empty sequence of feature counts, got {n_features!r}")
    ks = np.array([checks.positive_int("n_features", k, minimum=2) for k in n_features])
    context_per_feature = checks.positive_int("context_per_feature", context_per_feature)
    first_dominant, slowest = [], []
    for k in ks.tolist():
        _, hist = run_gradient_descent(imbalanced_probs(k, dominant), context_per_feature * k, steps=steps, lr=lr,
                                       n_samples=n_samples, generator=generator, record_every=record_every,
                                       progress=False)
        t = convergence_steps(hist.steps, hist.records["loss_k"], eps)
        first_dominant.append(t[0])
        slowest.append(t[1:].max())
    return ks, np.array(first_dominant), np.array(slowest)
