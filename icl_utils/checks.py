"""Argument checks shared by the package: each raises a ValueError or TypeError that names the argument.

Public functions check their arguments once, on entry; internal code trusts them. Most checks are declared in the
signatures with the types of :mod:`icl_utils.declared` (re-exported here) and run by
:func:`~icl_utils.declared.checked`; what no annotation says (a prompt's values finite, a matrix positive
semi-definite) is checked by the helpers below."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import numpy as np
import torch
from beartype.vale import Is
from torch import Tensor

from icl_utils import config
from icl_utils.declared import (  # noqa: F401  re-exported: the package declares its checks from here
    _CHECK_VALUES,
    Columns,
    Count,
    Counts,
    Depth,
    Distribution,
    DrawCounts,
    Draws,
    Finite,
    FloatDtype,
    Fraction,
    Integer,
    NonEmpty,
    NonNegative,
    Offset,
    Pair,
    Positive,
    Positives,
    PositiveScale,
    PositiveVariance,
    Probability,
    Rate,
    Real,
    Reals,
    Reps,
    Rows,
    Samples,
    Scale,
    Seed,
    Series,
    Several,
    Size,
    Steps,
    SumsToOne,
    Variance,
    Width,
    WithinScale,
    checked,
    declare,
    describe,
    finite_flag,
    finite_result,
    mapping_of,
    refusal,
    same_dtype,
    says,
    sequence_of,
    takes,
    values_checked,
)
from icl_utils.prompts import Prompt, TaskFamily

#: a task family (``dim`` and ``sample(batch, n, generator)``) whose ``dim`` is an int
Task = Annotated[TaskFamily, Is[lambda t: isinstance(t.dim, numbers.Integral) and not isinstance(t.dim, bool)]]
describe(Task, "a task family (dim and sample(batch, n, generator))", "a task family whose dim is an int")


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(minimum, bool) or not isinstance(minimum, numbers.Integral):
        raise TypeError(f"minimum must be an int, got {type(minimum).__name__}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def as_float64(name: str, value: object) -> Tensor:
    """``value`` (a tensor, array or nested list of real numbers) as a float64 tensor, or a TypeError naming it; a
    complex value is refused, not cut to its real part."""
    try:
        t = value if isinstance(value, Tensor) else torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a tensor of numbers, got {type(value).__name__}") from err
    if t.is_complex():
        raise TypeError(f"{name} must hold real numbers, got {t.dtype}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, but is on the meta device")
    return t.double()


def real_array(name: str, value: object) -> np.ndarray:
    """``value`` (a number, a sequence or an array of them, a tensor: one that requires a gradient or sits on a GPU
    too) as a float array, or a TypeError naming ``name``: text, which numpy would parse ("4" as 4.0), booleans and
    complex numbers are refused."""
    if isinstance(value, Tensor):
        if value.device.type == "meta":
            raise ValueError(f"{name} must hold values, but is on the meta device")
        value = value.detach().cpu()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as err:  # a ragged nesting, a list of tensors needing a gradient
        raise TypeError(f"{name} must be a number or an array of numbers: {err}") from None
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number or an array of real numbers, got {array.dtype} values: {value!r:.60}")
    return array.astype(float)


def matrix(name: str, value: object, dim: int) -> Tensor:
    """A finite ``(dim, dim)`` matrix, as float64 on the CPU."""
    t = as_float64(name, value)
    if tuple(t.shape) != (dim, dim):
        raise ValueError(f"{name} must have shape ({dim}, {dim}), got {tuple(t.shape)}")
    return finite(name, t).cpu()


def psd_matrix(name: str, value: object, dim: int) -> Tensor:
    """A symmetric positive semi-definite ``(dim, dim)`` matrix, as float64 on the CPU."""
    work(f"{name}'s eigenvalues at dim = {dim} (4 dim^3)", 4 * dim**3)  # before matrix() copies it
    t = matrix(name, value, dim)
    scale = max(t.abs().max().item(), 1.0)
    if not torch.allclose(t, t.T, atol=1e-8 * scale):
        raise ValueError(f"{name} must be symmetric")
    if torch.linalg.eigvalsh(t).min().item() < -1e-8 * scale:
        raise ValueError(f"{name} must be positive semi-definite")
    if t.diagonal().max().item() > config.MAX_SCALE**2:  # a variance: a scale squared
        raise ValueError(
            f"{name} must have variances at most config.MAX_SCALE^2 = {config.MAX_SCALE**2:.0e}, got "
            f"{t.diagonal().max().item():.3g}"
        )
    return t


def psd_sqrt(cov: Tensor, name: str = "cov") -> Tensor:
    """The symmetric square root of a PSD matrix (works for singular matrices too); errors call it ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not isinstance(cov, Tensor) or cov.ndim != 2 or cov.shape[0] != cov.shape[1] or not len(cov):
        raise ValueError(f"{name} must be a non-empty square matrix (a tensor), got {type(cov).__name__}")
    if not cov.is_floating_point():  # eigh takes floats only
        raise TypeError(f"{name} must be a float tensor, got {cov.dtype}")
    work(
        f"{name}'s square root at {len(cov)} x {len(cov)} (an eigendecomposition and two products, 14 d^3)",
        14 * len(cov) ** 3,
    )
    if not bool(finite_flag(cov)):
        raise ValueError(f"{name} must be finite, got a NaN or an infinity")
    if not torch.allclose(cov, cov.T, rtol=1e-5, atol=1e-8 * float(cov.abs().max())):  # eigh reads one triangle
        raise ValueError(f"{name} must be symmetric (eigh would read one triangle of it)")
    evals, evecs = torch.linalg.eigh(cov)
    if evals[0] < -1e-8 * max(float(evals.abs().max()), 1e-300):  # rounding leaves tiny negatives, no more
        raise ValueError(f"{name} must be positive semi-definite, got an eigenvalue {float(evals[0]):.3g}")
    return evecs @ torch.diag(evals.clamp(min=0).sqrt()) @ evecs.T


def prompt_fits(prompt_x: Tensor, module: torch.nn.Module, name: str = "prompt") -> None:
    """Raise a ValueError unless a prompt (given by its ``x``; or the inputs ``name``) is on the device and of the
    dtype of ``module``'s parameters: torch would otherwise fail deep inside a matrix product."""
    if not isinstance(prompt_x, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(prompt_x).__name__}")
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    param = next(module.parameters(), None)
    if param is None:
        return
    if prompt_x.device.type != param.device.type or prompt_x.dtype != param.dtype:
        raise ValueError(
            f"{name} is {prompt_x.dtype} on {prompt_x.device} but the model's parameters are {param.dtype} on "
            f"{param.device}; move or convert one of them (model.to(device), or sample with a generator there)"
        )


def task_fits(model: torch.nn.Module, task: object) -> None:
    """A ValueError naming ``task`` unless it has the input dimension of ``model`` (a model without a ``dim`` fits
    any task), before a sample of the wrong width reaches the model's first product."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    task_dim = getattr(task, "dim", None)
    if isinstance(task_dim, bool) or not isinstance(task_dim, numbers.Integral):
        raise TypeError(f"task must be a task family with an int dim (a TaskFamily), got {type(task).__name__}")
    dim = getattr(model, "dim", None)
    if dim is not None and dim != task_dim:
        raise ValueError(f"task must be of the model's dim={dim}, got task.dim = {task.dim}")


def warn_if_ill_conditioned(name: str, penalty: float, gram_scale: Tensor) -> None:
    """Warn when a penalty is below 1e-10 of the largest Gram scale: float64 then loses most digits in the solve,
    and the result is close to the unpenalized limit. The text holds no other number, so Python's default shows
    it once per call site and penalty, not once per call."""
    if isinstance(penalty, bool) or not isinstance(penalty, numbers.Real):
        raise TypeError(f"penalty must be a number, got {type(penalty).__name__}")
    if not math.isfinite(penalty):
        raise ValueError(f"penalty must be finite, got {penalty}")
    if not isinstance(gram_scale, Tensor) or not gram_scale.numel():
        raise TypeError(f"gram_scale must be a non-empty tensor, got {type(gram_scale).__name__}")
    scale = gram_scale.max().item()
    if penalty < 1e-10 * scale:
        warnings.warn(
            f"{name}={penalty:g} is below 1e-10 of the Gram matrix's scale; the solve is ill-conditioned. For "
            "the unpenalized limit use a pseudo-inverse (least_squares).",
            RuntimeWarning,
            stacklevel=3,
        )


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """Whether two devices are one: ``cuda`` and ``cuda:0`` are, when device 0 is the current CUDA device."""

    def resolved(dev: torch.device | str, name: str) -> torch.device:
        try:
            dev = torch.device(dev)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"{name} must be a device (a torch.device or a name such as 'cpu'): {err}") from None
        if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return dev

    return resolved(a, "a") == resolved(b, "b")


@contextmanager
def nonfinite_allowed() -> Iterator[None]:
    """Within the block, public functions accept prompts that hold NaN or infinite values (the check costs one
    pass over the prompt and, on a GPU, a host sync per call)."""
    token = _CHECK_VALUES.set(False)
    try:
        yield
    finally:
        _CHECK_VALUES.reset(token)


def finite(name: str, value: Tensor) -> Tensor:
    """``value`` itself, or a ValueError naming it when it holds a NaN or an infinity (or no values: meta)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    if value.device.type == "meta":
        raise ValueError(f"{name} must hold values, but is on the meta device")
    if not bool(finite_flag(value)):
        bad = ~torch.isfinite(value)
        raise ValueError(
            f"{name} must be finite, but holds {int(bad.sum())} NaN or infinite value(s) of {value.numel()}"
        )
    return value


def nonfinite_names(tensors: dict[str, Tensor]) -> list[str]:
    """The names of the tensors that hold a NaN or an infinity, found with one host sync (parameters after a step)."""
    if not isinstance(tensors, dict) or not all(isinstance(t, Tensor) for t in tensors.values()):
        raise TypeError(f"tensors must be a dict of names to tensors, got {type(tensors).__name__}")
    if not tensors:
        return []
    ok = torch.stack([finite_flag(t.detach()) for t in tensors.values()]).tolist()
    return [name for name, fine in zip(tensors, ok) if not fine]


def prompt(value: object, name: str = "prompt", *, finite: bool = True) -> Prompt:
    """An :class:`icl_utils.prompts.Prompt`, whose values are finite unless ``finite=False`` (a model's forward
    pass, which must not sync inside a training step) or inside :func:`nonfinite_allowed`."""
    if not isinstance(value, Prompt):
        raise TypeError(f"{name} must be an icl_utils.Prompt, got {type(value).__name__}")
    if value.dim == 0:
        raise ValueError(f"{name} must have inputs of at least one coordinate, got d = 0")
    if value.x.device.type == "meta":
        raise ValueError(f"{name} must hold values, but is on the meta device")
    if finite and values_checked():
        bad_fields = nonfinite_names({f: getattr(value, f) for f in ("x", "y", "x_query", "y_query")})
        if bad_fields:
            field = bad_fields[0]
            bad = ~torch.isfinite(getattr(value, field))
            first = int(bad.reshape(len(bad), -1).any(1).nonzero()[0, 0])
            raise ValueError(
                f"{name}.{field} holds {int(bad.sum())} NaN or infinite value(s), the first in prompt {first}; "
                "drop those prompts, or wrap the call in icl_utils.checks.nonfinite_allowed()"
            )
    return value


def predictions_of(fn: Callable[[Prompt], object], prompt: Prompt, name: str) -> object:
    """``fn(prompt)``, where ``fn`` is the argument ``name`` (a model, an estimator): a TypeError or AttributeError
    that the call raises is raised again naming ``name``, since it typically means that ``fn`` does not read a
    Prompt (an ``nn.Linear`` takes tensors); the original error is kept, chained and quoted."""
    try:
        return fn(prompt)
    except (TypeError, AttributeError) as err:
        raise TypeError(
            f"{name} must take an icl_utils.Prompt and return its predictions; calling it raised "
            f"{type(err).__name__}: {err}"
        ) from err


class Diverged(FloatingPointError, ValueError):
    """A run whose loss or parameters became NaN or infinite, or grew by orders of magnitude: a FloatingPointError,
    as such numbers are, and a ValueError, since the cause is an argument (a step size ``lr`` too large, say),
    which the message names."""


def finite_losses(losses: Tensor, first_step: int) -> None:
    """Raise a FloatingPointError if a block of recorded losses (rows are steps, the first being ``first_step``)
    holds a NaN or an infinity, naming the first such step."""
    if not isinstance(losses, Tensor) or losses.ndim == 0:  # rows are steps
        raise TypeError(f"losses must be a tensor of one row per step, got {type(losses).__name__}")
    if isinstance(first_step, bool) or not isinstance(first_step, numbers.Integral):
        raise TypeError(f"first_step must be an int, got {type(first_step).__name__}")
    finite = torch.isfinite(losses).reshape(len(losses), -1).all(dim=1) if losses.ndim > 1 else torch.isfinite(losses)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0, 0])
        value = losses[bad].item() if losses[bad].numel() == 1 else losses[bad].tolist()  # one model's: a number
        if first_step + bad == 0:  # before any update: no step size is to blame
            raise Diverged(
                f"training loss was {value} at step 0, before any update: the starting point's loss is not finite "
                "(check loss_fn and init, or the model and the task)"
            )
        raise Diverged(f"training loss became {value} at step {first_step + bad}; lower lr or check the task")


def allocation(what: str, values: int, dtype: torch.dtype = torch.float32) -> None:
    """A ValueError with the estimated size when one tensor of ``values`` entries would exceed
    :data:`icl_utils.config.MAX_ELEMENTS` float32 values (in bytes: 2^30 int64 values are twice as many bytes),
    before torch tries (and a machine swaps for a minute) to allocate it."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if isinstance(values, bool) or not isinstance(values, numbers.Integral):
        raise TypeError(f"values must be an int (a count of entries), got {type(values).__name__}")
    if values < 0:
        raise ValueError(f"values must be a count of entries >= 0, got {values}")
    size = values * dtype.itemsize
    if size > config.MAX_ELEMENTS * 4:
        raise ValueError(
            f"{what} = {_magnitude(values)} values ({_magnitude(size, 2**30)} GiB in {dtype}) exceed the limit of "
            "one tensor, "
            f"{config.MAX_ELEMENTS * 4 / 2**30:.3g} GiB (config.MAX_ELEMENTS = {config.MAX_ELEMENTS:.3g} float32 "
            "values); ask for fewer at a time"
        )


def work(what: str, flops: float) -> None:
    """A ValueError with the estimate when one computation sized by the arguments (``what``, naming them) would
    take more than :data:`icl_utils.config.MAX_FLOPS` floating-point operations, counted as that limit's comment
    says, before it starts: a width within :data:`~icl_utils.config.MAX_WIDTH` still makes a d^3 factorization of
    minutes."""
    if not isinstance(what, str):
        raise TypeError(f"what must be a str, got {type(what).__name__}")
    if isinstance(flops, bool) or not isinstance(flops, numbers.Real):
        raise TypeError(f"flops must be a number (an estimate of operations), got {type(flops).__name__}")
    if not flops >= 0:
        raise ValueError(f"flops must be an estimate >= 0, got {flops}")
    if flops > config.MAX_FLOPS:
        raise ValueError(
            f"{what} = {_magnitude(flops)} floating-point operations exceed the limit of one call, "
            f"{config.MAX_FLOPS:.3g} "
            f"(config.MAX_FLOPS, about {config.MAX_FLOPS / 1e11:.0f} s on two CPU cores); ask for less"
        )


def _magnitude(value: float, unit: int = 1) -> str:
    """``value / unit`` to three digits; an int past float64's range (which cannot be made a float) by its digits."""
    try:
        return f"{value / unit:.3g}"
    except OverflowError:  # log10 takes an int of any size (str would refuse one past 4300 digits)
        return f"about 10^{math.floor(math.log10(value // unit))}"


def svd_flops(m: int, d: int) -> int:
    """The work of an SVD (or a pseudo-inverse through one) of an ``m x d`` matrix, in the units of
    :data:`icl_utils.config.MAX_FLOPS`: ``30 m d min(m, d)`` (timed: a pseudo-inverse of 2048 x 8192 took 11.8 s
    where a product runs at 100 GFLOP/s, one of 8192 x 1024 1.1 s)."""
    return 30 * m * d * min(m, d)


def sample_sizes(batch: object, n: object, gen: object, dim: int | None = None) -> tuple[int, int, torch.Generator]:
    """The arguments every sampler shares: ``batch >= 1`` prompts of ``n >= 0`` examples, drawn with ``gen``; given
    the task's ``dim``, the prompt's size is checked against :data:`icl_utils.config.MAX_ELEMENTS`."""
    batch, n = positive_int("batch", batch), positive_int("n", n, minimum=0)
    if not isinstance(gen, torch.Generator):  # samplers draw on its device
        raise TypeError(f"generator must be a torch.Generator, got {type(gen).__name__}")
    if dim is not None:
        allocation("batch * (n + 1) * dim", batch * (n + 1) * positive_int("dim", dim))
    return batch, n, gen
