"""Chapter 0's figure function draws what its docstring says (checked on the artists, not on pixels)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils import plotting
from icl_utils.plotting import plot_error_per_dimension


def test_error_per_dimension_draws_normalized_curves_noise_level_and_interpolation_line():
    dim, noise_var = 5, 0.25
    curves = {"Least squares": torch.full((8, 11), 2.0), "Transformer": torch.full((8, 11), 1.0)}
    fig = plot_error_per_dimension(curves, dim=dim, noise_var=noise_var, ylim=(0.03, 3.0))
    (ax,) = fig.axes
    assert fig.get_size_inches()[0] == plotting.FIGURE_WIDTH
    lines = {line.get_label(): line for line in ax.lines}
    # Two methods, the dashed noise level, and the unlabelled vertical line at k = d.
    assert len(ax.lines) == 4
    np.testing.assert_allclose(lines["Least squares"].get_ydata(), 2.0 / dim)
    np.testing.assert_allclose(lines["Transformer"].get_ydata(), 1.0 / dim)
    np.testing.assert_allclose(lines["noise level"].get_ydata(), noise_var / dim)
    assert lines["noise level"].get_linestyle() == "--"
    assert list(ax.lines[-1].get_xdata()) == [dim, dim]
    assert ax.get_yscale() == "log" and ax.get_ylim() == pytest.approx((0.03, 3.0))
    assert ax.get_ylabel() == "squared error / $d$"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Least squares", "Transformer", "noise level"]
    plt.close(fig)


def test_error_per_dimension_draws_on_the_given_axes_and_a_noise_level_only_with_noise():
    for noise_var, lines in ((0.0, 2), (0.1, 3)):  # the curve, k = d, and the noise level if there is noise
        fig, ax = plt.subplots()
        out = plot_error_per_dimension({"Bayes": torch.ones(4, 6)}, dim=2, noise_var=noise_var, ax=ax)
        assert out is fig and len(ax.lines) == lines
        assert ("noise level" in ax.get_legend_handles_labels()[1]) == (noise_var > 0)
        plt.close(fig)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"dim": 0, "noise_var": 0.1}, ValueError),
        ({"dim": 2.5, "noise_var": 0.1}, TypeError),
        ({"dim": 3, "noise_var": -1.0}, ValueError),
    ],
)
def test_error_per_dimension_checks_its_arguments(kwargs, error):
    with pytest.raises(error):
        plot_error_per_dimension({"Bayes": torch.ones(4, 6)}, **kwargs)
    plt.close("all")


def test_error_per_dimension_limits_follow_the_data_and_cut_a_peak():
    dim, noise_var = 5, 0.05
    errors = torch.full((8, 11), 0.02)  # below the old fixed floor of 0.03 (per dimension: 0.004)
    errors[:, 0] = 5.0  # no example: the prior's scale, 1 per dimension
    peak = errors.clone()
    peak[:, dim] = 2000.0  # least squares at k = d with noise
    fig = plot_error_per_dimension({"Transformer": errors, "Least squares": peak}, dim=dim, noise_var=noise_var)
    (ax,) = fig.axes
    assert ax.get_ylim() == pytest.approx((0.7 * 0.02 / dim, 2.0))
    plt.close(fig)
    fig = plot_error_per_dimension({"Least squares": errors}, dim=dim, noise_var=0.0, logy=False)
    (ax,) = fig.axes
    assert ax.get_yscale() == "linear" and ax.get_ylim() == pytest.approx((0.0, 1.15))
    plt.close(fig)


def test_error_per_dimension_checks_logy():
    with pytest.raises(TypeError, match="logy"):
        plot_error_per_dimension({"Bayes": torch.ones(4, 6)}, dim=2, noise_var=0.0, logy="yes")
    plt.close("all")


def test_effective_ridge_finds_the_penalty_of_a_ridge_curve_and_least_squares_at_the_bottom():
    from icl_utils import estimators as est
    from icl_utils.risk import effective_ridge, prefix_errors
    from icl_utils.tasks import LinearRegression

    prompt = LinearRegression(dim=4).sample(512, 8, torch.Generator().manual_seed(3))
    lams = [0.01, 0.1, 0.3, 1.0, 3.0]
    curve = prefix_errors(lambda p: est.ridge(p, lam=0.3), prompt).double().mean(0)
    assert effective_ridge(curve, prompt, lams) == (0.3, 0.0)
    lsq = prefix_errors(est.least_squares, prompt).double().mean(0)
    lam, distance = effective_ridge(lsq, prompt, lams)
    assert lam == 0.01 and 0 < distance < 0.1
    # predicting zero is ridge with an infinite penalty: the largest on the grid
    zero = prefix_errors(lambda p: torch.zeros(p.x_query.shape[0]), prompt).double().mean(0)
    assert effective_ridge(zero, prompt, lams)[0] == 3.0
    with pytest.raises(ValueError, match="curve"):
        effective_ridge(curve[:-1], prompt, lams)
    with pytest.raises(
        ValueError,
        match=r"lams must be a non-empty tuple, list or 1-D array of at most 1024 \(config.MAX_SERIES\) numbers > 0",
    ):
        effective_ridge(curve, prompt, [0.1, 0.0])
    with pytest.raises(ValueError, match="lams"):
        effective_ridge(curve, prompt, [])
    with pytest.raises(ValueError, match="curve"):
        effective_ridge(curve * float("nan"), prompt, lams)
