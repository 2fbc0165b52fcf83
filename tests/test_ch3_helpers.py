"""Chapter 3's helpers: sample complexity read off curves and risk terms, bootstrap intervals, and the chapter's figures
(checked on the artists, not on pixels)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils.plotting import (
    method_color,
    plot_error_panels,
    plot_floor_by_width,
    plot_risk_against_examples,
    plot_sample_complexity,
    plot_subspace_mass,
    plot_subspace_recovery,
    shade,
    unreadable,
)
from icl_utils.risk import (
    RiskTerms,
    bootstrap_interval,
    examples_needed,
    examples_to_reach,
    exponent_difference,
    scaling_exponent,
)


def test_examples_to_reach_interpolates_a_power_law_exactly():
    ns = np.array([16, 32, 64, 128])
    risks = 3.0 * ns**-0.5  # a straight line in log-log
    assert examples_to_reach(ns, risks, 3.0 * 50.0**-0.5) == pytest.approx(50.0)
    assert examples_to_reach(ns, risks, 10.0) == 16  # already below at the first point
    assert examples_to_reach(ns, risks, 0.01) == np.inf  # never reached on the grid
    # The first crossing counts, not a later one.
    assert examples_to_reach(ns, [1.0, 0.4, 0.9, 0.3], 0.5) < 32


def test_bootstrap_interval_covers_the_mean_and_is_reproducible():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(40):
        x = rng.normal(2.0, 1.0, size=50)
        est, lo, hi = bootstrap_interval(np.mean, [x], reps=300, level=0.9, seed=3)
        assert est == pytest.approx(x.mean()) and lo < est < hi
        hits += lo < 2.0 < hi
    assert 30 <= hits <= 40  # about 90% coverage
    x = rng.normal(size=20)
    assert bootstrap_interval(np.mean, [x], seed=5) == bootstrap_interval(np.mean, [x], seed=5)
    # Two groups are resampled independently; a statistic that cannot be computed leaves no interval.
    est, lo, hi = bootstrap_interval(lambda a, b: a.mean() - b.mean(), [x, x + 1.0], reps=200)
    assert est == pytest.approx(-1.0) and lo < -1.0 < hi
    assert np.isnan(bootstrap_interval(lambda a: np.nan, [x], reps=20)[1:]).all()
    assert bootstrap_interval(lambda a: np.inf, [x], reps=20)[1:] == (np.inf, np.inf)


def test_scaling_exponents_recover_a_power_law_and_tell_two_apart():
    rng = np.random.default_rng(0)
    xs = [8, 16, 32]
    # n*(x) = 5 x^2 and 40 x^0.5, each measured by 30 noisy replicates (the median is the statistic).
    fast = [5 * x**2 * np.exp(rng.normal(0, 0.1, 30)) for x in xs]
    slow = [40 * x**0.5 * np.exp(rng.normal(0, 0.1, 30)) for x in xs]
    est, lo, hi = scaling_exponent(xs, fast, np.median, reps=300)
    assert est == pytest.approx(2.0, abs=0.05) and lo < 2.0 < hi
    gap = exponent_difference((xs, fast, np.median), (xs, slow, np.median), reps=300)
    assert gap[0] == pytest.approx(1.5, abs=0.07) and gap[1] > 1.2
    # Never reached at the largest size: unbounded growth, +inf for the first, -inf (against the claim) for the
    # second. Never reached at the smallest: nothing measured, no interval, no claim passes.
    unbounded = [*slow[:2], np.full(30, np.inf)]
    assert scaling_exponent(xs, unbounded, np.median, reps=50) == (np.inf, np.inf, np.inf)
    assert exponent_difference((xs, fast, np.median), (xs, unbounded, np.median), reps=50)[1] == -np.inf
    assert exponent_difference((xs, unbounded, np.median), (xs, slow, np.median), reps=50)[1] == np.inf
    never = [np.full(30, np.inf), *slow[1:]]
    assert np.isnan(scaling_exponent(xs, never, np.median, reps=50)[1])
    assert np.isnan(exponent_difference((xs, never, np.median), (xs, slow, np.median), reps=50)[1])
    with pytest.raises(ValueError, match="one array per size"):
        scaling_exponent(xs, fast[:2], np.median)


def test_risk_terms_give_the_risk_and_the_sample_complexity():
    terms = RiskTerms(np.array([0.2, 0.4]), np.array([8.0, 12.0]), np.array([0.9, 1.3]))
    assert terms.floor == pytest.approx(0.3) and terms.spread == pytest.approx(10.0)
    assert terms.swapped_floor == pytest.approx(1.1)
    np.testing.assert_allclose(terms.risk([10, 100]), [1.3, 0.4])
    assert terms.examples_needed(0.4) == pytest.approx(100.0)
    assert terms.examples_needed(0.3) == np.inf
    np.testing.assert_allclose(terms.standard_error([1e12]), [np.std([0.2, 0.4], ddof=1) / np.sqrt(2)])
    with pytest.raises(ValueError, match="positive context lengths"):
        terms.risk(0)


def test_examples_needed_per_run_is_the_n_where_floor_plus_spread_over_n_meets_the_level():
    floors, spreads = np.array([0.2, 0.3, 0.5]), np.array([8.0, 2.0, 1.0])
    needed = examples_needed(floors, spreads, 0.4)
    np.testing.assert_allclose(needed[:2], [40.0, 20.0])
    np.testing.assert_allclose(floors[:2] + spreads[:2] / needed[:2], 0.4)  # the level is reached there
    assert needed[2] == np.inf  # a floor above the level is never reached
    assert examples_needed(0.2, 8.0, 0.4) == pytest.approx(40.0)
    with pytest.raises(ValueError, match="floor and spread must have one shape"):
        examples_needed(floors, spreads[:2], 0.4)


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


def test_risk_against_examples_draws_seed_bands_baselines_and_prompt_free_levels():
    ns = [16, 32, 64]
    by_dim = {8: np.array([[1.5, 0.8, 0.5], [1.7, 1.0, 0.7]]), 16: np.array([[1.6, 0.9, 0.5], [1.6, 0.9, 0.5]])}
    by_rank = {1: np.array([[0.9, 0.5, 0.3]] * 2), 2: by_dim[16]}
    baselines = {
        "kernel ridge": {8: ([32, 64], [0.7, 0.5]), 16: ([32, 64], [0.9, 0.8])},
        "two-layer net": {8: ([32, 64], [0.6, 0.4])},
    }
    fig = plot_risk_against_examples(
        ns, by_dim, by_rank, prompt_free={1: 0.3, 2: 0.65}, rank=2, rank_dim=16, baselines=baselines, target=0.55
    )
    left, right = fig.axes
    np.testing.assert_allclose(left.lines[0].get_ydata(), [1.6, 0.9, 0.6])  # the median of two seeds
    assert len(left.collections) == 2 and len(right.collections) == 2  # a band per curve
    styles = [(line.get_linestyle(), line.get_color()) for line in left.lines]
    ridge, net = method_color("kernel ridge"), method_color("two-layer net")
    # each learner in its method's colour, lighter at the larger d: kernel ridge at d=16, the net at d=8
    assert ("--", shade(ridge, 1, 2)) in styles and (":", shade(net, 0, 2)) in styles
    assert (":", shade(net, 1, 2)) not in styles  # the net was not given at d=16
    np.testing.assert_allclose(left.lines[1].get_ydata(), [0.7, 0.5])
    flat = {
        line.get_ydata()[0]
        for line in left.lines
        if line.get_linestyle() in ("-.", ":") and len(set(line.get_ydata())) == 1
    }
    assert {0.65, 0.55} <= flat  # the prompt-free level of r = 2 and the target
    legend = [t.get_text() for t in left.get_legend().get_texts()]
    assert legend == [
        "pretrained",
        "kernel ridge",
        "two-layer net",
        "$d = 8$",
        "$d = 16$",
        r"prompt-free $\mathbb{E}[y|x]$",
        "target",
    ]
    levels = [line for line in right.lines if line.get_linestyle() == "-."]
    assert [line.get_ydata()[0] for line in levels] == [0.3, 0.65]
    assert levels[0].get_color() == right.lines[0].get_color()
    assert {ax.get_xscale() for ax in fig.axes} == {ax.get_yscale() for ax in fig.axes} == {"log"}
    assert not unreadable(fig)
    plt.close(fig)
    with pytest.raises(ValueError, match="one risk per n"):
        plot_risk_against_examples(ns, {8: [1.0, 0.5]}, by_rank, prompt_free={1: 0.3, 2: 0.6}, rank=2, rank_dim=16)
    with pytest.raises(ValueError, match="prompt_free must give"):
        plot_risk_against_examples(ns, by_dim, by_rank, prompt_free={2: 0.6}, rank=2, rank_dim=16)
    with pytest.raises(ValueError, match=r"baselines\['kernel ridge'\]"):
        plot_risk_against_examples(
            ns,
            by_dim,
            by_rank,
            prompt_free={1: 0.3, 2: 0.6},
            rank=2,
            rank_dim=16,
            baselines={"kernel ridge": {8: ([32], [0.7, 0.5])}},
        )


def test_subspace_recovery_scales_the_tasks_by_each_power_of_d():
    t1 = {8: [8, 64], 16: [32, 256]}
    masses = {8: np.array([[0.3, 0.8], [0.5, 0.9]]), 16: np.array([[0.2, 0.7], [0.2, 0.9]])}
    fig = plot_subspace_recovery(t1, masses, exponents=(2, 3), level=0.6)
    ax2, ax3 = fig.axes
    np.testing.assert_allclose(ax2.lines[0].get_xdata(), [8 / 64, 1.0])
    np.testing.assert_allclose(ax3.lines[1].get_xdata(), [32 / 16**3, 256 / 16**3])
    np.testing.assert_allclose(ax2.lines[1].get_ydata(), [0.2, 0.8])
    assert ax2.lines[-1].get_ydata()[0] == 0.6
    assert not unreadable(fig)
    plt.close(fig)
    with pytest.raises(ValueError, match="one column per T1"):
        plot_subspace_recovery({8: [8, 64, 128]}, {8: masses[8]})
    with pytest.raises(ValueError, match="same, non-empty set"):
        plot_subspace_recovery({8: [8, 64]}, {16: masses[16]})


def test_floor_by_width_draws_medians_ranges_and_references():
    floors = {
        "features in S": np.array([[0.5, 0.3, 0.2], [0.4, 0.2, 0.1], [0.6, 0.25, 0.15]]),
        "random first layer": np.ones((3, 3)),
    }
    fig = plot_floor_by_width(
        [8, 16, 32], floors, reference={"prompt-free": 0.65, "E[y]": 1.1}, points={"pretrained": (32, 0.4)}
    )
    (ax,) = fig.axes
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.5, 0.25, 0.15])  # the median over runs
    assert ax.lines[0].get_color() != ax.lines[1].get_color()
    assert [line.get_ydata()[0] for line in ax.lines[2:4]] == [0.65, 1.1]
    assert [line.get_linestyle() for line in ax.lines[2:4]] == ["--", ":"]
    assert list(ax.lines[4].get_xydata()[0]) == [32, 0.4] and ax.lines[4].get_marker() == "D"
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "pretrained"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert not unreadable(fig)
    plt.close(fig)
    with pytest.raises(ValueError, match="shape"):
        plot_floor_by_width([8, 16], floors)
    with pytest.raises(ValueError, match="widths"):
        plot_floor_by_width([8, -16, 32], floors)
    plt.close("all")


def test_sample_complexity_draws_estimates_with_intervals_and_slopes():
    fig = plot_sample_complexity(
        {"d": ([8, 16], {"a": np.array([[10, 8, 12], [40, 30, np.inf]]), "b": np.array([50, 60])})},
        slopes={"d": {"a": 2.0}},
    )
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a (slope 2.00)", "b"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10, 40])
    assert len(ax.containers) == 1  # one error bar set, for the learner with intervals
    assert not unreadable(fig)
    plt.close(fig)
    with pytest.raises(ValueError, match="panels must be a non-empty mapping"):
        plot_sample_complexity({})


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
