"""Argument checks shared by the package: each raises a ValueError or TypeError that names the argument.

Public functions check their arguments once, on entry; internal code trusts them. Most checks are declared: a
function decorated with :func:`checked` has its arguments checked against their annotations, the dtypes and shapes
of tensors by jaxtyping (``Float[Tensor, "B n d"]``: one size per axis name across the arguments) and the types and
value constraints by beartype (:data:`Count`, :data:`Positive`, ...; the limits of :mod:`icl_utils.config` among
them). What no annotation says (a prompt's values finite, a matrix positive semi-definite) is checked by the
helpers below."""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import numbers
import re
import types
import typing
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, TypeVar

import numpy as np
import torch
from beartype import BeartypeConf, beartype
from beartype.door import is_bearable
from beartype.vale import Is
from jaxtyping import AbstractArray, TypeCheckError, jaxtyped
from torch import Tensor

from icl_utils import config
from icl_utils.prompts import Prompt, TaskFamily

_CHECK_VALUES = contextvars.ContextVar("icl_utils_check_values", default=True)
_CONF = BeartypeConf(is_pep484_tower=True)  # an int where a float is declared, as Python's numbers do

# --- declared checks -------------------------------------------------------------------------------------------
# The constraints read in an error message as they are written here (beartype shows a validator's source).
#: an int >= 1 (steps, prompts, widths); an int >= 0 (context lengths, indices)
Count = Annotated[int, Is[lambda v: not isinstance(v, bool) and v >= 1]]
Size = Annotated[int, Is[lambda v: not isinstance(v, bool) and v >= 0]]
#: counts that set how long a call runs, refused above :mod:`icl_utils.config`'s limits
Steps = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_STEPS]]
Draws = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_DRAWS]]
Reps = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_REPS]]
#: finite real numbers (an int is taken where a float is declared): > 0, >= 0, any, in [0, 1], in (0, 1)
Positive = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 < v < math.inf]]
NonNegative = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v < math.inf]]
Real = Annotated[float, Is[lambda v: not isinstance(v, bool) and math.isfinite(v)]]
Probability = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v <= 1]]
Fraction = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 < v < 1]]
#: a non-empty tuple or list of such numbers, every item checked (beartype checks one random item of a container)
Counts = Annotated[tuple | list, Is[lambda v: len(v) > 0 and all(is_bearable(x, Count) for x in v)]]
Positives = Annotated[tuple | list, Is[lambda v: len(v) > 0 and all(is_bearable(x, Positive, conf=_CONF) for x in v)]]
Reals = Annotated[tuple | list, Is[lambda v: len(v) > 0 and all(is_bearable(x, Real, conf=_CONF) for x in v)]]
#: a tensor without NaN or infinite values (one pass over it, and a host sync on a GPU)
Finite = Is[lambda t: bool(torch.isfinite(t).all())]

_TYPECHECK = beartype(conf=_CONF)
F = TypeVar("F", bound=Callable)
# (the kind of value, the constraint on it), as the error messages put them
_DESCRIBED = {
    Count: ("an int", ">= 1"),
    Size: ("an int", ">= 0"),
    Steps: ("an int", f"in [1, {config.MAX_STEPS:.0e}] (config.MAX_STEPS)"),
    Draws: ("an int", f"in [1, {config.MAX_DRAWS:.0e}] (config.MAX_DRAWS)"),
    Reps: ("an int", f"in [1, {config.MAX_REPS:.0e}] (config.MAX_REPS)"),
    Positive: ("a real number", "> 0 and finite"),
    NonNegative: ("a real number", ">= 0 and finite"),
    Real: ("a real number", "finite"),
    Probability: ("a real number", "in [0, 1]"),
    Fraction: ("a real number", "in (0, 1)"),
    Counts: ("a tuple or list", "a non-empty tuple or list of ints >= 1"),
    Positives: ("a tuple or list", "a non-empty tuple or list of numbers > 0 and finite"),
    Reals: ("a tuple or list", "a non-empty tuple or list of finite numbers"),
}


def _options(hint: object) -> list:
    """The alternatives of a union, each keeping the constraints declared on the whole."""
    if hint in _DESCRIBED:
        return [hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [o for a in typing.get_args(hint) for o in _options(a)]
    if typing.get_origin(hint) is Annotated and len(inner := _options(typing.get_args(hint)[0])) > 1:
        return [Annotated[(o, *hint.__metadata__)] for o in inner]
    return [hint]


def _words(hint: object) -> tuple[str, str]:
    """A declared type in words: the kind of value it takes and the constraint on it."""
    if hint in _DESCRIBED:
        return _DESCRIBED[hint]
    if hint is None or hint is type(None):
        return "None", "None"
    if typing.get_origin(hint) is Annotated:
        kind, constraint = _words(typing.get_args(hint)[0])
        return kind, constraint + (" with finite values" if any(m is Finite for m in hint.__metadata__) else "")
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        dtype = {"Float": "a float", "Int": "an integer", "Bool": "a boolean"}.get(hint.dtype.__name__, "a")
        dims = ", ".join(str(d) for d in hint.dim_str.split()) + ("," if len(hint.dims) == 1 else "")
        return "a torch.Tensor", f"{dtype} tensor of shape ({dims})"
    if isinstance(hint, type):
        name = f"icl_utils.{hint.__qualname__}" if hint.__module__.startswith("icl_utils") else hint.__qualname__
        name = f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"
        return name, name
    name = str(hint).replace("typing.", "")
    return name, name


def _of_kind(value: object, hint: object) -> bool:
    """Whether ``value`` is of the kind ``hint`` takes (a number for a number, a tensor for a tensor), whatever its
    constraint."""
    while typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        return isinstance(value, Tensor)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if len(options := _options(hint)) > 1:
        return any(_of_kind(value, o) for o in options)
    kind = typing.get_origin(hint) or hint
    return isinstance(kind, type) and isinstance(value, kind)


def _shown(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def refusal(name: str, hint: object, value: object) -> TypeError | ValueError:
    """The error for ``value`` given as ``name``, declared ``hint``: a ValueError with the constraint when the value
    is of the declared kind (a negative number where a positive one is declared), else a TypeError with the kind."""
    options = _options(hint)
    matching = [o for o in options if _of_kind(value, o)]
    if matching:
        wanted = " or ".join(dict.fromkeys(_words(o)[1] for o in matching))
        return ValueError(f"{name} must be {wanted}, got {_shown(value)}")
    wanted = " or ".join(dict.fromkeys(_words(o)[0] for o in options))
    return TypeError(f"{name} must be {wanted}, got {type(value).__name__}")


def checked(fn: F) -> F:
    """``fn``, its arguments (and result) checked on every call against its annotations: jaxtyping's dtypes and
    shapes, beartype's types and validators. A bad argument raises the error of :func:`refusal`, "``name`` must be
    ..., got ...", with the sizes that other arguments gave the tensor axes. NumPy scalars are taken as the Python
    numbers they hold, everywhere."""
    typed = jaxtyped(typechecker=_TYPECHECK)(fn)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        args = [a.item() if isinstance(a, np.generic) else a for a in args]
        kwargs = {k: v.item() if isinstance(v, np.generic) else v for k, v in kwargs.items()}
        try:
            return typed(*args, **kwargs)
        except TypeCheckError as err:
            found = re.search(r"typechecking parameter '(\w+)'", str(err))
            if not found or "checking the parameters of" not in str(err):
                raise
            name = found.group(1)
            value = signature.bind(*args, **kwargs).arguments[name]
            error = refusal(name, typing.get_type_hints(fn, include_extras=True)[name], value)
            axes = re.findall(r"^(\w+)=(\d+)$", str(err).split("axis annotation are as follows.")[-1], re.M)
            if axes and isinstance(value, Tensor):  # the sizes the other arguments fixed
                error.args = (f"{error.args[0]} (axes so far: {', '.join(f'{k}={v}' for k, v in axes)})",)
            raise error from None

    return call


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def real(name: str, value: object) -> float:
    """A finite real number (numpy scalars included), as a Python float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if value != value or abs(value) == float("inf"):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def nonnegative_float(name: str, value: object, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not value == value or value < 0 or (strict and value == 0) or value == float("inf"):
        raise ValueError(f"{name} must be {'> 0' if strict else '>= 0'} and finite, got {value}")
    return value


def as_float64(name: str, value: object) -> Tensor:
    """``value`` (a tensor, array or nested list of numbers) as a float64 tensor, or a TypeError naming it."""
    if isinstance(value, Tensor):
        return value.double()
    try:
        return torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a tensor of numbers, got {type(value).__name__}") from err


def vector(name: str, value: object, dim: int) -> Tensor:
    """A finite ``(dim,)`` vector, as float64 on the CPU."""
    t = as_float64(name, value)
    if tuple(t.shape) != (dim,):
        raise ValueError(f"{name} must have shape ({dim},), got {tuple(t.shape)}")
    return finite(name, t).cpu()


def matrix(name: str, value: object, dim: int) -> Tensor:
    """A finite ``(dim, dim)`` matrix, as float64 on the CPU."""
    t = as_float64(name, value)
    if tuple(t.shape) != (dim, dim):
        raise ValueError(f"{name} must have shape ({dim}, {dim}), got {tuple(t.shape)}")
    return finite(name, t).cpu()


def psd_matrix(name: str, value: object, dim: int) -> Tensor:
    """A symmetric positive semi-definite ``(dim, dim)`` matrix, as float64 on the CPU."""
    t = matrix(name, value, dim)
    scale = max(t.abs().max().item(), 1.0)
    if not torch.allclose(t, t.T, atol=1e-8 * scale):
        raise ValueError(f"{name} must be symmetric")
    if torch.linalg.eigvalsh(t).min().item() < -1e-8 * scale:
        raise ValueError(f"{name} must be positive semi-definite")
    return t


def same_dim(name: str, size: int, dim: int) -> None:
    """A ValueError unless an argument's last axis (of ``size``) matches the prompt's dimension ``dim``."""
    if size != dim:
        raise ValueError(f"{name} must have the prompt's dimension {dim} along its last axis, got {size}")


def psd_sqrt(cov: Tensor) -> Tensor:
    """The symmetric square root of a PSD matrix (works for singular matrices too)."""
    evals, evecs = torch.linalg.eigh(cov)
    return evecs @ torch.diag(evals.clamp(min=0).sqrt()) @ evecs.T


def prompt_fits(prompt_x: Tensor, module: torch.nn.Module) -> None:
    """Raise a ValueError unless a prompt (given by its ``x``) is on the device and of the dtype of ``module``'s
    parameters: torch would otherwise fail deep inside a matrix product."""
    param = next(module.parameters(), None)
    if param is None:
        return
    if prompt_x.device.type != param.device.type or prompt_x.dtype != param.dtype:
        raise ValueError(
            f"prompt is {prompt_x.dtype} on {prompt_x.device} but the model's parameters are {param.dtype} on "
            f"{param.device}; move or convert one of them (model.to(device), or sample with a generator there)"
        )


def probabilities(name: str, value: object) -> Tensor:
    """A non-empty vector of positive probabilities summing to 1, as float64 on the CPU."""
    probs = as_float64(name, value).cpu()
    if probs.ndim != 1 or probs.numel() < 1:
        raise ValueError(f"{name} must be a non-empty vector, got shape {tuple(probs.shape)}")
    if torch.any(~(probs > 0)) or abs(probs.sum().item() - 1) > 1e-6:
        raise ValueError(f"{name} must be positive and sum to 1, got sum {probs.sum().item():.6f}")
    return probs


def warn_if_ill_conditioned(name: str, penalty: float, gram_scale: Tensor) -> None:
    """Warn when a penalty is below 1e-10 of the largest Gram scale: float64 then loses most digits in the solve,
    and the result is close to the unpenalized limit. The text holds no other number, so Python's default shows
    it once per call site and penalty, not once per call."""
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

    def resolved(dev: torch.device | str) -> torch.device:
        dev = torch.device(dev)
        if dev.type == "cuda" and dev.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return dev

    return resolved(a) == resolved(b)


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
    """``value`` itself, or a ValueError naming it when it holds a NaN or an infinity."""
    if not bool(torch.isfinite(value).all()):
        bad = ~torch.isfinite(value)
        raise ValueError(
            f"{name} must be finite, but holds {int(bad.sum())} NaN or infinite value(s) of {value.numel()}"
        )
    return value


def nonfinite_names(tensors: dict[str, Tensor]) -> list[str]:
    """The names of the tensors that hold a NaN or an infinity, found with one host sync (parameters after a step)."""
    if not tensors:
        return []
    ok = torch.stack([torch.isfinite(t.detach()).all() for t in tensors.values()]).tolist()
    return [name for name, fine in zip(tensors, ok) if not fine]


def prompt(value: object, name: str = "prompt", *, finite: bool = True) -> Prompt:
    """An :class:`icl_utils.prompts.Prompt`, whose values are finite unless ``finite=False`` (a model's forward
    pass, which must not sync inside a training step) or inside :func:`nonfinite_allowed`."""
    if not isinstance(value, Prompt):
        raise TypeError(f"{name} must be an icl_utils.Prompt, got {type(value).__name__}")
    if finite and _CHECK_VALUES.get():
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


def task_family(value: object, name: str = "task"):
    """A :class:`~icl_utils.prompts.TaskFamily` (a task family or a pool) whose ``dim`` is an integer."""
    if not isinstance(value, TaskFamily) or not callable(value.sample):
        raise TypeError(
            f"{name} must be a task family (dim and sample(batch, n, generator)), got {type(value).__name__}"
        )
    dim = getattr(value, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{name}.dim must be an int, got {type(dim).__name__}")
    return value


def finite_losses(losses: Tensor, first_step: int) -> None:
    """Raise a FloatingPointError if a block of recorded losses (rows are steps, the first being ``first_step``)
    holds a NaN or an infinity, naming the first such step."""
    finite = torch.isfinite(losses).reshape(len(losses), -1).all(dim=1) if losses.ndim > 1 else torch.isfinite(losses)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0, 0])
        value = losses[bad].item() if losses[bad].numel() == 1 else losses[bad].tolist()  # one model's: a number
        raise FloatingPointError(f"training loss became {value} at step {first_step + bad}; lower lr or check the task")


def sequence(name: str, value: object) -> object:
    """An iterable of values (not a string)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence, got {type(value).__name__}")
    return value


def boolean(name: str, value: object) -> bool:
    """True or False (numpy's booleans too), as a Python bool; never a truthy string or number."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def module(name: str, value: object) -> torch.nn.Module:
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")
    return value


def generator(value: object, name: str = "generator") -> torch.Generator:
    """A torch.Generator (samplers draw on its device)."""
    if not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator, got {type(value).__name__}")
    return value


def text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def allocation(what: str, values: int, dtype: torch.dtype = torch.float32) -> None:
    """A ValueError with the estimated size when one tensor of ``values`` entries would exceed
    :data:`icl_utils.config.MAX_ELEMENTS`, before torch tries (and a machine swaps for a minute) to allocate it."""
    if values > config.MAX_ELEMENTS:
        size = values * torch.finfo(dtype).bits / 8
        raise ValueError(
            f"{what} = {values:.3g} values ({size / 2**30:.3g} GiB in {dtype}) exceed the limit of one tensor, "
            f"config.MAX_ELEMENTS = {config.MAX_ELEMENTS:.3g} values; ask for fewer at a time"
        )


def sample_sizes(batch: object, n: object, gen: object, dim: int | None = None) -> tuple[int, int, torch.Generator]:
    """The arguments every sampler shares: ``batch >= 1`` prompts of ``n >= 0`` examples, drawn with ``gen``; given
    the task's ``dim``, the prompt's size is checked against :data:`icl_utils.config.MAX_ELEMENTS`."""
    batch, n, gen = positive_int("batch", batch), positive_int("n", n, minimum=0), generator(gen)
    if dim is not None:
        allocation("batch * (n + 1) * dim", batch * (n + 1) * dim)
    return batch, n, gen
