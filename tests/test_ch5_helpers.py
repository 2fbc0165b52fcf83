"""Chapter 5's helpers: convergence and phase detection on recorded histories, the K sweep, and its figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from icl_utils.dynamics import softmax_attention as sa  # noqa: E402
from icl_utils.gd import GDHistory  # noqa: E402
from icl_utils.plotting import (  # noqa: E402
    plot_attention_snapshots,
    plot_convergence_scaling,
    plot_feature_errors,
    plot_phase_weights,
)
from icl_utils.tasks.discrete import imbalanced_probs  # noqa: E402


def test_convergence_steps_by_hand():
    steps = np.array([0, 5, 10, 15])
    loss_k = np.array([[0.5, 0.5, 0.5], [0.005, 0.4, 0.5], [0.001, 0.02, 0.5], [0.001, 0.009, 0.3]])
    t = sa.convergence_steps(steps, loss_k, 0.01)
    assert t.dtype == float
    np.testing.assert_array_equal(t, [5.0, 15.0, np.inf])
    with pytest.raises(ValueError, match="loss_k must have one row per recorded step"):
        sa.convergence_steps(steps, loss_k[:3], 0.01)
    with pytest.raises(ValueError, match="eps"):
        sa.convergence_steps(steps, loss_k, 0.0)


def test_phase_boundaries_by_hand():
    steps = np.array([0, 10, 20, 30, 40])
    own = np.array([0.1, 0.3, 0.6, 0.9, 0.95])  # attention of a query on v_2 to its own feature
    dom = np.array([0.5, 0.2, 0.2, 0.05, 0.02])  # ... and to the dominant feature v_1
    attn = np.zeros((5, 3, 3))
    attn[:, 1, 1], attn[:, 1, 0] = own, dom
    loss_k = np.full((5, 3), 0.5)
    loss_k[:, 1] = [0.5, 0.3, 0.1, 0.02, 0.005]
    np.testing.assert_array_equal(sa.phase_boundaries(steps, attn, loss_k, feature=1, eps=0.01), [10, 20, 40])
    # feature 2 never overtakes the dominant one, never passes 1/2, never converges
    assert np.isinf(sa.phase_boundaries(steps, attn, loss_k, feature=2, eps=0.01)).all()


@pytest.mark.parametrize("feature", [0, 3, 1.0, True])
def test_phase_boundaries_rejects_a_feature_that_is_not_under_represented(feature):
    with pytest.raises(ValueError, match="feature"):
        sa.phase_boundaries(np.arange(2), np.zeros((2, 3, 3)), np.zeros((2, 3)), feature=feature, eps=0.01)


def test_phase_boundaries_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="attn must be"):
        sa.phase_boundaries(np.arange(2), np.zeros((2, 3, 3)), np.zeros((2, 4)), feature=1, eps=0.01)


def test_convergence_time_sweep_matches_separate_runs():
    kwargs = dict(steps=300, lr=1.0, n_samples=64, record_every=5)
    ks, dominant, slowest = sa.convergence_time_sweep((3, 4), dominant=0.5, context_per_feature=8, eps=0.05,
                                                      generator=torch.Generator().manual_seed(0), **kwargs)
    gen = torch.Generator().manual_seed(0)  # the same draws, in the same order
    expected = []
    for k in (3, 4):
        _, hist = sa.run_gradient_descent(imbalanced_probs(k, 0.5), 8 * k, generator=gen, progress=False, **kwargs)
        expected.append(sa.convergence_steps(hist.steps, hist.records["loss_k"], 0.05))
    np.testing.assert_array_equal(ks, [3, 4])
    assert ks.dtype.kind == "i"
    np.testing.assert_array_equal(dominant, [t[0] for t in expected])
    np.testing.assert_array_equal(slowest, [t[1:].max() for t in expected])
    assert np.isfinite(slowest).all() and (dominant <= slowest).all()


@pytest.mark.parametrize("n_features, error", [((), TypeError), ("34", TypeError), ((3, 1), ValueError)])
def test_convergence_time_sweep_rejects_bad_feature_counts(n_features, error):
    with pytest.raises(error, match="n_features"):
        sa.convergence_time_sweep(n_features, dominant=0.5, context_per_feature=4, steps=10, lr=1.0, n_samples=8,
                                  eps=0.01, generator=torch.Generator().manual_seed(0))


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


def test_plot_convergence_scaling_draws_measured_times_and_the_bound_shape():
    ks = np.array([4, 8, 16])
    fig = plot_convergence_scaling(ks, np.array([100.0, 300.0, 900.0]), np.array([20.0, 25.0, 30.0]), slope=1.58,
                                   shape_slope=2.4)
    (ax,) = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["slowest rare feature (slope 1.58)", "dominant feature", "$K^2 \\log K$ (slope 2.40)"]
    np.testing.assert_allclose(ax.lines[2].get_ydata()[0], 100.0)  # the shape is matched at the first K
    plt.close(fig)
