"""Linear attention on a feature map, ``(1/n) sum_i y_i f(x_i)^T Gamma f(x_query)``, and its fitting recipes.

* :class:`FeatureAttention`: one ReLU layer (chapter 4, Oko et al. 2024), pretrained by the paper's two stages,
  :func:`two_stage_fit` (:func:`one_step_feature_update` on the first layer, then :func:`fit_attention_ridge` on
  ``Gamma``);
* :class:`MLPAttention`: an MLP feature map (chapter 2, Kim, Nakamaki and Suzuki 2024), trained end to end by
  :func:`icl_utils.train.train`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icl_utils import checks, config
from icl_utils.checks import Count, Depth, Draws, NonNegative, Positive, Task, Width, checked
from icl_utils.models.base import QueryModel
from icl_utils.prompts import Prompt, TaskFamily


class AttentionOnFeatures(QueryModel):
    """Linear attention on a feature map ``f``: ``(1/n) sum_i y_i f(x_i)^T Gamma f(x_query)``. Subclasses define
    ``_feature_map`` and the parameter ``gamma``; the prediction is linear in ``Gamma`` (so that Gamma can be
    fitted by ridge regression, :func:`fit_attention_ridge`)."""

    def _feature_map(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def features(self, x: Tensor) -> Tensor:
        """The feature map ``f(x)``, shape ``(..., m)``, of inputs ``(..., dim)`` of the model's dtype and device."""
        # checked by hand, not declared: a few attribute reads, where the call itself may be a small product
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.ndim == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (..., {self.dim}) (the model's dim), got {tuple(x.shape)}")
        checks.prompt_fits(x, self, "x")
        if checks.values_checked() and not bool(checks.finite_flag(x)):  # NaN features would be returned
            raise ValueError("x must be finite, got a NaN or an infinity")
        return self._feature_map(x)

    def context_summary(self, prompt: Prompt) -> Tensor:
        """``(1/n) sum_i y_i f(x_i)``, shape ``(B, m)``: what the attention reads from the context."""
        return self._summary(self._check(prompt))

    def _summary(self, prompt: Prompt) -> Tensor:
        # A (1, n) x (n, m) product per prompt: no (B, n, m) temporary for y_i f(x_i).
        return (prompt.y[:, None, :] @ self._feature_map(prompt.x))[:, 0] / prompt.n_context

    def forward(self, prompt: Prompt) -> Tensor:
        prompt = self._check(prompt)
        return ((self._summary(prompt) @ self.gamma) * self._feature_map(prompt.x_query)).sum(-1)


class FeatureAttention(AttentionOnFeatures):
    """ReLU features feeding linear attention (chapter 4):
    ``(1/n) sum_i y_i f(x_i)^T Gamma f(x_query)`` with ``f(x) = ReLU(W x + b)`` of width ``m``.

    The initialization of Oko et al. (2024): rows of ``W`` uniform on the unit sphere, ``b = 0``, and ``Gamma``
    diagonal with random signs, times ``gamma_scale`` (default ``1/m``). The scale does not change the direction of
    the first gradient step's correlation term, but it keeps the initial prediction small, so that the step is not
    swamped by terms that couple each neuron to all the others (at scale 1 the step puts a smaller share of the
    weights in the hidden subspace). :func:`two_stage_fit` pretrains it as the paper does.
    """

    @checked
    def __init__(
        self,
        dim: Width,
        width: Width,
        generator: torch.Generator | None = None,
        gamma_scale: checks.Scale | None = None,
    ):
        super().__init__(dim)
        gamma_scale = 1.0 / width if gamma_scale is None else float(gamma_scale)
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        if not isinstance(g, torch.Generator) or g.device.type != "cpu":
            raise TypeError("generator must be a CPU torch.Generator (parameters are drawn on the CPU)")
        w = torch.randn(width, dim, generator=g)
        self.W = nn.Parameter(w / w.norm(dim=1, keepdim=True))
        self.b = nn.Parameter(torch.zeros(width))
        signs = torch.randint(0, 2, (width,), generator=g) * 2.0 - 1.0
        self.gamma = nn.Parameter(gamma_scale * torch.diag(signs))

    def _feature_map(self, x: Tensor) -> Tensor:
        # One fused matmul-plus-bias and an in-place ReLU (autograd allows it: the linear map's backward does not
        # need its output): two passes over the (B, n, m) features instead of three.
        return F.relu(F.linear(x, self.W, self.b), inplace=True)


class MLPAttention(AttentionOnFeatures):
    """A deep feature map feeding linear attention (chapter 2): ``phi`` is an MLP ``R^d -> R^N`` (``depth`` hidden
    layers of width ``hidden``, GELU), and the prediction is ``(1/n) sum_i y_i phi(x_i)^T Gamma phi(x_query)``.
    ``Gamma`` starts at ``I / N``; the MLP has PyTorch's default initialization (seeded by the caller), except that
    the first layer's weights are multiplied by ``input_scale`` and its biases drawn from
    ``U[-input_scale, input_scale]``: on inputs in ``[0, 1]`` the default gives features too smooth to learn the
    higher harmonics of a Fourier basis (chapter 2 uses scale 10)."""

    @checked
    def __init__(
        self,
        dim: Width,
        n_features: Width,
        *,
        hidden: Width = 64,
        depth: Depth = 2,
        input_scale: checks.PositiveScale = 1.0,
    ):
        super().__init__(dim)
        checks.allocation(
            "the MLP's parameters, hidden (dim + (depth - 1) hidden + n_features) + n_features^2",
            hidden * (dim + (depth - 1) * hidden + n_features) + n_features**2,
        )
        layers: list[nn.Module] = []
        width = dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        self.phi = nn.Sequential(*layers, nn.Linear(width, n_features))
        with torch.no_grad():
            self.phi[0].weight.mul_(input_scale)
            self.phi[0].bias.uniform_(-input_scale, input_scale)
        self.gamma = nn.Parameter(torch.eye(n_features) / n_features)

    def _feature_map(self, x: Tensor) -> Tensor:
        return self.phi(x)


class FixedFeatureAttention(AttentionOnFeatures):
    """Linear attention on a given, untrained feature map ``features`` (a callable from ``(..., dim)`` inputs to
    ``(..., n_features)``; chapter 2 passes the first ``N`` functions of the true basis): only ``Gamma`` (starting
    at ``I / N``) is a parameter, so that experiments on the pretraining of ``Gamma`` leave the features out."""

    @checked
    def __init__(self, features: Callable[[Tensor], Tensor], dim: Width, n_features: Width):
        super().__init__(dim)
        self._given = features
        self.gamma = nn.Parameter(torch.eye(n_features) / n_features)
        try:  # one input, so that a map of another dim or kind is refused here, not at the first prediction
            probe = self._feature_map(torch.zeros(2, dim))
            if probe.shape[0] != 2 or not bool(checks.finite_flag(probe.detach())):
                raise ValueError(f"features must give finite features, one row per input, got {probe!r:.60}")
        except (TypeError, ValueError, RuntimeError, AttributeError, IndexError) as err:
            kind = TypeError if isinstance(err, TypeError) else ValueError
            said = f"features must map inputs (K, dim={dim}) to (K, n_features={n_features})"
            raise kind(f"{said}: {type(err).__name__}: {err}") from err

    def _feature_map(self, x: Tensor) -> Tensor:
        out = self._given(x)
        if not isinstance(out, Tensor) or out.shape != (*x.shape[:-1], self.gamma.shape[0]):
            said = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else f"a {type(out).__name__}"
            raise ValueError(
                f"features must give tensors of n_features={self.gamma.shape[0]} outputs per input, shape "
                f"{(*x.shape[:-1], self.gamma.shape[0])} for inputs {tuple(x.shape)}, got {said}"
            )
        if out.is_complex():  # the cast below would drop the imaginary part
            raise TypeError(f"features must give real features, got {out.dtype}")
        if checks.values_checked() and not bool(checks.finite_flag(out.detach())) and bool(checks.finite_flag(x)):
            raise ValueError("features must give finite features of finite inputs, got a NaN or an infinity")
        return out.to(self.gamma.dtype)


@checked
def one_step_feature_update(
    model: nn.Module,
    task: Task,
    *,
    n_tasks: Draws,
    n: Count,
    lr: checks.PositiveScale,
    weight_decay: NonNegative,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> None:
    """Stage 1 of Oko et al. (2024): one gradient step on the first-layer weights ``W`` of a
    :class:`FeatureAttention`, in place,

        W <- W - lr * (grad_W (1/T1) sum_t (y_q,t - f(X_t, Y_t, x_q,t))^2 + weight_decay * W),

    over ``n_tasks`` fresh prompts of ``n`` examples (the gradient of :func:`stage_one_gradients`). With
    ``lr * weight_decay = 1`` the initial ``W`` cancels and the step keeps the gradient alone.
    """
    (grad,) = stage_one_gradients(model, task, n_tasks=(n_tasks,), n=n, generator=generator, chunk_size=chunk_size)
    with torch.no_grad():
        stepped = model.W - lr * (grad + weight_decay * model.W)
        if not bool(checks.finite_flag(stepped)):  # the model is left as it was
            raise checks.Diverged(f"lr = {lr:g} and weight_decay = {weight_decay:g} made the step overflow W")
        model.W.copy_(stepped)


@checked
def stage_one_gradients(
    model: FeatureAttention,
    task: Task,
    *,
    n_tasks: checks.DrawCounts,
    n: Count,
    generator: torch.Generator,
    chunk_size: Count | None = None,
) -> list[Tensor]:
    """The gradient in ``W`` of the empirical ICL loss ``(1/T1) sum_t (y_q,t - f(X_t, Y_t, x_q,t))^2`` of a
    :class:`FeatureAttention` at its current weights, over the first ``T1`` of one stream of prompts of ``n``
    examples, for every ``T1`` in ``n_tasks`` (increasing): a sweep over the number of stage-1 tasks at the cost of
    its largest. Prompts are drawn ``chunk_size`` at a time (default: as many as hold
    :data:`~icl_utils.config.CHUNK_ELEMENTS` feature values). The model is not changed.
    """
    if any(a >= b for a, b in itertools.pairwise(n_tasks)):
        raise ValueError(f"n_tasks must increase, got {n_tasks}")
    _reads(model, task, generator)
    chunk_size = (
        config.prompts_per_chunk((n + 1) * (model.W.shape[0] + model.dim)) if chunk_size is None else chunk_size
    )
    total, done, out = torch.zeros_like(model.W), 0, []
    for target in n_tasks:
        while done < target:
            batch = min(chunk_size, target - done)
            prompt = task.sample(batch, n, generator)
            loss = (model(prompt) - prompt.y_query).square().sum()
            (g,) = torch.autograd.grad(loss, model.W)
            total += g
            done += batch
        out.append(total / target)
    return out


def _reads(model: AttentionOnFeatures, task: TaskFamily, generator: torch.Generator) -> None:
    """Check that ``model`` can read the prompts of ``task`` drawn with ``generator``, before any is drawn (their
    types are declared by the callers)."""
    if task.dim != model.dim:
        raise ValueError(f"the model reads dim={model.dim}, but task.dim={task.dim}")
    checks.prompt_fits(torch.empty(0, device=generator.device), model)


def _spd_solve(gram: Tensor, ridge: float, rhs: Tensor) -> Tensor:
    """``(gram + ridge I)^-1 rhs`` for a positive semi-definite ``gram``, by Cholesky in float64: on ``gram``'s device,
    and on the CPU if that factorization fails (CUDA's solvers can give up on systems the CPU's LAPACK solves)."""
    system = gram.detach().double()
    system = (system + system.T) / 2 + ridge * torch.eye(system.shape[0], dtype=system.dtype, device=system.device)
    for dev in dict.fromkeys([system.device, torch.device("cpu")]):
        factor, info = torch.linalg.cholesky_ex(system.to(dev))
        if int(info) == 0 and bool(torch.isfinite(factor).all()):
            solution = torch.cholesky_solve(rhs.detach().double().to(dev)[:, None], factor)[:, 0]
            return solution.to(rhs.device)
    raise ValueError(f"the ridge system is not numerically positive definite; raise lam (got {ridge:g} after scaling)")


def _kronecker_gram(a: Tensor, f: Tensor) -> Tensor:
    """``phi^T phi`` for the rows ``phi_t = vec(a_t f_t^T)`` (``a``, ``f`` of shape ``(T, m)``), shape
    ``(m^2, m^2)``. Its entry ``((i, k), (j, l))`` is ``sum_t a_ti a_tj f_tk f_tl``, which depends on the pairs
    ``{i, j}`` and ``{k, l}`` only: one product of the ``m (m + 1) / 2`` pair products of ``a`` with those of ``f``
    gives every entry with 3.8 times fewer operations than ``phi^T phi`` at ``m = 32``."""
    m = a.shape[1]
    i, j = torch.triu_indices(m, m, device=a.device)
    pairs = (a[:, i] * a[:, j]).T @ (f[:, i] * f[:, j])
    index = torch.empty(m, m, dtype=torch.long, device=a.device)
    index[i, j] = index[j, i] = torch.arange(i.numel(), device=a.device)
    return pairs[index[:, None, :, None], index[None, :, None, :]].reshape(m * m, m * m)


@checked
def fit_attention_ridge(
    model: AttentionOnFeatures, task: Task, *, n_tasks: Draws, n: Count, lam: Positive, generator: torch.Generator
) -> None:
    """Stage 2 of Oko et al. (2024): set ``Gamma`` of a feature-attention model, in place, to the ridge solution

        argmin_Gamma (1/T2) sum_t (y_q,t - a_t^T Gamma f_t)^2 + lam ||Gamma||_F^2,

    with ``a_t = (1/n) sum_i y_i f(x_i)`` and ``f_t = f(x_q,t)`` over ``n_tasks`` fresh prompts. The problem is
    ridge regression on the features ``vec(a_t f_t^T)``; it is solved in the primal (``m^2`` unknowns) or in the
    kernel form ``K = (A A^T) * (F F^T)``, whichever system is smaller, in float64.
    """
    _reads(model, task, generator)
    checks.allocation("n_tasks * (n + 1) * dim", n_tasks * (n + 1) * task.dim)
    fit_gamma(model, task.sample(n_tasks, n, generator), lam=lam)


@checked
def fit_gamma(model: AttentionOnFeatures, prompt: Prompt, *, lam: Positive) -> None:
    """Set ``Gamma`` of a feature-attention model, in place, to the minimizer of the empirical ICL risk on the
    given prompts plus ``lam ||Gamma||_F^2`` (the solver of :func:`fit_attention_ridge`, on a fixed pretraining set
    such as a :class:`~icl_utils.tasks.pool.PromptPool`'s prompts). With ``lam`` small and fewer prompts than the
    ``m^2`` entries of ``Gamma``, it interpolates them."""
    lam = float(lam)
    prompt = checks.prompt(prompt)
    if prompt.dim != model.dim:
        raise ValueError(f"prompt must have dim = {model.dim} (the model's), got {prompt.dim}")
    checks.prompt_fits(prompt.x, model)
    n_tasks, n = prompt.batch_size, prompt.n_context
    with torch.no_grad():
        # The context's features (n_tasks x n x m values) are summarized a chunk of prompts at a time, so that
        # they never materialize at once.
        chunk = config.prompts_per_chunk(n * model.gamma.shape[0])
        a = torch.cat([model.context_summary(part) for part in prompt.split(chunk)]).double()
        f = model.features(prompt.x_query).double()
        y = prompt.y_query.double()
        m = a.shape[1]
        checks.warn_if_ill_conditioned("lam", lam, (a.square().sum(1) * f.square().sum(1)).mean())
        for name, t in (("the context summaries", a), ("the query features", f), ("the query labels", y)):
            if not bool(checks.finite_flag(t)):
                raise ValueError(
                    f"{name} of the stage-2 prompts are not finite: rescale the prompt, or check the model's weights"
                )
        # A Gram matrix plus a ridge: symmetric positive definite, solved by Cholesky (see _spd_solve).
        if m * m <= n_tasks:
            system = _kronecker_gram(a, f) / n_tasks
            rhs = ((a * y[:, None]).T @ f).reshape(m * m) / n_tasks
            gamma = _spd_solve(system, lam, rhs).reshape(m, m)
        else:
            alpha = _spd_solve((a @ a.T) * (f @ f.T), n_tasks * lam, y)
            gamma = (a * alpha[:, None]).T @ f
        model.gamma.copy_(gamma.to(model.gamma.dtype))


@checked
def two_stage_fit(
    model: FeatureAttention,
    task: Task,
    *,
    stage1_tasks: Draws,
    stage1_n: Count,
    stage2_tasks: Draws,
    stage2_n: Count,
    lam: Positive,
    generator: torch.Generator,
    bias_range: checks.PositiveScale = 1.0,
) -> None:
    """Oko et al.'s (2024) pretraining, in place: stage 1 (:func:`one_step_feature_update` with ``lr = weight_decay
    = 1``, so the step keeps the gradient alone) on ``stage1_tasks`` prompts of ``stage1_n`` examples; then rows of
    ``W`` rescaled to mean length one (the step size that does so) and biases redrawn from
    ``U[-bias_range, bias_range]``; then stage 2 (:func:`fit_attention_ridge`) on ``stage2_tasks`` prompts of
    ``stage2_n`` examples with penalty ``lam``."""
    _reads(model, task, generator)  # before stage 1 changes the model
    one_step_feature_update(
        model, task, n_tasks=stage1_tasks, n=stage1_n, lr=1.0, weight_decay=1.0, generator=generator
    )
    stage_two_fit(
        model, task, stage2_tasks=stage2_tasks, stage2_n=stage2_n, lam=lam, generator=generator, bias_range=bias_range
    )


@checked
def subspace_fit(
    model: FeatureAttention,
    task: Task,
    *,
    stage2_tasks: Draws,
    stage2_n: Count,
    lam: Positive,
    generator: torch.Generator,
    bias_range: checks.PositiveScale = 1.0,
) -> None:
    """The reference for :func:`two_stage_fit`, in place: stage 1 replaced by a perfect one, the rows of ``W``
    projected onto the task's hidden subspace (``task.basis``, ``d x r`` orthonormal), then the same rescaling,
    biases and stage 2. What its floor exceeds the pretrained one by is stage 1's error; what is left is the width's
    and stage 2's."""
    kw = {
        "stage2_tasks": stage2_tasks,
        "stage2_n": stage2_n,
        "lam": lam,
        "generator": generator,
        "bias_range": bias_range,
    }
    _reads(model, task, generator)
    basis = getattr(task, "basis", None)
    if not isinstance(basis, Tensor) or basis.ndim != 2 or basis.shape[0] != model.dim:
        raise ValueError(f"task must have a basis of shape (d={model.dim}, r) of its hidden subspace")
    with torch.no_grad():
        u = basis.to(model.W)
        model.W.copy_(model.W @ u @ u.T)
    stage_two_fit(model, task, **kw)


@checked
def stage_two_fit(
    model: FeatureAttention,
    task: Task,
    *,
    stage2_tasks: Draws,
    stage2_n: Count,
    lam: Positive,
    generator: torch.Generator,
    bias_range: checks.PositiveScale = 1.0,
) -> None:
    """What follows stage 1 in :func:`two_stage_fit`, in place: rows of ``W`` rescaled to mean length one, biases
    redrawn from ``U[-bias_range, bias_range]``, ``Gamma`` by :func:`fit_attention_ridge`. On a freshly initialized
    model (unit rows) it is the control without stage 1: random features, the same stage 2."""
    _reads(model, task, generator)
    with torch.no_grad():
        model.W /= model.W.norm(dim=1).mean()
        model.b.uniform_(-bias_range, bias_range, generator=generator)
    fit_attention_ridge(model, task, n_tasks=stage2_tasks, n=stage2_n, lam=lam, generator=generator)
