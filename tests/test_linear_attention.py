"""Chapter 4's linear attention models and the closed-form risks of one-step GD (Zhang, Wu and Bartlett 2024)."""

import pytest
import torch

from icl_utils import estimators as est
from icl_utils import exact, risk
from icl_utils.models import GPTConfig, ICLTransformer
from icl_utils.models.linear_attention import (
    GD0,
    LSA,
    LTB,
    GDBeta,
    GDPlusPlus,
    attention_mask,
    gd_beta_from_ltb,
    ltb_from_gd_beta,
    moment_prompt,
    sample_moment_prompts,
    token_matrix,
)
from icl_utils.prompts import Prompt
from icl_utils.tasks import LinearRegression
from icl_utils.train import fit_lbfgs


def _task(d=3, noise_std=0.5, shift=1.0):
    cov = torch.tensor([[1.0, 0.2, 0.0], [0.2, 0.5, 0.1], [0.0, 0.1, 0.8]], dtype=torch.float64)[:d, :d]
    x_cov = torch.tensor([[1.5, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 0.7]], dtype=torch.float64)[:d, :d]
    mean = shift * torch.linspace(1.0, -0.5, d, dtype=torch.float64)
    return LinearRegression(dim=d, noise_std=noise_std, prior_mean=mean, prior_cov=cov, x_cov=x_cov)


def test_token_matrix_and_mask_follow_the_paper(gen):
    p = LinearRegression(dim=3).sample(2, 4, gen)
    z = token_matrix(p)
    assert z.shape == (2, 4, 5)
    assert torch.equal(z[:, :3, :4], p.x.transpose(1, 2)) and torch.equal(z[:, 3, :4], p.y)
    assert torch.equal(z[:, :3, 4], p.x_query) and torch.all(z[:, 3, 4] == 0)
    m = attention_mask(4)
    assert torch.equal(torch.diag(m), torch.tensor([1.0, 1, 1, 1, 0])) and m.sum() == 4
    # Z M Z^T / n is the second-moment matrix of the context examples alone
    s = z @ m @ z.transpose(1, 2) / 4
    assert torch.allclose(s[:, :3, 3], (p.x * p.y[..., None]).mean(1), atol=1e-6)


@pytest.mark.parametrize("mlp", [True, False])
def test_ltb_is_the_papers_matrix_formula(gen, mlp):
    """The LTB computes only the query column; it must equal the bottom-right entry of (3.3) written out in full,
    [(I + W_2^T W_1)(Z + W_P W_V Z M Z^T W_K^T W_Q Z / n)]_{-1,-1}."""
    torch.manual_seed(3)
    model = LTB(3, mlp=mlp, init_std=0.5).double()
    p = _task().sample(16, 6, gen)
    p = Prompt(p.x.double(), p.y.double(), p.x_query.double(), p.y_query.double())
    z, m = token_matrix(p), attention_mask(6, torch.float64)
    h = z + model.W_P @ model.W_V @ z @ m @ z.transpose(1, 2) @ model.W_K.T @ model.W_Q @ z / 6
    if mlp:
        h = h + model.W_2.T @ model.W_1 @ h
    torch.testing.assert_close(model.predict(p), h[:, -1, -1].detach(), rtol=1e-10, atol=1e-10)


def test_lsa_with_the_gd0_construction_is_one_gradient_step(gen):
    d, n = 3, 6
    gamma = torch.tensor([[0.5, 0.1, 0.0], [0.0, 0.8, -0.2], [0.3, 0.0, 1.0]])
    lsa = LSA(d, init_std=0.0)
    with torch.no_grad():
        lsa.W_P.copy_(torch.eye(d + 1))
        lsa.W_K.copy_(torch.eye(d + 1))
        lsa.W_V[d, d] = 1.0  # values are the labels
        lsa.W_Q[:d, :d] = gamma.T  # scores x_i^T Gamma^T x_query
    p = LinearRegression(dim=d, noise_std=0.3).sample(64, n, gen)
    w = (p.x * p.y[..., None]).mean(1) @ gamma.T  # one GD step from zero, matrix step Gamma
    assert torch.allclose(lsa.predict(p), (w * p.x_query).sum(-1), atol=1e-5)
    assert torch.allclose(GD0(d, gamma=gamma).predict(p), lsa.predict(p), atol=1e-5)


def test_gd_beta_written_as_an_ltb_is_the_same_function(gen):
    d = 3
    model = GDBeta(d, beta0=torch.tensor([1.0, -2.0, 0.5]), gamma=torch.randn(d, d, generator=gen))
    ltb = ltb_from_gd_beta(model)
    p = _task().sample(128, 7, gen)
    assert torch.allclose(ltb.predict(p), model.predict(p), atol=1e-4)
    # and reading the GD-beta model back off the LTB recovers it
    back = gd_beta_from_ltb(ltb)
    assert torch.allclose(back.beta0, model.beta0) and torch.allclose(back.gamma, model.gamma, atol=1e-6)


def test_gd_beta_step_matches_autograd(gen):
    d, n = 3, 5
    model = GDBeta(d, beta0=torch.randn(d, generator=gen), gamma=torch.randn(d, d, generator=gen))
    p = _task().sample(4, n, gen)
    for b in range(4):
        beta = model.beta0.detach().clone().requires_grad_(True)
        loss = 0.5 * (p.y[b] - p.x[b] @ beta).square().mean()
        (grad,) = torch.autograd.grad(loss, beta)
        w = model.beta0 - model.gamma @ grad
        assert torch.allclose(model.predict(p)[b], w @ p.x_query[b], atol=1e-5)


@pytest.mark.parametrize("init", ["mean", "zero", "other"])
def test_closed_form_gd_beta_risk_matches_monte_carlo(gen, init):
    task, n = _task(), 6
    beta0 = {"mean": task.mean(), "zero": torch.zeros(3, dtype=torch.float64), "other": torch.tensor([0.3, 1.0, -1.0])}[
        init
    ]
    gamma = torch.tensor([[0.6, 0.1, 0.0], [-0.1, 0.9, 0.2], [0.0, 0.3, 0.7]], dtype=torch.float64)
    closed_form = exact.gd_beta_risk(task, n, beta0, gamma).item()
    p = task.sample(200_000, n, gen)
    errors = (GDBeta(3, beta0=beta0, gamma=gamma).predict(p).double() - p.y_query.double()).square()
    se = errors.std().item() / len(errors) ** 0.5
    assert abs(errors.mean().item() - closed_form) < 4 * se, (errors.mean().item(), closed_form, se)


def test_optimal_gd_step_is_a_stationary_point_and_beats_perturbations():
    task, n = _task(), 8
    for beta0 in (task.mean(), torch.zeros(3, dtype=torch.float64)):
        gamma = exact.optimal_gd_step(task, n, beta0).requires_grad_(True)
        value = exact.gd_beta_risk(task, n, beta0, gamma)
        (grad,) = torch.autograd.grad(value, gamma)
        assert grad.abs().max() < 1e-9
        for _ in range(5):
            other = gamma.detach() + 0.05 * torch.randn(3, 3, dtype=torch.float64)
            assert exact.gd_beta_risk(task, n, beta0, other) > value
    # the best initialization is the task mean: GD-beta beats GD-0 when the mean is not zero
    best = exact.gd_beta_risk(task, n, task.mean(), exact.optimal_gd_step(task, n))
    zero = torch.zeros(3, dtype=torch.float64)
    assert best < exact.gd_beta_risk(task, n, zero, exact.optimal_gd_step(task, n, zero)) - 0.1


def test_bayes_risk_matches_posterior_mean_and_lies_below_gd_beta(gen):
    task, n = _task(), 6
    bayes, se = exact.bayes_risk(task, n, gen, n_mc=20_000)
    p = task.sample(200_000, n, gen)
    errors = (task.posterior_mean(p).double() - p.y_query.double()).square()
    mc_se = errors.std().item() / len(errors) ** 0.5
    assert abs(errors.mean().item() - bayes) < 4 * (se + mc_se)
    assert bayes < exact.gd_beta_risk(task, n, task.mean(), exact.optimal_gd_step(task, n)).item()


def _gd_plus_plus_by_tokens(p, lr, gamma, steps):
    """Von Oswald et al.'s GD++ layers written token by token: each layer reads the tokens as they enter it, moves
    every label by the GD step and every input by the curvature correction; the prediction is minus the query's."""
    x, y = p.x.double(), p.y.double()
    xq, yq = p.x_query.double(), torch.zeros_like(p.y_query, dtype=torch.float64)
    n = x.shape[1]
    for _ in range(steps):
        delta = lr * (x * y[..., None]).sum(1) / n
        s = x.transpose(1, 2) @ x
        x, xq, y, yq = (
            x - gamma * x @ s,
            xq - gamma * (s @ xq[..., None])[..., 0],
            y - (x * delta[:, None, :]).sum(-1),
            yq - (xq * delta).sum(-1),
        )
    return -yq


def test_gd_plus_plus_is_von_oswalds_recursion(gen):
    p = LinearRegression(dim=4, x_range=0.5).sample(64, 7, gen)
    for lr, gamma, steps in [(3.0, 0.2, 1), (3.0, 0.2, 2), (5.0, 0.4, 4)]:
        ours = est.gd_plus_plus(p, lr, gamma, steps).double()
        assert torch.allclose(ours, _gd_plus_plus_by_tokens(p, lr, gamma, steps), atol=1e-4)
    # one layer's correction acts only on the next, so one step is plain GD; two steps differ from two GD steps
    assert torch.allclose(est.gd_plus_plus(p, 3.0, 0.2, 1), est.one_step_gd(p, 3.0), atol=1e-5)
    assert not torch.allclose(est.gd_plus_plus(p, 3.0, 0.2, 2), est.gd_plus_plus(p, 3.0, 0.0, 2), atol=1e-3)
    # with gamma = 0, many steps are gradient descent, which converges to least squares (n > d)
    p = LinearRegression(dim=4, x_range=0.5).sample(64, 30, gen)
    assert torch.allclose(est.gd_plus_plus(p, 6.0, 0.0, 400), est.least_squares(p), atol=1e-3)
    with pytest.raises(ValueError, match="lr"):
        est.gd_plus_plus(p, torch.eye(3), 0.1)
    with pytest.raises(ValueError, match="steps"):
        est.gd_plus_plus(p, 1.0, 0.1, steps=0)
    with pytest.raises(TypeError, match="gamma"):
        est.gd_plus_plus(p, 1.0, "0.1")
    with pytest.raises(
        ValueError,
        match=r"lr must be a float tensor of shape \(\), with finite values or a float tensor of shape \(4, 4\)",
    ):
        est.gd_plus_plus(p, torch.ones(4), 0.1)
    assert torch.allclose(
        est.gd_plus_plus(p, torch.tensor(1.0), torch.tensor(0.1), 2), est.gd_plus_plus(p, 1.0, 0.1, 2)
    )


def test_gd_plus_plus_model_matches_the_estimator(gen):
    p = _task().sample(32, 5, gen)
    model = GDPlusPlus(3, steps=2, lr=0.4, gamma=0.05)
    assert torch.allclose(model.predict(p), est.gd_plus_plus(p, 0.4 * torch.eye(3), 0.05, 2), atol=1e-5)
    scalar = GDPlusPlus(3, steps=2, matrix_step=False, lr=0.4, gamma=0.05)
    assert scalar.step.shape == () and torch.allclose(scalar.predict(p), model.predict(p), atol=1e-5)
    # one step with gamma = 0 and a matrix step is GD-0
    gd0 = GDPlusPlus(3, lr=0.7)
    assert torch.allclose(gd0.predict(p), GD0(3, gamma=torch.eye(3) * 0.7).predict(p), atol=1e-5)


def test_fit_lbfgs_reaches_the_least_squares_solution(gen):
    """One GD step is linear in its matrix step, so the fit is a least-squares problem with a known solution."""
    task = _task()
    p = task.sample(4096, 6, gen)
    model = GDPlusPlus(3)
    result = fit_lbfgs(model, p)
    features = ((p.x.double() * p.y.double()[..., None]).mean(1)[:, None, :] * p.x_query.double()[:, :, None]).reshape(
        len(p.y_query), -1
    )
    solution = torch.linalg.lstsq(features, p.y_query.double()[:, None]).solution.reshape(3, 3)
    assert result.grad_max < 1e-3
    assert torch.allclose(model.step.detach().double(), solution, atol=1e-3)
    # control: one iteration does not get there
    short = GDPlusPlus(3)
    assert fit_lbfgs(short, p, max_iter=1).grad_max > 1e-3
    assert not torch.allclose(short.step.detach().double(), solution, atol=1e-3)
    with pytest.raises(TypeError, match="prompt"):
        fit_lbfgs(model, p.x)
    with pytest.raises(ValueError, match="max_iter"):
        fit_lbfgs(model, p, max_iter=0)


def test_moment_prompt_keeps_the_predictions_of_linear_attention(gen):
    p = _task().sample(64, 40, gen)
    q = moment_prompt(p)
    assert q.n_context == 4
    torch.manual_seed(0)
    for model in (LTB(3), LSA(3), GDBeta(3, beta0=torch.ones(3), gamma=torch.eye(3))):
        assert torch.allclose(model.predict(q), model.predict(p), atol=1e-4)
    # control: a model that reads single examples (GD++'s curvature is not divided by n) tells them apart
    model = GDPlusPlus(3, steps=2, lr=0.5, gamma=0.01)
    assert not torch.allclose(model.predict(q), model.predict(p), atol=1e-3)


def test_sample_moment_prompts_draws_in_chunks(gen, monkeypatch):
    from icl_utils import config

    monkeypatch.setattr(config, "CHUNK_ELEMENTS", 300)  # 6 prompts of 11 tokens of 4 values per chunk
    task = _task()
    p = sample_moment_prompts(task, 20, 10, torch.Generator().manual_seed(0))
    assert p.batch_size == 20 and p.n_context == 4
    # the same stream, prompt by prompt: the chunks join in order
    ref = torch.Generator().manual_seed(0)
    first = moment_prompt(task.sample(6, 10, ref))
    assert torch.equal(p.x_query[:6], first.x_query)
    with pytest.raises(ValueError, match="batch"):
        sample_moment_prompts(task, 0, 10, gen)


def test_uniform_inputs(gen):
    task = LinearRegression(dim=3, x_range=0.5)
    p = task.sample(20_000, 2, gen)
    assert p.x.abs().max() <= 0.5 and p.x.abs().max() > 0.49
    cov = torch.cov(p.x.reshape(-1, 3).T.double())
    assert torch.allclose(cov, task.input_cov(), atol=2e-3)  # 1/12 on the diagonal
    with pytest.raises(ValueError, match="Gaussian inputs"):
        exact.best_gd_beta_risk(task, 5)
    with pytest.raises(ValueError, match="not both"):
        LinearRegression(dim=3, x_range=0.5, x_cov=torch.eye(3))
    with pytest.raises(ValueError, match="x_range"):
        LinearRegression(dim=3, x_range=0.0)


def test_models_are_permutation_invariant_in_the_context(gen):
    p = _task().sample(16, 6, gen)
    perm = torch.randperm(6, generator=gen)
    q = type(p)(x=p.x[:, perm], y=p.y[:, perm], x_query=p.x_query, y_query=p.y_query)
    torch.manual_seed(0)
    for model in (LTB(3), LSA(3), GDBeta(3, beta0=torch.ones(3), gamma=torch.eye(3)), GDPlusPlus(3)):
        assert torch.allclose(model.predict(p), model.predict(q), atol=1e-4)


def test_bad_arguments_raise_clear_errors(gen):
    task = _task()
    with pytest.raises(TypeError, match="prompt"):
        LTB(3)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="dimension"):
        LTB(4)(task.sample(2, 3, gen))
    with pytest.raises(ValueError, match="gamma"):
        GDBeta(3, gamma=torch.eye(2))
    with pytest.raises(ValueError, match="beta0"):
        GDBeta(3, beta0=torch.ones(4))
    with pytest.raises(ValueError, match="learnable_init"):
        GDBeta(3, learnable_init=False, beta0=torch.ones(3))
    with pytest.raises(ValueError, match="gamma"):
        exact.gd_beta_risk(task, 5, torch.zeros(3), torch.eye(4))
    with pytest.raises(ValueError, match="n"):
        exact.optimal_gd_step(task, 0)
    with pytest.raises(TypeError, match="task"):
        exact.bayes_risk("linear", 5, gen)
    with pytest.raises(ValueError, match="MLP"):
        gd_beta_from_ltb(LSA(3))
    with pytest.raises(ValueError, match="positive semi-definite"):
        LinearRegression(dim=2, prior_cov=torch.tensor([[1.0, 0.0], [0.0, -1.0]]))


def test_training_gd_beta_on_sampled_prompts_reaches_the_closed_form_optimum(gen):
    from icl_utils.train import TrainConfig, train

    task, n = _task(), 6
    model = GDBeta(3)
    config = TrainConfig(steps=400, batch_size=256, n_context=n, lr=0.05, schedule="cosine")
    hist = train(model, task, config, generator=gen, progress=False)
    best = exact.gd_beta_risk(task, n, task.mean(), exact.optimal_gd_step(task, n)).item()
    reached = exact.gd_beta_risk(task, n, model.beta0.detach(), model.gamma.detach()).item()
    assert hist.losses[:20].mean() > 2 * best  # it did have to learn
    assert reached < 1.05 * best, (reached, best)


def test_query_risk_in_chunks_matches_the_closed_form_and_a_single_pass(gen):
    task, n = _task(), 6
    model = GDBeta(3, beta0=task.mean(), gamma=exact.optimal_gd_step(task, n))
    value = exact.gd_beta_risk(task, n, task.mean(), exact.optimal_gd_step(task, n)).item()
    mean, se = risk.query_risk(model.predict, task, n, 100_000, gen, chunk_size=8192)
    assert abs(mean - value) < 4 * se and 0 < se < 0.05 * value
    state = gen.get_state()
    one_pass, _ = risk.query_risk(model.predict, task, n, 4096, gen, chunk_size=4096)
    gen.set_state(state)
    p = task.sample(4096, n, gen)
    assert one_pass == pytest.approx((model.predict(p) - p.y_query).double().square().mean().item(), rel=1e-9)
    with pytest.raises(TypeError, match="predict"):
        risk.query_risk("model", task, n, 10, gen)
    with pytest.raises(ValueError, match="n_prompts"):
        risk.query_risk(model.predict, task, n, 1, gen)


class RowByRow:
    """Linear-regression prompts drawn one prompt at a time, so that the stream of prompts from a seed does not
    depend on how many are asked for at once; it counts the prompts drawn."""

    dim = 2

    def __init__(self):
        self.drawn = 0

    def sample(self, batch, n, generator):
        self.drawn += batch
        rows = [torch.randn(1, n + 1, self.dim + 1, generator=generator) for _ in range(batch)]
        xs, w = torch.cat(rows)[..., :-1], torch.cat(rows)[:, 0, -1:]
        return Prompt.from_points(xs, w * xs.sum(-1) + 0.1)


@pytest.mark.parametrize("n_prompts, chunk_size", [(1000, 300), (7, 2), (5, 8)])
def test_query_risk_uses_exactly_n_prompts_whatever_the_chunks(n_prompts, chunk_size):
    """The last chunk holds the rest: chunks of any size give the mean and standard error of one chunk of all the
    prompts from the same seed, drawn n_prompts in all."""
    from icl_utils.estimators import averaging

    task = RowByRow()
    chunked = risk.query_risk(averaging, task, 3, n_prompts, torch.Generator().manual_seed(3), chunk_size=chunk_size)
    assert task.drawn == n_prompts
    whole = risk.query_risk(averaging, task, 3, n_prompts, torch.Generator().manual_seed(3), chunk_size=n_prompts)
    assert task.drawn == 2 * n_prompts
    assert chunked[0] == pytest.approx(whole[0], rel=0, abs=1e-12)
    assert chunked[1] == pytest.approx(whole[1], rel=1e-9, abs=1e-12)
    if n_prompts > chunk_size:  # control: whole chunks only (the old rounding down) is another mean
        kept = n_prompts // chunk_size * chunk_size
        rounded = risk.query_risk(averaging, task, 3, kept, torch.Generator().manual_seed(3), chunk_size=chunk_size)
        assert abs(rounded[0] - whole[0]) > 1e-6


def test_query_risk_needs_one_prediction_per_prompt(gen):
    """A GPT predicts at every point, (B, n+1): query_risk wants its predict, (B,), and says so."""
    task = LinearRegression(dim=2)
    torch.manual_seed(0)
    gpt = ICLTransformer(GPTConfig(n_dims=2, n_context=4, n_embd=8, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match=r"shape \(10,\), got \(10, 5\); for a GPT, pass model.predict"):
        risk.query_risk(gpt, task, 4, 10, gen)
    with pytest.raises(ValueError, match=r"got \(4, 1\)"):
        risk.query_risk(lambda p: p.y_query[:, None], task, 4, 10, gen, chunk_size=4)
    with pytest.raises(ValueError, match="got float"):
        risk.query_risk(lambda p: 0.0, task, 4, 10, gen)
    mean, se = risk.query_risk(gpt.predict, task, 4, 10, gen)  # the control: its predict is accepted
    assert mean > 0 and se > 0


def test_gd_plus_plus_keeps_its_moments_within_a_fixed_sample_only(monkeypatch):
    """A full-batch fit reads one prompt many times: inside fit_lbfgs's fixed_sample block GD++ computes its X^T X
    and X^T y once; outside it (the control), every call computes them, so no model holds state (it pickles) and a
    prompt changed between calls is read afresh."""
    import pickle

    from icl_utils.models import linear_attention
    from icl_utils.models.base import fixed_sample

    calls = []
    real = linear_attention._gd_plus_plus_moments
    monkeypatch.setattr(linear_attention, "_gd_plus_plus_moments", lambda x, y: calls.append(1) or real(x, y))
    model = GDPlusPlus(3, steps=2, matrix_step=False, lr=0.4)
    p = LinearRegression(dim=3).sample(16, 8, torch.Generator().manual_seed(0))
    first = model(p)
    torch.testing.assert_close(model(p), first, rtol=0, atol=0)
    assert len(calls) == 2  # outside a block: computed each time
    with fixed_sample(p):
        torch.testing.assert_close(model(p), first, rtol=0, atol=0)
        model(p)
        other = LinearRegression(dim=3).sample(16, 8, torch.Generator().manual_seed(1))
        model(other)  # another prompt is not the block's
    assert len(calls) == 4
    pickle.dumps(model)
    calls.clear()
    result = fit_lbfgs(model, p, max_iter=20)
    assert result.iterations > 1 and len(calls) == 1
