"""icl_utils.gd: gradient descent over one tensor or a dict of named tensors, one step size per block."""

import numpy as np
import pytest
import torch

from icl_utils.gd import GDHistory, gradient_descent

SHAPES = {"particles": (5, 4), "gamma": (3, 3)}
STEPS = {"particles": 0.3, "gamma": 0.05}


def problem():
    """A loss that couples the blocks (chapter 2's shape: particles feeding a matrix Gamma), in float64."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 4, generator=g, dtype=torch.float64)
    y = torch.randn(20, 3, generator=g, dtype=torch.float64)
    init = {name: torch.randn(*shape, generator=g, dtype=torch.float64) for name, shape in SHAPES.items()}

    def loss(theta):
        features = torch.tanh(x @ theta["particles"].T)[:, :3]
        return (features @ theta["gamma"] - y).square().mean() + 0.1 * theta["gamma"].square().sum()

    return loss, init


def flattened_reference(loss, init, lr, steps):
    """The same descent by hand on one vector with a per-coordinate step: the trajectory, one row per step."""
    sizes = [init[name].numel() for name in SHAPES]
    theta = torch.cat([init[name].flatten() for name in SHAPES])
    step = torch.cat([torch.full((size,), lr[name], dtype=torch.float64) for name, size in zip(SHAPES, sizes)])

    def unflatten(vector):
        return {name: part.view(SHAPES[name]) for name, part in zip(SHAPES, vector.split(sizes))}

    path = [theta.clone()]
    for _ in range(steps):
        theta = theta.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(loss(unflatten(theta)), theta)
        theta = theta.detach() - step * grad
        path.append(theta.clone())
    return torch.stack(path)


def test_named_blocks_follow_the_flattened_descent_bitwise():
    loss, init = problem()
    before = {name: t.clone() for name, t in init.items()}
    final, history = gradient_descent(loss, init, steps=30, lr=STEPS, record=dict, progress=False)
    reference = flattened_reference(loss, init, STEPS, 30)
    path = torch.cat([torch.as_tensor(history.records[name]).flatten(1) for name in SHAPES], dim=1)
    assert list(history.steps) == list(range(31))
    assert torch.equal(path, reference)  # every step, bitwise
    assert set(final) == set(SHAPES) and all(not t.requires_grad for t in final.values())
    assert torch.equal(torch.cat([final[name].flatten() for name in SHAPES]), reference[-1])
    assert all(torch.equal(init[name], before[name]) for name in SHAPES)  # the initial tensors are left alone
    # control: the step sizes do act per block (swapped, the path is another one)
    swapped, _ = gradient_descent(loss, init, steps=30, lr={"particles": 0.05, "gamma": 0.3}, progress=False)
    assert not torch.equal(swapped["gamma"], final["gamma"])


def test_one_step_size_for_every_block_and_one_tensor_in_one_tensor_out():
    loss, init = problem()
    final, _ = gradient_descent(loss, init, steps=5, lr=0.1, progress=False)
    reference = flattened_reference(loss, init, dict.fromkeys(SHAPES, 0.1), 5)
    assert torch.equal(torch.cat([final[name].flatten() for name in SHAPES]), reference[-1])
    theta, history = gradient_descent(
        lambda t: (t - 3.0).square().sum(),
        torch.zeros(2, dtype=torch.float64),
        steps=4,
        lr=0.25,
        record_every=2,
        progress=False,
    )
    assert isinstance(theta, torch.Tensor) and isinstance(history, GDHistory)
    torch.testing.assert_close(theta, torch.full((2,), 3.0 - 3.0 * 0.5**4, dtype=torch.float64))
    assert list(history.steps) == [0, 2, 4] and history.records["loss"].shape == (3,)
    np.testing.assert_allclose(history.records["loss"], [18.0, 18.0 / 16, 18.0 / 256])


def test_loss_record_and_hook_receive_the_dict():
    seen = []

    def hook(step, theta, value):
        seen.append((step, sorted(theta), value))

    final, history = gradient_descent(
        lambda t: t["a"].square().sum() + t["b"].sum(),
        {"a": torch.ones(2), "b": torch.zeros(1)},
        steps=2,
        lr={"a": 0.5, "b": 1.0},
        hook=hook,
        progress=False,
    )
    assert [s[:2] for s in seen] == [(0, ["a", "b"]), (1, ["a", "b"])] and seen[0][2] == pytest.approx(2.0)
    assert torch.equal(final["a"], torch.zeros(2)) and torch.equal(final["b"], torch.tensor([-2.0]))
    np.testing.assert_allclose(history.records["loss"], [2.0, -1.0, -2.0])


@pytest.mark.parametrize(
    "init, lr, error, match",
    [
        ({"a": torch.ones(2), "b": torch.ones(1)}, {"a": 0.1}, ValueError, "lr must name the same blocks as init"),
        ({"a": torch.ones(2)}, {"a": 0.1, "b": 0.1}, ValueError, "lr must name the same blocks as init"),
        ({"a": torch.ones(2)}, {"A": 0.1}, ValueError, r"\['a'\], got \['A'\]"),
        (torch.ones(2), {"a": 0.1}, ValueError, "lr must name the same blocks as init"),
        (
            {"a": torch.ones(2)},
            {"a": 0.0},
            ValueError,
            "lr must be a non-empty mapping from block names to numbers > 0",
        ),
        (
            {"a": torch.ones(2)},
            {"a": "big"},
            ValueError,
            "lr must be a non-empty mapping from block names to numbers > 0",
        ),
        ({"a": torch.ones(2)}, torch.full((2,), 0.1), TypeError, "lr must be a real number or a mapping, got Tensor"),
        ({"a": torch.ones(2), "b": np.ones(2)}, 0.1, TypeError, r"init\['b'\] must be a floating-point tensor"),
        ({"a": torch.ones(2), "b": 1.0}, 0.1, TypeError, r"init\['b'\] must be a floating-point tensor, got float"),
        ({"a": torch.ones(2, dtype=torch.long)}, 0.1, TypeError, r"init\['a'\] must be a floating-point tensor"),
        ([1.0, 2.0], 0.1, TypeError, "init must be a torch.Tensor or a dict, got list"),
        ({}, 0.1, ValueError, "non-empty dict"),
        ({"a": torch.ones(2), "b": torch.ones(2, dtype=torch.float64)}, 0.1, ValueError, "share one device and dtype"),
    ],
)
def test_bad_blocks_and_step_sizes_are_refused(init, lr, error, match):
    def loss(t):
        return sum(v.sum() for v in t.values()) if isinstance(t, dict) else t.sum()

    with pytest.raises(error, match=match):
        gradient_descent(loss, init, steps=1, lr=lr, progress=False)


def test_until_stops_at_the_first_record_it_accepts():
    target = torch.tensor([1.0], dtype=torch.float64)
    seen = []

    def until(rec):
        seen.append(float(rec["loss"]))
        return rec["loss"] < 1e-4

    theta, hist = gradient_descent(
        lambda t: (t - target).square().sum(),
        torch.zeros(1, dtype=torch.float64),
        steps=10_000,
        lr=0.1,
        record_every=10,
        until=until,
        progress=False,
    )
    # the loss is 0.64^s after s steps: first below 1e-4 at s = 21, so at the record of step 30
    assert hist.steps[-1] == 30 and len(seen) == len(hist.steps) == 4
    assert hist.records["loss"][-1] < 1e-4 <= hist.records["loss"][-2]
    assert torch.allclose(theta, target - 0.8**30, atol=1e-12)
    with pytest.raises(TypeError, match="until"):
        gradient_descent(lambda t: t.sum(), torch.zeros(1), steps=1, lr=0.1, until=3, progress=False)


def test_the_final_record_and_parameters_are_checked():
    """A descent whose last step overflows records no non-finite loss before it: the final record (the loss at the
    returned parameters) and the parameters themselves are checked, so it cannot return inf or NaN silently."""
    with pytest.raises(FloatingPointError, match="loss became inf at step 1"):
        gradient_descent(
            lambda t: t.square().sum(), torch.tensor([1.0], dtype=torch.float64), steps=1, lr=1e200, progress=False
        )
    with pytest.raises(FloatingPointError, match="the parameters became non-finite by step 1"):
        gradient_descent(
            lambda t: t.abs().sqrt().sum() * 0,
            torch.zeros(1),
            steps=1,
            lr=1.0,
            record=lambda t: {"norm": t.norm()},
            progress=False,
        )


def test_history_run_selects_one_of_the_runs_descended_together():
    from icl_utils.gd import GDHistory

    hist = GDHistory(np.arange(3), {"loss": np.arange(6.0).reshape(3, 2), "w": np.zeros((3, 2, 4))}, runs=2)
    one = hist.run(1)
    np.testing.assert_array_equal(one.records["loss"], [1.0, 3.0, 5.0])
    assert one.records["w"].shape == (3, 4) and one.steps is hist.steps and one.runs is None
    with pytest.raises(ValueError, match="index must select"):
        hist.run(2)
    with pytest.raises(TypeError, match="index must be an int"):
        hist.run(True)
    # a single run whose records happen to have a second axis is not sliced as if it held runs
    with pytest.raises(ValueError, match="single run"):
        GDHistory(np.arange(3), {"loss_k": np.zeros((3, 3))}).run(0)
