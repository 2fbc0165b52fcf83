import numpy as np
import pytest
import torch

from icl_utils.prompts import Prompt, TaskFamily, squared_errors
from icl_utils.tasks import LinearRegression
from icl_utils.tasks.discrete import DiscreteFeatures, imbalanced_probs
from icl_utils.tasks.features import TeacherFeatures
from icl_utils.tasks.nonparametric import NonparametricTasks
from icl_utils.tasks.pool import PromptPool
from icl_utils.tasks.single_index import SingleIndexTasks


def test_prompt_shapes_and_tokens(gen):
    p = LinearRegression(dim=3).sample(4, 5, gen)
    assert p.x.shape == (4, 5, 3) and p.y.shape == (4, 5)
    tok = p.tokens()
    assert tok.shape == (4, 11, 4)
    # x tokens at even positions, y tokens at odd ones, the query last
    assert torch.equal(tok[:, 0:10:2, :3], p.x) and torch.all(tok[:, 0::2, 3] == 0)
    assert torch.equal(tok[:, 1::2, 3], p.y) and torch.equal(tok[:, 1::2, :3], p.x)
    assert torch.equal(tok[:, -1, :3], p.x_query)


def test_split_gives_consecutive_pieces_that_cat_back(gen):
    p = LinearRegression(dim=2).sample(7, 4, gen)
    parts = p.split(3)
    assert [q.batch_size for q in parts] == [3, 3, 1]
    assert torch.equal(parts[1].x, p.x[3:6]) and torch.equal(parts[2].y_query, p.y_query[6:])
    joined = Prompt.cat(parts)
    assert all(torch.equal(getattr(joined, f), getattr(p, f)) for f in ("x", "y", "x_query", "y_query"))
    assert len(p.split(100)) == 1


def test_prefix_makes_point_k_the_query(gen):
    p = LinearRegression(dim=2).sample(3, 6, gen)
    q = p.prefix(2)
    assert q.n_context == 2
    assert torch.equal(q.x_query, p.x[:, 2]) and torch.equal(q.y_query, p.y[:, 2])
    assert torch.equal(p.prefix(6).x_query, p.x_query)
    with pytest.raises(ValueError, match="k must be"):
        p.prefix(7)


def test_prompt_validates_shapes():
    x = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="y must be a float tensor of shape"):
        Prompt(x=x, y=torch.zeros(2, 4), x_query=torch.zeros(2, 4), y_query=torch.zeros(2))
    with pytest.raises(ValueError, match="x_query"):
        Prompt(x=x, y=torch.zeros(2, 3), x_query=torch.zeros(2, 5), y_query=torch.zeros(2))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor"):
        Prompt(x=[[0.0]], y=torch.zeros(2, 3), x_query=torch.zeros(2, 4), y_query=torch.zeros(2))
    with pytest.raises(ValueError, match="dtype"):
        Prompt(x=x, y=torch.zeros(2, 3, dtype=torch.float64), x_query=torch.zeros(2, 4), y_query=torch.zeros(2))


def test_sampler_moments(gen):
    """Weights follow N(mean, cov), inputs N(0, x_cov), and the label noise has the stated variance."""
    mean = torch.tensor([1.0, -2.0, 0.5])
    a = torch.tensor([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.0, -0.3, 0.7]])
    cov = a @ a.T
    x_cov = torch.diag(torch.tensor([1.0, 4.0, 0.25]))
    task = LinearRegression(dim=3, noise_std=0.3, prior_mean=mean, prior_cov=cov, x_cov=x_cov)
    w = task.sample_weights(200_000, gen)
    assert torch.allclose(w.mean(0), mean, atol=0.02)
    assert torch.allclose(torch.cov(w.T), cov, atol=0.03)
    fixed = mean.expand(100_000, 3)
    p = task.sample(100_000, 1, gen, weights=fixed)
    assert torch.allclose(torch.cov(p.x[:, 0].T), x_cov, rtol=0.03, atol=0.02)
    resid = p.y[:, 0] - p.x[:, 0] @ mean
    assert abs(resid.var().item() - 0.09) < 0.003


def test_singular_prior_is_allowed_and_respected(gen):
    cov = torch.diag(torch.tensor([1.0, 0.0]))
    w = LinearRegression(dim=2, prior_cov=cov).sample_weights(1000, gen)
    assert torch.all(w[:, 1].abs() < 1e-6)


def test_active_dims_zero_the_rest(gen):
    p = LinearRegression(dim=5).sample(8, 4, gen, active_dims=2)
    assert torch.all(p.x[:, :, 2:] == 0) and torch.all(p.x_query[:, 2:] == 0)
    with pytest.raises(ValueError, match="active_dims"):
        LinearRegression(dim=5).sample(8, 4, gen, active_dims=6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=0), "dim"),
        (dict(dim=2.5), "dim"),
        (dict(dim=2, noise_std=-1.0), "noise_std"),
        (dict(dim=2, prior_mean=torch.zeros(3)), "prior_mean"),
        (dict(dim=2, prior_cov=torch.tensor([[1.0, 2.0], [0.0, 1.0]])), "prior_cov must be symmetric"),
        (dict(dim=2, prior_cov=torch.tensor([[1.0, 0.0], [0.0, -1.0]])), "prior_cov must be positive"),
        (dict(dim=2, x_cov=torch.eye(3)), "x_cov"),
    ],
)
def test_task_rejects_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LinearRegression(**kwargs)


def test_sample_rejects_bad_arguments(gen):
    task = LinearRegression(dim=2)
    with pytest.raises(ValueError, match="batch"):
        task.sample(0, 3, gen)
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 3, 0)
    with pytest.raises(ValueError, match="weights"):
        task.sample(2, 3, gen, weights=torch.zeros(3, 2))


def test_from_points_makes_the_last_point_the_query(gen):
    xs = torch.randn(4, 6, 3, generator=gen)
    ys = torch.randn(4, 6, generator=gen)
    p = Prompt.from_points(xs, ys)
    assert (p.batch_size, p.n_context, p.dim) == (4, 5, 3)
    assert torch.equal(p.x, xs[:, :5]) and torch.equal(p.y, ys[:, :5])
    assert torch.equal(p.x_query, xs[:, 5]) and torch.equal(p.y_query, ys[:, 5])
    back_x, back_y = p.points()  # the inverse of points()
    assert torch.equal(back_x, xs) and torch.equal(back_y, ys)
    alone = Prompt.from_points(xs[:, :1], ys[:, :1])  # one point: the query alone, n = 0
    assert alone.n_context == 0 and torch.equal(alone.x_query, xs[:, 0])
    with pytest.raises(ValueError, match=r"xs and ys must be tensors of shape .* got \(4, 6, 3\) and \(4, 5\)"):
        Prompt.from_points(xs, ys[:, :5])


TASKS = {
    "linear": lambda: LinearRegression(dim=3, noise_std=0.1),
    "nonparametric": lambda: NonparametricTasks(dim=3, smoothness=1.0, n_basis=8),
    "single index": lambda: SingleIndexTasks(dim=3, subspace_dim=1),
    "discrete": lambda: DiscreteFeatures(dim=3, probs=imbalanced_probs(3, 0.5)),
    "teacher features": lambda: TeacherFeatures(dim=3, k=2, width=4, n_whiten=256),
}


@pytest.mark.parametrize("name", TASKS)
def test_every_sampler_is_a_task_family_drawing_n_examples_and_a_query(name, gen):
    """Every task family takes sample(batch, n, generator) and returns n context examples and a query; the same seed
    gives the same prompts (only LinearRegression takes active_dims, for the curriculum)."""
    task = TASKS[name]()
    assert isinstance(task, TaskFamily)
    p = task.sample(4, 6, gen)
    assert (p.batch_size, p.n_context, p.dim) == (4, 6, 3)
    a, b = (task.sample(2, 0, torch.Generator().manual_seed(5)) for _ in range(2))
    assert a.n_context == 0 and torch.equal(a.x_query, b.x_query) and torch.equal(a.y_query, b.y_query)
    pool = PromptPool(p)
    assert isinstance(pool, TaskFamily) and pool.sample(3, 6, gen).n_context == 6


NUMPY_TASKS = {  # each family's numbers given as NumPy scalars, and as the Python numbers they hold
    "linear": lambda m: LinearRegression(dim=m(3), noise_std=m(0.1), x_range=m(0.5)),
    "nonparametric": lambda m: NonparametricTasks(
        dim=m(2), smoothness=m(1.5), basis="bspline", n_basis=m(9), order=m(1), noiseless_query=m(True)
    ),
    "single index": lambda m: SingleIndexTasks(dim=m(3), subspace_dim=m(2), lead_mean=m(1.5), subspace_seed=m(1)),
    "discrete": lambda m: DiscreteFeatures(dim=m(3), probs=imbalanced_probs(m(3), m(0.5)), seed=m(2)),
    "teacher features": lambda m: TeacherFeatures(dim=m(3), k=m(2), width=m(4), scale=m(1.5), n_whiten=m(256)),
}


@pytest.mark.parametrize("name", NUMPY_TASKS)
def test_numpy_scalars_are_taken_as_the_python_numbers_they_hold(name):
    def numpy(v):
        return np.bool_(v) if isinstance(v, bool) else np.int64(v) if isinstance(v, int) else np.float64(v)

    task, same = NUMPY_TASKS[name](numpy), NUMPY_TASKS[name](lambda v: v)
    assert repr(task) == repr(same)
    a = task.sample(np.int64(3), np.int64(4), torch.Generator().manual_seed(0))
    b = same.sample(3, 4, torch.Generator().manual_seed(0))
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("x", "y", "x_query", "y_query"))


def test_squared_errors_at_the_query_or_at_every_point(gen):
    p = LinearRegression(dim=2).sample(5, 4, gen)
    at_query = torch.randn(5, generator=gen)
    errs = squared_errors(at_query, p)
    assert errs.shape == (5,)
    torch.testing.assert_close(errs, (at_query - p.y_query).square(), rtol=0, atol=0)
    every = torch.randn(5, 5, generator=gen)
    errs = squared_errors(every, p)
    assert errs.shape == (5, 5)
    torch.testing.assert_close(errs, (every - p.points()[1]).square(), rtol=0, atol=0)
    assert squared_errors(at_query.double(), p).dtype == torch.float64  # the wider dtype
    assert squared_errors(at_query.half(), p).dtype == torch.float32
    for shape in [(5, 4), (5, 1), (4,), (5, 5, 1), ()]:
        with pytest.raises(
            ValueError, match=r"preds \(the predictions\) must have shape \(5,\) \(the query\) or \(5, 5\)"
        ):
            squared_errors(torch.zeros(shape), p)
    with pytest.raises(TypeError, match=r"preds \(the predictions\) must be a torch.Tensor"):
        squared_errors([0.0] * 5, p)
