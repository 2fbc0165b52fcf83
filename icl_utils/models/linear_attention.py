"""Linear attention models of chapter 5 (Zhang, Wu and Bartlett 2024), written as the paper defines them.

A prompt becomes the token matrix (3.1), one column per example and the query last with its label slot zero::

    Z = [[x_1, ..., x_n, x_query],
         [y_1, ..., y_n,       0]]      shape (d+1, n+1)

and the mask (3.2), ``M = diag(1, ..., 1, 0)``, keeps the query column out of the keys and values. Every model here
maps a :class:`~icl_utils.prompts.Prompt` to its prediction at the query, shape ``(B,)``:

* :class:`LSA`, linear self-attention (3.4): ``[Z + W_P W_V Z M Z^T W_K^T W_Q Z / n]_{-1,-1}``;
* :class:`LTB`, a linear transformer block (3.3): the same attention followed by a linear MLP with its residual,
  ``[(I + W_2^T W_1)(Z + W_P W_V Z M Z^T W_K^T W_Q Z / n)]_{-1,-1}``;
* :class:`GDBeta`, one gradient step from a learnable initialization (5.1),
  ``<beta_0 + Gamma X^T (y - X beta_0) / n, x_query>``, and :func:`GD0`, the same from ``beta_0 = 0``;
* :class:`GDPlusPlus`, von Oswald et al.'s GD++: gradient steps from zero, each after a curvature correction
  ``x <- (I - gamma X^T X) x`` of every input (:func:`~icl_utils.estimators.gd_plus_plus`), step and ``gamma`` learned.

:func:`ltb_from_gd_beta` writes a GD-beta model as an LTB (Lemma 5.1), and :func:`gd_beta_from_ltb` reads the
GD-beta model off an LTB's weights. :func:`moment_prompt` shrinks a prompt to the ``d + 1`` pseudo-examples these
models cannot tell from it, and :func:`sample_moment_prompts` draws many such prompts in bounded memory.
"""

from __future__ import annotations

from typing import Annotated

import torch
from jaxtyping import Float
from torch import Tensor, nn

from icl_utils import checks, config
from icl_utils.checks import Count, Finite, Steps, Task, Width, checked
from icl_utils.estimators import _gd_plus_plus, _gd_plus_plus_moments
from icl_utils.models.base import QueryModel, sample_memo
from icl_utils.prompts import Prompt


def token_matrix(prompt: Prompt) -> Tensor:
    """The token matrices (3.1) of a batch of prompts, shape ``(B, d+1, n+1)`` (a layout: values are not checked,
    as in a model's forward pass)."""
    prompt = checks.prompt(prompt, finite=False)
    x = torch.cat([prompt.x, prompt.x_query[:, None, :]], dim=1)
    y = torch.cat([prompt.y, torch.zeros_like(prompt.y_query)[:, None]], dim=1)
    return torch.cat([x, y[..., None]], dim=2).transpose(1, 2)


def _moment_work(batch: int, n: int, d: int, name: str) -> None:
    """The work limit on ``batch`` moment prompts: each prompt's moment matrix (2 n (d+1)^2) and its
    eigendecomposition (10 (d+1)^3), ``d`` read from ``name``."""
    checks.work(
        f"the moment prompts of {batch} prompts of n = {n} in {name}'s d = {d} (2 n (d+1)^2 + 10 (d+1)^3 each)",
        batch * (2 * n * (d + 1) ** 2 + 10 * (d + 1) ** 3),
    )


@checks.finite_result("prompt")
def moment_prompt(prompt: Prompt) -> Prompt:
    """A prompt of ``d + 1`` pseudo-examples on which every model here predicts as on ``prompt``.

    LSA, LTB and GD-beta read the context only through the moment matrix ``Z M Z^T / n`` of its tokens, so ``n``
    examples can be replaced by the ``d + 1`` columns of ``sqrt(d + 1) V Lambda^(1/2)`` (``V Lambda V^T`` the moment
    matrix), which have the same moments: fitting them costs the same at every ``n``. Not for GD++, whose
    curvature ``X^T X`` is not divided by ``n``, nor for models that read single examples (the GPT).
    """
    prompt = checks.prompt(prompt)
    n, d = prompt.n_context, prompt.dim
    if n < 1:
        raise ValueError("prompt must have at least one context example")
    _moment_work(prompt.batch_size, n, d, "prompt")
    context = token_matrix(prompt).double()[:, :, :n]
    evals, evecs = torch.linalg.eigh(context @ context.transpose(1, 2) / n)
    pseudo = ((d + 1) ** 0.5 * evecs * evals.clamp_min(0).sqrt()[:, None, :]).to(prompt.x.dtype)
    return Prompt(x=pseudo[:, :d].transpose(1, 2), y=pseudo[:, d], x_query=prompt.x_query, y_query=prompt.y_query)


@checked
def sample_moment_prompts(task: Task, batch: Count, n: Count, generator: torch.Generator) -> Prompt:
    """``batch`` prompts of ``n`` examples from ``task``, each shrunk by :func:`moment_prompt`; drawn a bounded
    number of values at a time, so memory grows with ``batch`` but not with ``n``."""
    batch, n, generator = checks.sample_sizes(batch, n, generator, dim=task.dim)
    _moment_work(batch, n, task.dim, "task")
    per_chunk = config.prompts_per_chunk((n + 1) * (task.dim + 1))
    return Prompt.cat(
        [
            moment_prompt(task.sample(min(per_chunk, batch - start), n, generator))
            for start in range(0, batch, per_chunk)
        ]
    )


@checked
def attention_mask(n: Count, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """The mask (3.2): ``diag(1, ..., 1, 0)`` of size ``n + 1``, so only the ``n`` context columns are attended."""
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    device = config.resolve_device("device", device) if device is not None else None
    checks.allocation("(n + 1)^2", (n + 1) ** 2, dtype)
    # Built from device ops alone (no element assignment), so it can be recorded inside a CUDA graph.
    return torch.diag((torch.arange(n + 1, device=device) < n).to(dtype))


def _param(shape: tuple[int, ...], std: float) -> nn.Parameter:
    return nn.Parameter(std * torch.randn(shape))


class LTB(QueryModel):
    """A linear transformer block (3.3); with ``mlp=False`` it is the linear self-attention (3.4).

    Weights are square, ``(d+1) x (d+1)`` for ``W_P, W_V, W_K, W_Q`` and ``mlp_width x (d+1)`` for ``W_1, W_2``
    (default width ``d + 1``), initialized with independent ``N(0, init_std^2)`` entries.
    """

    @checked
    def __init__(self, dim: Width, *, mlp: bool = True, mlp_width: Width | None = None, init_std: checks.Scale = 0.3):
        super().__init__(dim)
        if mlp_width is not None and not mlp:
            raise ValueError(f"mlp_width must be None without an MLP (mlp=False), got {mlp_width}")
        e = dim + 1
        width = (mlp_width if mlp_width is not None else e) if mlp else 0
        checks.allocation("the LTB's parameters, 4 (dim + 1)^2 + 2 mlp_width (dim + 1)", 4 * e * e + 2 * width * e)
        self.W_P, self.W_V, self.W_K, self.W_Q = (_param((e, e), init_std) for _ in range(4))
        self.mlp = mlp
        if self.mlp:
            self.W_1, self.W_2 = _param((width, e), init_std), _param((width, e), init_std)

    def forward(self, prompt: Prompt) -> Tensor:
        prompt = self._check(prompt)
        z = token_matrix(prompt)
        n = prompt.n_context
        # Only the bottom-right entry is read, so only the query column of the block's output is computed:
        # Z M Z^T / n is the context tokens' second-moment matrix (M drops the query column), and the query column
        # of the attention output is W_P W_V (Z M Z^T / n) W_K^T W_Q z_query. Weight products act on (B, d+1)
        # rows, so S models trained at once (vmap) multiply S large matrices, not S * B tiny ones.
        context, z_query = z[:, :, :n], z[:, :, n]
        moments = context @ context.transpose(1, 2) / n
        scores = z_query @ (self.W_K.T @ self.W_Q).T
        h_query = z_query + (moments @ scores[:, :, None])[:, :, 0] @ (self.W_P @ self.W_V).T
        out = h_query[:, -1]
        if self.mlp:
            out = out + h_query @ (self.W_2.T @ self.W_1)[-1]
        return out


def LSA(dim: int, *, init_std: float = 0.3) -> LTB:
    """Linear self-attention (3.4): an :class:`LTB` without its MLP."""
    return LTB(dim, mlp=False, init_std=init_std)


class GDBeta(QueryModel):
    """One gradient step on ``(1/2n) ||y - X beta||^2`` from ``beta_0`` with matrix step ``Gamma`` (5.1).

    The prediction is ``<beta_0 + Gamma X^T (y - X beta_0) / n, x_query>``. With ``learnable_init=False`` the
    initialization stays at zero (GD-0). Parameters start at zero unless given.
    """

    @checked
    def __init__(
        self,
        dim: Width,
        *,
        learnable_init: bool = True,
        beta0: Annotated[Float[Tensor, " {dim}"], Finite, checks.WithinScale] | None = None,
        gamma: Annotated[Float[Tensor, "{dim} {dim}"], Finite] | None = None,
    ):
        super().__init__(dim)
        gamma = torch.zeros(dim, dim) if gamma is None else gamma.detach().cpu()
        if not bool(torch.isfinite(gamma.float()).all()):  # the parameters are float32
            raise ValueError(
                f"gamma must be finite in float32 (|entries| < 3.4e38), got {gamma.abs().max().item():.3g}"
            )
        self.gamma = nn.Parameter(gamma.float().clone())
        if learnable_init:
            beta0 = torch.zeros(dim) if beta0 is None else beta0.detach().cpu()
            self.beta0 = nn.Parameter(beta0.float().clone())
        else:
            if beta0 is not None:
                raise ValueError("beta0 is given but learnable_init=False fixes it at zero")
            self.register_buffer("beta0", torch.zeros(dim))

    def forward(self, prompt: Prompt) -> Tensor:
        prompt = self._check(prompt)
        x, y = prompt.x, prompt.y
        resid = y - x @ self.beta0
        beta = self.beta0 + (x.transpose(1, 2) @ resid[..., None])[..., 0] @ self.gamma.T / prompt.n_context
        return (beta * prompt.x_query).sum(-1)


def GD0(dim: int, *, gamma: Tensor | None = None) -> GDBeta:
    """One gradient step from zero with matrix step ``Gamma``: what an optimal LSA computes when the task mean is 0."""
    return GDBeta(dim, learnable_init=False, gamma=gamma)


class GDPlusPlus(QueryModel):
    """Von Oswald et al.'s GD++ (:func:`~icl_utils.estimators.gd_plus_plus`) with learnable step and curvature.

    ``steps`` recurrent steps share one step (a ``(d, d)`` matrix, or a scalar with ``matrix_step=False`` as in
    their paper) and one curvature ``gamma``; both start at ``lr`` and ``gamma`` (zero by default). One step is GD-0
    whatever ``gamma`` (the correction acts from the second step on); with ``gamma`` frozen at zero (``requires_grad``
    off) it is plain gradient descent with a learned step.
    """

    @checked
    def __init__(
        self,
        dim: Width,
        *,
        steps: Steps = 1,
        matrix_step: bool = True,
        lr: checks.Offset = 0.0,
        gamma: checks.Offset = 0.0,
    ):
        super().__init__(dim)
        self.steps = steps
        lr = float(lr)  # a float32 parameter, an int given or not
        self.step = nn.Parameter(lr * torch.eye(dim) if matrix_step else torch.tensor(lr))
        self.gamma = nn.Parameter(torch.tensor(float(gamma)))

    def forward(self, prompt: Prompt) -> Tensor:
        prompt = self._check(prompt)
        # the moments do not depend on the parameters: half of each L-BFGS call at n = 100, computed once per fit
        moments = sample_memo(prompt, "gd++ moments", lambda: _gd_plus_plus_moments(prompt.x, prompt.y))
        return _gd_plus_plus(prompt.x, prompt.y, prompt.x_query, self.step, self.gamma, self.steps, moments)


@torch.no_grad()
@checked
def ltb_from_gd_beta(model: GDBeta) -> LTB:
    """The LTB of Lemma 5.1 that computes the same function as a GD-beta model.

    ``W_K = I`` and ``W_Q = [[Gamma^T, 0], [0, 0]]`` make the attention scores ``x_i^T Gamma^T x_query``;
    ``W_P = I`` and a value map with last row ``(-beta_0, 1)`` make the values the residuals ``y_i - <beta_0, x_i>``;
    a width-one MLP adds ``<beta_0, x_query>`` to the output.
    """
    d = model.dim
    ltb = LTB(d, mlp=True, mlp_width=1, init_std=0.0)
    beta0, gamma = model.beta0.detach().cpu().float(), model.gamma.detach().cpu().float()
    ltb.W_P.copy_(torch.eye(d + 1))
    ltb.W_K.copy_(torch.eye(d + 1))
    ltb.W_Q.zero_()
    ltb.W_Q[:d, :d] = gamma.T
    ltb.W_V.zero_()
    ltb.W_V[d, :d] = -beta0
    ltb.W_V[d, d] = 1.0
    ltb.W_1.zero_()
    ltb.W_1[0, :d] = beta0
    ltb.W_2.zero_()
    ltb.W_2[0, d] = 1.0
    return ltb


@torch.no_grad()
@checked
def gd_beta_from_ltb(model: LTB) -> GDBeta:
    """Read the GD-beta model off an LTB's weights (the characterization of optimal LTBs, Theorem 5.3).

    The LTB's prediction is ``<c, x_query> + u^T S B x_query``, with ``c`` and ``u = (W_P W_V)^T c_full`` read from
    the last row ``c_full`` of ``I + W_2^T W_1``, ``B`` the first ``d`` columns of ``W_K^T W_Q`` and
    ``S = Z M Z^T / n``. The GD-beta reading keeps ``beta_0 = c`` and ``Gamma = (u_{d+1} B_{:d})^T``; it computes the
    same function exactly when the remaining parts vanish (``u_{:d} = -u_{d+1} beta_0`` and ``B_{d+1} = 0``),
    which Theorem 5.3 shows every optimal LTB satisfies.
    """
    if not model.mlp:
        raise ValueError("model must be an LTB with its MLP: an LSA has none, so no learnable initialization to read")
    if bad := checks.nonfinite_names({k: v.detach() for k, v in model.named_parameters()}):
        raise ValueError(f"model must have finite weights to read, got NaN or infinite {', '.join(bad)}")
    d = model.dim
    c_full = (torch.eye(d + 1) + model.W_2.T.cpu() @ model.W_1.cpu())[d]
    u = (model.W_P.cpu() @ model.W_V.cpu()).T @ c_full
    b = (model.W_K.T.cpu() @ model.W_Q.cpu())[:, :d]
    beta0, gamma = c_full[:d], (u[d] * b[:d]).T
    if not bool(torch.isfinite(gamma).all()) or not bool((beta0.abs() <= config.MAX_SCALE).all()):
        raise ValueError(
            "model's weights must give a finite Gamma and a beta_0 within config.MAX_SCALE, but their products "
            "overflow: rescale model's weights"
        )
    return GDBeta(d, beta0=beta0, gamma=gamma)
