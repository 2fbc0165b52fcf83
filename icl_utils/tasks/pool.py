"""A fixed pretraining set: ``T`` prompts drawn once, the data of the empirical ICL risk

    L_hat(model) = (1/T) sum_t (y_q,t - model(prompt_t))^2

that chapter 2's theory analyses. Training on a :class:`PromptPool` revisits the same ``T`` tasks every epoch, so a
model can memorize them; training on a task family draws fresh tasks every step (``T = infinity``).

To train S models on S different pools at once, give :func:`icl_utils.train.train_ensemble` a list of S pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icl_utils import checks
from icl_utils.prompts import Prompt


@dataclass(frozen=True)
class PromptPool:
    """``T`` fixed prompts; :meth:`sample` draws a minibatch of them (uniformly, with replacement), so that
    :func:`icl_utils.train.train` minimizes the empirical ICL risk over the pool."""

    prompts: Prompt

    def __post_init__(self) -> None:
        checks.prompt(self.prompts, "prompts")

    def __len__(self) -> int:
        """``T``, the number of prompts in the pool."""
        return self.prompts.batch_size

    @property
    def dim(self) -> int:
        return self.prompts.dim

    def sample(self, batch: int, n: int, generator: torch.Generator) -> Prompt:
        """``batch`` prompts of the pool, drawn uniformly with replacement; ``n`` must be the pool's context length
        (the argument is there so that a pool can stand in for a task family)."""
        batch, n, generator = checks.sample_sizes(batch, n, generator, self.dim)
        if n != self.prompts.n_context:
            raise ValueError(f"the pool's prompts have n={self.prompts.n_context} examples, asked for n={n}")
        p = self.prompts
        if not checks.same_device(generator.device, p.x.device):
            raise ValueError(f"the generator samples on {generator.device} but the pool lives on {p.x.device}")
        return p.take(torch.randint(len(self), (batch,), generator=generator, device=p.x.device))
