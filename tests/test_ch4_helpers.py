"""Chapter 4's helpers: the GD-beta risk at its best step, its Hessian, its gradient flow, and the chapter's figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils.dynamics.gd_beta import gd_beta_flow, gd_beta_hessian
from icl_utils.exact import best_gd_beta_risk, best_lsa_risk, gd_beta_risk, lsa_risk, optimal_gd_step, optimal_lsa
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.models import LSA
from icl_utils.plotting import (
    method_color,
    plot_gap_scaling,
    plot_gd_beta_reading,
    plot_gd_records,
    plot_risk_against_signal,
    plot_risk_ratios_against_n,
    shade,
)
from icl_utils.prompts import Prompt
from icl_utils.tasks import LinearRegression


def _task(d: int = 3, norm: float = 2.0, noise_std: float = 0.5) -> LinearRegression:
    return LinearRegression(dim=d, noise_std=noise_std, prior_mean=torch.full((d,), norm / d**0.5))


def _origin(d: int) -> dict[str, torch.Tensor]:
    return {"beta0": torch.zeros(d, dtype=torch.float64), "gamma": torch.zeros(d, d, dtype=torch.float64)}


# ---- best_gd_beta_risk ---------------------------------------------------------------------------------------------


def test_best_gd_beta_risk_matches_the_isotropic_closed_form():
    # H = Psi = I and beta0 = beta*: Gamma* = g I with 1/g = 1 + 1/n + (d + sigma^2)/n, and R = sigma^2 + d (1 - g).
    d, n, noise = 4, 7, 0.5
    task = _task(d, noise_std=noise)
    g = 1 / (1 + 1 / n + (d + noise**2) / n)
    assert best_gd_beta_risk(task, n) == pytest.approx(noise**2 + d * (1 - g), rel=1e-12)


def test_best_gd_beta_risk_is_the_risk_at_the_optimal_step_and_gd0_pays_for_the_mean():
    task, n = _task(), 6
    zero = torch.zeros(3, dtype=torch.float64)
    assert best_gd_beta_risk(task, n) == gd_beta_risk(task, n, task.mean(), optimal_gd_step(task, n)).item()
    assert best_gd_beta_risk(task, n, zero) == gd_beta_risk(task, n, zero, optimal_gd_step(task, n, zero)).item()
    assert best_gd_beta_risk(task, n, zero) > best_gd_beta_risk(task, n) + 0.5


def test_best_gd_beta_risk_checks_its_arguments():
    with pytest.raises(TypeError, match="task must be a LinearRegression"):
        best_gd_beta_risk("not a task", 5)
    with pytest.raises(ValueError, match="beta0"):
        best_gd_beta_risk(_task(), 5, torch.zeros(4))
    with pytest.raises(ValueError, match="n must be"):
        best_gd_beta_risk(_task(), 0)


# ---- gd_beta_hessian -----------------------------------------------------------------------------------------------


def _flat_risk(task, n, d):
    return lambda theta: gd_beta_risk(task, n, theta[:d], theta[d:].reshape(d, d))


def test_gd_beta_hessian_matches_second_differences():
    # The risk is quadratic in beta0 alone and in Gamma alone, so second differences along two coordinates of the
    # same block are exact; across blocks, central differences of the autograd gradient agree to O(h^2).
    d, n = 2, 5
    task = _task(d)
    gen = torch.Generator().manual_seed(0)
    beta0, gamma = (
        torch.randn(d, generator=gen, dtype=torch.float64),
        torch.randn(d, d, generator=gen, dtype=torch.float64),
    )
    hess = gd_beta_hessian(task, n, beta0, gamma)
    assert hess.shape == (d + d * d, d + d * d) and torch.allclose(hess, hess.T)
    risk, theta = _flat_risk(task, n, d), torch.cat([beta0, gamma.flatten()])
    eye, h = torch.eye(d + d * d, dtype=torch.float64), 0.5
    for i, j in [(0, 1), (1, 1), (2, 5), (3, 4)]:  # same block
        second = (
            risk(theta + h * eye[i] + h * eye[j]) - risk(theta + h * eye[i]) - risk(theta + h * eye[j]) + risk(theta)
        ) / h**2
        assert hess[i, j].item() == pytest.approx(second.item(), rel=1e-9, abs=1e-9)

    def grad(t):
        t = t.clone().requires_grad_(True)
        return torch.autograd.grad(risk(t), t)[0]

    eps = 1e-4
    for j in range(d + d * d):
        column = (grad(theta + eps * eye[j]) - grad(theta - eps * eye[j])) / (2 * eps)
        assert torch.allclose(hess[:, j], column, rtol=1e-6, atol=1e-6)


def test_gd_beta_hessian_is_indefinite_at_the_origin():
    hess = gd_beta_hessian(_task(), 6, **_origin(3))
    evals = torch.linalg.eigvalsh(hess)
    assert evals.min() < 0 < evals.max()


def test_gd_beta_hessian_checks_its_arguments():
    with pytest.raises(ValueError, match="gamma"):
        gd_beta_hessian(_task(), 6, torch.zeros(3), torch.zeros(2, 2))


# ---- gd_beta_flow --------------------------------------------------------------------------------------------------


def test_gd_beta_flow_is_bitwise_the_flattened_gradient_descent():
    # Named blocks change nothing elementwise: the same run on one flat vector (beta0, then Gamma row by row)
    # records the same numbers, bit for bit.
    d, n, steps, lr = 3, 6, 40, 0.02
    task = _task(d)
    flat = torch.randn(d + d * d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    hist = gd_beta_flow(
        task, n, {"beta0": flat[:d], "gamma": flat[d:].reshape(d, d)}, steps=steps, lr=lr, record_every=5
    )
    gamma_star = optimal_gd_step(task, n)
    best = gd_beta_risk(task, n, task.mean(), gamma_star).item()
    risk = _flat_risk(task, n, d)

    def distances(theta):
        error = (theta[:d] - task.mean()).square().sum() + (theta[d:].reshape(d, d) - gamma_star).square().sum()
        return {"excess risk": risk(theta) - best, "parameter error": torch.sqrt(error)}

    _, ref = gradient_descent(risk, flat, steps=steps, lr=lr, record=distances, record_every=5, progress=False)
    np.testing.assert_array_equal(hist.steps, ref.steps)
    for key in ("excess risk", "parameter error"):
        np.testing.assert_array_equal(hist.records[key], ref.records[key])


def test_gd_beta_flow_reaches_the_optimum_from_the_origin():
    hist = gd_beta_flow(_task(), 6, _origin(3), steps=1500, lr=0.05, record_every=100)
    assert hist.records["excess risk"][0] > 1.0
    assert hist.records["excess risk"][-1] < 1e-8 and hist.records["parameter error"][-1] < 1e-4
    assert hist.steps[-1] == 1500


def test_gd_beta_flow_checks_its_arguments():
    with pytest.raises(TypeError, match="init must be a dict"):
        gd_beta_flow(_task(), 6, torch.zeros(12, dtype=torch.float64), steps=5, lr=0.1)
    with pytest.raises(ValueError, match="init must be a dict"):
        gd_beta_flow(_task(), 6, {"beta0": torch.zeros(3)}, steps=5, lr=0.1)
    with pytest.raises(ValueError, match=r"gamma must be a float tensor of shape \(d, d\)"):
        gd_beta_flow(_task(), 6, {"beta0": torch.zeros(3), "gamma": torch.zeros(3)}, steps=5, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        gd_beta_flow(_task(), 6, _origin(3), steps=5, lr=0.0)


# ---- figures -------------------------------------------------------------------------------------------------------


def test_plot_risk_against_signal_draws_every_model_and_the_bayes_line():
    risks = {"best GD-β": [1.0, 1.0, 1.0], "best GD-0": [1.1, 1.5, 2.5], "LSA": [1.1, 1.4, 2.3], "LTB": [1.0, 1.0, 1.1]}
    ax = plot_risk_against_signal([0.0, 1.0, 2.0], risks, bayes=0.9)
    labels = [line.get_label() for line in ax.lines]
    assert labels == [*risks, "Bayes"]
    assert ax.lines[-1].get_ydata()[0] == 0.9
    assert ax.lines[labels.index("LSA")].get_marker() == "o"
    assert ax.lines[labels.index("best GD-0")].get_linestyle() == ":"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    plt.close("all")
    with pytest.raises(ValueError, match="one risk per norm"):
        plot_risk_against_signal([0.0, 1.0], {"LSA": [1.0, 2.0, 3.0]})


def test_plot_gd_beta_reading_draws_two_scatters_on_diagonals():
    pred = torch.linspace(-2, 2, 50)
    gamma, beta = torch.eye(3, dtype=torch.float64), torch.tensor([1.0, 2.0, 3.0])
    fig = plot_gd_beta_reading(
        pred, pred + 0.01, gamma, gamma.float() * 0.9, beta_star=beta, beta_read=beta * 1.1, k=20
    )
    ax1, ax2 = fig.axes
    assert len(ax1.collections) == 1 and ax1.collections[0].get_offsets().shape == (20, 2)
    assert [c.get_offsets().shape for c in ax2.collections] == [(9, 2), (3, 2)]
    assert [line.get_label() for line in ax1.lines] == ["equal"] and [line.get_label() for line in ax2.lines] == [
        "equal"
    ]
    assert ax1.get_ylabel() == "trained LTB" and "Gamma^*" in ax2.get_xlabel()
    # the diagonal spans the initialization's entries too
    assert ax2.get_xlim()[1] >= 3.0
    plt.close("all")
    assert len(plot_gd_beta_reading(pred, pred, gamma, gamma).axes[1].collections) == 1
    plt.close("all")
    with pytest.raises(ValueError, match=r"pred_ltb must be a float tensor of shape \(B,\)"):
        plot_gd_beta_reading(pred, pred[:10], gamma, gamma)
    with pytest.raises(ValueError, match=r"gamma_read must be a float tensor of shape \(d, d\)"):
        plot_gd_beta_reading(pred, pred, gamma, gamma[:2])
    with pytest.raises(ValueError, match="both beta_star and beta_read"):
        plot_gd_beta_reading(pred, pred, gamma, gamma, beta_star=beta)


def test_plot_gap_scaling_scales_by_n_over_norm_squared():
    ns = [10, 20, 40]
    closed = {2.0: 4.0 * 6 / np.array(ns, dtype=float)}  # gap = 6 ||beta*||^2 / n: flat at 6
    trained = {2.0: np.stack([closed[2.0] * 0.9, closed[2.0] * 1.1])}
    ax = plot_gap_scaling(ns, trained, closed, control={2.0: np.full(3, 1.0)}, limit=6.0)
    medians = ax.containers[0].lines[0].get_ydata()
    assert np.allclose(medians, 6.0)  # median of 0.9 and 1.1 times the closed form
    drawn = {line.get_linestyle(): line.get_ydata() for line in ax.lines if len(line.get_xdata()) == len(ns)}
    assert np.allclose(drawn["-"], 6.0)  # the closed form, flat
    assert np.allclose(drawn["--"], np.array(ns) / 4.0)  # the control grows like n
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close("all")
    with pytest.raises(ValueError, match="shape"):
        plot_gap_scaling(ns, {2.0: np.ones((2, 2))}, closed)
    with pytest.raises(ValueError, match="shape"):
        plot_gap_scaling(ns, trained, closed, control={2.0: np.ones(2)})
    with pytest.raises(ValueError, match="closed"):
        plot_gap_scaling(ns, trained, {})
    with pytest.raises(ValueError, match="trained must be keyed by norms, numbers in \\(0, "):
        plot_gap_scaling(ns, {0.0: trained[2.0]}, {0.0: closed[2.0]})


def test_plot_risk_ratios_against_n_draws_one_line_per_method_and_snr():
    ns, snrs = [5, 10, 20], [0.5, 2.0]
    ratios = {(snr, m): {"GD-β": 1.1, "GD-0": 1.5, "GD++": 1.3} for snr in snrs for m in ns}
    ax = plot_risk_ratios_against_n(ns, ratios, snrs=snrs)
    assert len(ax.lines) == 6
    assert ax.lines[0].get_label() == "GD-β, SNR 0.5" and ax.lines[0].get_marker() == "o"
    # each method in its colour, the second signal-to-noise ratio in a lighter shade of it
    assert ax.lines[1].get_linestyle() == ":" and ax.lines[1].get_color() == method_color("GD-0")
    assert ax.lines[3].get_color() == shade(ax.lines[0].get_color(), 1, 2)
    assert ax.lines[3].get_color() != ax.lines[0].get_color()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["5", "10", "20"]
    # ratios within less than a decade still get labelled ticks
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1.25", "1.5"]
    plt.close("all")
    with pytest.raises(ValueError, match="signal-to-noise ratios"):
        plot_risk_ratios_against_n(ns, ratios, snrs=list(range(7)))


def test_plot_gd_records_draws_one_panel_per_key_and_one_line_per_run():
    steps = np.arange(0, 50, 5)
    runs = {
        f"start {i}": GDHistory(
            steps=steps,
            records={"excess risk": np.exp(-steps / (i + 1)) + 1e-9, "parameter error": np.exp(-steps / (2 * i + 2))},
        )
        for i in range(3)
    }
    fig = plot_gd_records(runs, keys=["excess risk", "parameter error"])
    assert len(fig.axes) == 2
    for ax, key in zip(fig.axes, ["excess risk", "parameter error"]):
        assert ax.get_ylabel() == key and ax.get_yscale() == "log"
        assert [line.get_label() for line in ax.lines] == list(runs)
        np.testing.assert_array_equal(ax.lines[1].get_ydata(), runs["start 1"].records[key])
    plt.close("all")
    with pytest.raises(ValueError, match="keys must be recorded by every run"):
        plot_gd_records(runs, keys=["loss"])


# ---- lsa_risk, optimal_lsa, best_lsa_risk --------------------------------------------------------------------------


def _spd(d: int, seed: int, floor: float) -> torch.Tensor:
    a = torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return a @ a.T / d + floor * torch.eye(d, dtype=torch.float64)


def _skewed_task(d: int = 3, noise_std: float = 0.7) -> LinearRegression:
    """Non-isotropic inputs and prior, and a mean off every axis."""
    mean = torch.linspace(-1.0, 2.0, d, dtype=torch.float64)
    return LinearRegression(
        dim=d, noise_std=noise_std, prior_mean=mean, prior_cov=_spd(d, 1, 0.2), x_cov=_spd(d, 2, 0.3)
    )


def _random_lsa_weights(d: int, seed: int, scale: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (
        scale * torch.randn(d + 1, generator=gen, dtype=torch.float64),
        scale * torch.randn(d + 1, d, generator=gen, dtype=torch.float64),
    )


def test_lsa_risk_at_gd0_weights_is_the_gd0_risk():
    # u = e_{d+1} and b = [Gamma^T; 0] make the LSA predict <Gamma X^T y / n, x_q>: GD-0, whatever H and Psi.
    task, d = _skewed_task(), 3
    gamma = torch.randn(d, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    u = torch.zeros(d + 1, dtype=torch.float64)
    u[d] = 1.0
    b = torch.cat([gamma.T, torch.zeros(1, d, dtype=torch.float64)])
    for n in (1, 4, 50):
        assert lsa_risk(task, n, u, b).item() == pytest.approx(
            gd_beta_risk(task, n, torch.zeros(d, dtype=torch.float64), gamma).item(), rel=1e-12
        )


def test_lsa_risk_averages_the_conditional_wishart_risk_over_beta_exactly():
    # Given beta the risk is (1 + 1/n) u^T C A C u + tr(A C) u^T C u / n - 2 u^T C B H beta + E[y_q^2 | beta], a
    # polynomial of degree 4 in beta; the 3-point Gauss-Hermite product rule integrates it exactly against
    # N(beta*, Psi), an independent check of the Isserlis algebra (non-isotropic H and Psi).
    task, d, n = _skewed_task(), 3, 4
    u, b = _random_lsa_weights(d, 4)
    h, root, noise = task.input_cov(), torch.linalg.cholesky(task.cov()), task.noise_var
    a = b @ h @ b.T
    nodes = torch.tensor([-(3**0.5), 0.0, 3**0.5], dtype=torch.float64)
    weights = torch.tensor([1 / 6, 2 / 3, 1 / 6], dtype=torch.float64)
    total = 0.0
    for index in np.ndindex(*(3,) * d):
        beta = task.mean() + root @ nodes[list(index)]
        q = torch.cat([torch.eye(d, dtype=torch.float64), beta[None]])
        c = q @ h @ q.T
        c[d, d] += noise
        risk = (
            (1 + 1 / n) * u @ c @ a @ c @ u
            + torch.trace(a @ c) * (u @ c @ u) / n
            - 2 * u @ c @ b @ h @ beta
            + beta @ h @ beta
            + noise
        )
        total += weights[list(index)].prod().item() * risk.item()
    assert lsa_risk(task, n, u, b).item() == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize(
    "n, norm, noise_std, skewed", [(2, 0.0, 0.5, False), (5, 2.0, 0.3, True), (20, 3.0, 1.0, False)]
)
def test_lsa_risk_matches_monte_carlo_through_the_lsa_model(n, norm, noise_std, skewed):
    # Prompts sampled from the task, through an LSA whose weights give (u, b): W_P = W_K = I, W_V's last row u,
    # W_Q = [b, 0]. Within 4 standard errors (the seeds are fixed, so the test is deterministic).
    d = 3
    task = (
        _skewed_task(d, noise_std)
        if skewed
        else LinearRegression(dim=d, noise_std=noise_std, prior_mean=torch.full((d,), norm / d**0.5))
    )
    u, b = _random_lsa_weights(d, 5 + n)
    model = LSA(d, init_std=0.0).double()
    with torch.no_grad():
        model.W_P.copy_(torch.eye(d + 1))
        model.W_K.copy_(torch.eye(d + 1))
        model.W_V[d] = u
        model.W_Q[:, :d] = b
    gen = torch.Generator().manual_seed(n)
    errors = []
    for _ in range(8):
        p = task.sample(50_000, n, gen)
        p = Prompt(x=p.x.double(), y=p.y.double(), x_query=p.x_query.double(), y_query=p.y_query.double())
        errors.append((model.predict(p) - p.y_query).square())
    errors = torch.cat(errors)
    mc, se = errors.mean().item(), errors.std().item() / errors.numel() ** 0.5
    exact = lsa_risk(task, n, u, b).item()
    assert abs(mc - exact) < 4 * se, (mc, exact, se)


def test_optimal_lsa_is_a_stationary_point_of_lsa_risk():
    task, n = _task(3, norm=2.0), 12
    u, b = optimal_lsa(task, n)
    assert u.norm().item() == pytest.approx(1.0, rel=1e-12)
    u, b = u.clone().requires_grad_(True), b.clone().requires_grad_(True)
    grad_u, grad_b = torch.autograd.grad(lsa_risk(task, n, u, b), (u, b))
    assert grad_u.abs().max().item() < 1e-8 and grad_b.abs().max().item() < 1e-8


@pytest.mark.parametrize(
    "task",
    [_task(5, norm=0.0), LinearRegression(dim=3, noise_std=0.7, prior_cov=_spd(3, 1, 0.2), x_cov=_spd(3, 2, 0.3))],
)
def test_best_lsa_risk_is_the_best_gd_beta_risk_at_zero_mean(task):
    # With beta* = 0 the best GD-beta step starts at 0: GD-0, which an LSA computes (Theorem 4.1's gap vanishes).
    for n in (3, 40):
        assert best_lsa_risk(task, n) == pytest.approx(best_gd_beta_risk(task, n), rel=1e-8)


@pytest.mark.parametrize("task", [_task(3, norm=1.0), _task(4, norm=3.0), _skewed_task()])
def test_best_lsa_risk_lies_between_best_gd_beta_and_best_gd0(task):
    # An LTB contains every LSA, and an LSA contains GD-0; with beta* != 0 both inequalities are strict.
    zero = torch.zeros(task.dim, dtype=torch.float64)
    for n in (3, 50):
        lsa = best_lsa_risk(task, n)
        assert best_gd_beta_risk(task, n) < lsa < best_gd_beta_risk(task, n, zero)
    assert best_lsa_risk(task, 50) == lsa  # seeded starts: the same number at every call


def test_lsa_risk_and_optimal_lsa_check_their_arguments():
    task, d = _task(3), 3
    u, b = _random_lsa_weights(d, 0)
    with pytest.raises(TypeError, match="task must be a LinearRegression"):
        lsa_risk("not a task", 5, u, b)
    with pytest.raises(ValueError, match="uniform inputs"):
        lsa_risk(LinearRegression(dim=d, x_range=0.5), 5, u, b)
    with pytest.raises(ValueError, match="n must be"):
        lsa_risk(task, 0, u, b)
    with pytest.raises(
        ValueError, match=r"u must be a float tensor of shape \(4,\).* got a float64 tensor of shape \(3,\)"
    ):
        lsa_risk(task, 5, u[:d], b)
    with pytest.raises(
        ValueError, match=r"b must be a float tensor of shape \(4, 3\).* got a float64 tensor of shape \(3, 4\)"
    ):
        lsa_risk(task, 5, u, b.T)
    with pytest.raises(ValueError, match="u must be .* with finite values"):
        lsa_risk(task, 5, torch.full((d + 1,), float("nan")), b)
    with pytest.raises(ValueError, match="starts must be"):
        best_lsa_risk(task, 5, starts=0)
    with pytest.raises(ValueError, match="seed must be"):
        optimal_lsa(task, 5, seed=-1)
    with pytest.raises(TypeError, match="max_iter must be an int"):
        optimal_lsa(task, 5, max_iter=2.5)
    with pytest.raises(ValueError, match="positive-definite input covariance"):
        optimal_lsa(LinearRegression(dim=d, noise_std=0.5, x_cov=torch.diag(torch.tensor([1.0, 1.0, 0.0]))), 5)
    with pytest.raises(ValueError, match="noise_std > 0 or a positive-definite prior_cov"):
        optimal_lsa(LinearRegression(dim=d, prior_cov=torch.zeros(d, d)), 5)


def test_gd_plus_plus_curvature_scales_with_the_inputs_and_checks_its_arguments():
    """Inputs twice as wide multiply X^T X by 4: the fit starts at the same point in the inputs' units and lands on
    the same optimum, rescaled, so gamma is exactly a quarter (up to float32 rounding)."""
    from icl_utils.train import fit_gd_plus_plus_curvature

    narrow = fit_gd_plus_plus_curvature(LinearRegression(dim=4, x_range=0.5), 6, 256, seed=3)
    wide = fit_gd_plus_plus_curvature(LinearRegression(dim=4, x_range=1.0), 6, 256, seed=3)
    assert narrow[1] > 0
    assert wide[1] == pytest.approx(narrow[1] / 4, rel=1e-4)
    assert wide[0] == pytest.approx(narrow[0] / 4, rel=1e-4)
    with pytest.raises(ValueError, match="n_prompts"):
        fit_gd_plus_plus_curvature(LinearRegression(dim=4), 6, 0, seed=0)
    with pytest.raises(TypeError, match="seed"):
        fit_gd_plus_plus_curvature(LinearRegression(dim=4), 6, 8, seed=1.5)
    with pytest.raises(TypeError, match="task"):
        fit_gd_plus_plus_curvature("linear", 6, 8, seed=0)
