"""One training loop for in-context learners: Adam on the squared error at every x position of a prompt.

The task family supplies prompts (``task.sample(batch, n, generator, active_dims)``) on the generator's device;
an optional :class:`Curriculum` grows the active dimension and the prompt length as in Garg et al. (2022).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from icl_utils import checks
from icl_utils.prompts import Prompt


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
    """Per-step training losses (mean squared error over the x positions) and the wall-clock time."""

    losses: np.ndarray
    seconds: float

    def smoothed(self, window: int = 50) -> np.ndarray:
        """Moving average of the losses over ``window`` steps (shorter at the start)."""
        window = checks.positive_int("window", window)
        csum = np.cumsum(np.insert(self.losses, 0, 0.0))
        idx = np.arange(1, len(self.losses) + 1)
        lo = np.maximum(idx - window, 0)
        return (csum[idx] - csum[lo]) / (idx - lo)


def _schedule(name: str, steps: int):
    """The learning-rate multiplier at each step, for ``LambdaLR``."""
    if name == "constant":
        return lambda step: 1.0
    warmup = max(1, steps // 20)
    return lambda step: min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))


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
    log_every: int = 50,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train ``model`` in place on prompts from ``task`` and return the loss history.

    Each step draws ``batch_size`` fresh prompts of ``n_points`` points (the query included), or the curriculum's
    current size, on the generator's device (the model must live there too), and takes one Adam step on the mean
    squared error over all x positions (a model that returns ``(B, n+1)``, like the GPT) or at the query alone
    (a model that returns ``(B,)``, like the linear attention models of chapter 4). ``schedule`` is ``"constant"`` (Garg et al.) or ``"cosine"`` (a linear
    warm-up over the first 5% of steps, then cosine decay to zero), which reaches a lower loss in a short run. ``bf16`` runs the forward pass under bfloat16 autocast on CUDA (ignored on
    the CPU). The progress bar shows the loss every ``log_every`` steps; nothing else syncs with the host.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    steps = checks.positive_int("steps", steps)
    batch_size = checks.positive_int("batch_size", batch_size)
    n_points = checks.positive_int("n_points", n_points)
    lr = checks.nonnegative_float("lr", lr, strict=True)
    log_every = checks.positive_int("log_every", log_every)
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    dev = generator.device
    param_dev = next(model.parameters()).device
    if param_dev.type != dev.type:
        raise ValueError(f"model is on {param_dev} but the generator samples on {dev}; move one of them")
    if curriculum is not None and curriculum.points[1] > n_points:
        raise ValueError(f"curriculum ends at {curriculum.points[1]} points, more than n_points={n_points}")
    use_bf16 = bf16 and dev.type == "cuda"

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(schedule, steps))
    model.train()
    losses = torch.empty(steps, device=dev)
    start = time.perf_counter()
    bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0, leave=False)
    for step in bar:
        dims, points = curriculum.at(step) if curriculum is not None else (None, n_points)
        prompt = task.sample(batch_size, points - 1, generator, active_dims=dims)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_bf16):
            preds = model(prompt)
        targets = prompt.points()[1] if preds.ndim == 2 else prompt.y_query
        loss = (preds.float() - targets).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses[step] = loss.detach()
        if progress and (step + 1) % log_every == 0:
            bar.set_postfix(loss=f"{losses[step - log_every + 1 : step + 1].mean().item():.3f}", refresh=False)
    bar.close()
    model.eval()
    history = losses.cpu().numpy()
    if not np.isfinite(history).all():
        bad = int(np.flatnonzero(~np.isfinite(history))[0])
        raise FloatingPointError(f"training loss became {history[bad]} at step {bad}; lower lr or check the task")
    return TrainHistory(losses=history, seconds=time.perf_counter() - start)


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
    lr: float,
    record: Callable[[Tensor], dict[str, Tensor]] | None = None,
    record_every: int = 1,
    progress: bool = True,
    desc: str = "gradient descent",
) -> tuple[Tensor, GDHistory]:
    """Plain gradient descent ``theta <- theta - lr * grad loss_fn(theta)`` on a population objective.

    The analyses of chapters 2, 4 and 5 study exactly this algorithm (full-batch GD, or gradient flow as its
    small-step limit) on an exact or fixed-sample loss. ``record(theta)`` returns the quantities to keep, every
    ``record_every`` steps and at the end. Returns the final parameters and the history.
    """
    if not callable(loss_fn):
        raise TypeError("loss_fn must be callable on the parameter tensor")
    if not isinstance(init, Tensor) or not init.is_floating_point():
        raise TypeError("init must be a floating-point tensor")
    steps = checks.positive_int("steps", steps)
    lr = checks.nonnegative_float("lr", lr, strict=True)
    record_every = checks.positive_int("record_every", record_every)
    record = record if record is not None else (lambda theta: {"loss": loss_fn(theta)})
    theta = init.detach().clone().requires_grad_(True)
    kept_steps, kept = [], {}

    def keep(step: int) -> None:
        with torch.no_grad():
            for name, value in record(theta).items():
                kept.setdefault(name, []).append(value.detach().cpu().numpy().copy())
        kept_steps.append(step)

    for step in tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0, leave=False):
        if step % record_every == 0:
            keep(step)
        loss = loss_fn(theta)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}; lower lr")
        (grad,) = torch.autograd.grad(loss, theta)
        with torch.no_grad():
            theta -= lr * grad
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
        a = model.context_summary(prompt).double()
        f = model.features(prompt.x_query).double()
        y = prompt.y_query.double()
        m = a.shape[1]
        if m * m <= n_tasks:
            phi = (a[:, :, None] * f[:, None, :]).reshape(n_tasks, m * m)
            gram = phi.T @ phi / n_tasks + lam * torch.eye(m * m, dtype=phi.dtype, device=phi.device)
            gamma = torch.linalg.solve(gram, phi.T @ y / n_tasks).reshape(m, m)
        else:
            kernel = (a @ a.T) * (f @ f.T) + n_tasks * lam * torch.eye(n_tasks, dtype=a.dtype, device=a.device)
            alpha = torch.linalg.solve(kernel, y)
            gamma = (a * alpha[:, None]).T @ f
        model.gamma.copy_(gamma.to(model.gamma.dtype))
