"""What the models share: the base class of models that predict the query, and evaluation mode as a context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from icl_utils import checks
from icl_utils.checks import Count, checked
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


class QueryModel(nn.Module):
    """A model whose ``forward(prompt)`` is the prediction at the query, shape ``(B,)``, from ``n >= 1`` examples
    in ``dim`` dimensions."""

    @checked
    def __init__(self, dim: Count):
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
        """The prediction at the query, without gradients, in eval mode: usable wherever an estimator is."""
        with evaluating(self):
            return self(checks.prompt(prompt))
