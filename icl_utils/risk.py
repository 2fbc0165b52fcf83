"""ICL risk estimated on sampled prompts: squared errors at every prefix length, and their mean with a band.

The ICL risk after ``k`` examples is ``E (f_hat(x_query; first k examples) - y_query)^2``. Sampling ``B`` prompts
of ``n`` context points gives, for every ``k = 0..n``, ``B`` squared errors: :func:`prefix_errors` for an estimator
(one call per prefix), :func:`model_errors` for a transformer (one forward pass reads every prefix).
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
