"""Declared argument checks: the types a public function's annotations declare, and :func:`checked`, which checks
every call against them.

jaxtyping checks the dtypes and shapes of tensors (``Float[Tensor, "B n d"]``: one size per axis name across the
arguments; ``Float`` refuses complex and integer tensors), beartype the types and the value constraints declared
below (:data:`Count`, :data:`Positive`, ...; the limits of :mod:`icl_utils.config` among them). The errors are made
from the declarations: "``name`` must be <constraint>, got <value>" (a ValueError) or "``name`` must be <kind>, got
<type>" (a TypeError). :mod:`icl_utils.checks` re-exports all of it, beside the checks no annotation says."""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import functools
import inspect
import itertools
import math
import numbers
import re
import reprlib
import sys
import types
import typing
from collections.abc import Callable
from typing import Annotated, TypeVar

import jaxtyping._decorator
import numpy as np
import torch
from beartype import BeartypeConf, beartype
from beartype.door import is_bearable
from beartype.vale import Is
from jaxtyping import AbstractArray, Float, TypeCheckError, jaxtyped
from torch import Tensor

from icl_utils import config

_CONF = BeartypeConf(is_pep484_tower=True)  # an int where a float is declared, as Python's numbers do

# --- declared checks -------------------------------------------------------------------------------------------
_TINY, _HUGE = sys.float_info.min, sys.float_info.max
# The constraints read in an error message as they are written here (beartype shows a validator's source).
#: an int >= 1 (steps, prompts, widths); an int >= 0 (context lengths, indices)
#: (below 2^63: what a 64-bit integer, and so torch, holds)
Count = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v < 2**63]]
Size = Annotated[int, Is[lambda v: not isinstance(v, bool) and 0 <= v < 2**63]]
#: counts that set how long a call runs, refused above :mod:`icl_utils.config`'s limits
Steps = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_STEPS]]
Draws = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_DRAWS]]
Reps = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_REPS]]
#: a model's or a task's dimension, width, number of features or heads; a model's number of layers: both refused
#: above :mod:`icl_utils.config`'s limits at once, not after torch has tried to allocate the weights
Width = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_WIDTH]]
Depth = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_DEPTH]]
#: how many series or panels a figure draws: refused above :mod:`icl_utils.config`'s limit
Series = Annotated[int, Is[lambda v: not isinstance(v, bool) and 1 <= v <= config.MAX_SERIES]]
#: a generator's seed: an int >= 0 that a signed 64-bit integer holds (torch's and numpy's seeds take it)
Seed = Annotated[int, Is[lambda v: not isinstance(v, bool) and 0 <= v < 2**63]]
#: any int, but not a bool (a shift, an offset)
Integer = Annotated[int, Is[lambda v: not isinstance(v, bool)]]
#: two or more (features, points of a prompt)
Several = Annotated[int, Is[lambda v: not isinstance(v, bool) and v >= 2]]
#: draws of which a spread is computed (a standard error needs two)
Samples = Annotated[int, Is[lambda v: not isinstance(v, bool) and 2 <= v <= config.MAX_DRAWS]]
#: finite real numbers (an int is taken where a float is declared): > 0, >= 0, any, in [0, 1], in (0, 1). Each is
#: a float64 that computes: not an int too large to convert (200!), nor a positive number below the smallest
#: normal float (1e-320, whose reciprocal overflows)
Positive = Annotated[float, Is[lambda v: not isinstance(v, bool) and _TINY <= v <= _HUGE]]
NonNegative = Annotated[float, Is[lambda v: not isinstance(v, bool) and (v == 0 or _TINY <= v <= _HUGE)]]
Real = Annotated[float, Is[lambda v: not isinstance(v, bool) and -_HUGE <= v <= _HUGE]]
Probability = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v <= 1]]
Fraction = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 < v < 1]]
#: a task's scale (a noise level, an input range, a mean): refused above :mod:`icl_utils.config`'s MAX_SCALE
Scale = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v <= config.MAX_SCALE]]
PositiveScale = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 < v <= config.MAX_SCALE]]
Offset = Annotated[float, Is[lambda v: not isinstance(v, bool) and -config.MAX_SCALE <= v <= config.MAX_SCALE]]
#: a variance: a scale squared
Variance = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v <= config.MAX_SCALE**2]]
PositiveVariance = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 < v <= config.MAX_SCALE**2]]
#: a rate in [0, 1) (dropout)
Rate = Annotated[float, Is[lambda v: not isinstance(v, bool) and 0 <= v < 1]]
# a non-empty tuple or list of such numbers, every item checked (beartype checks one random item of a container)
# (a 1-D numpy array too, its items taken as the Python numbers they hold)
Counts = Annotated[tuple | list | np.ndarray, Is[lambda v: _all_of(v, Count)]]
# counts of prompts drawn in a loop, each within the limit of Draws (a sweep over a number of tasks)
DrawCounts = Annotated[tuple | list | np.ndarray, Is[lambda v: len(v) <= config.MAX_SERIES and _all_of(v, Draws)]]
# a grid of penalties, bandwidths or tolerances, each a run or a factorization: at most a figure's series
Positives = Annotated[tuple | list | np.ndarray, Is[lambda v: len(v) <= config.MAX_SERIES and _all_of(v, Positive)]]
Reals = Annotated[tuple | list | np.ndarray, Is[lambda v: len(v) <= config.MAX_SERIES and _all_of(v, Real)]]
# a floating-point dtype (torch.float32, torch.float64, ...): the dtype of a sample or of parameters
FloatDtype = Annotated[torch.dtype, Is[lambda d: d.is_floating_point]]
#: a tensor with at least one entry along its first axis (a batch of at least one)
NonEmpty = Is[lambda t: len(t) > 0]
#: values of magnitude at most config.MAX_SCALE (a task's means)
WithinScale = Is[lambda t: bool(t.abs().max() <= config.MAX_SCALE) if t.numel() else True]
#: a matrix (or a stack of them) with at least one column; with at least one row
Columns = Is[lambda t: t.ndim >= 1 and t.shape[-1] >= 1]
Rows = Is[lambda t: t.ndim >= 2 and t.shape[-2] >= 1]
#: a tensor with at least two entries along its first axis (a spread over them)
Pair = Is[lambda t: len(t) >= 2]
#: a vector of positive probabilities summing to 1 (within 1e-6, summed in float64)
SumsToOne = Is[lambda p: bool((p > 0).all()) and abs(p.double().sum().item() - 1) <= 1e-6]
Distribution = Annotated[Float[Tensor, " K"], SumsToOne]


def _all_of(values: tuple | list | np.ndarray, item: object) -> bool:
    """Whether ``values`` is non-empty (a 1-D array if an array) and every item is ``item``."""
    if isinstance(values, np.ndarray) and values.ndim != 1:
        return False
    plain = [v.item() if isinstance(v, np.generic) else v for v in values]
    return len(plain) > 0 and all(is_bearable(x, item, conf=_CONF) for x in plain)


def finite_flag(t: Tensor) -> Tensor:
    """Whether ``t`` holds no NaN or infinity, as a 0-dim bool tensor (no host sync). For a non-empty tensor of a
    float dtype, one reduction to its smallest and largest values, to which a NaN propagates: on a large tensor far
    faster than ``isfinite``'s mask of every value (about 30x for 34 million values on the CPU); for other
    tensors (empty, integer, bool, complex, float8), ``isfinite``'s mask."""
    if not isinstance(t, Tensor):
        raise TypeError(f"t must be a tensor, got {type(t).__name__}")
    if t.device.type == "meta":  # a tensor without values has no finite value
        return torch.tensor(False)
    if t.numel() == 0 or t.dtype not in _REDUCIBLE:
        return torch.isfinite(t).all()
    return torch.isfinite(torch.stack(torch.aminmax(t))).all()


_REDUCIBLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


#: a tensor or numpy array without NaN or infinite values (one pass over it, and a host sync on a GPU)
Finite = Is[lambda t: bool(finite_flag(t) if isinstance(t, Tensor) else np.isfinite(t).all())]

# off inside checks.nonfinite_allowed(): the values of prompts and predictions are then not checked finite
_CHECK_VALUES = contextvars.ContextVar("icl_utils_check_values", default=True)


def values_checked() -> bool:
    """Whether values are checked finite here, that is, outside :func:`icl_utils.checks.nonfinite_allowed`."""
    return _CHECK_VALUES.get()


_TYPECHECK = beartype(conf=_CONF)
F = TypeVar("F", bound=Callable)
T = TypeVar("T")
# (the kind of value, the constraint on it), as the error messages put them
_DESCRIBED = {
    Count: ("an int", ">= 1"),
    Size: ("an int", ">= 0"),
    Steps: ("an int", f"in [1, {config.MAX_STEPS:.0e}] (config.MAX_STEPS)"),
    Draws: ("an int", f"in [1, {config.MAX_DRAWS:.0e}] (config.MAX_DRAWS)"),
    Reps: ("an int", f"in [1, {config.MAX_REPS:.0e}] (config.MAX_REPS)"),
    Width: ("an int", f"in [1, {config.MAX_WIDTH}] (config.MAX_WIDTH)"),
    Depth: ("an int", f"in [1, {config.MAX_DEPTH}] (config.MAX_DEPTH)"),
    Seed: ("an int", "in [0, 2^63)"),
    Series: ("an int", f"in [1, {config.MAX_SERIES}] (config.MAX_SERIES)"),
    Integer: ("an int", "an int, not a bool"),
    Several: ("an int", ">= 2"),
    Samples: ("an int", f"in [2, {config.MAX_DRAWS:.0e}] (config.MAX_DRAWS)"),
    FloatDtype: ("a torch.dtype", "a floating-point torch.dtype (torch.float32 or torch.float64)"),
    Positive: ("a real number", "> 0 and finite (a normal float64, 2.2e-308 to 1.8e308)"),
    NonNegative: ("a real number", ">= 0 and finite (0, or a normal float64)"),
    Real: ("a real number", "finite (a float64)"),
    Probability: ("a real number", "in [0, 1]"),
    Fraction: ("a real number", "in (0, 1)"),
    Rate: ("a real number", "in [0, 1)"),
    Scale: ("a real number", f"in [0, {config.MAX_SCALE:.0e}] (config.MAX_SCALE)"),
    PositiveScale: ("a real number", f"in (0, {config.MAX_SCALE:.0e}] (config.MAX_SCALE)"),
    Variance: ("a real number", f"in [0, {config.MAX_SCALE**2:.0e}] (config.MAX_SCALE^2)"),
    PositiveVariance: ("a real number", f"in (0, {config.MAX_SCALE**2:.0e}] (config.MAX_SCALE^2)"),
    Offset: ("a real number", f"in [-{config.MAX_SCALE:.0e}, {config.MAX_SCALE:.0e}] (config.MAX_SCALE)"),
    Counts: ("a tuple, list or 1-D array", "a non-empty tuple, list or 1-D array of ints >= 1"),
    DrawCounts: (
        "a tuple, list or 1-D array",
        f"a non-empty tuple, list or 1-D array of at most {config.MAX_SERIES} (config.MAX_SERIES) ints in "
        f"[1, {config.MAX_DRAWS:.0e}] (config.MAX_DRAWS)",
    ),
    Positives: (
        "a tuple, list or 1-D array",
        f"a non-empty tuple, list or 1-D array of at most {config.MAX_SERIES} (config.MAX_SERIES) numbers > 0 and "
        "finite",
    ),
    Reals: (
        "a tuple, list or 1-D array",
        f"a non-empty tuple, list or 1-D array of at most {config.MAX_SERIES} (config.MAX_SERIES) finite numbers",
    ),
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


_CONTAINERS = {
    collections.abc.Callable: "a callable",
    dict: "a dict",
    collections.abc.Mapping: "a mapping",
    collections.abc.Sequence: "a sequence",
    list: "a list",
    tuple: "a tuple",
    np.ndarray: "a numpy array",
}


_SAID: dict[int, str] = {}


def says(validator: T, words: str) -> T:
    """``validator`` (a beartype ``Is[...]``, declared elsewhere) given the words its error messages use."""
    _SAID[id(validator)] = words
    return validator


def describe(hint: T, kind: str, constraint: str) -> T:
    """``hint``, a declared type defined elsewhere (``checks.Task``), given the words of its error messages: the kind
    of value it takes and the constraint on it."""
    _DESCRIBED[hint] = (kind, constraint)
    return hint


def declare(base: object, ok: Callable[[object], bool], constraint: str) -> object:
    """``base`` (a type or a union) whose values must satisfy ``ok``, which ``constraint`` says in words (``ok`` may
    take further arguments with defaults, which beartype's ``Is`` refuses)."""
    if not all(isinstance(o, type) for o in _options(base)) or not callable(ok) or not isinstance(constraint, str):
        raise TypeError(
            f"base, ok and constraint must be a type (or a union of types), a predicate and a str, got {base!r:.40}"
        )
    return describe(
        Annotated[base, Is[lambda v: bool(ok(v))]],
        " or ".join(dict.fromkeys(_words(o)[0] for o in _options(base))),
        constraint,
    )


def _each(item: object) -> Callable[[object], bool]:
    """``item`` (a predicate, a type or a declared type) as a predicate; NumPy scalars and 0-d arrays are taken as
    the Python numbers they hold, as :func:`checked` takes them."""
    return item if isinstance(item, types.FunctionType) else lambda v: is_bearable(_plain(v), item, conf=_CONF)


def mapping_of(item: object, words: str | None = None, *, keys: str = "names", empty: bool = False) -> object:
    """A mapping, non-empty unless ``empty``, of at most ``config.MAX_SERIES`` entries (each a series, a panel or a
    named run, drawn or run in turn) from ``keys`` to values each of which is ``item`` (a predicate, a type or a
    declared type), which ``words`` say (``item``'s own words by default)."""
    ok, some, most = _each(item), "" if empty else "non-empty ", config.MAX_SERIES
    words = f"a {some}mapping from {keys} to {words or _words(item)[1]} (at most {most} of them, config.MAX_SERIES)"
    return declare(
        collections.abc.Mapping,
        lambda m: (empty or len(m) > 0) and len(m) <= most and all(ok(v) for v in m.values()),
        words,
    )


def sequence_of(
    item: object, words: str, *, base: object = collections.abc.Sequence, empty: bool = False, most: int | None = None
) -> object:
    """A ``base`` (a sequence by default), non-empty unless ``empty``, of at most ``most`` items if given, each of
    which is ``item`` (a predicate, a type or a declared type), which ``words`` say."""
    if not all(isinstance(o, type) for o in _options(base)):
        raise TypeError(f"base must be a type or a union of types, got {base!r:.60}")
    if most is not None and (isinstance(most, bool) or not isinstance(most, int)):
        raise TypeError(f"most must be None or an int, got {most!r:.40}")
    if most is not None and most < 1:
        raise ValueError(f"most must be >= 1, got {most}")
    ok, kind = _each(item), " or ".join(_words(o)[0].removeprefix("a ") for o in _options(base))
    words = f"a {'' if empty else 'non-empty '}{kind} of {'' if most is None else f'at most {most} '}{words}"
    return declare(
        base, lambda s: (empty or len(s) > 0) and (most is None or len(s) <= most) and all(ok(v) for v in s), words
    )


_DTYPES = {
    "Float": "a float",
    "Float64": "a float64",
    "Float32": "a float32",
    "Int": "an integer",
    "Real": "a real",
    "Bool": "a boolean",
}  # jaxtyping's, in words


def _words(hint: object, arguments: dict | None = None) -> tuple[str, str]:
    """A declared type in words: the kind of value it takes and the constraint on it."""
    if hint in _DESCRIBED:
        return _DESCRIBED[hint]
    if hint is None or hint is type(None):
        return "None", "None"
    if typing.get_origin(hint) is Annotated:
        kind, constraint = _words(typing.get_args(hint)[0], arguments)
        extra = {id(Finite): "with finite values", id(NonEmpty): "not empty", id(Pair): "with at least two rows"}
        extra[id(WithinScale)] = f"of magnitude at most config.MAX_SCALE = {config.MAX_SCALE:.0e}"
        extra |= {id(Columns): "with at least one column", id(Rows): "with at least one row"}
        extra[id(SumsToOne)] = "with positive values summing to 1"
        # a validator declared elsewhere and not described (describe()) is shown as its source
        extra |= _SAID
        said = [extra.get(id(m), "satisfying " + repr(m).removeprefix("beartype.vale.")) for m in hint.__metadata__]
        return kind, ", ".join([constraint, *said])
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        dtype = _DTYPES.get(hint.dtype.__name__, "a")
        dim_str = hint.dim_str
        # axes given by arguments ("{dim}", "{task.dim+1}"): the annotation's f-string, evaluated as jaxtyping does
        with contextlib.suppress(NameError, AttributeError, TypeError, ValueError, SyntaxError, IndexError, KeyError):
            dim_str = eval("f" + repr(dim_str), {}, dict(arguments or {}))
        dims = ", ".join(dim_str.split()) + ("," if len(hint.dims) == 1 and hint.index_variadic is None else "")
        if hint.array_type is np.ndarray:
            return "a numpy array", f"{dtype} numpy array of shape ({dims})"
        return "a torch.Tensor", f"{dtype} tensor of shape ({dims})"
    if typing.get_origin(hint) is typing.Literal:
        name = " or ".join(repr(a) for a in typing.get_args(hint))
        return name, name
    if hint is bool:
        return "True or False", "True or False"
    if hint is float:
        return "a real number", "a real number"
    if typing.get_origin(hint) is tuple and ... not in (items := typing.get_args(hint)):  # a fixed-length tuple
        return "a tuple", f"a tuple ({', '.join(_words(i, arguments)[1] for i in items)})"
    if (typing.get_origin(hint) or hint) in _CONTAINERS:
        name = _CONTAINERS[typing.get_origin(hint) or hint]
        return name, name
    if isinstance(hint, type):
        name = hint.__qualname__
        if hint.__module__.startswith("icl_utils"):  # icl_utils.Prompt, the rest by their names
            exported = getattr(sys.modules.get("icl_utils"), name, None) is hint
            name = f"icl_utils.{name}" if exported else name
        elif hint.__module__.startswith("torch"):
            name = "torch.nn.Module" if hint is torch.nn.Module else f"torch.{name}"
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
        return isinstance(value, hint.array_type)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if len(options := _options(hint)) > 1:
        return any(_of_kind(value, o) for o in options)
    if typing.get_origin(hint) is typing.Literal:  # a value of the literals' type, but not one of them
        return any(type(value) is type(a) for a in typing.get_args(hint))
    kind = typing.get_origin(hint) or hint
    return isinstance(kind, type) and isinstance(value, kind)


def _shown(value: object) -> str:
    if isinstance(value, Tensor):
        where = "" if value.device.type == "cpu" else f" on {value.device}"
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}{where}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} numpy array of shape {value.shape}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return f"{value:.3g}, past what a 64-bit integer holds (2^63)" if abs(value) < 1e300 else "an int past 2^63"
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def refusal(name: str, hint: object, value: object, arguments: dict | None = None) -> TypeError | ValueError:
    """The error for ``value`` given as ``name``, declared ``hint``: a ValueError with the constraint when the value
    is of the declared kind (a negative number where a positive one is declared), else a TypeError with the kind."""
    options = _options(hint)
    matching = [o for o in options if _of_kind(value, o)]
    if matching:
        wanted = " or ".join(dict.fromkeys(_words(o, arguments)[1] for o in matching))
        return ValueError(f"{name} must be {wanted}, got {_shown(value)}")
    wanted = " or ".join(dict.fromkeys(_words(o)[0] for o in options))
    return TypeError(f"{name} must be {wanted}, got {type(value).__name__}")


def _scalar(value: object) -> bool:
    """Whether ``value`` is a NumPy scalar or a 0-d numeric array (``np.array(0.5)``, ``np.median``'s result)."""
    return isinstance(value, np.generic) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf"
    )


def _plain(value: object) -> object:
    """NumPy scalars and 0-d arrays as the Python numbers they hold, at the top level and in a tuple or list."""
    if _scalar(value):
        return value.item()
    if type(value) in (tuple, list) and any(_scalar(v) for v in value):
        return type(value)(v.item() if _scalar(v) else v for v in value)
    return value


def _shallow(hint: object) -> object:
    """``hint`` as it is checked: a container's items are left out (``list[Positive]`` checks a list), since
    beartype checks one random item of a container, which would refuse a bad item on some calls and not on others;
    a declaration that wants every item checked says so with a validator (``Counts``). Fixed-length tuples
    keep their items, which beartype checks all of."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return Annotated[(_shallow(args[0]), *hint.__metadata__)]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_shallow(a) for a in args)]  # noqa: UP007  (built from a tuple)
    if origin is tuple and args and ... not in args:
        return tuple[tuple(_shallow(a) for a in args)]
    return origin if origin is not None and origin is not typing.Literal else hint


def _typed(fn: Callable) -> Callable:
    """``fn`` checked by jaxtyping and beartype against its parameters' hints made shallow; its result is not
    checked (a container's random item would be, after the work is done)."""
    hints = {k: _shallow(v) for k, v in typing.get_type_hints(fn, include_extras=True).items() if k != "return"}
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__module__ = fn.__kwdefaults__, fn.__qualname__, fn.__module__
    copy.__annotations__ = hints
    return jaxtyped(typechecker=_TYPECHECK)(copy)


def _axis_names(hint: object) -> set[str]:
    """The axis names of the array types in ``hint`` (in a union or under Annotated too), those of symbolic axes
    (``p-k-1``) among them; not the arguments an f-string axis reads (``{prompt.dim}``)."""
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        return set(re.findall(r"[A-Za-z_]\w*", re.sub(r"\{[^}]*\}", "", hint.dim_str)))
    return set().union(*(_axis_names(a) for a in typing.get_args(hint)))


def _arrays(hint: object) -> list[type]:
    """The array types in ``hint`` (in a union or under Annotated too)."""
    if isinstance(hint, type) and issubclass(hint, AbstractArray):
        return [hint]
    return [a for arg in typing.get_args(hint) for a in _arrays(arg)]


def _fixed_axes(name: str, arguments: dict, fn: Callable) -> list[tuple[str, str, str]]:
    """The axes of argument ``name``'s annotation that the arguments before it fixed, each as (axis, size, the
    argument that fixed it), bound again as jaxtyping binds them: its error's own record of them loses those that
    an argument bound through the second type of a union (``Float[Tensor, " K"] | Float[Tensor, "K J"]``). A
    variadic axis's sizes read as a tuple, ``S=(2,)``."""
    try:  # jaxtyping's own axis bindings, a private module (pinned version): without it, no "axes so far"
        from jaxtyping._storage import get_shape_memo, pop_shape_memo, push_shape_memo
    except ImportError:
        return []
    hints = typing.get_type_hints(fn, include_extras=True)
    wanted, fixed = _axis_names(hints[name]), {}
    push_shape_memo(arguments)
    try:
        for arg in itertools.takewhile(lambda a: a != name, arguments):
            any(isinstance(arguments[arg], option) for option in _arrays(hints.get(arg)))  # binds the axes
            single, variadic = get_shape_memo()[:2]
            bound = {**single, **{k: tuple(shape) for k, (_, shape) in variadic.items()}}
            fixed.update({k: (k, str(v), arg) for k, v in bound.items() if k in wanted and k not in fixed})
    finally:
        pop_shape_memo()
    return list(fixed.values())


def _arity(hint: object) -> list | None:
    """The argument types of a ``Callable[[A, B], R]`` in ``hint`` (under Annotated or in an Optional), or None
    when it declares none (``Callable``, ``Callable[..., R]``)."""
    while typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [a for a in map(_arity, typing.get_args(hint)) if a is not None]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(hint) is collections.abc.Callable:
        args = typing.get_args(hint)
        return list(args[0]) if args and isinstance(args[0], list) else None
    return None


def _kind(hint: object) -> str:
    return _words(hint)[0]


_COUNTS = ("no argument", "one argument", "two arguments", "three arguments")


def takes(fn: object, kinds: list, name: str) -> None:
    """A TypeError naming ``name`` unless the callable ``fn`` can be called with one positional argument of each
    of ``kinds`` (declared types, or words), before a loop calls it and fails at its first step. A callable whose
    signature Python cannot read (some builtins) passes."""
    if not isinstance(kinds, (list, tuple)):
        raise TypeError(f"kinds must be a list of the arguments' kinds, got {type(kinds).__name__}")
    if not callable(fn):
        raise TypeError(f"{name} must be a callable, got {type(fn).__name__}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(len(kinds)))
    except TypeError:
        said = ", ".join(
            k if isinstance(k, str) else " or ".join(dict.fromkeys(map(_kind, _options(k)))) for k in kinds
        )
        count = _COUNTS[len(kinds)] if len(kinds) < len(_COUNTS) else f"{len(kinds)} arguments"
        raise TypeError(f"{name} must take {count}{f' ({said})' if said else ''}, got a callable {signature}") from None


# A failed check makes jaxtyping format every argument into its message (26 s for a tuple of a million penalties),
# which `checked` then replaces by its own: a short repr keeps a refused call as quick as an accepted one.
def _short_repr(x: object, *args: object, **kwargs: object) -> str:
    try:
        return reprlib.repr(x)
    except Exception:  # an int past Python's 4300 digits, a repr that raises
        return f"<{type(x).__name__}>"


if hasattr(jaxtyping._decorator, "_pformat"):
    jaxtyping._decorator._pformat = _short_repr


def checked(fn: F) -> F:
    """``fn`` (a function, or a class whose ``__init__`` is checked), its arguments checked on every call against
    its annotations: jaxtyping's dtypes and shapes, beartype's types and validators (a container's items only where
    a validator such as ``Counts`` declares it). A bad argument raises the error of :func:`refusal`, "``name``
    must be ..., got ...", with the sizes that other arguments gave the tensor axes. NumPy scalars and 0-d arrays
    are taken as the Python numbers they hold, in tuples and lists too. Like every beartype and jaxtyping check,
    the checks are off under ``python -O`` and with ``JAXTYPING_DISABLE=1``."""
    if not callable(fn):
        raise TypeError(f"fn must be a function or a class, got {type(fn).__name__}")
    if isinstance(fn, type):  # a class (a dataclass): its __init__ checked against the fields' types
        fn.__init__ = checked(fn.__init__)
        return fn
    signature, typed, arities = inspect.signature(fn), None, {}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        nonlocal typed, arities
        if typed is None:  # at the first call, when the module's names (hints may name later classes) are all bound
            hints = typing.get_type_hints(fn, include_extras=True)
            arities = {k: a for k, h in hints.items() if k != "return" and (a := _arity(h)) is not None}
            typed = _typed(fn)
        args = [_plain(a) for a in args]
        kwargs = {k: _plain(v) for k, v in kwargs.items()}
        try:
            if arities:  # a callable declared Callable[[A, ...], R] must take that many arguments
                try:
                    bound = signature.bind(*args, **kwargs).arguments
                except TypeError:  # a bad binding is the type checker's to report
                    bound = {}
                for name, kinds in arities.items():
                    if callable(value := bound.get(name)):
                        takes(value, kinds, name)
            return typed(*args, **kwargs)
        except TypeCheckError as err:
            found = re.search(r"typechecking parameter '(\w+)'", str(err))
            if not found or "checking the parameters of" not in str(err):
                raise
            name = found.group(1)
            arguments = signature.bind(*args, **kwargs).arguments
            error = refusal(name, typing.get_type_hints(fn, include_extras=True)[name], arguments[name], arguments)
            if isinstance(arguments[name], (Tensor, np.ndarray)) and (axes := _fixed_axes(name, arguments, fn)):
                said = ", ".join(f"{k}={v} from {arg}" for k, v, arg in axes)
                error.args = (f"{error.args[0]} (axes so far: {said})",)
            raise error from None
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError:  # a call Python itself refuses (a misspelt keyword): Python's own words, which name it
                fn(*args, **kwargs)
            raise

    return call


def _all_finite(value: object) -> bool:
    """Whether a result holds no NaN or infinity: a tensor, an array, a number, or a tuple, list or Prompt of them
    (anything else counts as finite)."""
    if isinstance(value, Tensor):
        return value.device.type == "meta" or value.is_complex() or bool(finite_flag(value.detach()))
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return bool(np.isfinite(value).all())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return all(_all_finite(v) for v in value)
    fields = getattr(value, "__dataclass_fields__", None)  # a Prompt: its tensors
    return all(_all_finite(getattr(value, f)) for f in fields) if fields and hasattr(value, "x_query") else True


def finite_result(*names: str) -> Callable[[F], F]:
    """A decorator (above :func:`checked`) that declares the result finite whenever the arguments are: a NaN or an
    infinity in it (a product or a square that overflowed inside, on finite inputs) is a ValueError naming
    ``names``, the arguments whose size made it overflow, not a wrong number returned. Off inside
    :func:`~icl_utils.checks.nonfinite_allowed`."""
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be one or more argument names (str), got {names!r:.60}")

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            if values_checked() and not _all_finite(out):
                said = " or ".join(names)
                raise ValueError(f"{said} made the result of {fn.__name__} overflow to inf or NaN: rescale {said}")
            return out

        return call

    return decorate


def same_dtype(*names: str) -> Callable[[F], F]:
    """A decorator (above :func:`checked`) that declares that the tensor arguments ``names`` share one dtype: a
    mix is a TypeError naming the first argument that differs from the first given, not torch's error from
    inside a matrix product. Arguments that are not tensors (None, say) are left to the other checks."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        if unknown := [n for n in names if n not in signature.parameters]:
            raise TypeError(f"names must be arguments of {fn.__name__}, but it has no {', '.join(unknown)}")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs).arguments
            tensors = [(n, bound[n]) for n in names if isinstance(bound.get(n), Tensor)]
            for name, t in tensors[1:]:
                if t.dtype != tensors[0][1].dtype:
                    first, dtype = tensors[0][0], tensors[0][1].dtype
                    raise TypeError(f"{name} must have the dtype of {first}, {dtype}, got {t.dtype}")
            return fn(*args, **kwargs)

        return call

    return decorate
