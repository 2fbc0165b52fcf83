import pytest
import torch

from icl_utils import config
from icl_utils import estimators as est
from icl_utils.exact import optimal_gd_lr
from icl_utils.risk import prefix_errors
from icl_utils.tasks import LinearRegression


def test_least_squares_recovers_noiseless_task(gen):
    task = LinearRegression(dim=4)
    p = task.sample(64, 6, gen)
    assert torch.allclose(est.least_squares(p), p.y_query, atol=1e-4)


def test_least_squares_is_minimum_norm_when_underdetermined(gen):
    p = LinearRegression(dim=6).sample(16, 3, gen)
    # the minimum-norm interpolant lies in the row space of X: w = X^T (X X^T)^{-1} y
    x, y = p.x.double(), p.y.double()
    w = (x.transpose(1, 2) @ torch.linalg.solve(x @ x.transpose(1, 2), y[..., None]))[..., 0]
    assert torch.allclose(est.least_squares(p).double(), (w * p.x_query.double()).sum(-1), atol=1e-4)


def test_ridge_with_noise_over_prior_variance_is_bayes(gen):
    prior_var, noise_var = 2.0, 0.5
    task = LinearRegression(dim=5, noise_std=noise_var**0.5, prior_cov=prior_var * torch.eye(5))
    p = task.sample(32, 7, gen)
    assert torch.allclose(est.ridge(p, lam=noise_var / prior_var), task.posterior_mean(p), atol=1e-5)
    # and another penalty is not
    assert not torch.allclose(est.ridge(p, lam=10.0), task.posterior_mean(p), atol=1e-3)


def test_posterior_mean_with_shifted_prior_matches_direct_solve(gen):
    d, noise_var = 3, 0.2
    mean = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    cov = torch.tensor([[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)
    task = LinearRegression(dim=d, noise_std=noise_var**0.5, prior_mean=mean, prior_cov=cov)
    p = task.sample(8, 4, gen)
    x, y = p.x.double(), p.y.double()
    # precision form: (Psi^{-1} + X^T X / s^2) w = Psi^{-1} m + X^T y / s^2
    prec = torch.linalg.inv(cov) + x.transpose(1, 2) @ x / noise_var
    rhs = torch.linalg.inv(cov) @ mean + (x.transpose(1, 2) @ y[..., None])[..., 0] / noise_var
    w = torch.linalg.solve(prec, rhs)
    assert torch.allclose(task.posterior_mean(p).double(), (w * p.x_query.double()).sum(-1), atol=1e-5)


def test_posterior_mean_with_empty_context_is_prior_mean(gen):
    mean = torch.tensor([1.0, 2.0])
    task = LinearRegression(dim=2, noise_std=0.1, prior_mean=mean)
    p = task.sample(4, 0, gen)
    assert torch.allclose(task.posterior_mean(p), p.x_query @ mean)


def test_noiseless_posterior_mean_is_least_squares(gen):
    task = LinearRegression(dim=6)
    p = task.sample(16, 4, gen)
    assert torch.allclose(task.posterior_mean(p), est.least_squares(p), atol=1e-4)


def test_bayes_risk_matches_posterior_variance(gen):
    """Monte Carlo risk of the posterior mean equals E tr(x_q x_q^T Sigma_post) + noise: a closed form given X."""
    d, n, noise_var = 4, 6, 0.25
    task = LinearRegression(dim=d, noise_std=noise_var**0.5)
    p = task.sample(40_000, n, gen)
    mc = (task.posterior_mean(p) - p.y_query).square().mean().item()
    x = p.x.double()
    post_cov = torch.linalg.inv(x.transpose(1, 2) @ x / noise_var + torch.eye(d, dtype=x.dtype))
    exact = post_cov.diagonal(dim1=1, dim2=2).sum(-1).mean().item() + noise_var
    assert abs(mc - exact) < 0.02 * exact


def test_one_step_gd_risk_and_optimal_step(gen):
    d, n, noise_var = 5, 10, 0.25
    task = LinearRegression(dim=d, noise_std=noise_var**0.5)
    p = task.sample(100_000, n, gen)

    def risk(lr):  # excess risk, from the closed form in optimal_gd_lr's docstring
        return d * (lr**2 * (n + d + 1) / n - 2 * lr + 1) + lr**2 * noise_var * d / n

    best = optimal_gd_lr(n, d, noise_var)
    for lr in (0.5 * best, best, 1.0):
        mc = (est.one_step_gd(p, lr) - p.y_query).square().mean().item() - noise_var
        assert abs(mc - risk(lr)) < 0.03 * risk(lr) + 0.01
    assert risk(best) < min(risk(0.9 * best), risk(1.1 * best))


def test_averaging_is_one_unit_gd_step(gen):
    p = LinearRegression(dim=3).sample(8, 5, gen)
    manual = ((p.y[..., None] * p.x).mean(1) * p.x_query).sum(-1)
    assert torch.allclose(est.averaging(p), manual, atol=1e-6)


def test_nearest_neighbours(gen):
    p = LinearRegression(dim=2).sample(4, 5, gen)
    # put the query on context point 3: with k = 1 the prediction is its label
    q = type(p)(x=p.x, y=p.y, x_query=p.x[:, 3], y_query=p.y_query)
    assert torch.allclose(est.nearest_neighbours(q, k=1), p.y[:, 3])
    assert torch.allclose(est.nearest_neighbours(p, k=10), p.y.mean(1))
    with pytest.raises(ValueError, match="k must be"):
        est.nearest_neighbours(p, k=0)


def test_prefix_errors_shape_and_first_column(gen):
    p = LinearRegression(dim=3).sample(10, 4, gen)
    errs = prefix_errors(est.least_squares, p)
    assert errs.shape == (10, 5)
    assert torch.allclose(errs[:, 0], p.points()[1][:, 0].square())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda p: est.ridge(p, lam=0.0), "lam"),
        (lambda p: est.ridge(p, lam=-1), "lam"),
        (lambda p: est.one_step_gd(p, lr="big"), "lr"),
        (lambda p: est.least_squares(p.x), "prompt"),
        (lambda p: est.bayes_linear_regression(p, torch.zeros(2), torch.eye(3), 0.1), "prior_mean"),
        (lambda p: est.bayes_linear_regression(p, torch.zeros(3), -torch.eye(3), 0.1), "prior_cov"),
        (lambda p: optimal_gd_lr(0, 3, 0.1), "n"),
    ],
)
def test_estimators_reject_bad_arguments(gen, call, match):
    p = LinearRegression(dim=3).sample(2, 4, gen)
    with pytest.raises((ValueError, TypeError), match=match):
        call(p)


def test_tiny_penalties_warn_that_the_solve_is_ill_conditioned(gen):
    import warnings

    from icl_utils.estimators import bayes_linear_regression, ridge

    p = LinearRegression(dim=4).sample(3, 2, gen)  # n < d: X^T X is singular
    with pytest.warns(RuntimeWarning, match="ill-conditioned"):
        ridge(p, 1e-14)
    with pytest.warns(RuntimeWarning, match="ill-conditioned"):
        bayes_linear_regression(p, torch.zeros(4), torch.eye(4), 1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ridge(p, 1e-3)
        bayes_linear_regression(p, torch.zeros(4), torch.eye(4), 0.25)


def test_kernel_ridge_in_chunks_of_prompts_matches_one_pass(monkeypatch):
    """kernel_ridge builds n x n kernels per prompt, so it works through prompts a chunk of values at a time; with a
    chunk of one prompt (30 values hold one prompt's 4 x (4 + 2), not two) the predictions are the same."""
    p = LinearRegression(dim=2, noise_std=0.2).sample(5, 4, torch.Generator().manual_seed(3))
    whole = est.kernel_ridge(p)
    monkeypatch.setattr(config, "CHUNK_ELEMENTS", 30)
    torch.testing.assert_close(est.kernel_ridge(p), whole)
