import numpy as np
import pytest
import torch

from icl_utils.dynamics import softmax_attention as sa
from icl_utils.gd import gradient_descent
from icl_utils.tasks.discrete import DiscreteFeatures, imbalanced_probs


def test_features_are_orthonormal():
    task = DiscreteFeatures(dim=10, probs=imbalanced_probs(6, 0.4))
    v = task.features
    assert v.shape == (10, 6)
    assert torch.allclose(v.T @ v, torch.eye(6, dtype=v.dtype), atol=1e-12)


def test_sampler_frequencies_and_labels(gen):
    probs = imbalanced_probs(4, 0.55)
    task = DiscreteFeatures(dim=6, probs=probs)
    prompt, idx = task.sample_with_labels(20_000, 4, gen)
    freq = torch.bincount(idx.flatten(), minlength=4).double() / idx.numel()
    assert torch.allclose(freq, probs, atol=0.01)
    assert torch.allclose(prompt.x_query, task.features.float().T[idx[:, -1]])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=5, probs=torch.tensor([0.5, 0.4])), "probs must be .*summing to 1"),
        (dict(dim=5, probs=torch.tensor([1.2, -0.2])), "positive"),
        (dict(dim=2, probs=torch.full((3,), 1 / 3)), "K=3"),
        (dict(dim=5, probs=torch.tensor([0.5, float("nan"), 0.5])), "positive"),
    ],
)
def test_bad_feature_sets_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DiscreteFeatures(**kwargs)


def test_sample_counts_rejects_bad_probabilities(gen):
    with pytest.raises(ValueError, match="probs must be .*with positive values summing to 1"):
        sa.sample_counts(torch.tensor([0.7, 0.7]), 4, 8, gen)
    with pytest.raises(TypeError, match="generator"):
        sa.sample_counts(torch.tensor([0.5, 0.5]), 4, 8, None)


def test_zero_q_gives_uniform_attention_and_the_context_mean(gen):
    task = DiscreteFeatures(dim=6, probs=imbalanced_probs(5, 0.5))
    prompt = task.sample(64, 9, gen)
    assert torch.allclose(sa.predict(prompt, torch.zeros(6, 6)), prompt.y.mean(1), atol=1e-6)
    counts = sa.sample_counts(task.probs, 9, 32, gen)
    attn = sa.feature_attention(torch.zeros(5, 5, dtype=torch.float64), counts)
    assert torch.allclose(attn, (counts / 9)[:, None, :].expand_as(attn))


def test_reduced_loss_matches_the_token_level_model(gen):
    """The per-feature loss in closed form over tasks matches a Monte Carlo run of the d-dimensional model."""
    K, n = 4, 12
    task = DiscreteFeatures(dim=7, probs=imbalanced_probs(K, 0.5), seed=3)
    w = torch.tensor(
        [[1.5, -0.3, 0.2, 0.0], [0.4, 2.0, -0.5, 0.1], [0.0, 0.3, 1.0, -0.2], [-0.6, 0.0, 0.2, 0.8]],
        dtype=torch.float64,
    )
    q = task.features @ w @ task.features.T
    prompt, idx = task.sample_with_labels(200_000, n, gen)
    sq = 0.5 * (sa.predict(prompt, q.float()) - prompt.y_query).double().square()
    mc = torch.stack([sq[idx[:, -1] == k].mean() for k in range(K)])
    exact = sa.per_feature_loss(w, sa.sample_counts(task.probs, n, 200_000, gen))
    assert torch.allclose(mc, exact, rtol=0.03, atol=1e-3)
    assert torch.allclose(sa.feature_weights(q, task.features), w, atol=1e-10)


def test_attention_rows_sum_to_one_and_skip_absent_features(gen):
    counts = torch.tensor([[3.0, 0.0, 1.0]], dtype=torch.float64)
    attn = sa.feature_attention(torch.randn(3, 3, dtype=torch.float64, generator=gen), counts)
    assert torch.allclose(attn.sum(2), torch.ones(1, 3, dtype=attn.dtype))
    assert torch.all(attn[:, :, 1] == 0)


def test_gradient_descent_on_a_quadratic():
    target = torch.tensor([1.0, -2.0], dtype=torch.float64)
    theta, hist = gradient_descent(
        lambda t: (t - target).square().sum(),
        torch.zeros(2, dtype=torch.float64),
        steps=200,
        lr=0.1,
        record_every=50,
        progress=False,
    )
    assert torch.allclose(theta, target, atol=1e-8)
    assert list(hist.steps) == [0, 50, 100, 150, 200]
    assert np.all(np.diff(hist.records["loss"]) < 0)
    with pytest.raises(FloatingPointError, match="step"):
        gradient_descent(
            lambda t: (t * 1e200).square().sum() * 1e200,
            torch.ones(1, dtype=torch.float64),
            steps=5,
            lr=1.0,
            progress=False,
        )


@pytest.mark.parametrize("record_every", [1, 7, 1000])
def test_gradient_descent_names_the_first_diverged_step_however_rarely_it_records(record_every):
    # lr = 1.5 on t^2 doubles |t| every step: the loss 4^k overflows float64 first at k = 512 (4^512 = 2^1024),
    # while t = 2^k is still finite. The check runs at records only, and must still name step 512 (and the loss, a
    # number: "inf", not "[inf]").
    with pytest.raises(FloatingPointError, match=r"training loss became inf at step 512;"):
        gradient_descent(
            lambda t: t.square().sum(),
            torch.ones(1, dtype=torch.float64),
            steps=600,
            lr=1.5,
            record_every=record_every,
            progress=False,
        )


def test_gradient_descent_reports_divergence_behind_a_failed_factorization():
    # A loss that factorizes a matrix of the parameters: once they are NaN, the Cholesky raises before the next
    # record; the user must still learn that the loss diverged, and where.
    def loss(t):
        chol = torch.linalg.cholesky(torch.diag(1 + t.square()))
        return t.square().sum() * 1e300 * chol.diagonal().sum()

    with pytest.raises(FloatingPointError, match="at step 0"):
        gradient_descent(
            loss, torch.full((2,), 1e10, dtype=torch.float64), steps=50, lr=1.0, record_every=100, progress=False
        )


def test_run_gradient_descent_is_gradient_descent_on_the_population_loss():
    """run_gradient_descent (formerly softmax_attention.train) runs gd.gradient_descent on L(W) from W = 0 over a
    fixed sample of counts, recording W, every L_k and the attention; the loss falls."""
    probs = imbalanced_probs(3, 0.6)
    w, hist = sa.run_gradient_descent(
        probs,
        6,
        steps=40,
        lr=0.5,
        n_samples=64,
        generator=torch.Generator().manual_seed(2),
        record_every=10,
        progress=False,
    )
    assert list(hist.steps) == [0, 10, 20, 30, 40] and set(hist.records) == {"W", "loss_k", "attn"}
    assert hist.records["W"].shape == (5, 3, 3) and hist.records["loss_k"].shape == (5, 3)
    assert hist.records["attn"].shape == (5, 3, 3) and torch.equal(torch.as_tensor(hist.records["W"][-1]), w)
    total = (hist.records["loss_k"] * probs.numpy()).sum(1)
    assert np.all(np.diff(total) < 0)
    counts = sa.sample_counts(probs, 6, 64, torch.Generator().manual_seed(2))
    direct, _ = gradient_descent(
        lambda v: sa.population_loss(v, counts, probs),
        torch.zeros(3, 3, dtype=torch.float64),
        steps=40,
        lr=0.5,
        progress=False,
    )
    assert torch.equal(direct, w)


def test_first_only_times_are_the_first_feature_crossings_of_the_same_descent():
    probs = imbalanced_probs(4, 0.5)
    levels = (0.04, 0.01)
    kw = dict(eps=levels, n_seeds=2, lr=1.0, n_samples=64, record_every=1, progress=False)
    got = sa.convergence_times(
        [(probs, 24)], steps=80, first_only=True, generator=torch.Generator().manual_seed(3), **kw
    )
    _, hist = sa.run_gradient_descent(
        probs.expand(2, -1),
        24,
        steps=80,
        lr=1.0,
        n_samples=64,
        generator=torch.Generator().manual_seed(3),
        record_every=1,
        progress=False,
    )
    for r in range(2):
        for j, level in enumerate(levels):
            assert got.first[0, r, j] == sa.convergence_steps(hist.steps, hist.records["loss_k"][:, r], level)[0]
    assert np.isfinite(got.first).all() and np.all(got.first[..., 0] < got.first[..., 1])
    assert np.isinf(got.rest).all() and np.isnan(got.concentration).all()  # the rare features are not waited for
    short = sa.convergence_times([(probs, 24)], steps=3, first_only=True, generator=torch.Generator(), **kw)
    assert np.isinf(short.first).all()  # the budget ran out
    with pytest.raises(TypeError, match="first_only"):
        sa.convergence_times([(probs, 24)], steps=3, first_only="yes", generator=torch.Generator(), **kw)


def test_doubling_increments_tell_saturation_log_and_power_laws_apart():
    ks = [4, 6, 8, 12, 16, 32]
    law = lambda f: np.array([[f(k)] for k in ks], dtype=float)  # noqa: E731
    assert sa.doubling_increments(ks, law(np.log))[0] == pytest.approx(1.0)
    assert sa.doubling_increments(ks, law(lambda k: k))[0] == pytest.approx(4.0)  # (32 - 16) / (8 - 4)
    assert sa.doubling_increments(ks, law(lambda k: 100 - 64 / k))[0] == pytest.approx(0.25)
    # no growth at all passes as saturation; growth only at the end is unbounded
    flat_then_up = np.array([[5.0, 5.0], [5.0, 5.0], [5.0, 5.0], [5.0, 5.0], [5.0, 5.0], [5.0, 9.0]])
    np.testing.assert_array_equal(sa.doubling_increments(ks, flat_then_up), [0.0, np.inf])
    # the chain stops at the first missing doubling: 4, 8 then no 16 is one doubling, too few
    with pytest.raises(ValueError, match="two doublings"):
        sa.doubling_increments([4, 8, 32, 64], np.ones((4, 1)))
    with pytest.raises(ValueError, match="shape"):
        sa.doubling_increments(ks, np.ones(len(ks)))
    runs = sa.run_gradient_descent(
        imbalanced_probs(3, 0.5).expand(2, -1),
        12,
        steps=2,
        lr=1.0,
        n_samples=8,
        generator=torch.Generator().manual_seed(0),
        progress=False,
    )[1]
    assert runs.runs == 2 and runs.run(1).records["loss_k"].shape == (2, 3)
    with pytest.raises(ValueError, match="stop_on"):
        sa.run_gradient_descent(
            imbalanced_probs(3, 0.5),
            12,
            steps=2,
            lr=1.0,
            n_samples=8,
            stop_below=0.1,
            stop_on=3,
            generator=torch.Generator(),
            progress=False,
        )


def test_calibrate_bound_recovers_the_constants_of_times_on_the_bound():
    ks, levels = np.array([4, 6, 8, 12]), np.array([0.04, 0.01])
    t1, t2 = sa.bound_terms(ks[:, None], levels[None, :], 1.0)
    exact = 2.0 * t1 + 0.1 * t2  # (K, eps)
    spread = np.stack([exact, 1.1 * exact], 1)  # seeds: (K, 2, eps), 10% apart
    times = sa.ConvergenceTimes(eps=levels, first=spread, rest=spread, concentration=np.full_like(spread, np.nan))
    fit = sa.calibrate_bound(times, ks, 2, 1.0)
    assert fit.ratio.shape == (4, 2) and fit.allowance == pytest.approx(0.1 + np.abs(fit.ratio[:2] - 1).max())
    np.testing.assert_allclose(fit.ratio, fit.ratio[0, 0], rtol=1e-6)  # one law everywhere: one ratio
    assert fit.held_out == pytest.approx(fit.ratio[2:].max())
    faster = sa.ConvergenceTimes(
        eps=levels, first=spread, rest=spread * (ks[:, None, None] / 4.0) ** 2, concentration=spread
    )
    assert sa.calibrate_bound(faster, ks, 2, 1.0).held_out > 1.5  # a law that outgrows the bound breaks it
    with pytest.raises(ValueError, match="leave at least one K"):
        sa.calibrate_bound(times, ks, 4, 1.0)
    with pytest.raises(TypeError, match="ConvergenceTimes"):
        sa.calibrate_bound(spread, ks, 2, 1.0)


def test_convergence_times_can_skip_the_concentration():
    probs = imbalanced_probs(3, 0.5)
    kw = dict(eps=(0.05,), n_seeds=1, steps=400, lr=1.0, n_samples=32, progress=False)
    without = sa.convergence_times([(probs, 24)], quantile=None, generator=torch.Generator().manual_seed(0), **kw)
    with_q = sa.convergence_times([(probs, 24)], quantile=0.5, generator=torch.Generator().manual_seed(0), **kw)
    assert np.isnan(without.concentration).all() and np.isfinite(with_q.concentration).all()
    np.testing.assert_array_equal(without.rest, with_q.rest)
    with pytest.raises(ValueError, match="quantile"):
        sa.convergence_times([(probs, 24)], quantile=1.5, generator=torch.Generator(), **kw)
