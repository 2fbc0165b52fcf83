"""A compact GPT-style in-context learner (in the spirit of nanoGPT and Garg et al. 2022).

Prompts are read as interleaved tokens ``x_1, y_1, ..., x_n, y_n, x_query``
(see :meth:`~icl_utils.prompts.Prompt.tokens`), mapped to the model width by a linear read-in, given learned
position embeddings, passed through causal pre-norm blocks (attention on
``torch.nn.functional.scaled_dot_product_attention``, then an optional GELU MLP), and read out by a linear map at
the x positions. Position ``i`` therefore predicts ``y_i`` from the ``i`` examples before it, and
one forward pass gives the whole "error against number of examples" curve.

With ``tokens="paired"`` it reads Zhang, Wu and Bartlett's token matrix (3.1) instead: one token ``(x_i, y_i)`` per
example and ``(x_query, 0)`` last, and predicts at the query alone. ``residual_init=True`` scales the initial
output projections of attention and MLP by ``1 / sqrt(number of residual connections)``, as GPT-2 does and as their
Appendix I prescribes (``n_layer`` connections without MLPs, ``2 n_layer`` with them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icl_utils import checks
from icl_utils.checks import Depth, Rate, Size, Width, checked
from icl_utils.models.base import evaluating
from icl_utils.prompts import Prompt


@checked
@dataclass(frozen=True)
class GPTConfig:
    """Size of the transformer. ``n_context`` is the most context examples a prompt it reads may hold."""

    n_dims: Width
    n_context: Size
    n_embd: Width = 64
    n_layer: Depth = 4
    n_head: Width = 4
    mlp: bool = True
    dropout: Rate = 0.0
    tokens: Literal["interleaved", "paired"] = "interleaved"  # "paired": the token matrix (3.1) of Zhang et al.
    residual_init: bool = False
    # With tokens="paired", False keeps the query's token out of its own attention, as the mask M keeps the query
    # column out of linear self-attention's keys and values (chapter 5); x_query still reaches the read-out
    # through the residual stream.
    query_sees_itself: bool = True

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        # the position embeddings: one row per token (a huge n_context once ended in torch's out-of-memory error)
        checks.allocation("(2 n_context + 2) * n_embd", (2 * self.n_context + 2) * self.n_embd)
        # the blocks' weights together (4 n_embd^2 of attention, 8 n_embd^2 of MLP each): every one may fit alone
        checks.allocation("the blocks' parameters, 12 * n_layer * n_embd^2", 12 * self.n_layer * self.n_embd**2)
        if not self.query_sees_itself and self.tokens != "paired":
            raise ValueError("query_sees_itself=False needs tokens='paired' (the query is then one token)")


class CausalSelfAttention(nn.Module):
    @checked
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.query_sees_itself = cfg.query_sees_itself

    def forward(self, h: Tensor) -> Tensor:
        batch, length, width = h.shape
        q, k, v = self.qkv(h).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        if self.query_sees_itself or length == 1:  # a lone query token has nothing else to attend to
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        else:
            # causal, less the query's own entry; built from device ops alone (no element assignment, which
            # copies from the host), so a CUDA graph can record it
            i = torch.arange(length, device=h.device)
            allowed = (i[:, None] > i) | ((i[:, None] == i) & (i < length - 1))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-norm transformer block: ``h + attn(ln(h))``, then ``h + mlp(ln(h))`` when the MLP is on."""

    @checked
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.n_embd) if cfg.mlp else None
        self.mlp = (
            nn.Sequential(
                nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
                nn.GELU(),
                nn.Linear(4 * cfg.n_embd, cfg.n_embd),
                nn.Dropout(cfg.dropout),
            )
            if cfg.mlp
            else None
        )

    def forward(self, h: Tensor) -> Tensor:
        h = h + self.attn(self.ln_attn(h))
        if self.mlp is not None:
            h = h + self.mlp(self.ln_mlp(h))
        return h


class ICLTransformer(nn.Module):
    """GPT-style transformer; ``model(prompt)`` returns predictions at every x position, shape ``(B, n+1)``, or at
    the query alone, shape ``(B,)``, with ``tokens="paired"``."""

    @checked
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.read_in = nn.Linear(cfg.n_dims + 1, cfg.n_embd)
        # x and y tokens of n examples and the query, or one token per example and the query
        self.pos = nn.Embedding((2 if cfg.tokens == "interleaved" else 1) * cfg.n_context + 1, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.read_out = nn.Linear(cfg.n_embd, 1)
        self.apply(self._init_weights)
        if cfg.residual_init:
            residuals = cfg.n_layer * (2 if cfg.mlp else 1)
            for block in self.blocks:
                outputs = [block.attn.proj] + ([block.mlp[2]] if block.mlp is not None else [])
                for layer in outputs:
                    nn.init.normal_(layer.weight, mean=0.0, std=0.02 / residuals**0.5)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, prompt: Prompt) -> Tensor:
        prompt = checks.prompt(prompt, finite=False)  # values are checked by predict: a training step must not sync
        if prompt.dim != self.cfg.n_dims:
            raise ValueError(f"prompt has dimension {prompt.dim}, but the model reads n_dims={self.cfg.n_dims}")
        if prompt.n_context > self.cfg.n_context:
            raise ValueError(f"prompt has {prompt.n_context} examples, more than n_context={self.cfg.n_context}")
        checks.prompt_fits(prompt.x, self)
        paired = self.cfg.tokens == "paired"
        if paired:
            xs, ys = prompt.points()
            tokens = torch.cat([xs, torch.cat([ys[:, :-1], torch.zeros_like(ys[:, -1:])], 1)[..., None]], 2)
        else:
            tokens = prompt.tokens()
        h = self.read_in(tokens) + self.pos.weight[: tokens.shape[1]]
        h = self.drop(h)
        for block in self.blocks:
            h = block(h)
        if paired:  # only the query's token lacks its label
            return self.read_out(self.ln_f(h[:, -1]))[..., 0]
        return self.read_out(self.ln_f(h[:, ::2]))[..., 0]

    @checks.finite_result("prompt")  # or the model's weights: a finite prompt of 1e30 overflows inside LayerNorm
    @torch.no_grad()
    def predict(self, prompt: Prompt) -> Tensor:
        """The prediction at the query alone, shape ``(B,)``, in eval mode: usable wherever an estimator is."""
        with evaluating(self):
            preds = self(checks.prompt(prompt))
        return preds if self.cfg.tokens == "paired" else preds[:, -1]
