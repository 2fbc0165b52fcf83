"""The declared checks (icl_utils.declared): the errors they make from a declaration, numpy scalars taken as Python
numbers, and the same outcome on every call (beartype checks one random item of a container)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from icl_utils.declared import Count, Counts, Positive, checked, finite_flag


@checked
def _f(x: Float[Tensor, "n d"], w: Float[Tensor, " d"], k: Count = 1, lams: Counts = (1,)) -> float:
    return float(k)


@checked
def _items(ns: Sequence[int], pair: tuple[Count, Count] = (1, 1)) -> list[int]:
    return list(ns)


@checked
@dataclass(frozen=True)
class _Config:
    steps: Count
    lr: Positive = 0.1


def test_errors_name_the_argument_the_constraint_and_the_value():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"^k must be >= 1, got 0$"):
        _f(x, torch.zeros(2), k=0)
    with pytest.raises(TypeError, match=r"^k must be an int, got float$"):
        _f(x, torch.zeros(2), k=2.5)
    with pytest.raises(
        ValueError, match=r"w must be a float tensor of shape \(d,\), got .*\(3,\) \(axes so far: d=2 from x\)$"
    ):
        _f(x, torch.zeros(3))
    with pytest.raises(ValueError, match="x must be a float tensor"):  # integer and complex tensors are refused
        _f(x.long(), torch.zeros(2))
    with pytest.raises(
        ValueError, match=r"lr must be > 0 and finite \(a normal float64, 2.2e-308 to 1.8e308\), got nan"
    ):
        _Config(steps=1, lr=float("nan"))


@checked
def _g(a: Float[Tensor, "B n"], b: Float[Tensor, "K K"], c: Float[Tensor, "*S B"]) -> None:
    pass


def test_the_axes_so_far_are_those_the_other_arguments_fixed_for_the_failing_one():
    """Not the failing argument's own axes (b bound K=2 before its second axis failed), nor the axes of arguments
    it shares none with (a's n for c); a variadic axis as a tuple."""
    with pytest.raises(ValueError, match=r"^b must be a float tensor of shape \(K, K\), got [^(]*\(2, 3\)$"):
        _g(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match=r"c must be .* shape \(3,\) \(axes so far: B=2 from a\)$"):
        _g(torch.zeros(2, 3), torch.zeros(4, 4), torch.zeros(3))


def test_numpy_scalars_are_the_python_numbers_they_hold_in_tuples_and_lists_too():
    assert _f(torch.zeros(3, 2), torch.zeros(2), k=np.int64(2), lams=(np.int64(1), 2)) == 2.0
    assert _items([1, np.int64(2)], pair=(np.int32(1), 2)) == [1, 2]
    config = _Config(steps=np.int64(3), lr=np.float32(0.5))
    assert type(config.steps) is int and type(config.lr) is float


def test_a_bad_item_gets_the_same_outcome_on_every_call():
    """A container's items are checked where a validator says so (every item), never one random item: a bad
    item once passed on some calls and failed on others, sometimes after the work was done."""
    for _ in range(20):
        assert _items(["a", 1, 2]) == ["a", 1, 2]  # Sequence[int] checks a sequence
        with pytest.raises(ValueError, match="lams must be a non-empty tuple, list or 1-D array of ints >= 1"):
            _f(torch.zeros(3, 2), torch.zeros(2), lams=[1] * 30 + [0])
        with pytest.raises(ValueError, match=r"pair must be a tuple \(>= 1, >= 1\)"):  # fixed tuples: every item
            _items([1], pair=(1, 0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_finite_flag_finds_every_nan_and_infinity(dtype):
    """One reduction (smallest and largest value) says what isfinite's mask says: a NaN, +inf or -inf at any place,
    in the vectorized body or the tail of the reduction (a max alone would miss -inf, a NaN-skipping one a NaN)."""
    for n in (1, 7, 16, 33, 100):
        clean = torch.randn(n, 3).to(dtype)
        assert bool(finite_flag(clean))
        for position in range(n * 3):
            for bad in (float("nan"), float("inf"), -float("inf")):
                t = clean.clone().view(-1)
                t[position] = bad
                assert not bool(finite_flag(t.view(n, 3))), (n, position, bad)


def test_finite_flag_of_empty_integer_and_complex_tensors():
    assert bool(finite_flag(torch.empty(0, 3)))  # aminmax has no identity: isfinite's answer
    assert bool(finite_flag(torch.arange(5)))
    assert not bool(finite_flag(torch.tensor([1 + 1j, complex("nan")])))
    assert finite_flag(torch.ones(3)).shape == ()  # a tensor, not a bool: no host sync
    assert bool(finite_flag(torch.tensor([True, False])))
    assert not bool(finite_flag(torch.tensor(float("nan"))))  # 0-dim
    assert not bool(finite_flag(torch.tensor([1.0, float("inf")], requires_grad=True)))
    assert not finite_flag(torch.ones(3, requires_grad=True)).requires_grad
