"""Full-batch gradient descent on a population objective, the algorithm the analyses of chapters 3, 5 and 6 study.

The parameters are one tensor or a dict of named tensors (particles and ``Gamma``, say), each block with its own
step size, so that no caller flattens parameters into one vector by hand.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch
from jaxtyping import Real
from torch import Tensor

from icl_utils import checks
from icl_utils.checks import Count, Positive, Steps, checked, mapping_of
from icl_utils.config import progress_bar

# one step size, or one per block of the parameters
StepSizes = Positive | mapping_of(Positive, "numbers > 0 and finite", keys="block names")

Params = Tensor | dict[str, Tensor]
# what a history records: a numpy array (steps first) per name (a plain comment: autodoc would render the
# mapping type, whose collections.abc.Mapping has no target without intersphinx)
Records = mapping_of(np.ndarray, "numpy arrays", keys="record names", empty=True)


@checked
@dataclass
class GDHistory:
    """What :func:`gradient_descent` recorded: the steps, and one array per recorded quantity (steps first).
    ``runs`` is the number of independent runs descended together, whose axis follows the steps' in every record
    (``None`` for a single run)."""

    steps: Annotated[Real[np.ndarray, " T"], checks.Finite]
    records: Records
    runs: int | None = None

    def __post_init__(self):
        if len(self.steps) > 1 and not (np.diff(self.steps) > 0).all():
            raise ValueError("steps must increase: one record per step, in order")
        if bad := {k: v.shape for k, v in self.records.items() if v.ndim == 0 or len(v) != len(self.steps)}:
            raise ValueError(f"records must hold one row per step ({len(self.steps)} steps), got shapes {bad}")
        if self.runs is not None:
            self.runs = checks.positive_int("runs", self.runs)
            bad = {k: v.shape for k, v in self.records.items() if v.ndim < 2 or v.shape[1] != self.runs}
            if bad:
                raise ValueError(f"runs={self.runs} must be the length of every record's second axis, got {bad}")

    def run(self, index: int) -> GDHistory:
        """The history of run ``index`` of the runs descended together."""
        if self.runs is None:
            raise ValueError("this history holds a single run (runs=None): there is no run to select")
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        index = int(index)
        if not -self.runs <= index < self.runs:
            raise ValueError(f"index must select one of the {self.runs} runs, got {index}")
        return GDHistory(self.steps, {k: v[:, index] for k, v in self.records.items()})


def _blocks(init: object) -> dict[str, Tensor]:
    """The parameter blocks of ``init``, checked: one tensor (named ``""``) or a non-empty dict of tensors."""
    blocks = init if isinstance(init, Mapping) else {"": init}
    if not blocks:
        raise ValueError("init must be a tensor or a non-empty dict of tensors")
    for name, value in blocks.items():
        label = f"init[{name!r}]" if name else "init"
        if not isinstance(value, Tensor) or not value.is_floating_point():
            raise TypeError(f"{label} must be a floating-point tensor, got {type(value).__name__}")
        checks.finite(label, value.detach())
    if len({(t.device, t.dtype) for t in blocks.values()}) > 1:
        raise ValueError("the tensors of init must share one device and dtype")
    return dict(blocks)


def _step_sizes(lr: object, blocks: dict[str, Tensor]) -> dict[str, float]:
    """One positive step size per block: ``lr`` itself, or ``lr[name]`` when ``lr`` is a dict over the blocks."""
    if not isinstance(lr, Mapping):
        return dict.fromkeys(blocks, float(lr))
    if set(lr) != set(blocks):
        raise ValueError(f"lr must name the same blocks as init, {sorted(blocks)}, got {sorted(lr)}")
    return {name: float(lr[name]) for name in blocks}


def _recorded(name: str, value: object) -> np.ndarray:
    """A recorded quantity as a numpy array, or a TypeError naming ``record``."""
    try:
        return torch.as_tensor(value).detach().cpu().numpy().copy()
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"record must return a dict of tensors or numbers, got {name!r}: {value!r:.60}") from err


def _truth(value: object) -> bool:
    """``until``'s answer as a bool, or a TypeError naming ``until``: an array would be true or false by chance."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0):
        return bool(value)
    raise TypeError(f"until must return True or False, got {value!r:.80}")


@checked
def gradient_descent(
    loss_fn: Callable[[Params], Tensor],
    init: Params,
    *,
    steps: Steps,
    lr: StepSizes,
    record: Callable[[Params], dict[str, Tensor]] | None = None,
    record_every: Count = 1,
    hook: Callable[[int, Params, Tensor], None] | None = None,
    until: Callable[[dict[str, np.ndarray]], bool] | None = None,
    progress: bool = True,
    desc: str = "gradient descent",
) -> tuple[Params, GDHistory]:
    """Plain gradient descent ``theta <- theta - lr * grad loss_fn(theta)``, from ``init``.

    ``init`` is a tensor or a dict of named tensors; ``loss_fn``, ``record`` and ``hook`` receive the parameters in
    the same form, and ``lr`` is one step size or a dict of them, one per block. ``record(theta)`` returns the
    quantities to keep (default: the loss), every ``record_every`` steps and at the end. ``hook(step, theta,
    loss)``, if given, runs after every step with that step's loss (a tensor on the device) and may change
    ``theta`` in place (chapter 3's birth-death and perturbation). ``until(recorded)``, if given, sees every record
    (a dict of numpy arrays) and stops the descent
    at the first one where it returns True: the history then ends there. Returns the final parameters, in the form
    of ``init``, and the history.

    The losses stay on the device and are checked at each record: a NaN or infinite loss raises a
    ``FloatingPointError`` naming the first such step, without a host sync at every step (one per record).
    """
    blocks = _blocks(init)
    sizes = _step_sizes(lr, blocks)
    params = {name: t.detach().clone().requires_grad_(True) for name, t in blocks.items()}
    theta = params if isinstance(init, Mapping) else params[""]

    def evaluate() -> Tensor:
        loss = loss_fn(theta)
        if not isinstance(loss, Tensor) or loss.ndim != 0 or not loss.is_floating_point():
            shape = f" of shape {tuple(loss.shape)} and {loss.dtype}" if isinstance(loss, Tensor) else ""
            raise TypeError(f"loss_fn must return a real scalar tensor, got a {type(loss).__name__}{shape}")
        return loss

    records_loss = record is None  # then the final record is a loss too, and checked as one
    record = record if record is not None else (lambda _: {"loss": evaluate()})
    first = next(iter(params.values()))
    # the losses since the last record, all that its finite check reads: nothing up front for a long run
    losses = torch.empty(min(steps, record_every), dtype=first.dtype, device=first.device)
    kept_steps: list[int] = []
    kept: dict[str, list[np.ndarray]] = {}
    checked = 0

    def check_finite(upto: int) -> None:
        nonlocal checked
        checks.finite_losses(losses[: upto - checked], first_step=checked)
        checked = upto

    def check_parameters(step: int) -> None:
        """The step after the last recorded loss, which no loss shows."""
        bad = [name or "the parameters" for name in checks.nonfinite_names(params)]
        if bad:
            culprit = (
                "lower lr, check the task, or what hook does" if hook is not None else "lower lr or check the task"
            )
            raise checks.Diverged(f"{', '.join(bad)} became non-finite by step {step}; {culprit}")

    def overflowed(step: int, err: Exception) -> None:
        """A check inside loss_fn or record that refused an overflow after some steps: the run diverged, and the
        step size, not the starting point the check names, is to blame."""
        if step > 0 and isinstance(err, ValueError) and not isinstance(err, checks.Diverged) and "overflow" in str(err):
            raise checks.Diverged(
                f"the parameters grew until the loss overflowed by step {step} ({err}); lower lr"
            ) from err

    def keep(step: int) -> bool:
        """Record at ``step``; whether ``until`` says to stop there."""
        check_finite(step)
        check_parameters(step)
        with torch.no_grad():
            try:
                recorded = record(theta)
            except ValueError as err:
                overflowed(step, err)
                raise
            if not isinstance(recorded, Mapping):
                raise TypeError(f"record must return a dict of tensors, got {type(recorded).__name__}")
            values = {name: _recorded(name, value) for name, value in recorded.items()}
        if records_loss:
            checks.finite_losses(torch.as_tensor(values["loss"])[None], first_step=step)
        for name, value in values.items():
            if name in kept and kept[name][0].shape != value.shape:  # the history stacks them
                raise ValueError(
                    f"record must return quantities of fixed shapes; {name!r} had shape {kept[name][0].shape}, "
                    f"now {value.shape}"
                )
            kept.setdefault(name, []).append(value)
        kept_steps.append(step)
        return until is not None and _truth(until(values))

    stopped = False
    for step in progress_bar(range(steps), desc=desc, enabled=progress):
        if step % record_every == 0 and keep(step):
            stopped = True
            break
        try:
            loss = evaluate()
            grads = torch.autograd.grad(loss, list(params.values()))
        except (RuntimeError, ValueError) as err:  # a factorization or a check that fails on diverged parameters
            if "does not require grad" in str(err) or "not have been used in the graph" in str(err):
                raise ValueError(
                    f"loss_fn must depend on every block of init (each gets a gradient step), "
                    f"differentiably: {str(err).splitlines()[0]}"
                ) from err
            check_finite(step)
            check_parameters(step)
            overflowed(step, err)
            raise
        with torch.no_grad():
            losses[step - checked] = loss.detach()
            for (name, p), g in zip(params.items(), grads):
                p -= sizes[name] * g
            if hook is not None:  # the loss as a tensor: a hook that needs a number syncs when it needs one
                hook(step, theta, loss.detach())
    if not stopped:
        keep(steps)
    history = GDHistory(steps=np.asarray(kept_steps), records={k: np.stack(v) for k, v in kept.items()})
    final = {name: p.detach() for name, p in params.items()}
    return (final if isinstance(init, Mapping) else final[""]), history
