"""Chapter 5's helpers: convergence and phase detection on recorded histories, the K sweep, and its figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils.dynamics import softmax_attention as sa
from icl_utils.gd import GDHistory
from icl_utils.plotting import plot_attention_snapshots, plot_convergence_times, plot_feature_errors, plot_phase_weights
from icl_utils.tasks.discrete import DiscreteFeatures, imbalanced_probs


def test_convergence_steps_by_hand():
    steps = np.array([0, 5, 10, 15])
    loss_k = np.array([[0.5, 0.5, 0.5], [0.005, 0.4, 0.5], [0.001, 0.02, 0.5], [0.001, 0.009, 0.3]])
    t = sa.convergence_steps(steps, loss_k, 0.01)
    assert t.dtype == float
    np.testing.assert_array_equal(t, [5.0, 15.0, np.inf])
    with pytest.raises(
        ValueError, match=r"loss_k must be a real numpy array of shape \(T, \*K\), .* \(axes so far: T=4 from steps\)"
    ):
        sa.convergence_steps(steps, loss_k[:3], 0.01)
    with pytest.raises(ValueError, match="eps"):
        sa.convergence_steps(steps, loss_k, 0.0)


def test_phase_boundaries_by_hand():
    steps = np.array([0, 10, 20, 30, 40, 50])
    w = np.zeros((6, 3, 3))
    w[:, 1, 1] = [0.0, 0.1, 0.3, 0.8, 1.0, 1.1]  # A_2: rates 0.01, 0.02, 0.05 (peak), 0.02, 0.01
    w[:, 0, 1] = [0.0, -0.3, -0.55, -0.6, -0.65, -0.7]  # B_(2,1): falls at 0.03, 0.025, then 0.005, ...
    loss_k = np.full((6, 3), 0.5)
    loss_k[:, 1] = [0.5, 0.3, 0.1, 0.02, 0.005, 0.001]
    # I ends at the first interval where A_2 rises faster than B_(2,1) falls (from step 20: 0.05 > 0.005),
    # II at the peak of A_2's rate from there on (the interval from 20), III at L_2 <= 0.01 (step 40)
    np.testing.assert_array_equal(sa.phase_boundaries(steps, w, loss_k, feature=1, eps=0.01), [20, 20, 40])
    w[:, 1, 1] *= 10  # A_2 wins from the start: phase I is empty, as in the balanced case
    assert sa.phase_boundaries(steps, w, loss_k, feature=1, eps=0.01)[0] == 0
    # feature 2 never moves and never converges: no phase ends
    assert np.isinf(sa.phase_boundaries(steps, w, loss_k, feature=2, eps=0.01)).all()
    w[:, 2, 2] = -np.arange(6.0)  # A_3 falls faster than B_(3,1) (zero): phase I ends at once, but A_3 never grows
    np.testing.assert_array_equal(sa.phase_boundaries(steps, w, loss_k, feature=2, eps=0.01)[:2], [np.inf, np.inf])


def test_phase_boundaries_on_a_run_find_the_rising_off_target_weight():
    """On the imbalanced dynamics, the weight to another rare feature rises in phase I and falls after it; on the
    balanced one phase I is empty and that weight never rises (the chapter's claim and its control)."""
    probs = torch.stack([imbalanced_probs(5, 0.5), imbalanced_probs(5, 0.2)])
    _, h = sa.run_gradient_descent(
        probs,
        60,
        steps=600,
        lr=1.0,
        n_samples=256,
        generator=torch.Generator().manual_seed(0),
        record_every=2,
        progress=False,
    )
    imb = sa.phase_boundaries(h.steps, h.records["W"][:, 0], h.records["loss_k"][:, 0], feature=1, eps=0.02)
    bal = sa.phase_boundaries(h.steps, h.records["W"][:, 1], h.records["loss_k"][:, 1], feature=1, eps=0.02)
    assert 0 < imb[0] < imb[1] < imb[2] < np.inf and bal[0] == 0 < bal[1] < bal[2] < np.inf
    b_imb, b_bal = h.records["W"][:, 0, 2, 1], h.records["W"][:, 1, 2, 1]
    peak = h.steps[b_imb.argmax()]
    assert b_imb.max() > 0 and abs(peak - imb[0]) <= 0.2 * imb[0] and b_bal.max() == 0


@pytest.mark.parametrize("feature, error", [(0, ValueError), (3, ValueError), (1.0, TypeError), (True, TypeError)])
def test_phase_boundaries_rejects_a_feature_that_is_not_under_represented(feature, error):
    with pytest.raises(error, match="feature must be"):
        sa.phase_boundaries(np.arange(3), np.zeros((3, 3, 3)), np.zeros((3, 3)), feature=feature, eps=0.01)


def test_phase_boundaries_rejects_mismatched_shapes():
    with pytest.raises(
        ValueError, match=r"loss_k must be a real numpy array of shape \(T, K\), .* T=3 from steps, K=3 from w"
    ):
        sa.phase_boundaries(np.arange(3), np.zeros((3, 3, 3)), np.zeros((3, 4)), feature=1, eps=0.01)


def test_convergence_times_match_separate_runs_and_stop_early():
    problems = [(imbalanced_probs(3, 0.5), 16), (imbalanced_probs(4, 0.25), 24)]
    kwargs = dict(steps=400, lr=1.0, n_samples=64, record_every=5)
    t = sa.convergence_times(
        problems, eps=(0.05, 0.02), n_seeds=2, generator=torch.Generator().manual_seed(0), progress=False, **kwargs
    )
    assert t.first.shape == t.rest.shape == t.concentration.shape == (2, 2, 2)
    gen = torch.Generator().manual_seed(0)
    for i, (probs, n) in enumerate(problems):
        _, hist = sa.run_gradient_descent(probs.expand(2, -1), n, generator=gen, progress=False, **kwargs)
        for r in range(2):
            for j, eps in enumerate((0.05, 0.02)):
                want = sa.convergence_steps(hist.steps, hist.records["loss_k"][:, r], eps)
                assert t.first[i, r, j] == want[0] and t.rest[i, r, j] == want[1:].max()
        # draw the concentration's fresh contexts as convergence_times did, to keep the generators in step
        for _ in range(2 * 2 * (len(probs) - 1)):
            sa.sample_counts(probs, n, 64, gen)
    assert np.isfinite(t.rest).all() and (t.first <= t.rest).all() and (t.rest[:, :, 0] <= t.rest[:, :, 1]).all()
    # the 0.9 quantile of (1 - Attn_k)^2 is a few times eps, and its mean would be at most 2 eps
    assert np.all((t.concentration > 0) & (t.concentration < 20 * t.eps))


def test_run_gradient_descent_batched_rows_are_separate_runs():
    probs = torch.stack([imbalanced_probs(3, 0.6), imbalanced_probs(3, 0.3)])
    w, hist = sa.run_gradient_descent(
        probs,
        [6, 9],
        steps=30,
        lr=0.5,
        n_samples=32,
        generator=torch.Generator().manual_seed(1),
        record_every=10,
        progress=False,
    )
    assert w.shape == (2, 3, 3) and hist.records["loss_k"].shape == (4, 2, 3)
    assert hist.records["attn"].shape == (4, 2, 3, 3)
    gen = torch.Generator().manual_seed(1)
    for r, n in enumerate([6, 9]):
        single, _ = sa.run_gradient_descent(probs[r], n, steps=30, lr=0.5, n_samples=32, generator=gen, progress=False)
        torch.testing.assert_close(w[r], single, rtol=1e-12, atol=1e-14)
    # the first row draws the same counts as a single run from the same seed: its records match too
    _, first = sa.run_gradient_descent(
        probs[0],
        6,
        steps=30,
        lr=0.5,
        n_samples=32,
        generator=torch.Generator().manual_seed(1),
        record_every=10,
        progress=False,
    )
    for name in ("loss_k", "attn", "W"):
        np.testing.assert_allclose(hist.records[name][:, 0], first.records[name], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="n_context"):
        sa.run_gradient_descent(probs, [6], steps=3, lr=0.5, n_samples=8, generator=gen, progress=False)


def test_stop_below_ends_the_descent_at_the_first_record_below_the_level():
    _, hist = sa.run_gradient_descent(
        imbalanced_probs(3, 0.5),
        12,
        steps=5000,
        lr=1.0,
        n_samples=64,
        generator=torch.Generator().manual_seed(0),
        record_every=5,
        stop_below=0.05,
        progress=False,
    )
    loss = hist.records["loss_k"]
    assert hist.steps[-1] < 5000 and (loss[-1] <= 0.05).all() and not (loss[-2] <= 0.05).all()


def test_fit_bound_recovers_constants_and_bounds_a_faster_law():
    ks, eps = np.meshgrid([4.0, 6.0, 8.0, 12.0], [0.04, 0.01], indexing="ij")
    t1, t2 = sa.bound_terms(ks, eps, 1.0)
    np.testing.assert_allclose(sa.fit_bound(2.0 * t1 + 0.1 * t2, ks, eps, 1.0), [2.0, 0.1], rtol=1e-10)
    np.testing.assert_allclose(sa.fit_bound(0.3 * t2, ks, eps, 1.0), [0.0, 0.3], atol=1e-12)
    # a = 0 forced: the best b for a law that needs the first term; its relative-error least squares by hand
    x = t2 / (2.0 * t1 + 0.1 * t2)
    np.testing.assert_allclose(
        sa.fit_bound(2.0 * t1 + 0.1 * t2, ks, eps, 1.0, eps_term_only=True),
        [0.0, x.sum() / np.square(x).sum()],
        rtol=1e-12,
    )
    # K^4 grows faster than the bound: fitted on K <= 6 it underestimates K = 12 (the chapter's control)
    fast = ks**4
    a, b = sa.fit_bound(fast[:2], ks[:2], eps[:2], 1.0)
    assert (fast[3] / (a * t1[3] + b * t2[3])).min() > 2
    with pytest.raises(ValueError, match="times"):
        sa.fit_bound(np.array([1.0, np.inf]), ks[0], eps[0], 1.0)
    with pytest.raises(ValueError, match="eps"):
        sa.bound_terms(4, 1.5, 1.0)


def test_concentration_quantile_by_hand():
    # K = 2, W = 0, one token per context: a query on v_1 puts all its attention on v_1 when the token is v_1
    # ((1 - Attn)^2 = 0), none otherwise (1), each with probability 1/2: the 0.3 quantile is 0, the 0.9 quantile 1
    gen = torch.Generator().manual_seed(0)
    zero, half = torch.zeros(2, 2, dtype=torch.float64), torch.tensor([0.5, 0.5])
    low = sa.concentration_quantile(zero, half, 1, n_samples=4000, quantile=0.3, generator=gen)
    high = sa.concentration_quantile(zero, half, 1, n_samples=4000, quantile=0.9, generator=gen)
    assert low.tolist() == [0.0, 0.0] and high.tolist() == [1.0, 1.0]
    for bad, error in ((1.0, ValueError), ("0.9", TypeError)):
        with pytest.raises(error, match="quantile must be"):
            sa.concentration_quantile(zero, half, 4, n_samples=8, quantile=bad, generator=gen)
    # numpy's numbers are Python's (np.float32 is no float: it was refused)
    assert sa.concentration_quantile(zero, half, 1, n_samples=8, quantile=np.float32(0.5), generator=gen).shape == (2,)
    with pytest.raises(ValueError, match=r"probs must be a float tensor of shape \(K,\).*K=3"):
        sa.concentration_quantile(torch.zeros(3, 3), half, 4, n_samples=8, quantile=0.5, generator=gen)


def test_bad_inputs_get_named_errors(gen):
    w, counts = torch.zeros(2, 2, dtype=torch.float64), torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(TypeError, match=r"w must be a torch.Tensor"):
        sa.feature_attention(np.zeros((2, 2)), counts)
    with pytest.raises(ValueError, match=r"probs must be a float tensor of shape \(\*B, K\)"):
        sa.population_loss(w, counts, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="queries"):
        sa.empirical_loss(w, counts.expand(5, -1), torch.tensor([0]), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="coords"):
        sa.empirical_loss(w, counts, torch.tensor([0]), torch.zeros(2))
    with pytest.raises(
        ValueError,
        match=r"n_features must be a real numpy array of shape \(\) or .* \(axes so far: T=\(2, 2\) from times\)",
    ):
        sa.fit_bound(np.ones((2, 2)), np.array([4.0, 8.0]), 0.01, 1.0)
    with pytest.raises(ValueError, match="n_features"):
        sa.bound_terms(np.nan, 0.01, 1.0)
    with pytest.raises(TypeError, match="eps must be a tuple, list or 1-D array"):
        sa.convergence_times(
            [(torch.tensor([0.5, 0.5]), 4)],
            eps=0.05,
            n_seeds=1,
            steps=2,
            lr=1.0,
            n_samples=4,
            generator=gen,
            progress=False,
        )
    with pytest.raises(ValueError, match="problems must be .*pairs"):
        sa.convergence_times(
            [torch.tensor([0.5, 0.5])],
            eps=(0.05,),
            n_seeds=1,
            steps=2,
            lr=1.0,
            n_samples=4,
            generator=gen,
            progress=False,
        )


def test_integer_counts_do_not_round_the_weights():
    w = 0.7 * torch.eye(2, dtype=torch.float64)
    got = sa.feature_attention(w, torch.tensor([[2, 2]]))[0, 0]
    want = torch.tensor([np.exp(0.7), 1.0], dtype=torch.float64) / (np.exp(0.7) + 1)
    torch.testing.assert_close(got, want)


def test_empirical_loss_is_the_token_level_loss_on_the_same_prompts(gen):
    task = DiscreteFeatures(dim=6, probs=imbalanced_probs(4, 0.4), seed=1)
    prompt, idx = task.sample_with_labels(50, 7, gen)
    w = torch.randn(4, 4, dtype=torch.float64, generator=gen)
    q = task.features @ w @ task.features.T
    residual = sa.predict(prompt, q) - prompt.y_query
    counts = torch.nn.functional.one_hot(idx[:, :-1], 4).sum(1).double()
    # the task coordinates <w_i, v_m> from the labels: y_j = <w_i, x_j> with x_j = v_(idx_j)
    coords = torch.zeros(50, 4, dtype=torch.float64)
    ys = torch.cat([prompt.y, prompt.y_query[:, None]], 1).double()
    coords.scatter_(1, idx, ys)
    seen = torch.zeros(50, 4, dtype=torch.bool).scatter_(1, idx, True)
    keep = seen.all(1)  # every feature appears, so every coordinate is known
    assert keep.sum() > 10
    got = sa.empirical_loss(w, counts[keep], idx[keep, -1], coords[keep])
    want = 0.5 * residual.double()[keep].square().mean()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_empirical_descent_learns_stage_wise():
    task = DiscreteFeatures(dim=4, probs=imbalanced_probs(4, 0.5))
    _, hist = sa.run_empirical_gradient_descent(
        task,
        400,
        24,
        steps=800,
        lr=1.0,
        n_samples=256,
        generator=torch.Generator().manual_seed(0),
        record_every=5,
        progress=False,
    )
    t = sa.convergence_steps(hist.steps, hist.records["loss_k"], 0.05)
    assert np.isfinite(t).all() and 2 * t[0] <= t[1:].min()
    assert hist.records["train"][-1] < hist.records["train"][0] / 10
    with pytest.raises(TypeError, match="task"):
        sa.run_empirical_gradient_descent(
            imbalanced_probs(4, 0.5), 10, 4, steps=2, lr=1.0, n_samples=8, generator=torch.Generator(), progress=False
        )


def _history(n_steps=6, k=4):
    steps = np.arange(n_steps) * 10
    loss_k = np.exp(-np.outer(steps + 1, np.arange(1, k + 1)) / 20)
    attn = np.broadcast_to(np.eye(k), (n_steps, k, k)).copy()
    return GDHistory(steps=steps, records={"loss_k": loss_k, "attn": attn, "W": attn * 2})


def test_plot_feature_errors_draws_one_panel_per_run():
    fig = plot_feature_errors({"imbalanced": _history(), "balanced": _history()}, level=0.01)
    assert [ax.get_title() for ax in fig.axes] == ["imbalanced", "balanced"]
    for ax in fig.axes:
        assert len(ax.lines) == 4 + 1  # one line per feature and the level
        assert ax.get_yscale() == "log"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"$L_{{{k}}}$" for k in range(1, 5)]
    plt.close(fig)
    with pytest.raises(ValueError, match="histories"):
        plot_feature_errors({})


def test_plot_attention_snapshots_rounds_up_to_recorded_steps():
    h = _history()
    fig = plot_attention_snapshots(h.steps, h.records["attn"], at=[0, 15, h.steps[-1]])
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ["step 0", "step 20", "step 50"]
    plt.close(fig)


def test_plot_phase_weights_draws_three_weights_and_four_phases():
    h = _history()
    fig = plot_phase_weights(h.steps, h.records["W"], feature=1, other=2, boundaries=np.array([10.0, 20.0, 30.0]))
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["$A_{2}$", "$B_{2,1}$", "$B_{2,3}$"]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), h.records["W"][:, 1, 1])
    assert [t.get_text() for t in ax.texts] == ["I", "II", "III", "IV"]
    assert len(ax.patches) == 4 and ax.get_xlim() == (0, 50)
    plt.close(fig)


def test_plot_convergence_times_draws_medians_ranges_and_bounds():
    t = np.array([[100.0, 110.0, 90.0], [300.0, 320.0, 310.0]])
    fig = plot_convergence_times(
        [
            {
                "x": [4, 8],
                "xlabel": "K",
                "bounds": {"bound": [120, 350]},
                "times": {"rare": t, "own x": ([4, 6, 8], np.vstack([t, t[:1]]))},
            },
            {"x": [25, 100], "xlabel": "1/eps", "times": {"K = 4": t}},
        ]
    )
    left, right = fig.axes
    assert left.get_xscale() == left.get_yscale() == "log" and right.get_xlabel() == "1/eps"
    np.testing.assert_array_equal(left.lines[0].get_ydata(), [100.0, 310.0])  # medians over seeds
    assert any(list(line.get_xdata()) == [4, 6, 8] for line in left.lines)  # a series on its own x values
    assert sorted(text.get_text() for text in left.get_legend().get_texts()) == ["bound", "own x", "rare"]
    plt.close(fig)
    with pytest.raises(ValueError, match="one row per x"):
        plot_convergence_times([{"x": [4], "xlabel": "K", "times": {"rare": t}}])
