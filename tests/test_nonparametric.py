"""Chapter 1's task family: B-splines, the Fourier basis, the oracle posterior mean, and the MLP attention model."""

import pytest
import torch

from icl_utils.models.linear_attention import MLPAttention
from icl_utils.risk import fit_slope, query_risk
from icl_utils.tasks.nonparametric import NonparametricTasks, cardinal_bspline
from icl_utils.train import fit_attention_ridge


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
def test_oracle_posterior_mean_equals_a_direct_solve(basis, gen):
    task = NonparametricTasks(dim=1, smoothness=1.5, basis=basis, n_basis=24, noise_std=0.3)
    p = task.sample(5, 12, gen)
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

    class NoiselessQuery:
        dim = 1

        def sample(self, batch, n, generator, active_dims=None):
            return task.sample(batch, n, generator, noiseless_query=True)

    ns = (16, 32, 64, 128)
    risks = [query_risk(task.posterior_mean, NoiselessQuery(), n, 4096, gen)[0] for n in ns]
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
        (dict(dim=1, smoothness=1.0, order=-1), "order must be >= 0"),
        (dict(dim=1, smoothness=1.0, basis="wavelet"), "basis must be one of"),
        (dict(dim=0, smoothness=1.0), "dim must be >= 1"),
    ],
)
def test_bad_task_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NonparametricTasks(**kwargs)


def test_bad_sample_and_basis_arguments_raise(gen):
    task = NonparametricTasks(dim=1, smoothness=1.0)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        task.sample(0, 4, gen)
    with pytest.raises(ValueError, match="order must be >= 0"):
        cardinal_bspline(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="last dimension dim=1"):
        task.features(torch.zeros(4, 2))
