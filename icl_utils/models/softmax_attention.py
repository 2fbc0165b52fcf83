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

import numpy as np
import torch
from torch import Tensor

from icl_utils import checks
from icl_utils.prompts import Prompt
from icl_utils.train import GDHistory, gradient_descent


def predict(prompt: Prompt, q: Tensor) -> Tensor:
    """Token-level prediction ``sum_i softmax_i(x_i^T Q x_query) y_i``, shape ``(B,)``."""
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be an icl_utils.Prompt, got {type(prompt).__name__}")
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


def train(
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
    attention matrix ``E Attn[k, m]``. Returns the final ``W`` and the :class:`~icl_utils.train.GDHistory`."""
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


def convergence_steps(steps: np.ndarray, loss_k: np.ndarray, eps: float) -> np.ndarray:
    """For every feature, the first recorded step with ``L_k <= eps`` (``inf`` if it never gets there)."""
    below = loss_k <= eps
    first = np.where(below.any(0), below.argmax(0), -1)
    return np.where(first >= 0, steps[first].astype(float), np.inf)
