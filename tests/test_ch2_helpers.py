"""Chapter 2's machinery: the three mean-field models' gradient descent, the saddle-escape fit, the mixture path
towards the teacher, the readout error, and the chapter's figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils.dynamics import mean_field as mf
from icl_utils.gd import GDHistory
from icl_utils.plotting import plot_mean_field_training, plot_model_losses, plot_readout_errors
from icl_utils.tasks.features import TeacherFeatures, sigmoid_network

D, K, M = 5, 2, 8


@pytest.fixture
def problem():
    teacher = TeacherFeatures(dim=D, k=K, width=6, seed=3, n_whiten=4096)
    data = mf.FeaturePrompts.sample(teacher, 16, 32, torch.Generator().manual_seed(1), torch.float64)
    x, f = data.inputs()
    init = mf.init_particles(M, D, K, torch.Generator().manual_seed(2)).double()
    return teacher, x, f, init, data


def test_attention_model_matches_descent_on_the_flattened_vector(problem):
    """Named blocks with their own step sizes give bitwise the update of one vector with per-coordinate steps."""
    _, x, f, init, data = problem
    run = mf.run_gradient_descent("attention", data, init, steps=5, eta=0.2, gamma_lr=5.0, progress=False)
    size = init.numel()
    theta = torch.cat([init.flatten(), torch.eye(K, dtype=init.dtype).flatten()])
    lr = torch.cat([torch.full((size,), 0.2 * M, dtype=init.dtype), torch.full((K * K,), 5.0, dtype=init.dtype)])
    for _ in range(5):
        theta.requires_grad_(True)
        loss = mf.attention_loss(theta[:size].view(M, -1), theta[size:].view(K, K), f, x)
        (grad,) = torch.autograd.grad(loss, theta)
        theta = (theta - lr * grad).detach()
    assert torch.equal(run.particles, theta[:size].view(M, -1)) and torch.equal(run.gamma, theta[size:].view(K, K))
    assert run.events == [] and len(run.losses) == len(run.steps) == 2  # steps 0 and 5


def test_students_trained_together_are_trained_as_alone(problem):
    """Full batch: a stack of S students follows exactly the S runs alone; with SGD each student draws its own."""
    _, _x, _f, init, data = problem
    stack = torch.stack([init, mf.init_particles(M, D, K, torch.Generator().manual_seed(9)).double()])
    together = mf.run_gradient_descent("static", data, stack, steps=10, eta=0.2, record_every=5, progress=False)
    for s in range(2):
        alone = mf.run_gradient_descent("static", data, stack[s], steps=10, eta=0.2, record_every=5, progress=False)
        torch.testing.assert_close(together.particles[s], alone.particles, rtol=0, atol=1e-12)
        np.testing.assert_allclose(together.losses[:, s], alone.losses, rtol=1e-10)
    same = torch.stack([init, init])
    sgd = mf.run_gradient_descent(
        "attention",
        data,
        same,
        steps=10,
        eta=0.2,
        batch=2,
        gamma_lr=1.0,
        generator=torch.Generator().manual_seed(3),
        progress=False,
    )
    assert sgd.losses.shape == (2, 2) and not torch.equal(sgd.particles[0], sgd.particles[1])


def test_sgd_steps_on_the_drawn_prompts(problem):
    """One SGD step of the static model is a gradient step on the static loss over the drawn prompts' inputs, and
    of the attention model on the leave-one-out loss of the drawn prompts; each student draws its own."""
    _, _, _, init, data = problem
    stack = torch.stack([init, init])
    for model in ("static", "attention"):
        run = mf.run_gradient_descent(
            model,
            data,
            stack,
            steps=1,
            eta=0.2,
            batch=3,
            gamma_lr=1.0,
            generator=torch.Generator().manual_seed(4),
            progress=False,
        )
        drawn = data.draw(2, 3, torch.Generator().manual_seed(4))
        for s in range(2):
            p = init.clone().requires_grad_(True)
            if model == "static":
                loss = mf.static_loss(p, drawn.f[s].flatten(0, 1), drawn.x[s].flatten(0, 1), K)
            else:
                loss = mf.icl_loss(p, torch.eye(K, dtype=p.dtype), drawn.x[s], drawn.y[s])
            (grad,) = torch.autograd.grad(loss, p)
            torch.testing.assert_close(run.particles[s], init - 0.2 * M * grad, rtol=0, atol=1e-12)
        assert not torch.equal(run.particles[0], run.particles[1])


def test_static_and_modified_models(problem):
    _, x, f, init, data = problem
    static = mf.run_gradient_descent("static", data, init, steps=20, eta=0.2, record_every=10, progress=False)
    assert static.gamma is None and static.events == [] and list(static.steps) == [0, 10, 20]
    assert static.losses[-1] < static.losses[0]
    manual = init.clone()
    for _ in range(20):
        manual.requires_grad_(True)
        (grad,) = torch.autograd.grad(mf.static_loss(manual, f, x, K), manual)
        manual = (manual - 0.2 * M * grad).detach()
    torch.testing.assert_close(static.particles, manual, rtol=0, atol=1e-12)
    # a flat start (all neurons equal) stalls, so the modified dynamics intervene at every check
    flat = init[:1].repeat(M, 1)
    g = torch.Generator().manual_seed(7)
    with pytest.warns(RuntimeWarning, match="nearly singular") as caught:
        modified = mf.run_gradient_descent(
            "modified", data, flat, steps=205, eta=1e-6, generator=g, record_every=10, progress=False
        )
    assert modified.events == [(100, 0), (200, 0)]
    assert len([w for w in caught if "nearly singular" in str(w.message)]) == 1  # once per run, not per record


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(model="linear"), ValueError, "model must be 'attention' or 'static' or 'modified'"),
        (dict(model="attention"), ValueError, "gamma_lr must be given"),
        (dict(model="attention", gamma_lr=1.0, record=lambda t: {}), ValueError, "record is for the static"),
        (dict(model="modified"), TypeError, "generator must be a torch.Generator"),
        (dict(model="static", batch=4), TypeError, "generator must be a torch.Generator"),
        (dict(model="static", eta=0.0), ValueError, r"eta must be in \(0, "),
        (dict(model="static", init=torch.zeros(4, D + 1)), ValueError, r"init must have width k \+ d \+ 1"),
        (dict(model="static", data=torch.zeros(4, 3)), TypeError, "data must be a FeaturePrompts"),
    ],
)
def test_run_gradient_descent_checks_its_arguments(problem, kwargs, error, match):
    _, _x, _f, init, data = problem
    args = dict(init=init, eta=0.1, data=data) | kwargs
    model, init, data = args.pop("model"), args.pop("init"), args.pop("data")
    with pytest.raises(error, match=match):
        mf.run_gradient_descent(model, data, init, steps=2, progress=False, **args)


def test_particle_spread_and_escape_steps():
    p = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    assert mf.particle_spread(p).item() == pytest.approx(1.0)  # each row at distance 1 from the mean (1, 0)
    assert mf.particle_spread(p[:1].repeat(5, 1)).item() == 0.0
    four = torch.tensor([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0], [5.0, 5.0]])
    assert mf.particle_spread(four, torch.tensor([0, 0, 1, 1])).item() == 0.0  # coincident within each group
    assert mf.particle_spread(torch.stack([p, 2 * p])).tolist() == pytest.approx([1.0, 2.0])
    history = GDHistory(
        steps=np.array([0, 10, 20, 30]), records={"loss": np.array([[4.0, 1.0], [3.0, 1.0], [1.9, 0.9], [1.0, 0.9]])}
    )
    np.testing.assert_array_equal(mf.escape_steps(history), [20, np.inf])
    with pytest.raises(TypeError, match="GDHistory"):
        mf.escape_steps({"loss": [1.0]})


def test_fit_saddle_escape_recovers_an_exponential_on_the_plateau():
    steps = np.arange(0, 400, 10)
    spread = 1e-6 * np.exp(0.03 * steps)
    loss = np.where(steps < 300, 2.0, 0.01)  # falls half-way at step 300, the 31st record
    fit = mf.fit_saddle_escape(GDHistory(steps=steps, records={"loss": loss, "spread": spread}))
    assert fit.plateau_end == 30 and fit.plateau_step == 290 and fit.window == slice(10, 30)
    assert fit.rate == pytest.approx(0.03) and fit.r2 == pytest.approx(1.0)
    assert fit.growth == pytest.approx(np.exp(0.03 * 290))
    np.testing.assert_allclose(fit.fitted(), spread[10:30], rtol=1e-8)
    short = GDHistory(steps=steps, records={"loss": np.where(steps < 30, 2.0, 0.01), "spread": spread})
    with pytest.raises(ValueError, match="history must hold a loss plateau"):
        mf.fit_saddle_escape(short)
    flat = GDHistory(steps=steps, records={"loss": loss, "spread": 0 * spread})  # neurons that never split: NaN
    with pytest.raises(ValueError, match="spread must be > 0 on the plateau"):
        mf.fit_saddle_escape(flat)


def test_mixture_is_the_mixed_network_and_the_path_ends_at_zero(problem):
    teacher, x, f, init, _ = problem
    rotation = torch.linalg.qr(torch.randn(K, K, generator=torch.Generator().manual_seed(4), dtype=torch.float64))[0]
    s = 0.3
    mixed = sigmoid_network(mf.mixture(init, teacher.particles, s, rotation), x, K)
    torch.testing.assert_close(mixed, (1 - s) * sigmoid_network(init, x, K) + s * f @ rotation.T)
    losses = mf.path_losses(init, teacher.particles, rotation, np.linspace(0, 1, 5), f, x)
    assert losses.shape == (5,) and losses[-1] < 1e-6
    assert losses[0] == pytest.approx(mf.static_loss(init, f, x, K).item())
    with pytest.raises(ValueError, match=r"rotation must be a float tensor of shape \(k, k\)"):
        mf.mixture(init, teacher.particles, s, rotation[:1])


def test_readout_error_of_a_readable_and_an_unreadable_task(problem):
    _, x, _, init, _ = problem
    h = sigmoid_network(init, x, K)
    assert mf.readout_error(init, h @ torch.tensor([1.0, -2.0], dtype=h.dtype), x) < 1e-6  # linear in h
    ones = torch.ones(len(x), dtype=h.dtype)
    assert mf.readout_error(init, ones, x) > 1e-3  # no free constant: a constant is read only through the features
    noise = torch.randn(len(x), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert 0.9 < mf.readout_error(init, noise, x) <= 1.0  # independent of x: nothing to read out
    with pytest.raises(ValueError, match=r"x must be a float tensor of shape \(\*#S, K, d\).*K=511 from g"):
        mf.readout_error(init, noise[:-1], x)
    columns = torch.stack([ones, noise], 1)  # one evaluation of the features for both tasks
    shifted = ones + x[:, 0]  # a constant's centered error is refused (relative to Var g = 0)
    for centered, tasks in ((False, (ones, noise)), (True, (shifted, noise))):
        each = [mf.readout_error(init, g, x, centered) for g in tasks]
        both = mf.readout_error(init, torch.stack(tasks, 1), x, centered)
        np.testing.assert_allclose(both, np.stack(each, -1), rtol=1e-12)
    with pytest.raises(ValueError, match=r"g must not be constant .* column\(s\) \[0\] are"):
        mf.readout_error(init, columns, x, centered=True)
    students = (init, 0.5 * init)  # two networks, stacked (S, M, p): one value per student and column
    errors = mf.readout_error(torch.stack(students), columns, x)
    expected = [[mf.readout_error(p, g, x) for g in (ones, noise)] for p in students]
    np.testing.assert_allclose(errors, expected, rtol=1e-12)
    assert abs(errors[0, 0] - errors[1, 0]) > 1e-6  # the students differ, so a mix-up would show


def test_figures_draw_what_they_show(problem):
    steps = np.arange(0, 40, 10)
    losses = {name: np.ones((4, 3)) for name in mf.MODELS}
    fig = plot_mean_field_training(
        steps,
        losses,
        {"static": np.ones((4, 3)), "modified": np.ones((4, 3))},
        np.array([1e-4, 1e-8, 0.0]),
        {"static": np.array([10.0, 20.0, np.inf])},
        {"static": np.array([30.0, 25.0]), "perturbation only": np.array([5.0, 6.0])},
        saddle_steps=30,
    )
    a, b, c, d = fig.axes
    assert [line.get_label() for line in a.get_lines()] == list(mf.MODELS)
    assert a.get_lines()[2].get_linestyle() == "--" and len(a.collections) == 3  # medians with their bands
    assert len(b.get_lines()) == 2
    assert c.get_lines()[0].get_ydata().tolist() == [10.0, 20.0, 30.0]  # never escaped: drawn at the run's end
    assert [t.get_text() for t in c.get_xticklabels()] == ["0", "1e-4", "1e-8"]
    assert [t.get_text() for t in d.get_xticklabels()] == ["static", "perturbation only"]
    assert d.get_lines()[1].get_ydata().tolist() == [27.5, 27.5]  # the median bar
    plt.close(fig)
    ax = plot_model_losses(np.arange(3), {"static": np.ones(3)}, ylabel="excess")
    assert ax.get_ylabel() == "excess" and ax.get_yscale() == "log"
    plt.close(ax.figure)
    fig = plot_readout_errors(
        np.arange(3),
        {"a": np.ones(3), "b": np.ones(3)},
        {"a": [0.5, 0.7], "b": [0.6]},
        {"a": 0.4, "b": 0.3},
        titles={"a": "A"},
    )
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "task A" and fig.axes[1].get_title() == "task b"
    assert len(fig.axes[0].get_legend().get_texts()) == 3
    plt.close(fig)
    with pytest.raises(ValueError, match="same tasks"):
        plot_readout_errors(np.arange(3), {"a": np.ones(3)}, {}, {"a": 0.4})
    tasks = {name: np.ones(3) for name in "abc"}
    fig = plot_readout_errors(np.arange(3), tasks, {n: [0.5] for n in tasks}, dict.fromkeys(tasks, 0.4), columns=2)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 4 and [ax.get_title() for ax in visible] == ["task a", "task b", "task c"]
    assert visible[0].get_position().y0 > visible[2].get_position().y0  # two rows: c below a
    plt.close(fig)
    with pytest.raises(ValueError, match="columns"):
        plot_readout_errors(np.arange(3), tasks, {n: [0.5] for n in tasks}, dict.fromkeys(tasks, 0.4), columns=0)
