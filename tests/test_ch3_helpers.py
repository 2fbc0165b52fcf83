"""Chapter 3's helpers: the empirical sample complexity on a grid, the two-stage fit, and the chapter's figures
(checked on the artists, not on pixels)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from icl_utils.plotting import (  # noqa: E402
    PALETTE,
    plot_error_panels,
    plot_risk_against_examples,
    plot_subspace_mass,
)
from icl_utils.risk import first_n_below  # noqa: E402


def test_first_n_below_returns_the_first_grid_point_at_or_under_the_level():
    ns = (16, 32, 64, 128)
    assert first_n_below(ns, [1.2, 0.7, 0.6, 0.3], level=0.6) == 64  # "at most": 0.6 counts
    assert first_n_below(ns, [0.5, 0.9, 0.4, 0.3], level=0.6) == 16  # the first hit, not the last crossing
    assert first_n_below(ns, np.array([1.2, 0.9, 0.8, 0.7]), level=0.6) is None
    assert first_n_below([], [], level=0.6) is None


@pytest.mark.parametrize("ns, risks", [((16, 32), [0.1]), ((16,), [[0.1]]), ((16, 32), [0.1, float("nan")])])
def test_first_n_below_checks_its_arguments(ns, risks):
    with pytest.raises(ValueError):
        first_n_below(ns, risks, level=0.6)


def test_subspace_mass_draws_one_pair_of_bars_per_setting():
    fig = plot_subspace_mass(["d = 8", "d = 16"], [0.25, 0.12], [0.8, 0.75])
    (ax,) = fig.axes
    heights = [p.get_height() for p in ax.patches]
    assert heights == [0.25, 0.12, 0.8, 0.75]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d = 8", "d = 16"]
    assert ax.get_ylim() == (0, 1)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["initialization", "after one GD step"]
    plt.close(fig)
    with pytest.raises(ValueError, match="same non-zero length"):
        plot_subspace_mass(["d = 8"], [0.2, 0.1], [0.8, 0.7])


def test_risk_against_examples_draws_models_baselines_and_the_zero_predictor():
    ns, base_ns = [16, 32, 64], [32, 64]
    by_dim = {8: [1.5, 0.8, 0.5], 16: [1.6, 0.9, 0.5]}
    by_rank = {1: [0.9, 0.5, 0.3], 2: [1.5, 0.8, 0.5], 4: [2.0, 1.2, 0.9]}
    baselines = {"kernel ridge": {8: [0.7, 0.5], 16: [0.9, 0.8]}, "two-layer net": {8: [0.6, 0.4], 16: [1.0, 0.9]}}
    fig = plot_risk_against_examples(ns, by_dim, by_rank, baseline_ns=base_ns, baselines=baselines, rank_dim=16)
    left, right = fig.axes
    labelled = {line.get_label(): line for line in left.lines}
    # Two model curves, four baseline curves, the zero-predictor line.
    assert len(left.lines) == 7 and len(right.lines) == 4
    assert labelled["kernel ridge, d=16"].get_linestyle() == "--"
    assert labelled["two-layer net, d=8"].get_linestyle() == ":"
    assert labelled["kernel ridge, d=16"].get_color() == labelled["pretrained, d=16"].get_color() == PALETTE[1]
    np.testing.assert_allclose(labelled["two-layer net, d=16"].get_ydata(), [1.0, 0.9])
    np.testing.assert_allclose(right.lines[2].get_ydata(), by_rank[4])
    assert list(left.lines[-1].get_ydata()) == [1.0, 1.0]
    assert right.get_title() == "pretrained, d = 16"
    assert {ax.get_xscale() for ax in fig.axes} == {ax.get_yscale() for ax in fig.axes} == {"log"}
    assert len(left.get_legend().get_texts()) == 6
    plt.close(fig)
    with pytest.raises(ValueError, match="one risk per n"):
        plot_risk_against_examples(ns, {8: [1.0, 0.5]}, by_rank)
    with pytest.raises(ValueError, match="baseline 'kernel ridge'"):
        plot_risk_against_examples(ns, by_dim, by_rank, baseline_ns=[32], baselines=baselines)


def test_error_panels_draw_one_panel_per_title_with_crosses_in_the_curve_colours():
    left = {"GPT, d=8": torch.full((10, 5), 0.5), "GPT, d=16": torch.full((10, 5), 0.7)}
    right = {"GPT, r=1": torch.full((10, 5), 0.3)}
    fig = plot_error_panels({"r = 2": left, "d = 16": right}, markers={"GPT, d=16": (4, 0.9)})
    ax1, ax2 = fig.axes
    assert [ax1.get_title(), ax2.get_title()] == ["r = 2", "d = 16"]
    assert len(ax1.lines) == 3 and len(ax2.lines) == 1
    cross = ax1.lines[-1]
    assert cross.get_marker() == "x" and (list(cross.get_xdata()), list(cross.get_ydata())) == ([4], [0.9])
    assert cross.get_color() == ax1.lines[1].get_color()
    assert ax1.get_yscale() == "log" and ax1.get_ylabel() == "test squared error"
    plt.close(fig)
    with pytest.raises(ValueError, match="no panel draws"):
        plot_error_panels({"r = 2": left}, markers={"GPT, r=9": (4, 0.9)})
