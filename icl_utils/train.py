"""One training loop for in-context learners: Adam on the squared error of a model on fresh prompts.

A :class:`TrainConfig` holds everything about a run but the model, the task and the random stream: steps, prompts
per step, their context length, the learning rate and its schedule, an optional :class:`Curriculum` (Garg et al.
2022) and the fast path on CUDA. :func:`train` trains one model, :func:`train_ensemble` many at once (one forward
pass, for a GPU),
:func:`train_parallel` many at once in CPU processes.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import inspect
import math
import multiprocessing
import numbers
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import torch
from beartype.vale import Is
from jaxtyping import Real
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from icl_utils import checks
from icl_utils.checks import Count, Finite, NonNegative, Positive, Seed, Size, Steps, Task, checked, sequence_of
from icl_utils.config import MAX_SCALE, make_generator, progress_bar
from icl_utils.exact import AttentionMoments, profiled_attention_risk
from icl_utils.models.base import fixed_sample
from icl_utils.models.feature_attention import AttentionOnFeatures
from icl_utils.models.linear_attention import GDPlusPlus
from icl_utils.prompts import Prompt, TaskFamily, unchecked_squared_errors

Models = sequence_of(nn.Module, "torch.nn.Modules", base=list | tuple)
Tasks = Task | sequence_of(Task, "task families", base=list | tuple)
Seeds = sequence_of(Seed, "ints in [0, 2^63)", base=Sequence | np.ndarray)


@checked
@dataclass(frozen=True)
class Curriculum:
    """Start with ``dims[0]`` active dimensions and ``n_context[0]`` examples per prompt; every ``every`` steps add
    ``dims_step`` dimensions and ``n_context_step`` examples, up to ``dims[1]`` and ``n_context[1]``.

    Garg et al.'s setting for d = 20 is ``Curriculum(dims=(5, 20), n_context=(10, 40), every=2000)``.
    """

    dims: tuple[Count, Count]
    n_context: tuple[Size, Size]
    every: Count
    dims_step: Size = 1
    n_context_step: Size = 2

    def __post_init__(self) -> None:
        for name in ("dims", "n_context"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ValueError(f"{name} must be (start, end) with start <= end, got {(lo, hi)}")
            if lo < hi and getattr(self, f"{name}_step") == 0:  # it would never grow to its end
                raise ValueError(f"{name}_step must be >= 1 to grow {name} from {lo} to {hi}, got 0")

    @checked
    def at(self, step: Size) -> tuple[int, int]:
        """``(active_dims, n_context)`` at training step ``step``."""
        stage = step // self.every
        return (
            min(self.dims[0] + stage * self.dims_step, self.dims[1]),
            min(self.n_context[0] + stage * self.n_context_step, self.n_context[1]),
        )


@checked
@dataclass(frozen=True)
class TrainConfig:
    """A training run: ``steps`` Adam steps, each on ``batch_size`` fresh prompts (per model) of ``n_context``
    examples, or the curriculum's current size.

    ``schedule`` is ``"constant"`` (Garg et al.) or ``"cosine"`` (a linear warm-up over the first 5% of steps, then
    cosine decay to zero), which reaches a lower loss in a short run. On CUDA the step is made fast (see the
    performance appendix): ``bf16`` runs the forward pass under bfloat16 autocast and ``cuda_graph`` (default: on
    CUDA) replays forward, backward and a fused Adam step as one CUDA graph; on the CPU ``bf16`` is ignored. The
    loss is shown and checked for NaN every ``log_every`` steps; nothing else syncs with the host.
    """

    steps: Steps
    batch_size: Count
    n_context: Size
    lr: Positive = 1e-4
    schedule: Literal["constant", "cosine"] = "constant"
    curriculum: Curriculum | None = None
    bf16: bool = False
    cuda_graph: bool | None = None
    log_every: Count = 50

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", float(self.lr))  # as the optimizer and a results file take it
        if self.curriculum is not None and self.curriculum.n_context[1] > self.n_context:
            raise ValueError(
                f"curriculum ends at {self.curriculum.n_context[1]} examples, more than n_context={self.n_context}"
            )

    def lr_factor(self, step: int) -> float:
        """The learning-rate multiplier at ``step``."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):  # not declared: called at every step
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.schedule == "constant":
            return 1.0
        warmup = max(1, self.steps // 20)
        return min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(step, self.steps) / self.steps)))


# per-step losses: one per step, or one per step and model trained together (a comment, not an autodoc member)
Losses = Annotated[
    Real[np.ndarray, " T *S"], Finite, checks.says(Is[lambda a: bool((a >= 0).all())], "mean squared errors, >= 0")
]


@checked
@dataclass
class TrainHistory:
    """Per-step training losses (mean squared error; shape ``(steps,)``, or ``(steps, S)`` for ``S`` models trained
    together) and the wall-clock time."""

    losses: Losses
    seconds: NonNegative

    @checked
    def smoothed(self, window: Count = 50) -> np.ndarray:
        """Moving average of the losses over ``window`` steps (shorter at the start), per model."""
        csum = np.cumsum(np.concatenate([np.zeros_like(self.losses[:1]), self.losses]), axis=0)
        idx = np.arange(1, len(self.losses) + 1)
        lo = np.maximum(idx - window, 0)
        span = (idx - lo).reshape((-1,) + (1,) * (self.losses.ndim - 1))
        return (csum[idx] - csum[lo]) / span


def _mean_squared_error(preds: Tensor, prompt: Prompt) -> Tensor:
    """The training loss: the mean of :func:`icl_utils.prompts.squared_errors` (over every point for a model that
    predicts every point, else at the query), the output taken in float32 (it is bfloat16 under autocast)."""
    return unchecked_squared_errors(preds.float(), prompt).mean()


@dataclass(frozen=True)
class _Plan:
    """A checked configuration with the device, the fast-path decisions and the prompt stream."""

    config: TrainConfig
    dev: torch.device
    graph: bool  # replay the step as a CUDA graph
    autocast: bool  # run the forward pass under bfloat16 autocast
    draw: Callable[[int], Prompt]  # step -> the prompts of that step, batch_size per model

    def forward_context(self):
        """Autocast to bfloat16 where asked for (its weight cache must be off inside a CUDA graph capture)."""
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast, cache_enabled=not self.graph)


def _plan(
    models: list[nn.Module],
    tasks: list[TaskFamily],
    config: TrainConfig,
    generator: torch.Generator,
    name: str = "model",
) -> _Plan:
    """Check what the two training functions share and build the prompt stream: step ``t`` draws ``batch_size``
    prompts per model, all from ``tasks[0]`` or, given one task per model, block ``s`` from ``tasks[s]``."""
    dev = generator.device
    if len(tasks) not in (1, len(models)):
        raise ValueError(f"task must be one task, or one per model ({len(models)}), not {len(tasks)}")
    if len({task.dim for task in tasks}) > 1:
        raise ValueError(f"the tasks must share one dimension, got {[task.dim for task in tasks]}")
    curriculum = config.curriculum
    if curriculum is not None and any("active_dims" not in inspect.signature(t.sample).parameters for t in tasks):
        raise ValueError("a curriculum needs a task whose sample takes active_dims (LinearRegression)")
    if curriculum is not None and curriculum.dims[1] > tasks[0].dim:  # else it fails only when training gets there
        raise ValueError(
            f"curriculum grows to {curriculum.dims[1]} dimensions, more than the task's dim={tasks[0].dim}"
        )
    for task in tasks:  # a pool of prompts holds one context length
        pool = getattr(task, "prompts", None)
        if isinstance(pool, Prompt) and pool.n_context != config.n_context:
            raise ValueError(
                f"config.n_context must be the pool's context length {pool.n_context} (task is a "
                f"pool of prompts), got {config.n_context}"
            )
    for i, model in enumerate(models):
        label = name if name == "model" else f"{name}[{i}]"  # the caller's argument: train's model, or models[i]
        param = next(model.parameters(), None)
        if param is None:
            raise ValueError(f"{label} must have parameters to train, but has none")
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError(f"{label} must have trainable parameters, but every one has requires_grad=False")
        if param.device.type != dev.type:
            raise ValueError(f"{label} is on {param.device} but the generator samples on {dev}; move one of them")
        bad = checks.nonfinite_names(dict(model.named_parameters()))
        if bad:
            raise ValueError(f"{label} must have finite parameters before training, got NaN or inf in {', '.join(bad)}")
        for task in tasks:  # before the first step, whose error would come from inside the model
            checks.task_fits(model, task)
    if config.cuda_graph and dev.type != "cuda":
        raise ValueError(f"cuda_graph=True needs a CUDA device, but the generator samples on {dev}")
    graph = dev.type == "cuda" if config.cuda_graph is None else config.cuda_graph
    batch = config.batch_size
    most = config.n_context if curriculum is None else max(curriculum.n_context)
    checks.allocation(
        "config.batch_size * models * (n_context + 1) * dim", batch * len(models) * (most + 1) * tasks[0].dim
    )

    def draw(step: int) -> Prompt:
        if curriculum is None:
            sizes, extra = config.n_context, {}
        else:
            dims, sizes = curriculum.at(step)
            extra = {"active_dims": dims}
        if len(tasks) == 1:
            return tasks[0].sample(batch * len(models), sizes, generator, **extra)
        return Prompt.cat([task.sample(batch, sizes, generator, **extra) for task in tasks])

    return _Plan(config, dev, graph, config.bf16 and dev.type == "cuda", draw)


def _finite_after(models: list[nn.Module], steps: int) -> None:
    """Raise a FloatingPointError if the last optimizer step left a parameter non-finite: the losses recorded
    before each step cannot show it."""
    for i, model in enumerate(models):
        bad = checks.nonfinite_names(dict(model.named_parameters()))
        if bad:
            label = "the model's" if len(models) == 1 else f"model {i}'s"
            raise checks.Diverged(
                f"{label} parameters became non-finite at the last of {steps} steps: "
                f"{', '.join(bad)}; lower lr or check the task"
            )


def _distinct(models: list[nn.Module]) -> list[nn.Module]:
    """``models``, refused when one module is listed twice: each run's weights are written back to its module, so
    the second would overwrite the first."""
    first: dict[int, int] = {}
    for i, model in enumerate(models):
        if (j := first.setdefault(id(model), i)) != i:
            raise ValueError(f"models must be distinct modules: models[{i}] is models[{j}] (make a copy)")
    return models


def _needs_gradient(loss: Tensor) -> None:
    """A ValueError naming the model when its loss does not depend on its parameters (autograd's own error says
    only that an element does not require grad); the steps run with gradients on, under ``torch.no_grad`` too."""
    if not loss.requires_grad:
        raise ValueError(
            "model must make predictions that depend on its parameters (each of models, in an ensemble): no gradient "
            "reaches them"
        )


def _step(optimizer: torch.optim.Optimizer, loss_fn: Callable[[Prompt], Tensor], prompt: Prompt) -> Tensor:
    """One optimizer step on ``loss_fn(prompt).sum()``, a vector of independent losses (one per model); returns
    the losses, detached."""
    optimizer.zero_grad(set_to_none=True)
    with torch.enable_grad():  # a call under torch.no_grad still trains
        losses = loss_fn(prompt)
        _needs_gradient(losses)
        losses.sum().backward()
    optimizer.step()
    return losses.detach()


class _GraphedStep:
    """:func:`_step` (forward, backward, fused Adam) captured into a CUDA graph and replayed.

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

    def __call__(self, prompt: Prompt) -> Tensor:
        shape = tuple(t.shape for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query))
        if shape != self.shape:
            self.graph, self.shape, self.eager_left = None, shape, self.warmup
        if self.eager_left > 0:
            self.eager_left -= 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = _step(self.optimizer, self.loss_fn, prompt)
            torch.cuda.current_stream().wait_stream(side)
            return out
        if self.graph is None:
            self.static = Prompt(*(t.clone() for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query)))
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                # _step keeps only the detached output, not the autograd graph behind it: a graph kept alive past
                # a recapture holds gradient-accumulation nodes on the old capture stream.
                self.static_losses = _step(self.optimizer, self.loss_fn, self.static)
        for buf, new in zip(
            (self.static.x, self.static.y, self.static.x_query, self.static.y_query),
            (prompt.x, prompt.y, prompt.x_query, prompt.y_query),
        ):
            buf.copy_(new)
        self.graph.replay()
        return self.static_losses.detach().clone()


def _optimize(
    params: list[Tensor], loss_fn: Callable[[Prompt], Tensor], plan: _Plan, *, n_losses: int, progress: bool, desc: str
) -> tuple[np.ndarray, float]:
    """Adam on ``params``; step ``t`` draws ``plan.draw(t)`` and takes :func:`_step` (replayed as a CUDA graph on
    the fast path). Returns the losses, shape ``(steps, n_losses)``, and the seconds taken. The host syncs only
    every ``log_every`` steps, to show and check the loss."""
    config = plan.config
    steps, lr, log_every = config.steps, config.lr, config.log_every
    if plan.graph:
        lr_now = torch.tensor(lr * config.lr_factor(0), device=plan.dev)
        graphed = _GraphedStep(params, loss_fn, lr_now)

        def step_fn(step: int, prompt: Prompt) -> Tensor:
            lr_now.fill_(lr * config.lr_factor(step))
            return graphed(prompt)
    else:
        optimizer = torch.optim.Adam(params, lr=lr, fused=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, config.lr_factor)

        def step_fn(step: int, prompt: Prompt) -> Tensor:
            losses = _step(optimizer, loss_fn, prompt)
            scheduler.step()
            return losses

    blocks: list[Tensor] = []  # log_every steps each, allocated as the run goes: nothing up front for a long run
    start = time.perf_counter()
    bar = progress_bar(range(steps), desc=desc, enabled=progress)
    prompts = _prompts(plan.draw, steps, ahead=plan.dev.type == "cpu")
    for step, prompt in zip(bar, prompts):
        row = step % log_every
        if row == 0:
            blocks.append(torch.empty(min(log_every, steps - step), n_losses, device=plan.dev))
        try:
            blocks[-1][row] = step_fn(step, prompt)
        except (TypeError, ValueError) as err:
            if step > 0 or isinstance(err, checks.Diverged):
                raise
            # Typically a model that does not read a Prompt, or that predicts another shape: say so, keep the message.
            raise type(err)(
                f"the first training step failed; the model must take a Prompt and return its "
                f"predictions, (B,) or (B, n+1): {err}"
            ) from err
        if row + 1 == len(blocks[-1]):
            _check_losses(blocks, first_step=step - row)
            if not bar.disable:
                bar.set_postfix(loss=f"{blocks[-1].mean().item():.3f}", refresh=False)
    bar.close()
    return torch.cat(blocks).cpu().numpy(), time.perf_counter() - start


def _prompts(draw: Callable[[int], Prompt], steps: int, ahead: bool) -> Iterator[Prompt]:
    """``draw(0), ..., draw(steps - 1)``; with ``ahead``, each drawn on a second thread while the step before it
    runs. The draws are the same, in the same order, so the prompts and the generator's final state are too: on a
    CPU, sampling (serial in torch) then overlaps the step (chapter 5's LTBs spend a third of a step sampling). Not
    on CUDA, where sampling is asynchronous already and work from a second thread would break a graph capture."""
    if not ahead:
        yield from map(draw, range(steps))
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        # each draw in a copy of the caller's context, so that its settings (checks.nonfinite_allowed) hold there
        pending = pool.submit(contextvars.copy_context().run, draw, 0)
        for step in range(steps):
            prompt = pending.result()
            if step + 1 < steps:  # never a draw past the last step: the generator ends where it would
                pending = pool.submit(contextvars.copy_context().run, draw, step + 1)
            yield prompt


#: A model whose mean loss over ``log_every`` steps grows this many times over its first step's has diverged, even
#: while its loss stays finite (an LTB at lr 10 goes from 0.5 to 1e11-1e15 within 20 steps): no training run grows its
#: loss by such a factor, so the separator is fixed here, not measured.
DIVERGED = 1e6


def _check_losses(blocks: list[Tensor], first_step: int) -> None:
    """A FloatingPointError if the last block of losses holds a NaN or an infinity, or its mean has grown
    :data:`DIVERGED` times over the first step's loss (per model)."""
    checks.finite_losses(blocks[-1], first_step=first_step)
    first, last = blocks[0][0], blocks[-1].mean(0)
    grown = (last > DIVERGED * first) & (first > 0)
    if bool(grown.any()):
        model = int(grown.nonzero()[0, 0])
        raise checks.Diverged(
            f"training loss grew from {first[model].item():.3g} at step 0 to a mean of {last[model].item():.3g} "
            f"over steps {first_step}-{first_step + len(blocks[-1]) - 1}"
            + (f" in model {model}" if len(first) > 1 else "")
            + "; lower lr"
        )


@checked
def train(
    model: nn.Module,
    task: Task,
    config: TrainConfig,
    *,
    generator: torch.Generator,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train ``model`` in place on fresh prompts from ``task`` as ``config`` says, and return the loss history.

    The prompts are drawn with ``generator``, on its device (the model must live there too). The loss is the mean
    squared error over every point for a model that predicts every point (the GPT, shape ``(B, n+1)``), at the
    query for one that predicts the query (shape ``(B,)``). A non-finite loss stops with an error that names the
    first bad step. The model is left in eval mode.
    """
    plan = _plan([model], [task], config, generator)

    def loss_fn(prompt: Prompt) -> Tensor:
        with plan.forward_context():
            preds = model(prompt)
        return _mean_squared_error(preds, prompt)[None]

    model.train()
    try:
        losses, seconds = _optimize(list(model.parameters()), loss_fn, plan, n_losses=1, progress=progress, desc=desc)
    finally:
        model.eval()
    _finite_after([model], config.steps)
    return TrainHistory(losses=losses[:, 0], seconds=seconds)


#: Forward-pass floating-point operations of one model on one step's prompts above which :func:`train_ensemble`
#: trains a CPU ensemble's models separately rather than in one batched pass. Measured on a 2-core CPU (8 models,
#: as the book trains them): the LSA and LTB of chapter 5 (0.5 MFLOP) ran batched in 2.4-3.3x the time of one;
#: the MLP with attention (27 MFLOP) and the GPTs (57-470 MFLOP) took 4.5-14x, more than separate runs on two
#: cores, as their batched activations no longer fit the cores' caches. Any threshold between the two groups
#: splits them the same way; the choice depends on the model and the configuration only, never on the machine.
BATCHED_FLOPS = 4e6


@checked
def batched_by_default(model: nn.Module, task: Task, config: TrainConfig) -> bool:
    """Whether :func:`train_ensemble` runs an ensemble of ``model``'s architecture as one batched pass by default:
    always on a GPU; on a CPU when the matrix products of one forward pass on ``batch_size`` prompts of
    ``n_context`` examples (a curriculum's largest) cost at most :data:`BATCHED_FLOPS` (counted on prompts of
    zeros: the task is not sampled)."""
    param = next(model.parameters(), None)
    if param is None:
        raise ValueError("model must have parameters to train, got none")
    checks.task_fits(model, task)
    if param.device.type != "cpu":
        return True
    batch, n, zeros = config.batch_size, config.n_context, functools.partial(torch.zeros, dtype=param.dtype)
    probe = Prompt(zeros(batch, n, task.dim), zeros(batch, n), zeros(batch, task.dim), zeros(batch))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        checks.predictions_of(model, probe, "model")
    return counter.get_total_flops() <= BATCHED_FLOPS


@checked
def train_ensemble(
    models: Models,
    task: Tasks,
    config: TrainConfig,
    *,
    generator: torch.Generator,
    batched: bool | None = None,
    workers: Count | None = None,
    progress: bool = True,
    desc: str = "training ensemble",
) -> TrainHistory:
    """Train ``S`` models of one architecture (different seeds, say) at once, in place, as :func:`train` trains
    one: each model sees its own ``batch_size`` fresh prompts per step and takes its own Adam step. ``task`` is one
    task family for all of them, or a list of ``S`` (of one dimension): model ``s`` then trains on ``task[s]``
    (a sweep over task parameters, or one :class:`~icl_utils.tasks.pool.PromptPool` per model).

    ``batched=True`` stacks the models' parameters along a new leading dimension and runs all of them in one
    forward pass (``torch.func.vmap`` over ``torch.func.functional_call``): step ``t`` draws the prompts of all
    ``S`` models from ``generator``, model ``s`` trains on block ``s`` of them, and Adam on the stacked tensors is
    exactly ``S`` independent Adams, since Adam acts elementwise. ``batched=False`` is :func:`train_parallel` with
    ``S`` seeds drawn from ``generator``: each model trains alone, on one thread, on prompts from its own seed, in
    up to ``workers`` forked processes (default: the cores, at most ``S``). The default
    (:func:`batched_by_default`) batches on a GPU, where small models are limited by kernel launches rather than
    arithmetic, and on a CPU when one model's forward pass costs at most :data:`BATCHED_FLOPS`. Returns losses of
    shape ``(steps, S)``.
    """
    models, tasks = _distinct(list(models)), list(task) if isinstance(task, (list, tuple)) else [task]
    plan = _plan(models, tasks, config, generator, name="models")
    for i, model in enumerate(models[1:], start=1):
        if _architecture(model) != _architecture(models[0]):
            raise ValueError(f"models[{i}] differs in architecture from models[0]; an ensemble needs one architecture")
    if batched is None:
        batched = batched_by_default(models[0], tasks[0], config)
    if not batched:
        if plan.dev.type != "cpu":
            raise ValueError(f"batched=False trains on the CPU; the generator samples on {plan.dev}")
        return _train_separately(models, tasks, config, generator, workers, progress, desc)
    n_models = len(models)
    for model in models:  # stack_module_state wants one mode for all (a model trained before is in eval mode)
        model.train()
    params, buffers = torch.func.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta").train()

    def one_model(p, b, x, y, xq, yq):
        prompt = Prompt(x=x, y=y, x_query=xq, y_query=yq)
        return _mean_squared_error(torch.func.functional_call(base, (p, b), (prompt,)), prompt)

    def loss_fn(prompt: Prompt) -> Tensor:
        split = [
            t.reshape(n_models, config.batch_size, *t.shape[1:])
            for t in (prompt.x, prompt.y, prompt.x_query, prompt.y_query)
        ]
        # Attention as plain matrix products: vmap batches those natively, while the fused attention kernels
        # have no batching rule on the CPU and fail in the backward pass on CUDA.
        with sdpa_kernel(SDPBackend.MATH), plan.forward_context():
            return torch.func.vmap(one_model)(params, buffers, *split)

    try:
        losses, seconds = _optimize(
            list(params.values()), loss_fn, plan, n_losses=n_models, progress=progress, desc=desc
        )
    finally:
        with torch.no_grad():
            for s, model in enumerate(models):
                for name, p in model.named_parameters():
                    p.copy_(params[name][s])
                model.eval()
    _finite_after(models, config.steps)
    return TrainHistory(losses=losses, seconds=seconds)


def _train_separately(
    models: list[nn.Module],
    tasks: list[TaskFamily],
    config: TrainConfig,
    generator: torch.Generator,
    workers: int | None,
    progress: bool,
    desc: str,
) -> TrainHistory:
    """:func:`train_ensemble` with ``batched=False``: :func:`train_parallel` with seeds drawn from ``generator``."""
    start = time.perf_counter()
    seeds = torch.randint(0, 2**62, (len(models),), generator=generator).tolist()
    tasks = tasks * len(models) if len(tasks) == 1 else tasks
    histories = train_parallel(models, tasks, config, seeds=seeds, workers=workers, progress=progress, desc=desc)
    return TrainHistory(losses=np.stack([h.losses for h in histories], 1), seconds=time.perf_counter() - start)


def _train_one_thread(model: nn.Module, task: TaskFamily, config: TrainConfig, seed: int) -> tuple[dict, TrainHistory]:
    """One run of :func:`train_parallel`, on one thread, with prompts from its own seed (a worker's entry point)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        device = next(model.parameters()).device
        history = train(model, task, config, generator=make_generator(seed, device), progress=False)
    finally:
        torch.set_num_threads(threads)
    return model.state_dict(), history


_SETTING = (bool, int, float, str, tuple, type(None))


def _architecture(model: nn.Module) -> tuple:
    """What the models of one ensemble must share, which :func:`train_ensemble` runs as copies of its first model:
    the type, the parameters' names and shapes, and every submodule's plain settings (a GPT's query that does not
    see itself is an attribute of its attention, not a parameter)."""
    settings = tuple(
        (name, key, repr(value))
        for name, module in model.named_modules()
        for key, value in vars(module).items()
        if not key.startswith("_")
        and key != "training"
        and (isinstance(value, _SETTING) or (dataclasses.is_dataclass(value) and not isinstance(value, type)))
    )
    return type(model), tuple((n, tuple(p.shape)) for n, p in model.named_parameters()), settings


def _train_groups(
    models: list[nn.Module], tasks: list[TaskFamily], config: TrainConfig, seeds: list[int], progress: bool, desc: str
) -> list[TrainHistory]:
    """:func:`train_parallel` on a GPU: the models of each architecture train as one :func:`train_ensemble`, with
    prompts from a generator seeded by the group's first seed (a GPU runs one batched pass as fast as one model)."""
    groups: dict[tuple, list[int]] = {}
    for i, model in enumerate(models):
        key = (_architecture(model), next(model.parameters()).device)
        groups.setdefault(key, []).append(i)
    histories: dict[int, TrainHistory] = {}
    for group in groups.values():
        generator = make_generator(seeds[group[0]], next(models[group[0]].parameters()).device)
        hist = train_ensemble(
            [models[i] for i in group],
            [tasks[i] for i in group],
            config,
            generator=generator,
            progress=progress,
            desc=desc,
        )
        for j, i in enumerate(group):
            histories[i] = TrainHistory(losses=hist.losses[:, j], seconds=hist.seconds)
    return [histories[i] for i in range(len(models))]


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parallel_runs() -> int:
    """How many runs :func:`train_parallel` trains at once on the CPU, one per process, when given as many runs as
    cores: one per core where it can fork worker processes, else 1. A notebook that splits its runs over cells puts
    this many in each."""
    return _workers(None, _cores())


def _workers(requested: int | None, jobs: int) -> int:
    """Processes for ``jobs`` runs on the CPU: ``requested``; by default the cores (at most ``jobs``), or every
    job at once when the cores do not divide them and there are at most two per core: the system then shares the
    cores among them, where rounds of one job per core leave cores idle in the last round (chapter 4's three GPTs
    on 2 cores: 41 s against 47 s); 1 where ``fork`` is missing or CUDA is present (autograd's engine keeps a
    thread per device once a backward pass has run, and a forked worker then fails inside torch)."""
    if "fork" not in multiprocessing.get_all_start_methods() or torch.cuda.is_available():
        return 1
    if requested is not None:
        return requested
    cores = _cores()
    return jobs if jobs % cores and jobs <= 2 * cores else min(cores, jobs)


def _run_jobs(job: Callable, jobs: list[tuple], workers: int, desc: str, progress: bool) -> list:
    """``[job(*args) for args in jobs]``, in ``workers`` forked processes (1: here, one after another), with a bar
    counting the finished jobs."""
    bar = progress_bar(range(len(jobs)), desc=desc, enabled=progress)
    results: dict[int, object] = {}
    if workers == 1:
        for i, args in enumerate(jobs):
            results[i] = job(*args)
            bar.update(1)
    else:
        # fork, as PyTorch's DataLoader does (its workers too run on one thread): spawn would re-run a script's
        # main module in every worker
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = {pool.submit(job, *args): i for i, args in enumerate(jobs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update(1)
        except BaseException:
            # an interrupt or a failed run stops the others now, not after they finish
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    bar.close()
    return [results[i] for i in range(len(jobs))]


@checked
def train_parallel(
    models: Models,
    task: Tasks,
    config: TrainConfig,
    *,
    seeds: Seeds,
    workers: Count | None = None,
    progress: bool = True,
    desc: str = "training",
) -> list[TrainHistory]:
    """Train ``S`` models as :func:`train` trains one, on the CPU each in its own process on one thread, and
    return their histories; the models are updated in place and left in eval mode.

    Why: a small model does not keep two cores busy (chapter 1's GPT takes as long per step on one thread as on
    two), and batching GPTs on the CPU costs more than it saves (:data:`BATCHED_FLOPS`), so on ``P`` cores ``S``
    runs take about ``S / P`` the time of one after another. Model ``i`` trains on ``task`` (or ``task[i]``)
    with prompts from a generator seeded ``seeds[i]`` and on one thread wherever it runs, so its result does not
    depend on ``workers`` (default: one per core, or all ``S`` at once when the cores do not divide them and
    there are at most two per core, so that no core idles in a last round; 1 trains here, one after another, as
    on a system without ``fork`` or with CUDA, whose autograd threads a fork cannot copy). On a GPU the models of each
    architecture train together, as one :func:`train_ensemble` whose prompts come from the group's first seed.
    """
    models = _distinct(list(models))
    tasks = list(task) if isinstance(task, (list, tuple)) else [task] * len(models)
    if len(tasks) != len(models):
        raise ValueError(f"task must be one task, or one per model ({len(models)}), not {len(tasks)}")
    seeds = [int(s) for s in seeds]
    if len(seeds) != len(models):
        raise ValueError(f"seeds must hold one seed per model ({len(models)}), got {len(seeds)}")
    for i, model in enumerate(models):
        if next(model.parameters(), None) is None:
            raise ValueError(f"models[{i}] has no parameters to train")
        if next(model.parameters()).device.type == "meta":
            raise ValueError(f"models[{i}] is on the meta device: it holds no values to train")
    if not all(p.device.type == "cpu" for model in models for p in model.parameters()):
        return _train_groups(models, tasks, config, seeds, progress, desc)
    jobs = [(models[i], tasks[i], config, seeds[i]) for i in range(len(models))]
    results = _run_jobs(_train_one_thread, jobs, _workers(workers, len(models)), desc, progress)
    for model, (weights, _) in zip(models, results):
        model.load_state_dict(weights)
        model.eval()
    return [history for _, history in results]


@dataclass(frozen=True)
class FitResult:
    """The end of a :func:`fit_lbfgs` run: the sample's mean squared error, the iterations taken and the gradient's
    largest entry (small, not zero, at convergence in float32)."""

    loss: float
    iterations: int
    grad_max: float


@checked
def fit_lbfgs(model: nn.Module, prompt: Prompt, *, max_iter: Steps = 500, tol: Positive = 1e-9) -> FitResult:
    """Fit ``model`` in place to one fixed sample of prompts by full-batch L-BFGS with a strong-Wolfe line search,
    until the gradient's largest entry or the change of the loss falls below ``tol``, or ``max_iter`` iterations
    (in float32 it is usually the change of the loss, with gradient entries near 1e-3 of a loss of order one).

    For models of few parameters and a smooth loss (GD++, GD-beta, linear attention): where Adam on fresh prompts
    stops at its budget, this reaches an optimum of the sample's mean squared query error, so a comparison between
    estimators is not one between training budgets. The sample's size sets how far that optimum is from the
    population's. The model is left in eval mode.
    """
    prompt = checks.prompt(prompt)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters to fit")
    if bad := checks.nonfinite_names(dict(model.named_parameters())):
        raise ValueError(f"model's parameters must be finite before the fit, but {', '.join(bad)} are not")
    if any(not checks.same_device(p.device, prompt.x.device) for p in params):
        raise ValueError(f"prompt is on {prompt.x.device} but the model's parameters are not")
    optimizer = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tol,
        tolerance_change=tol,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    @torch.enable_grad()  # a call under torch.no_grad still fits
    def closure() -> Tensor:
        optimizer.zero_grad()
        preds = checks.predictions_of(model, prompt, "model")
        try:
            loss = _mean_squared_error(preds, prompt)
        except (TypeError, ValueError) as err:  # predictions of another shape or kind
            raise type(err)(f"model returned bad predictions: {err}") from None
        _needs_gradient(loss)
        loss.backward()
        return loss

    model.train()
    try:
        with fixed_sample(prompt):  # the sample does not change during the fit (GD++ keeps its moments)
            optimizer.step(closure)
            loss = closure()
    finally:
        model.eval()
    checks.finite_losses(loss.detach()[None, None], first_step=0)
    _finite_after([model], max_iter)
    # a parameter the output does not depend on (GD++'s gamma with one step) has no gradient
    grad_max = max((p.grad.abs().max().item() for p in params if p.grad is not None), default=0.0)
    return FitResult(loss=loss.item(), iterations=optimizer.state[params[0]].get("n_iter", 0), grad_max=grad_max)


@checked
def fit_gd_plus_plus_curvature(task: Task, n: Count, n_prompts: Count, seed: Seed) -> tuple[float, float]:
    """``(eta, gamma)`` of von Oswald et al.'s recurrent two-step GD++ (one scalar step and one curvature shared by
    both layers) fitted by :func:`fit_lbfgs` to ``n_prompts`` prompts of ``n`` examples drawn from ``task`` with a
    CPU generator seeded ``seed``. The fit starts at the step ``0.5 / Var x_1``: the same start in the inputs' units,
    so that inputs of another scale land on the same optimum, rescaled."""
    checks.allocation("n_prompts * (n + 1) * task.dim", n_prompts * (n + 1) * task.dim)
    input_cov = getattr(task, "input_cov", None)
    if not callable(input_cov):
        raise TypeError(f"task must give its input covariance (input_cov()), got {type(task).__name__}")
    var = input_cov()[0, 0].item()
    least = 0.5 / MAX_SCALE  # the start 0.5 / Var x_1 needs a first input that varies, and a step within scale
    if not var >= least:
        raise ValueError(f"task must give its first input a variance of at least {least:g}, got {var}")
    model = GDPlusPlus(task.dim, steps=2, matrix_step=False, lr=0.5 / var)
    fit_lbfgs(model, task.sample(n_prompts, n, make_generator(seed, "cpu")))
    return model.step.item(), model.gamma.item()


@checked
def fit_features_exact(
    model: AttentionOnFeatures, task: object, n: Count, *, max_iter: Steps = 200, points: Count | None = None
) -> float:
    """Pretrain the feature map of linear attention on infinitely many tasks, exactly: full-batch L-BFGS (strong-Wolfe
    line search, at most ``max_iter`` iterations) on the parameters of ``model.features`` against the ICL risk at
    ``n`` examples with the best ``Gamma`` for the current features (:func:`~icl_utils.exact.profiled_attention_risk`,
    expectations by quadrature on ``points`` nodes), then ``Gamma`` set to that best one. No prompt is sampled, so
    the loss has no Monte Carlo noise, and a deterministic loss lets L-BFGS take far fewer steps than Adam. Returns the
    ICL risk at ``n`` of the trained features with that ``Gamma``."""
    params = [p for name, p in model.named_parameters() if name != "gamma" and p.requires_grad]
    if not params:
        raise ValueError("model has no feature parameters to train")
    optimizer = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        history_size=50,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
    )

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = profiled_attention_risk(model.features, task, n, points=points)
        loss.backward()
        return loss

    model.train()
    try:
        optimizer.step(closure)
    finally:
        model.eval()
    _finite_after([model], max_iter)
    with torch.no_grad():
        moments = AttentionMoments.of(model.features, task, points=points)
        best = moments.gamma(n)
        model.gamma.copy_(best.to(model.gamma.dtype))
        return moments.risk(n, best).item()
