"""Figure functions draw what their docstrings say (checked on the artists, not on pixels)."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils import plotting

RESULTS = Path(__file__).parents[1] / "benchmarks" / "results"


def speed_file(device, rows, ensembles):
    return {
        "device": device,
        "config": "small",
        "rows": [{"name": n, "prompts_per_s": v} for n, v in rows],
        "ensembles": [{"name": n, "models": 8, "time_ratio": r} for n, r in ensembles],
    }


def test_training_speed_draws_one_bar_per_loop_and_case_per_file():
    files = [
        speed_file("CPU", [("reference", 150.0), ("package", 400.0)], [("LTB", 2.5)]),
        speed_file("GPU", [("reference", 1e3), ("package", 2e4), ("package, fast", 5e4)], [("LTB", 1.5), ("GPT", 3.0)]),
    ]
    fig = plotting.plot_training_speed(files)
    left, right = fig.axes
    heights = [p.get_height() for p in left.patches]
    # Three loops per file; the CPU file has no fast loop, drawn as a missing (NaN) bar.
    assert len(heights) == 6 and np.isnan(heights[2]) and heights[5] == 5e4
    assert [t.get_text() for t in left.get_xticklabels()] == ["reference", "package", "package, fast"]
    assert left.get_yscale() == "log" and left.get_ylim()[0] == pytest.approx(100.0)  # the power of ten below 150
    assert [p.get_height() for p in right.patches][-2:] == [1.5, 3.0]
    plt.close(fig)


def test_training_speed_reads_the_committed_results():
    files = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("train_speed-*.json"))]
    fig = plotting.plot_training_speed(files)
    assert len(fig.axes[0].patches) == len(files) * len({r["name"] for f in files for r in f["rows"]})
    plt.close(fig)


def test_unreadable_names_a_wide_figure_and_small_text():
    fig, ax = plt.subplots(figsize=(14, 3.8))
    ax.plot([0, 1], label="a curve")
    ax.legend(fontsize=7)
    found = plotting.unreadable(fig)
    assert any("in wide as saved" in p for p in found) and any("'a curve' at 7 pt" in p for p in found), found
    fig.set_size_inches(plotting.FIGURE_WIDTH, 3.8)
    for text in fig.findobj(matplotlib.text.Text):
        text.set_fontsize(plotting.MIN_FONT_PT)
    assert plotting.unreadable(fig) == []
    plt.close(fig)


def test_wide_figures_are_narrowed_to_the_text_column():
    assert plotting._size(6.0, 4.0) == (6.0, 4.0)
    width, height = plotting._size(14.0, 3.8)
    assert width == plotting.FIGURE_WIDTH and height == pytest.approx(3.8 * 0.75)
    with pytest.raises(TypeError, match="fig must be"):
        plotting.unreadable("figure")


def test_training_loss_tells_its_reference_levels_apart_and_names_what_its_lines_are():
    from icl_utils.plotting import plot_training_loss
    from icl_utils.train import TrainHistory

    fig, ax = plt.subplots()
    hist = TrainHistory(losses=np.ones((60, 4)), seconds=1.0)
    plot_training_loss({"LSA": hist}, ax=ax, reference={"a": 0.5, "b": 0.25}, runs="norms")
    styles = [line.get_linestyle() for line in ax.lines if line.get_label() in ("a", "b")]
    assert len(styles) == 2 and styles[0] != styles[1]
    assert "LSA (4 norms, dark to light)" in ax.get_legend_handles_labels()[1]
    plt.close(fig)


def test_numpy_numbers_are_taken_where_python_numbers_are():
    """A rate or a dimension read off an array (a NumPy scalar) draws what the Python number draws."""
    ns, curves = [16, 64, 256], {"true basis": np.array([0.3, 0.1, 0.03])}
    drawn = []
    for rate in (2 / 3, np.float32(2 / 3), np.float64(2 / 3)):
        fig = plotting.plot_feature_maps(ns, curves, rate=rate)
        drawn.append([line.get_ydata().tolist() for line in fig.axes[0].lines])
        plt.close(fig)
    np.testing.assert_allclose(drawn[1], drawn[0], rtol=1e-6)  # float32's 2/3
    assert drawn[2] == drawn[0]
    fig = plotting.plot_error_per_dimension({"Bayes": torch.ones(4, 6)}, dim=np.int64(2), noise_var=np.float32(0.5))
    assert fig.axes[0].get_xlabel() == "number of in-context examples"
    plt.close(fig)


def test_a_refused_argument_leaves_no_figure_behind():
    """Arguments are checked before anything is drawn: a refused call opens no figure."""
    plt.close("all")
    with pytest.raises(ValueError, match=r"curves\['a'\] must have shape \(3,\)"):
        plotting.plot_feature_maps([16, 64, 256], {"a": np.ones(2)}, rate=0.5)
    with pytest.raises(ValueError, match="ratios must give every method"):
        plotting.plot_risk_ratios_against_n([4, 8], {}, snrs=[1.0])
    with pytest.raises(ValueError, match=r"losses_b\['static'\] must have shape \(3,\) or \(3, S\)"):
        one = {"static": np.ones(2)}
        plotting.plot_mean_field_training(
            np.arange(3), {"static": np.ones(3)}, one, np.ones(2), one, one, saddle_steps=5
        )
    with pytest.raises(ValueError, match="one row per x value"):
        plotting.plot_convergence_times([{"x": [4, 8], "xlabel": "K", "times": {"T": np.ones((3, 2))}}])
    assert plt.get_fignums() == []


# ---- the house style -------------------------------------------------------------------------------------------
def test_each_method_has_one_colour_and_recurring_methods_take_its_shades():
    assert plotting.method_color("Bayes (tuned ridge)") == plotting.method_color("Bayes oracle")  # not ridge's
    assert plotting.method_color("additive kernel ridge") != plotting.method_color("kernel ridge")
    assert plotting.method_color("kernel ridge") != plotting.method_color("Ridge, fixed λ = 1")
    assert plotting.method_color("d = 8") is None
    blue = plotting.method_color("pretrained")
    colors = plotting.colors_for(["pretrained, width N(n)", "true basis", "pretrained, width 6", "untrained"])
    assert colors[0] == blue and colors[2] == plotting.shade(blue, 1, 2) != blue
    assert colors[3] == plotting.method_color("untrained") and colors[1] not in colors[::2]
    assert plotting._shade_of(plotting.shade(blue, 1, 2), blue) and not plotting._shade_of("#d1495b", blue)


def test_off_style_names_a_method_in_another_colour():
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
    ax.plot([0, 1], [0, 1], color=plotting.method_color("Transformer"), label="Transformer")
    ax.plot([0, 1], [1, 0], color=plotting.method_color("Transformer"), label="Least squares")  # the control
    ax.set_ylim(0, 4)  # room above the lines for the legend
    ax.legend(loc="upper right")
    found = plotting.off_style(fig)
    assert found == [f"'Least squares' drawn in #1b4f9c, not its method's {plotting.method_color('least squares')}"]
    ax.lines[1].set_color(plotting.method_color("least squares"))
    ax.legend(loc="upper right")
    assert plotting.off_style(fig) == []
    plt.close(fig)


def test_off_style_finds_a_legend_on_the_data_and_tidy_moves_it():
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
    xs = np.linspace(0, 1, 50)
    for k in range(4):
        ax.plot(xs, np.full_like(xs, k), label=f"level {k}")  # lines across the whole axes: no free corner
    ax.legend(loc="center")  # the control: on the data
    assert any("covers" in p for p in plotting.off_style(fig))
    plotting.tidy(fig)
    assert plotting.off_style(fig) == []
    plt.close(fig)


def test_log_axes_get_three_labels_and_off_style_counts_them():
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
    ax.plot([1, 2], [30, 400])
    ax.set_yscale("log")
    ax.minorticks_off()  # the control: matplotlib then labels only 10^2 between 30 and 400
    assert plotting.off_style(fig) == ["a log y axis with 1 labelled ticks (at least 3)"]
    plotting.tidy(fig)
    assert plotting.off_style(fig) == []
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels == ["50", "100", "200"]
    plt.close(fig)


def test_the_house_style_warns_of_a_figure_that_breaks_it_when_drawn():
    plotting.use_house_style()
    try:
        fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
        ax.plot([0, 1], [0, 1], color="#d1495b", label="Bayes")
        ax.legend(loc="upper left")
        with pytest.warns(UserWarning, match="'Bayes' drawn in #d1495b"):
            fig.canvas.draw()
        ax.lines[0].set_color(plotting.method_color("Bayes"))
        ax.legend(loc="upper left")
        fig.canvas.draw()  # no warning: pytest's filter turns an unexpected one into an error
        plt.close(fig)
    finally:
        matplotlib.rcParams["figure.hooks"] = []


def test_off_style_sees_the_data_of_an_inset():
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.4))
    ax.plot([0, 1], [0, 0], label="a")
    ax.plot([0, 1], [1, 1], label="b")
    inset = ax.inset_axes((0.5, 0.3, 0.5, 0.4))  # a child of ax, not in fig.axes
    inset.plot([0, 1], [0.5, 0.5])
    ax.legend(loc="center right")  # on the inset's line
    assert any("covers" in p for p in plotting.off_style(fig))
    plotting.tidy(fig)
    assert plotting.off_style(fig) == []
    plt.close(fig)


def test_log_labels_follow_limits_set_after_tidy():
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
    ax.plot([0, 1], [1e-3, 10])
    plotting.log_y(ax)
    plotting.tidy(fig)  # labelled for four decades: powers of ten
    ax.set_ylim(0.04, 2.3)  # then narrowed, as a figure function may do: 0.1 and 1 alone would be left
    assert plotting.off_style(fig) == []
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels == ["0.05", "0.1", "0.2", "0.5", "1", "2"]
    plt.close(fig)


def test_a_method_drawn_twice_keeps_its_colour_and_changes_its_line_style():
    from icl_utils.train import TrainHistory

    assert plotting.recurrences(["Transformer, noiseless", "d = 8", "Transformer, noisy"]) == [0, 0, 1]
    fig, ax = plt.subplots(figsize=(plotting.FIGURE_WIDTH, 3.5))
    runs = {
        f"Transformer, {k}": TrainHistory(losses=np.ones((60, 2)) * v, seconds=1.0) for k, v in (("a", 1), ("b", 2))
    }
    plotting.plot_training_loss(runs, ax=ax)
    first, second = ax.lines[0], ax.lines[2]  # the first run of each history
    assert first.get_color() == second.get_color() == plotting.method_color("Transformer")
    assert (first.get_linestyle(), second.get_linestyle()) == ("-", "--")
    plt.close(fig)
