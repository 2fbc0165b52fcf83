"""What the models share: the base class of models that predict the query, and evaluation mode as a context."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from icl_utils import checks
from icl_utils.checks import Width, checked
from icl_utils.prompts import Prompt


@contextmanager
@checked
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode for the block and restore its mode after, whatever happens inside."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


#: the prompt of the :func:`fixed_sample` block that is running, with what models computed from it alone
_FIXED: contextvars.ContextVar[tuple[Prompt, dict] | None] = contextvars.ContextVar("icl_utils_fixed", default=None)


@contextmanager
def fixed_sample(prompt: Prompt) -> Iterator[None]:
    """Within the block, ``prompt``'s values stay as they are, so a model may keep what it computes from the prompt
    alone (GD++'s moments ``X^T X``) for its next call on it (:func:`sample_memo`): a full-batch fit
    (:func:`~icl_utils.train.fit_lbfgs`) reads one sample hundreds of times. Kept for the block only, in no model."""
    checks.prompt(prompt, finite=False)
    token = _FIXED.set((prompt, {}))
    try:
        yield
    finally:
        _FIXED.reset(token)


def sample_memo(prompt: Prompt, key: str, compute: Callable[[], object]) -> object:
    """``compute()``, or its value from an earlier call in the same :func:`fixed_sample` block of ``prompt``, under
    ``key``; outside such a block, or for a prompt whose inputs need a gradient, always ``compute()``."""
    checks.takes(compute, [], "compute")
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be an icl_utils.Prompt, got {type(prompt).__name__}")
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    fixed = _FIXED.get()
    if fixed is None or fixed[0] is not prompt or prompt.x.requires_grad or prompt.y.requires_grad:
        return compute()
    memo = fixed[1]
    if key not in memo:
        memo[key] = compute()
    return memo[key]


class QueryModel(nn.Module):
    """A model whose ``forward(prompt)`` is the prediction at the query, shape ``(B,)``, from ``n >= 1`` examples
    in ``dim`` dimensions."""

    @checked
    def __init__(self, dim: Width):
        super().__init__()
        self.dim = dim

    def _check(self, prompt: object) -> Prompt:
        """The checks of a forward pass; its values are checked by :meth:`predict` (a training step must not sync)."""
        prompt = checks.prompt(prompt, finite=False)
        if prompt.dim != self.dim:
            raise ValueError(f"prompt has dimension {prompt.dim}, but the model reads dim={self.dim}")
        if prompt.n_context < 1:
            raise ValueError("prompt must have at least one context example")
        checks.prompt_fits(prompt.x, self)
        return prompt

    @torch.no_grad()
    def predict(self, prompt: Prompt) -> Tensor:
        """The prediction at the query, without gradients, in eval mode: usable wherever an estimator is. A NaN or
        infinite prediction from a finite prompt is a ValueError that shows the model's scalar parameters (a step or
        a curvature that makes a recursion diverge), outside :func:`~icl_utils.checks.nonfinite_allowed`."""
        with evaluating(self):
            out = self(checks.prompt(prompt))
        if checks.values_checked() and not bool(checks.finite_flag(out)):
            said = ", ".join(f"{k} = {v.item():.4g}" for k, v in self.named_parameters() if v.numel() == 1)
            raise ValueError(
                f"the model's predictions must be finite, but {int((~torch.isfinite(out)).sum())} of {out.numel()} "
                f"overflowed on a finite prompt: its parameters make it diverge{f' ({said})' if said else ''}, or "
                "the prompt's scale overflows inside (rescale the prompt)"
            )
        return out
