"""A fixed pretraining set: ``T`` prompts drawn once, the data of the empirical ICL risk

    L_hat(model) = (1/T) sum_t (y_q,t - model(prompt_t))^2

that chapter 1's theory analyses. Training on a :class:`PromptPool` revisits the same ``T`` tasks every epoch, so a
model can memorize them; training on a task family draws fresh tasks every step (``T = infinity``).

With ``groups = S`` the prompts are S pools of equal size, one per model of an ensemble
(:func:`icl_utils.train.train_ensemble` gives model ``s`` the ``s``-th block of every batch), so that S models
train on S different pools at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icl_utils import checks
from icl_utils.prompts import Prompt


@dataclass(frozen=True)
class PromptPool:
    """``T`` fixed prompts; :meth:`sample` draws a minibatch of them (uniformly, with replacement), so that
    :func:`icl_utils.train.train` minimizes the empirical ICL risk over the pool. With ``groups = S``, ``prompts``
    holds S pools of ``T`` prompts one after the other, and a batch is S equal blocks, block ``s`` drawn from pool
    ``s``."""

    prompts: Prompt
    groups: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.prompts, Prompt):
            raise TypeError(f"prompts must be an icl_utils.Prompt, got {type(self.prompts).__name__}")
        groups = checks.positive_int("groups", self.groups)
        if self.prompts.batch_size % groups:
            raise ValueError(f"groups={groups} must divide the number of prompts, {self.prompts.batch_size}")

    def __len__(self) -> int:
        """``T``, the number of prompts in one pool."""
        return self.prompts.batch_size // self.groups

    def group(self, index: int) -> Prompt:
        """The prompts of pool ``index``."""
        if not isinstance(index, int) or not 0 <= index < self.groups:
            raise ValueError(f"index must be an int in [0, {self.groups}), got {index!r}")
        p, size = self.prompts, len(self)
        part = slice(index * size, (index + 1) * size)
        return Prompt(p.x[part], p.y[part], p.x_query[part], p.y_query[part])

    def sample(self, batch: int, n: int, generator: torch.Generator, active_dims: int | None = None) -> Prompt:
        batch, n, generator = checks.sample_sizes(batch, n, generator)
        if n != self.prompts.n_context:
            raise ValueError(f"the pool's prompts have n={self.prompts.n_context} examples, asked for n={n}")
        if active_dims is not None:
            raise ValueError("PromptPool has no curriculum over dimensions (active_dims must be None)")
        p = self.prompts
        if not checks.same_device(generator.device, p.x.device):
            raise ValueError(f"the generator samples on {generator.device} but the pool lives on {p.x.device}")
        if batch % self.groups:
            raise ValueError(f"batch={batch} must be a multiple of groups={self.groups} (equal blocks, one per pool)")
        idx = torch.randint(len(self), (self.groups, batch // self.groups), generator=generator, device=p.x.device)
        idx = (idx + len(self) * torch.arange(self.groups, device=p.x.device)[:, None]).flatten()
        return Prompt(p.x[idx], p.y[idx], p.x_query[idx], p.y_query[idx])
