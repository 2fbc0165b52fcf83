"""Chapter 1's task family: B-splines, the Fourier basis, the oracle posterior mean, and the MLP attention model."""

import itertools
import math

import numpy as np
import pytest
import torch

from icl_utils import config
from icl_utils.estimators import discrete_posterior_mean, kernel_ridge
from icl_utils.exact import AttentionMoments, attention_gamma, attention_risk
from icl_utils.models import MLPAttention
from icl_utils.models.feature_attention import fit_attention_ridge
from icl_utils.prompts import Prompt
from icl_utils.risk import fit_slope, model_errors, query_risk
from icl_utils.tasks import nonparametric
from icl_utils.tasks.nonparametric import NonparametricTasks, cardinal_bspline
from icl_utils.tasks.pool import PromptPool
from icl_utils.train import TrainConfig, train_ensemble


@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_cardinal_bspline_integrates_to_one_and_its_shifts_sum_to_one(order):
    x = torch.linspace(-1, order + 2, 200_001, dtype=torch.float64)
    integral = torch.trapezoid(cardinal_bspline(x, order), x)
    assert abs(integral.item() - 1) < 1e-4  # the trapezoid rule across the jumps of N_0 costs ~1e-5
    z = torch.rand(1000, generator=torch.Generator().manual_seed(order), dtype=torch.float64) * 5
    partition = sum(cardinal_bspline(z - k, order) for k in range(-order - 2, 8))
    torch.testing.assert_close(partition, torch.ones_like(z))
    assert cardinal_bspline(torch.tensor([-0.1, order + 1.1]), order).abs().max() == 0  # support [0, m+1]


@pytest.mark.parametrize("dim", [1, 2])
def test_fourier_basis_is_orthonormal_under_uniform_inputs(dim):
    task = NonparametricTasks(dim=dim, smoothness=1.0, n_basis=40)
    x = torch.rand(200_000, dim, generator=torch.Generator().manual_seed(dim), dtype=torch.float64)
    f = task.features(x)
    gram = f.T @ f / len(x)
    assert (gram - torch.eye(40, dtype=gram.dtype)).abs().max() < 0.03  # Monte Carlo error ~ 6 / sqrt(2e5)


@pytest.mark.parametrize("basis", ["fourier", "bspline"])
@pytest.mark.parametrize("n", [12, 40])  # fewer examples than basis functions (kernel form) and more (primal form)
def test_oracle_posterior_mean_equals_a_direct_solve(basis, n, gen):
    task = NonparametricTasks(dim=1, smoothness=1.5, basis=basis, n_basis=24, noise_std=0.3)
    p = task.sample(5, n, gen)
    phi, phi_q = task.features(p.x.double()), task.features(p.x_query.double())
    prec = torch.diag(1 / task.prior_var())
    for b in range(5):  # posterior mean of beta: (Phi^T Phi / sigma^2 + Psi^-1)^-1 Phi^T y / sigma^2
        a = phi[b].T @ phi[b] / task.noise_var + prec
        beta = torch.linalg.solve(a, phi[b].T @ p.y[b].double() / task.noise_var)
        assert abs((phi_q[b] @ beta).item() - task.posterior_mean(p)[b].item()) < 1e-4


def test_oracle_risk_follows_the_minimax_rate(gen):
    """Excess risk of the posterior mean against n: slope near -2s/(2s+1) = -2/3 at s = 1 (noise large enough that
    the truncation at n_basis is not reached)."""
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=64, noise_std=0.5)
    ns = (16, 32, 64, 128)
    risks = [query_risk(task.posterior_mean, task.noiseless(), n, 4096, gen)[0] for n in ns]
    assert abs(fit_slope(ns, risks) + 2 / 3) < 0.1


def test_mlp_attention_gamma_is_fitted_by_ridge(gen):
    """The prediction is linear in Gamma, so the stage-2 ridge fit applies and lowers the ICL risk."""
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=16, noise_std=0.3)
    torch.manual_seed(0)
    model = MLPAttention(1, 8, hidden=16, input_scale=5.0)
    before = query_risk(model.predict, task, 16, 4096, gen)[0]
    fit_attention_ridge(model, task, n_tasks=4096, n=16, lam=1e-4, generator=gen)
    after = query_risk(model.predict, task, 16, 4096, gen)[0]
    assert after < 0.8 * before


def test_fit_slope_recovers_a_power_law():
    ns = [10, 20, 40, 80]
    assert fit_slope(ns, [3 * n**-0.8 for n in ns]) == pytest.approx(-0.8)
    with pytest.raises(ValueError, match="positive"):
        fit_slope([1, 2], [0.0, 1.0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=1, smoothness=0.0), "smoothness must be > 0"),
        (dict(dim=1, smoothness=1.0, order=-1), r"order must be in \[0, "),
        (dict(dim=1, smoothness=1.0, basis="wavelet"), "basis must be 'fourier' or 'bspline'"),
        (dict(dim=0, smoothness=1.0), r"dim must be in \[1, "),
    ],
)
def test_bad_task_arguments_raise(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        NonparametricTasks(**kwargs)


def test_bad_sample_and_basis_arguments_raise(gen):
    task = NonparametricTasks(dim=1, smoothness=1.0)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        task.sample(0, 4, gen)
    with pytest.raises(ValueError, match=r"order must be in \[0, "):
        cardinal_bspline(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="x must be a float tensor of shape"):
        task.features(torch.zeros(4, 2))


@pytest.mark.parametrize("dim, count, max_j", [(1, 40, 48), (2, 100, 16), (3, 300, 20), (5, 500, 10)])
def test_fourier_multi_indices_are_the_lowest_frequencies_in_order(dim, count, max_j):
    """Built level by level, the indices are those of a whole grid sorted by (total frequency, indices)."""
    grid = sorted(itertools.product(range(1, max_j + 1), repeat=dim), key=lambda js: (sum(j // 2 for j in js), js))
    assert sum(j // 2 for j in grid[count - 1]) < max_j // 2  # the grid holds every index of that frequency
    assert nonparametric._fourier_indices(dim, count) == grid[:count]


def test_sampling_in_chunks_gives_the_same_prompts(monkeypatch):
    """Labels are computed a chunk of prompts at a time (memory); the chunks must not change the draw."""
    task = NonparametricTasks(dim=2, smoothness=1.0, n_basis=16, noise_std=0.5)
    whole = task.sample(7, 5, torch.Generator().manual_seed(1))
    monkeypatch.setattr(config, "CHUNK_ELEMENTS", 2 * 6 * 16)  # two prompts per chunk, the last one alone
    chunked = task.sample(7, 5, torch.Generator().manual_seed(1))
    for field in ("x", "y", "x_query", "y_query"):
        torch.testing.assert_close(getattr(chunked, field), getattr(whole, field), rtol=0, atol=1e-6)


def test_model_errors_of_a_query_model_are_its_squared_query_errors_in_chunks(gen):
    task = NonparametricTasks(dim=2, smoothness=1.0, n_basis=16, noise_std=0.5)
    torch.manual_seed(0)
    model = MLPAttention(2, 8, hidden=16).train()
    p = task.sample(10, 6, gen)
    errors = model_errors(model, p, chunk_size=3)
    with torch.no_grad():
        direct = (model(p) - p.y_query).square()
    assert errors.shape == (10,) and model.training  # the mode is restored
    torch.testing.assert_close(errors, direct)


@pytest.mark.parametrize("dim", [1, 2])
def test_attention_risk_matches_monte_carlo(dim, gen):
    """The closed form against the sampled ICL risk, for a learned feature map and an arbitrary Gamma."""
    task = NonparametricTasks(dim=dim, smoothness=1.0, n_basis=24, noise_std=0.4)
    torch.manual_seed(dim)
    model = MLPAttention(dim, 6, hidden=16, input_scale=5.0)
    with torch.no_grad():
        model.gamma.copy_(torch.randn(6, 6) / 6)
    exact = attention_risk(model.features, task, 5, model.gamma).item()
    sampled, se = query_risk(model.predict, task, 5, 2**18, gen)
    assert abs(exact - sampled) < 4 * se


def test_attention_gamma_is_the_minimizer():
    """The gradient of the risk in Gamma vanishes at Gamma* (autograd on the closed form), and moving away from
    Gamma* in a random direction raises the risk quadratically."""
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=32, noise_std=0.5)
    torch.manual_seed(0)
    model = MLPAttention(1, 8, hidden=16, input_scale=10.0)
    best = attention_gamma(model.features, task, 20).requires_grad_(True)
    value = attention_risk(model.features, task, 20, best)
    # attention_risk detaches Gamma, so rebuild the quadratic from the same moments with autograd
    mom = AttentionMoments.of(model.features, task)
    quad = lambda gam: -2 * torch.trace(gam @ mom.c) + torch.trace(gam @ mom.g @ gam.T @ mom.s(20))  # noqa: E731
    (grad,) = torch.autograd.grad(quad(best), best)
    assert grad.abs().max() < 1e-6 * (1 + best.abs().max())
    direction = torch.randn(8, 8, dtype=torch.float64)
    for step in (1e-3, 1e-2):
        assert attention_risk(model.features, task, 20, best.detach() + step * direction) > value


def test_ridge_fitted_gamma_approaches_the_closed_form(gen):
    """Stage-2 ridge over many prompts converges to Gamma* as the penalty vanishes: the fitted risk is within 2% of
    the optimum (with lam = 1e-6 it is 10% above: learned features are nearly collinear, so even a small penalty
    shrinks Gamma far from the optimum)."""
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=32, noise_std=0.5)
    torch.manual_seed(0)
    model = MLPAttention(1, 4, hidden=16, input_scale=5.0)
    fit_attention_ridge(model, task, n_tasks=2**15, n=16, lam=1e-8, generator=gen)
    fitted = attention_risk(model.features, task, 16, model.gamma).item()
    optimum = attention_risk(model.features, task, 16, attention_gamma(model.features, task, 16)).item()
    assert optimum <= fitted < 1.02 * optimum


def test_true_basis_attention_reaches_the_minimax_slope():
    """On the true basis the best linear attention's excess risk has local slope -> -2s/(2s+1) from below."""
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=256, noise_std=0.5)
    ns = [2**k for k in (8, 10, 12, 14)]
    mom = AttentionMoments.of(task.features, task)
    excess = [mom.risk(n, mom.gamma(n)).item() - task.noise_var for n in ns]
    local = [-fit_slope(ns[i : i + 2], excess[i : i + 2]) for i in range(3)]
    assert local[0] < local[1] < local[2] < 2 / 3 < local[2] + 0.05


def test_bad_attention_risk_arguments_raise():
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=8)
    with pytest.raises(ValueError, match=r"gamma must be a float tensor of shape \(8, 8\)"):
        attention_risk(task.features, task, 4, torch.eye(3))
    with pytest.raises(TypeError, match="task must be a NonparametricTasks"):
        attention_gamma(task.features, object(), 4)
    with pytest.raises(ValueError, match="n must be >= 1"):
        attention_gamma(task.features, task, 0)
    with pytest.raises(ValueError, match="prior_cov must have shape"):
        attention_gamma(task.features, task, 4, prior_cov=torch.eye(3))


def test_prompt_pool_draws_only_its_prompts_and_checks_its_arguments(gen):
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=8)
    pool = PromptPool(task.sample(5, 7, gen))
    batch = pool.sample(64, 7, gen)
    members = {round(v, 6) for v in pool.prompts.y_query.tolist()}
    assert {round(v, 6) for v in batch.y_query.tolist()} <= members
    assert len(pool) == 5
    with pytest.raises(ValueError, match="n=7 examples, asked for n=8"):
        pool.sample(4, 8, gen)
    with pytest.raises(TypeError, match=r"prompts must be an icl_utils.Prompt"):
        PromptPool(task)
    if torch.cuda.is_available():  # "cuda" and "cuda:0" are one device (the pool once refused a plain "cuda")
        cuda_pool = PromptPool(task.sample(5, 7, torch.Generator("cuda").manual_seed(0)))
        assert len(cuda_pool.sample(4, 7, torch.Generator("cuda").manual_seed(1)).y) == 4
        with pytest.raises(ValueError, match="generator samples on cpu"):
            cuda_pool.sample(4, 7, gen)


def test_a_list_of_pools_gives_each_model_of_an_ensemble_its_own_pool(gen):
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=8)
    quiet, loud = task.sample(6, 7, gen), task.sample(6, 7, gen)
    quiet = PromptPool(Prompt(quiet.x, 0 * quiet.y, quiet.x_query, 0 * quiet.y_query))  # every label is zero
    loud = PromptPool(Prompt(loud.x, 100 * loud.y, loud.x_query, 100 * loud.y_query))
    assert len(quiet) == 6 and quiet.dim == 1
    models = [MLPAttention(1, 4, hidden=8) for _ in range(2)]
    config = TrainConfig(steps=1, batch_size=5, n_context=7)
    losses = train_ensemble(models, [quiet, loud], config, generator=gen, progress=False).losses
    assert losses[0, 0] < 1e-2 * losses[0, 1]  # model 0 saw only the quiet pool's zero labels
    with pytest.raises(ValueError, match="one per model"):
        train_ensemble(models, [quiet, loud, quiet], config, generator=gen)
    with pytest.raises(ValueError, match="config.n_context must be the pool's context length 7"):
        train_ensemble(models, [quiet, loud], TrainConfig(steps=1, batch_size=5, n_context=8), generator=gen)


@pytest.mark.parametrize("chunk_elements", [None, 25, 7])
def test_discrete_posterior_mean_matches_a_direct_computation(chunk_elements, gen, monkeypatch):
    """Also in a stream: 25 values hold one prompt's (n + 1) x 4 pool members, so prompts go one at a time; 7 hold
    one member, so the softmax over the pool is accumulated member by member (the running maximum rescaling)."""
    if chunk_elements is not None:
        monkeypatch.setattr(config, "CHUNK_ELEMENTS", chunk_elements)
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=6, noise_std=0.3)
    pool = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    p = task.feature_prompt(task.sample(3, 5, gen, weights=pool[[0, 2, 3]].float()))
    got = discrete_posterior_mean(p, pool, task.noise_var)
    for b in range(3):
        log_lik = torch.stack(
            [-(p.y[b].double() - p.x[b].double() @ w).square().sum() / (2 * task.noise_var) for w in pool]
        )
        want = (torch.softmax(log_lik, 0) * (pool @ p.x_query[b].double())).sum()
        assert abs(got[b].item() - want.item()) < 1e-5
    one = discrete_posterior_mean(p, pool[:1], task.noise_var)  # a pool of one task: that task's prediction
    torch.testing.assert_close(one, (p.x_query.double() @ pool[0]).float())
    with pytest.raises(ValueError, match=r"pool must be a float tensor of shape \(M, 6\)"):
        discrete_posterior_mean(p, pool[:, :3], task.noise_var)


def test_kernel_ridge_tunes_the_bandwidth_with_the_penalty(gen):
    task = NonparametricTasks(dim=1, smoothness=1.0, n_basis=16, noise_std=0.3)
    p = task.noiseless().sample(64, 32, gen)
    one = kernel_ridge(p, bandwidth=0.2)
    torch.testing.assert_close(kernel_ridge(p, bandwidth=(0.2,)), one)
    tuned = kernel_ridge(p, bandwidth=(0.02, 0.2, 2.0))
    err = lambda pred: (pred - p.y_query).square().mean().item()  # noqa: E731
    assert err(tuned) < 1.2 * min(err(kernel_ridge(p, bandwidth=h)) for h in (0.02, 0.2, 2.0))
    with pytest.raises(ValueError, match="bandwidth must be"):
        kernel_ridge(p, bandwidth=())


@pytest.mark.parametrize("basis", ["fourier", "bspline"])
def test_noiseless_view_labels_the_query_by_f_and_keeps_the_context_noisy(basis):
    """task.noiseless() (a copy, the same as noiseless_query=True) draws the same prompts as the task from the same
    seed, except that the query's label is F(x_query) itself, bitwise; the context labels keep their noise."""
    task = NonparametricTasks(dim=2, smoothness=1.0, basis=basis, n_basis=12, noise_std=0.5)
    quiet_task = task.noiseless()
    assert quiet_task.noiseless_query and not task.noiseless_query  # a copy; the task itself is unchanged
    assert quiet_task == NonparametricTasks(
        dim=2, smoothness=1.0, basis=basis, n_basis=12, noise_std=0.5, noiseless_query=True
    )
    weights = torch.randn(256, 12, generator=torch.Generator().manual_seed(0)) * task.prior_var().sqrt().float()
    noisy = task.sample(256, 9, torch.Generator().manual_seed(1), weights=weights)
    quiet = quiet_task.sample(256, 9, torch.Generator().manual_seed(1), weights=weights)
    xs = quiet.points()[0]
    clean = torch.einsum("bnj,bj->bn", quiet_task.features(xs), weights)  # F at every point, as the sampler has it
    assert torch.equal(quiet.y_query, clean[:, -1])
    assert torch.equal(quiet.x, noisy.x) and torch.equal(quiet.x_query, noisy.x_query)
    assert torch.equal(quiet.y, noisy.y)  # the contexts are the noisy task's, noise and all
    context_noise = (quiet.y - clean[:, :-1]).std().item()
    query_noise = (noisy.y_query - clean[:, -1]).std().item()
    assert 0.45 < context_noise < 0.55 and 0.4 < query_noise < 0.6  # control: the task's queries are noisy
    with pytest.raises(TypeError, match="noiseless_query must be True or False"):
        NonparametricTasks(dim=1, smoothness=1.0, noiseless_query=1)


def test_the_fourier_basis_of_a_thousand_dimensions_is_enumerated_quickly():
    """Only the axes of non-zero frequency are enumerated: d = 1000 once hit Python's recursion limit (one level
    per axis), and an axis-by-axis table took 14 s; the basis is the constant and then single-axis frequencies."""
    import time

    start = time.perf_counter()
    task = NonparametricTasks(dim=1000, smoothness=1.0, n_basis=5)
    assert time.perf_counter() - start < 5.0  # a wide margin: 0.1 s here, 14 s for the old table
    x = torch.rand(3, 1000, generator=torch.Generator().manual_seed(0))
    feats = task.features(x)
    assert feats.shape == (3, 5) and torch.equal(feats[:, 0], torch.ones(3))
    j = task._index[1]  # frequency one on a single axis
    axis = next(i for i, v in enumerate(j) if v != 1)
    assert sum(v != 1 for v in j) == 1 and j[axis] in (2, 3)


@pytest.mark.parametrize(("dim", "order"), [(1, 0), (1, 2), (2, 1), (3, 2)])
def test_bspline_features_are_the_dyadic_tensor_products(dim, order):
    """Each column is prod_k N_m(2^a x_k - b_k) / its norm for its (level, shifts), evaluated one function at a time,
    with the norms in L^2 of uniform inputs taken per axis by a midpoint rule (2^16 cells, which the dyadic knots
    fall between)."""
    task = NonparametricTasks(dim=dim, smoothness=1.0, basis="bspline", order=order, n_basis=50)
    x = torch.rand(7, 3, dim, generator=torch.Generator().manual_seed(order), dtype=torch.float64)
    level, shifts = 0, []
    while len(shifts) < 50:  # levels in order, every shift whose support meets [0, 1]
        shifts += [(level, b) for b in itertools.product(range(-order, 2**level), repeat=dim)]
        level += 1
    grid = (torch.arange(2**16, dtype=torch.float64) + 0.5) / 2**16

    def norm(a, b):
        return math.prod(cardinal_bspline(2**a * grid - b_k, order).square().mean().sqrt().item() for b_k in b)

    expected = torch.stack(
        [
            math.prod(cardinal_bspline(2**a * x[..., k] - b_k, order) for k, b_k in enumerate(b)) / norm(a, b)
            for a, b in shifts[:50]
        ],
        dim=-1,
    )
    torch.testing.assert_close(task.features(x), expected, rtol=1e-6, atol=1e-9)
    assert expected[..., -1].abs().max() > 0  # the last column is not trivially zero


@pytest.mark.parametrize(("dim", "order"), [(1, 0), (1, 2), (2, 1), (2, 2), (3, 2)])
def test_bspline_features_have_unit_norm_under_uniform_inputs(dim, order):
    """E f_j(x)^2 = 1 for x uniform on [0, 1]^d, by a midpoint rule on a product grid, extrapolated (Richardson) from
    two grids: with every knot on a cell boundary of both grids the rule's error is c h^2 + O(h^4) for these
    piecewise polynomials, so (4 M(h) - M(2h)) / 3 is off by O(h^4), at most 1e-5 here (the finer grid alone is off
    by up to 2.4e-3 in d = 3). Control: the unnormalized functions, whose norms differ by level and, at the boundary
    shifts, by a few percent of the interior ones'."""
    task = NonparametricTasks(dim=dim, smoothness=1.0, basis="bspline", order=order, n_basis=40)
    fine = {1: 4096, 2: 256, 3: 64}[dim]
    assert (fine // 2) % 2 ** int(task.levels().max()) == 0, "the knots must lie on both grids' cell boundaries"

    def midpoint(per_axis):
        """The rule's means of f_j^2 and of the unnormalized functions' squares."""
        grid = (torch.arange(per_axis, dtype=torch.float64) + 0.5) / per_axis
        x = torch.stack(torch.meshgrid(*[grid] * dim, indexing="ij"), -1).reshape(-1, dim)
        feats = [task.features(chunk) for chunk in x.split(2**16)]
        raw = task._bspline_table[2]
        return torch.stack(
            [sum(f.square().sum(0) for f in feats), sum((f * raw).square().sum(0) for f in feats)]
        ) / len(x)

    second, raw = (4 * midpoint(fine) - midpoint(fine // 2)) / 3
    torch.testing.assert_close(second, torch.ones_like(second), rtol=1e-4, atol=0)
    # control: without the normalization
    assert raw.min() < 0.5 * raw.max()


def test_bspline_basis_in_high_dimension_enumerates_only_the_shifts_it_keeps():
    """Level 0 has (m + 1)^d shifts, 3^100 in d = 100: the basis takes the first n_basis of them, not all."""
    task = NonparametricTasks(dim=100, smoothness=1.0, basis="bspline", n_basis=8)
    assert task._index == [(0, b) for b in itertools.islice(itertools.product(range(-2, 1), repeat=100), 8)]
    assert task.features(torch.rand(5, 100, generator=torch.Generator().manual_seed(0))).shape == (5, 8)


def test_bspline_orders_stop_at_max_order():
    """The recursion costs 2^order operations: orders up to MAX_ORDER are computed, the next is refused."""
    top = nonparametric.MAX_ORDER
    x = torch.linspace(-1, top + 2, 2001, dtype=torch.float64)
    assert torch.trapezoid(cardinal_bspline(x, top), x).item() == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match=rf"order must be in \[0, {top}\].*got {top + 1}"):
        cardinal_bspline(x, top + 1)


def test_bspline_levels_count_the_shifts_of_each_level():
    """Level a has (m + 2^a)^d shifts: in d = 4 with order 1, 16 functions of level 0 and 81 of level 1."""
    task = NonparametricTasks(dim=4, smoothness=1.0, basis="bspline", order=1, n_basis=100)
    levels = task.levels()
    assert levels.tolist() == [0] * 16 + [1] * 81 + [2] * 3
    with pytest.raises(ValueError, match="levels are defined for the bspline basis"):
        NonparametricTasks(dim=4, smoothness=1.0).levels()


def test_fit_slopes_is_fit_slope_per_seed():
    from icl_utils.risk import fit_slope, fit_slopes

    xs = np.array([1.0, 2.0, 4.0, 8.0])
    ys = np.stack([xs**-0.5, 3 * xs**1.5], 1)
    np.testing.assert_allclose(fit_slopes(xs, ys), [-0.5, 1.5])
    assert fit_slopes(xs, ys)[0] == pytest.approx(fit_slope(xs, ys[:, 0]))
    with pytest.raises(ValueError, match="shape"):
        fit_slopes(xs, ys[:3])


@pytest.mark.parametrize(("dim", "order", "count"), [(1, 1, 6), (2, 1, 20), (2, 2, 30), (1, 0, 8)])
def test_orthonormal_bsplines_are_orthonormal_and_span_the_raw_ones(dim, order, count):
    """Under a product midpoint rule the Gram matrix is the identity (the knots fall between the cells), each
    orthonormal function is a combination of the raw splines kept, and the raw system has fewer independent functions
    than its count (the control: it is redundant)."""
    task = NonparametricTasks(dim=dim, smoothness=1.0, basis="bspline", order=order, n_basis=count, orthonormal=True)
    per_axis = {1: 4096, 2: 256}[dim]
    grid = (torch.arange(per_axis, dtype=torch.float64) + 0.5) / per_axis
    x = torch.stack(torch.meshgrid(*[grid] * dim, indexing="ij"), -1).reshape(-1, dim)
    f = task.features(x)
    gram = f.T @ f / len(x)
    assert (gram - torch.eye(count, dtype=gram.dtype)).abs().max() < 2e-3
    raw = NonparametricTasks(dim=dim, smoothness=1.0, basis="bspline", order=order, n_basis=count).features(x)
    assert torch.linalg.matrix_rank(raw.T @ raw / len(x), rtol=1e-8) < count
    levels = task.levels()
    assert (levels[1:] >= levels[:-1]).all() and levels[0] == 0  # Gram-Schmidt keeps the order of the levels


def test_orthonormal_bsplines_of_order_one_drop_what_level_zero_spans():
    """In d = 4, level 0 has 2^4 = 16 functions and levels 0 and 1 together span 3^4 = 81: level 1 adds 65."""
    task = NonparametricTasks(dim=4, smoothness=1.0, basis="bspline", order=1, n_basis=90, orthonormal=True)
    assert torch.bincount(task.levels()).tolist() == [16, 65, 9]
    with pytest.raises(ValueError, match="orthonormal applies to the bspline basis"):
        NonparametricTasks(dim=1, smoothness=1.0, orthonormal=True)
    with pytest.raises(TypeError, match="orthonormal"):
        NonparametricTasks(dim=1, smoothness=1.0, basis="bspline", orthonormal="yes")
    with pytest.raises(ValueError, match="n_basis=300 orthonormal B-splines in dim=8"):
        NonparametricTasks(dim=8, smoothness=1.0, basis="bspline", order=1, n_basis=300, orthonormal=True)


@pytest.mark.parametrize(("basis", "dim"), [("fourier", 1), ("bspline", 1), ("bspline", 2)])
def test_exact_oracle_excess_matches_the_posterior_mean_on_sampled_prompts(basis, dim, gen):
    """tr(Sigma_post(X) E f f^T), averaged over designs, against the squared error of the posterior mean on
    noiseless queries; the exact version's spread over designs is far smaller than Monte Carlo's over prompts."""
    from icl_utils.exact import basis_bayes_excess

    task = NonparametricTasks(
        dim=dim, smoothness=1.0, basis=basis, n_basis=24, noise_std=0.5, order=1, orthonormal=dim > 1
    )
    exact, se = basis_bayes_excess(task, 32, 256, gen)
    mc, mc_se = query_risk(task.posterior_mean, task.noiseless(), 32, 4096, gen)
    assert abs(exact - mc) < 4 * mc_se + 4 * se
    assert se * 256**0.5 < 0.2 * mc_se * 4096**0.5  # per draw: a design against a prompt
    with pytest.raises(ValueError, match="label noise"):
        basis_bayes_excess(NonparametricTasks(dim=1, smoothness=1.0, noise_std=0.0), 8, 4, gen)
    with pytest.raises(ValueError, match="designs"):
        basis_bayes_excess(task, 8, 1, gen)
    with pytest.raises(TypeError, match="NonparametricTasks"):
        basis_bayes_excess(object(), 8, 4, gen)


def test_prompt_mean_excess_is_the_prompt_means_squared_error(gen):
    from icl_utils.estimators import prompt_mean

    task = NonparametricTasks(dim=2, smoothness=1.0, n_basis=20, noise_std=0.5)
    mc, se = query_risk(prompt_mean, task.noiseless(), 8, 20_000, gen)
    assert abs(task.prompt_mean_excess(8) - mc) < 4 * se
    p = task.sample(3, 5, gen)
    constant = Prompt(p.x, torch.full_like(p.y, 2.5), p.x_query, p.y_query)
    torch.testing.assert_close(prompt_mean(constant), torch.full_like(p.y_query, 2.5))
    empty = Prompt(p.x[:, :0], p.y[:, :0], p.x_query, p.y_query)
    torch.testing.assert_close(prompt_mean(empty), torch.zeros_like(p.y_query))
    with pytest.raises(ValueError, match="fourier"):
        NonparametricTasks(dim=1, smoothness=1.0, basis="bspline").prompt_mean_excess(4)
    assert task.active_axes()[:5].tolist() == [0, 1, 1, 1, 1]


def test_additive_and_centred_kernel_ridge(gen):
    """On a sum of functions of one coordinate in d = 8, the additive kernel beats the Gaussian kernel on the same
    prompts; centring fits a constant shift exactly (the control: without it the penalty shrinks the constant)."""
    x = torch.rand(64, 65, 8, generator=gen, dtype=torch.float64)
    y = torch.sin(2 * math.pi * x).sum(-1)
    p = Prompt(x[:, :-1].float(), y[:, :-1].float(), x[:, -1].float(), y[:, -1].float())
    err = lambda pred: (pred - p.y_query).square().mean().item()  # noqa: E731
    additive = kernel_ridge(p, bandwidth=(0.1, 0.2, 0.4), additive=True, center=True)
    gaussian = kernel_ridge(p, bandwidth=(0.5, 1.0, 2.0, 4.0), center=True)
    assert err(additive) < 0.5 * err(gaussian)
    shifted = Prompt(p.x, torch.full_like(p.y, 3.0), p.x_query, torch.full_like(p.y_query, 3.0))
    centred = kernel_ridge(shifted, lams=(10.0,), bandwidth=0.5, center=True)
    torch.testing.assert_close(centred, shifted.y_query)
    assert (kernel_ridge(shifted, lams=(10.0,), bandwidth=0.5) - 3).abs().min() > 0.1
    with pytest.raises(TypeError, match="additive"):
        kernel_ridge(p, additive=1)


def test_kernel_ridge_picks_the_pair_with_the_smallest_explicit_leave_one_out_error(gen):
    """The closed-form leave-one-out of the eigendecomposition against refits without each point: the tuned
    prediction is that of the (bandwidth, penalty) pair whose explicit leave-one-out error is smallest."""
    task = NonparametricTasks(dim=2, smoothness=1.0, n_basis=16, noise_std=0.3)
    p = task.sample(4, 12, gen)
    pairs = [(h, lam) for h in (0.1, 0.5, 2.0) for lam in (1e-2, 1.0)]
    x, y = p.x.double(), p.y.double()

    def fit(xs, ys, h, lam, at):
        k = torch.exp(-torch.cdist(xs, xs).square() / (2 * h * h))
        alpha = torch.linalg.solve(k + lam * torch.eye(len(xs), dtype=xs.dtype), ys)
        return torch.exp(-torch.cdist(at, xs).square() / (2 * h * h)) @ alpha

    tuned = kernel_ridge(p, lams=(1e-2, 1.0), bandwidth=(0.1, 0.5, 2.0))
    for b in range(4):
        loo = []
        for h, lam in pairs:
            keep = [[j for j in range(12) if j != i] for i in range(12)]
            residuals = [y[b, i] - fit(x[b, k], y[b, k], h, lam, x[b, i : i + 1])[0] for i, k in enumerate(keep)]
            loo.append(torch.stack(residuals).square().mean().item())
        h, lam = pairs[int(np.argmin(loo))]
        want = fit(x[b], y[b], h, lam, p.x_query[b : b + 1].double())[0]
        assert abs(tuned[b].item() - want.item()) < 1e-5
