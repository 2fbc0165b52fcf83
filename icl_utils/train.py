"""One training loop for in-context learners: Adam on the squared error at every x position of a prompt.

The task family supplies prompts (``task.sample(batch, n, generator, active_dims)``) on the generator's device;
an optional :class:`Curriculum` grows the active dimension and the prompt length as in Garg et al. (2022).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm import tqdm

from icl_utils import checks, config
from icl_utils.prompts import Prompt
from icl_utils.risk import squared_errors


class TaskFamily(Protocol):
    dim: int

    def sample(self, batch: int, n: int, generator: torch.Generator, active_dims: int | None = None) -> Prompt: ...


@dataclass(frozen=True)
class Curriculum:
    """Start with ``dims[0]`` active dimensions and ``points[0]`` points per prompt (query included); every
    ``every`` steps add ``dims_step`` dimensions and ``points_step`` points, up to ``dims[1]`` and ``points[1]``.

    Garg et al.'s setting for d = 20 is ``Curriculum(dims=(5, 20), points=(11, 41), every=2000)``.
    """

    dims: tuple[int, int]
    points: tuple[int, int]
    every: int
    dims_step: int = 1
    points_step: int = 2

    def __post_init__(self) -> None:
        for name in ("dims", "points"):
            lo, hi = getattr(self, name)
            checks.positive_int(f"{name}[0]", lo)
            checks.positive_int(f"{name}[1]", hi)
            if lo > hi:
                raise ValueError(f"{name} must be (start, end) with start <= end, got {(lo, hi)}")
        checks.positive_int("every", self.every)
        checks.positive_int("dims_step", self.dims_step, minimum=0)
        checks.positive_int("points_step", self.points_step, minimum=0)

    def at(self, step: int) -> tuple[int, int]:
        """``(active_dims, n_points)`` at training step ``step``."""
        stage = step // self.every
        return (
            min(self.dims[0] + stage * self.dims_step, self.dims[1]),
            min(self.points[0] + stage * self.points_step, self.points[1]),
        )


@dataclass
class TrainHistory:
    """Per-step training losses (mean squared error; shape ``(steps,)``, or ``(steps, S)`` for ``S`` models trained
    together) and the wall-clock time."""

    losses: np.ndarray
    seconds: float

    def smoothed(self, window: int = 50) -> np.ndarray:
        """Moving average of the losses over ``window`` steps (shorter at the start), per model."""
        window = checks.positive_int("window", window)
        csum = np.cumsum(np.concatenate([np.zeros_like(self.losses[:1]), self.losses]), axis=0)
        idx = np.arange(1, len(self.losses) + 1)
        lo = np.maximum(idx - window, 0)
        span = (idx - lo).reshape((-1,) + (1,) * (self.losses.ndim - 1))
        return (csum[idx] - csum[lo]) / span


def _schedule(name: str, steps: int):
    """The learning-rate multiplier at each step."""
    if name == "constant":
        return lambda step: 1.0
    warmup = max(1, steps // 20)
    return lambda step: min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))


def _mean_squared_error(preds: Tensor, prompt: Prompt) -> Tensor:
    """The training loss: the mean of :func:`icl_utils.risk.squared_errors`, the output taken in float32 (it is
    bfloat16 under autocast)."""
    return squared_errors(preds.float(), prompt).mean()


@dataclass(frozen=True)
class _Plan:
    """What :func:`train` and :func:`train_ensemble` share once their arguments are checked."""

    steps: int
    batch_size: int  # prompts per model per step
    lr: float
    schedule: str
    log_every: int
    dev: torch.device
    graph: bool  # replay the step as a CUDA graph
    autocast: bool  # run the forward pass under bfloat16 autocast
    draw: Callable[[int], Prompt]  # step -> the prompts of that step, batch_size per model

    def forward_context(self):
        """Autocast to bfloat16 where asked for (its weight cache must be off inside a CUDA graph capture)."""
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast, cache_enabled=not self.graph)


def _plan(models, tasks, *, steps, batch_size, n_points, generator, lr, schedule, curriculum, cuda_graph, bf16,
          log_every) -> _Plan:
    """Check the arguments shared by the two training functions and build the prompt stream: step ``t`` draws
    ``batch_size`` prompts per model of ``n_points`` points, or the curriculum's size at ``t``, all from
    ``tasks[0]`` or, given one task per model, block ``s`` from ``tasks[s]``."""
    steps = checks.positive_int("steps", steps)
    batch_size = checks.positive_int("batch_size", batch_size)
    n_points = checks.positive_int("n_points", n_points)
    lr = checks.nonnegative_float("lr", lr, strict=True)
    log_every = checks.positive_int("log_every", log_every)
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
    if not isinstance(bf16, bool):
        raise TypeError(f"bf16 must be True or False, got {bf16!r}")
    dev = checks.generator(generator).device
    if len(tasks) not in (1, len(models)):
        raise ValueError(f"give one task, or one per model ({len(models)}), not {len(tasks)}")
    for task in tasks:
        if not callable(getattr(task, "sample", None)):
            raise TypeError(f"task must have a sample(batch, n, generator, active_dims) method, got {type(task).__name__}")
    if len({getattr(task, "dim", None) for task in tasks}) > 1:
        raise ValueError(f"the tasks must share one dimension, got {[getattr(t, 'dim', None) for t in tasks]}")
    if curriculum is not None and not isinstance(curriculum, Curriculum):
        raise TypeError(f"curriculum must be a Curriculum or None, got {type(curriculum).__name__}")
    if curriculum is not None and curriculum.points[1] > n_points:
        raise ValueError(f"curriculum ends at {curriculum.points[1]} points, more than n_points={n_points}")
    for i, model in enumerate(models):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model {i} must be a torch.nn.Module, got {type(model).__name__}")
        param_dev = next(model.parameters()).device
        if param_dev.type != dev.type:
            raise ValueError(f"model is on {param_dev} but the generator samples on {dev}; move one of them")
    if cuda_graph is None:
        graph = dev.type == "cuda"
    elif not isinstance(cuda_graph, bool):
        raise TypeError(f"cuda_graph must be True, False or None, got {cuda_graph!r}")
    elif cuda_graph and dev.type != "cuda":
        raise ValueError(f"cuda_graph=True needs a CUDA device, but the generator samples on {dev}")
    else:
        graph = cuda_graph

    def draw(step: int) -> Prompt:
        dims, points = curriculum.at(step) if curriculum is not None else (None, n_points)
        if len(tasks) == 1:
            return tasks[0].sample(batch_size * len(models), points - 1, generator, active_dims=dims)
        return Prompt.cat([task.sample(batch_size, points - 1, generator, active_dims=dims) for task in tasks])

    return _Plan(steps, batch_size, lr, schedule, log_every, dev, graph, bf16 and dev.type == "cuda", draw)


class _GraphedStep:
    """One optimizer step (forward, backward, fused Adam) captured into a CUDA graph and replayed.

    A graph replays fixed kernels on fixed memory, so the prompt is copied into static buffers before each replay
    and a new graph is captured whenever the prompt's shape changes (each stage of a curriculum). The first
    ``warmup`` steps at a new shape run eagerly on a side stream (lazy initialization must not happen during
    capture); they are real training steps. The learning rate lives in a device tensor that the schedule
    overwrites, so one graph serves every step.
    """

    def __init__(self, params: list[Tensor], loss_fn: Callable[[Prompt], Tensor], lr: Tensor, warmup: int = 2):
        self.loss_fn, self.warmup = loss_fn, warmup
        self.optimizer = torch.optim.Adam(params, lr=lr, fused=True, capturable=True)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.shape: tuple | None = None
        self.eager_left = 0

    def _eager(self, prompt: Prompt) -> Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        losses = self.loss_fn(prompt)
        losses.sum().backward()
        self.optimizer.step()
        return losses.detach()

    def __call__(self, prompt: Prompt) -> Tensor:
        shape = tuple(t.shape for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query))
        if shape != self.shape:
            self.graph, self.shape, self.eager_left = None, shape, self.warmup
        if self.eager_left > 0:
            self.eager_left -= 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self._eager(prompt)
            torch.cuda.current_stream().wait_stream(side)
            return out
        if self.graph is None:
            self.static = Prompt(*(t.clone() for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query)))
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                losses = self.loss_fn(self.static)
                losses.sum().backward()
                self.optimizer.step()
                # Keep the output buffer, not the autograd graph behind it: a graph kept alive past a recapture
                # holds gradient-accumulation nodes on the old capture stream (torch warns of a stream mismatch).
                self.static_losses = losses.detach()
            del losses
        for buf, new in zip((self.static.x, self.static.y, self.static.x_query, self.static.y_query),
                            (prompt.x, prompt.y, prompt.x_query, prompt.y_query)):
            buf.copy_(new)
        self.graph.replay()
        return self.static_losses.detach().clone()


def _optimize(
    params: list[Tensor],
    loss_fn: Callable[[Prompt], Tensor],
    plan: _Plan,
    *,
    n_losses: int,
    progress: bool,
    desc: str,
) -> tuple[np.ndarray, float]:
    """Adam on ``params`` for ``plan.steps`` steps; step ``t`` draws ``plan.draw(t)`` and minimizes
    ``loss_fn(prompt).sum()``, a vector of ``n_losses`` independent losses (one per model). Returns the losses,
    shape ``(steps, n_losses)``, and the seconds taken. The host syncs only every ``log_every`` steps, to show and
    check the loss."""
    steps, lr, log_every, dev, draw = plan.steps, plan.lr, plan.log_every, plan.dev, plan.draw
    factor = _schedule(plan.schedule, steps)
    if plan.graph:
        lr_now = torch.tensor(lr * factor(0), device=dev)
        step_fn = _GraphedStep(params, loss_fn, lr_now)
    else:
        optimizer = torch.optim.Adam(params, lr=lr, fused=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

        def step_fn(prompt: Prompt) -> Tensor:
            optimizer.zero_grad(set_to_none=True)
            losses = loss_fn(prompt)
            losses.sum().backward()
            optimizer.step()
            scheduler.step()
            return losses.detach()

    history = torch.empty(steps, n_losses, device=dev)
    start = time.perf_counter()
    bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0, leave=False)
    for step in bar:
        if plan.graph:
            lr_now.fill_(lr * factor(step))
        history[step] = step_fn(draw(step))
        if (step + 1) % log_every == 0 or step + 1 == steps:
            recent = history[step + 1 - (step % log_every + 1) : step + 1]
            _stop_if_not_finite(recent, first_step=step - step % log_every)
            if progress:
                bar.set_postfix(loss=f"{recent.mean().item():.3f}", refresh=False)
    bar.close()
    return history.cpu().numpy(), time.perf_counter() - start


def _stop_if_not_finite(losses: Tensor, first_step: int) -> None:
    """Raise if any loss in a block of recorded steps (the first being ``first_step``) is NaN or infinite."""
    finite = torch.isfinite(losses).all(dim=1)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0, 0])
        raise FloatingPointError(
            f"training loss became {losses[bad].tolist()} at step {first_step + bad}; lower lr or check the task"
        )


def train(
    model: nn.Module,
    task: TaskFamily,
    *,
    steps: int,
    batch_size: int,
    n_points: int,
    generator: torch.Generator,
    lr: float = 1e-4,
    schedule: str = "constant",
    curriculum: Curriculum | None = None,
    bf16: bool = False,
    cuda_graph: bool | None = None,
    log_every: int = 50,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train ``model`` in place on prompts from ``task`` and return the loss history.

    Each step draws ``batch_size`` fresh prompts of ``n_points`` points (the query included), or the curriculum's
    current size, on the generator's device (the model must live there too), and takes one Adam step on the mean
    squared error over all x positions (a model that returns ``(B, n+1)``, like the GPT) or at the query alone
    (a model that returns ``(B,)``, like the linear attention models of chapter 4). ``schedule`` is
    ``"constant"`` (Garg et al.) or ``"cosine"`` (a linear warm-up over the first 5% of steps, then cosine decay
    to zero), which reaches a lower loss in a short run.

    On CUDA the step is made fast (see the performance appendix): ``bf16`` runs the forward pass under bfloat16
    autocast and ``cuda_graph`` (default: on CUDA) captures forward, backward and a fused Adam step into a CUDA
    graph that is replayed every step. On the CPU ``bf16`` is ignored. The progress
    bar shows the loss every ``log_every`` steps; nothing else syncs with the host. A non-finite loss stops
    with an error that names the first bad step.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    plan = _plan([model], [task], steps=steps, batch_size=batch_size, n_points=n_points, generator=generator, lr=lr,
                 schedule=schedule, curriculum=curriculum, cuda_graph=cuda_graph, bf16=bf16, log_every=log_every)

    def loss_fn(prompt: Prompt) -> Tensor:
        with plan.forward_context():
            preds = model(prompt)
        return _mean_squared_error(preds, prompt)[None]

    model.train()
    try:
        losses, seconds = _optimize(list(model.parameters()), loss_fn, plan, n_losses=1,
                                    progress=progress, desc=desc)
    finally:
        model.eval()
    return TrainHistory(losses=losses[:, 0], seconds=seconds)


def train_ensemble(
    models: Sequence[nn.Module],
    task: TaskFamily | Sequence[TaskFamily],
    *,
    steps: int,
    batch_size: int,
    n_points: int,
    generator: torch.Generator,
    lr: float = 1e-4,
    schedule: str = "constant",
    curriculum: Curriculum | None = None,
    bf16: bool = False,
    cuda_graph: bool | None = None,
    log_every: int = 50,
    progress: bool = True,
    desc: str = "training ensemble",
) -> TrainHistory:
    """Train ``S`` models of one architecture (different seeds, say) at once, in place, as :func:`train` trains
    one: each model sees its own ``batch_size`` fresh prompts per step and takes its own Adam step. ``task`` is one
    task family for all of them, or a list of ``S`` (of one dimension): model ``s`` then trains on ``task[s]``
    (a sweep over task parameters, or one :class:`~icl_utils.tasks.pool.PromptPool` per model).

    The models' parameters are stacked along a new leading dimension and one forward pass runs all of them
    (``torch.func.vmap`` over ``torch.func.functional_call``); Adam acts elementwise, so Adam on the stacked
    tensors is exactly ``S`` independent Adams. On a GPU, where small models are limited by kernel launches
    rather than arithmetic, ``S`` models cost little more than one. ``bf16`` and ``cuda_graph`` act as in
    :func:`train`. Returns losses of shape ``(steps, S)``.
    """
    models = list(models) if isinstance(models, (list, tuple)) else models
    if not isinstance(models, list) or not models:
        raise TypeError("models must be a non-empty list or tuple of torch.nn.Module")
    tasks = list(task) if isinstance(task, (list, tuple)) else [task]
    plan = _plan(models, tasks, steps=steps, batch_size=batch_size, n_points=n_points, generator=generator, lr=lr,
                 schedule=schedule, curriculum=curriculum, cuda_graph=cuda_graph, bf16=bf16, log_every=log_every)
    names = [name for name, _ in models[0].named_parameters()]
    for i, model in enumerate(models[1:], start=1):
        if type(model) is not type(models[0]) or [n for n, _ in model.named_parameters()] != names or any(
            p.shape != q.shape for p, q in zip(model.parameters(), models[0].parameters())
        ):
            raise ValueError(f"model {i} differs in architecture from model 0; an ensemble needs one architecture")
    n_models = len(models)
    params, buffers = torch.func.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta").train()

    def one_model(p, b, x, y, xq, yq):
        prompt = Prompt(x=x, y=y, x_query=xq, y_query=yq)
        return _mean_squared_error(torch.func.functional_call(base, (p, b), (prompt,)), prompt)

    def loss_fn(prompt: Prompt) -> Tensor:
        split = [t.reshape(n_models, plan.batch_size, *t.shape[1:])
                 for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query)]
        # Attention as plain matrix products: vmap batches those natively, while the fused attention kernels
        # have no batching rule on the CPU and fail in the backward pass on CUDA (torch 2.11).
        with sdpa_kernel(SDPBackend.MATH), plan.forward_context():
            return torch.func.vmap(one_model)(params, buffers, *split)

    try:
        losses, seconds = _optimize(list(params.values()), loss_fn, plan, n_losses=n_models,
                                    progress=progress, desc=desc)
    finally:
        with torch.no_grad():
            for s, model in enumerate(models):
                for name, p in model.named_parameters():
                    p.copy_(params[name][s])
                model.eval()
    return TrainHistory(losses=losses, seconds=seconds)


@dataclass
class GDHistory:
    """What :func:`gradient_descent` recorded: the steps, and one array per recorded quantity (steps first)."""

    steps: np.ndarray
    records: dict[str, np.ndarray]


def gradient_descent(
    loss_fn: Callable[[Tensor], Tensor],
    init: Tensor,
    *,
    steps: int,
    lr: float | Tensor,
    record: Callable[[Tensor], dict[str, Tensor]] | None = None,
    record_every: int = 1,
    hook: Callable[[int, Tensor, float], None] | None = None,
    progress: bool = True,
    desc: str = "gradient descent",
) -> tuple[Tensor, GDHistory]:
    """Plain gradient descent ``theta <- theta - lr * grad loss_fn(theta)`` on a population objective.

    The analyses of chapters 2, 4 and 5 study exactly this algorithm (full-batch GD, or gradient flow as its
    small-step limit) on an exact or fixed-sample loss. ``record(theta)`` returns the quantities to keep, every
    ``record_every`` steps and at the end. ``hook(step, theta, loss)``, if given, runs after every step and may change
    ``theta`` in place (chapter 2's birth-death and perturbation). Returns the final parameters and the history.

    The losses stay on the device and are checked at each record: a NaN or infinite loss raises a
    ``FloatingPointError`` naming the first such step, without a host sync at every step (one per record, or per
    step when a ``hook`` needs the loss as a number).
    """
    if not callable(loss_fn):
        raise TypeError("loss_fn must be callable on the parameter tensor")
    if not isinstance(init, Tensor) or not init.is_floating_point():
        raise TypeError("init must be a floating-point tensor")
    steps = checks.positive_int("steps", steps)
    if isinstance(lr, Tensor):  # one step size per coordinate (chapter 2: particles and Gamma on two scales)
        if lr.shape != init.shape or not bool((lr > 0).all()) or not bool(torch.isfinite(lr).all()):
            raise ValueError(f"lr must be a positive number or a positive tensor of init's shape {tuple(init.shape)}")
        lr = lr.to(init.device, init.dtype)
    else:
        lr = checks.nonnegative_float("lr", lr, strict=True)
    record_every = checks.positive_int("record_every", record_every)
    if hook is not None and not callable(hook):
        raise TypeError("hook must be callable as hook(step, theta, loss)")

    def evaluate(theta: Tensor) -> Tensor:
        loss = loss_fn(theta)
        if not isinstance(loss, Tensor) or loss.ndim != 0:
            shape = f" of shape {tuple(loss.shape)}" if isinstance(loss, Tensor) else ""
            raise TypeError(f"loss_fn must return a scalar tensor, got a {type(loss).__name__}{shape}")
        return loss

    record = record if record is not None else (lambda theta: {"loss": evaluate(theta)})
    theta = init.detach().clone().requires_grad_(True)
    kept_steps, kept = [], {}
    losses = torch.empty(steps, 1, dtype=init.dtype, device=init.device)
    checked = 0

    def check_finite(upto: int) -> None:
        nonlocal checked
        _stop_if_not_finite(losses[checked:upto], first_step=checked)
        checked = upto

    def keep(step: int) -> None:
        check_finite(step)
        with torch.no_grad():
            for name, value in record(theta).items():
                kept.setdefault(name, []).append(value.detach().cpu().numpy().copy())
        kept_steps.append(step)

    for step in tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0, leave=False):
        if step % record_every == 0:
            keep(step)
        try:
            loss = evaluate(theta)
            (grad,) = torch.autograd.grad(loss, theta)
        except RuntimeError:  # e.g. a factorization that fails on parameters made non-finite by a diverged step
            check_finite(step)
            raise
        with torch.no_grad():
            losses[step] = loss.detach()
            theta -= lr * grad
            if hook is not None:
                value = loss.item()
                check_finite(step + 1)
                hook(step, theta, value)
    keep(steps)
    history = GDHistory(steps=np.asarray(kept_steps), records={k: np.stack(v) for k, v in kept.items()})
    return theta.detach(), history


def one_step_feature_update(
    model: nn.Module,
    task: TaskFamily,
    *,
    n_tasks: int,
    n: int,
    lr: float,
    weight_decay: float,
    generator: torch.Generator,
    chunk_size: int = 1024,
) -> None:
    """Stage 1 of Oko et al. (2024): one gradient step on the first-layer weights ``W`` of a
    :class:`~icl_utils.models.linear_attention.FeatureAttention`, in place,

        W <- W - lr * (grad_W (1/T1) sum_t (y_q,t - f(X_t, Y_t, x_q,t))^2 + weight_decay * W),

    over ``n_tasks`` fresh prompts of ``n`` examples (the gradient accumulated in chunks of prompts). With
    ``lr * weight_decay = 1`` the initial ``W`` cancels and the step keeps the gradient alone.
    """
    n_tasks = checks.positive_int("n_tasks", n_tasks)
    n = checks.positive_int("n", n)
    lr = checks.nonnegative_float("lr", lr, strict=True)
    weight_decay = checks.nonnegative_float("weight_decay", weight_decay)
    chunk_size = checks.positive_int("chunk_size", chunk_size)
    if not hasattr(model, "W"):
        raise TypeError("model must have first-layer weights W (a FeatureAttention)")
    grad = torch.zeros_like(model.W)
    for start in range(0, n_tasks, chunk_size):
        batch = min(chunk_size, n_tasks - start)
        prompt = task.sample(batch, n, generator)
        loss = (model(prompt) - prompt.y_query).square().sum() / n_tasks
        (g,) = torch.autograd.grad(loss, model.W)
        grad += g
    with torch.no_grad():
        model.W -= lr * (grad + weight_decay * model.W)


def _spd_solve(gram: Tensor, ridge: float, rhs: Tensor) -> Tensor:
    """``(gram + ridge I)^-1 rhs`` for a positive semi-definite ``gram``, by Cholesky in float64: on ``gram``'s device,
    and on the CPU if that factorization fails (it is the CPU's LAPACK that solved chapter 3's stage-2 system where
    CUDA's solvers gave up, on an H100 with torch 2.11)."""
    system = gram.detach().double()
    system = (system + system.T) / 2 + ridge * torch.eye(system.shape[0], dtype=system.dtype, device=system.device)
    for dev in dict.fromkeys([system.device, torch.device("cpu")]):
        factor, info = torch.linalg.cholesky_ex(system.to(dev))
        if int(info) == 0 and bool(torch.isfinite(factor).all()):
            solution = torch.cholesky_solve(rhs.detach().double().to(dev)[:, None], factor)[:, 0]
            return solution.to(rhs.device)
    raise ValueError(f"the ridge system is not numerically positive definite; raise lam (got {ridge:g} after scaling)")


def fit_attention_ridge(
    model: nn.Module,
    task: TaskFamily,
    *,
    n_tasks: int,
    n: int,
    lam: float,
    generator: torch.Generator,
) -> None:
    """Stage 2 of Oko et al. (2024): set ``Gamma`` of a feature-attention model, in place, to the ridge solution

        argmin_Gamma (1/T2) sum_t (y_q,t - a_t^T Gamma f_t)^2 + lam ||Gamma||_F^2,

    with ``a_t = (1/n) sum_i y_i f(x_i)`` and ``f_t = f(x_q,t)`` over ``n_tasks`` fresh prompts. The problem is
    ridge regression on the features ``vec(a_t f_t^T)``; it is solved in the primal (``m^2`` unknowns) or in the
    kernel form ``K = (A A^T) * (F F^T)``, whichever system is smaller, in float64.
    """
    n_tasks = checks.positive_int("n_tasks", n_tasks)
    n = checks.positive_int("n", n)
    lam = checks.nonnegative_float("lam", lam, strict=True)
    if not all(hasattr(model, a) for a in ("gamma", "context_summary", "features")):
        raise TypeError("model must be a FeatureAttention")
    prompt = task.sample(n_tasks, n, generator)
    with torch.no_grad():
        # The context's features (n_tasks x n x m values) are summarized a chunk of prompts at a time: chapter 3's
        # full mode would otherwise hold 16384 x 1024 x 128 of them (8.6 GB), twice.
        chunk = config.prompts_per_chunk(n * model.gamma.shape[0])
        a = torch.cat([model.context_summary(part) for part in prompt.split(chunk)]).double()
        f = model.features(prompt.x_query).double()
        y = prompt.y_query.double()
        m = a.shape[1]
        checks.warn_if_ill_conditioned("lam", lam, (a.square().sum(1) * f.square().sum(1)).mean())
        for name, t in (("the context summaries", a), ("the query features", f), ("the query labels", y)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} of the stage-2 prompts are not finite: check the model's weights")
        # A Gram matrix plus a ridge: symmetric positive definite, solved by Cholesky (see _spd_solve).
        if m * m <= n_tasks:
            phi = (a[:, :, None] * f[:, None, :]).reshape(n_tasks, m * m)
            system, rhs = phi.T @ phi / n_tasks, phi.T @ y / n_tasks
            gamma = _spd_solve(system, lam, rhs).reshape(m, m)
        else:
            alpha = _spd_solve((a @ a.T) * (f @ f.T), n_tasks * lam, y)
            gamma = (a * alpha[:, None]).T @ f
        model.gamma.copy_(gamma.to(model.gamma.dtype))
