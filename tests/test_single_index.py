"""Chapter 3's single-index tasks, feature attention and its two-stage training (Oko, Song, Suzuki and Wu 2024)."""

import numpy as np
import pytest
import torch

from icl_utils import config
from icl_utils.estimators import kernel_ridge, two_layer_network
from icl_utils.models.feature_attention import (
    FeatureAttention,
    _spd_solve,
    fit_attention_ridge,
    one_step_feature_update,
    stage_two_fit,
    subspace_fit,
    two_stage_fit,
)
from icl_utils.tasks.single_index import SingleIndexTasks, hermite, principal_angles, projection_mass


def test_hermite_polynomials_are_orthonormal_under_the_gaussian():
    nodes, weights = np.polynomial.hermite_e.hermegauss(30)  # exact for degree < 60 against exp(-z^2/2)
    weights = weights / weights.sum()
    he = hermite(torch.tensor(nodes, dtype=torch.float64), 6).numpy()
    gram = (he * weights[:, None]).T @ he
    assert np.allclose(gram, np.eye(7), atol=1e-10)
    z = torch.tensor([0.3, -1.2], dtype=torch.float64)
    assert torch.allclose(hermite(z, 3)[:, 3], (z**3 - 3 * z) / 6**0.5)


def test_tasks_live_in_the_subspace_and_have_unit_variance(gen):
    task = SingleIndexTasks(dim=10, subspace_dim=3, max_degree=4)
    basis = task.basis.float()
    assert torch.allclose(basis.T @ basis, torch.eye(3), atol=1e-5)
    beta = task.sample_directions(500, gen)
    assert torch.allclose(beta.norm(dim=1), torch.ones(500), atol=1e-5)
    assert torch.allclose((beta @ basis).norm(dim=1), torch.ones(500), atol=1e-5)  # beta lies in S
    p = task.sample(4000, 20, gen)
    assert abs(p.y.square().mean().item() - 1.0) < 0.05  # sum c_i^2 = 1 and orthonormal He_i
    c = task.sample_links(20_000, gen)
    assert c[:, 0].mean() > 0.5  # E[c_k] != 0: information exponent k


def test_one_step_update_concentrates_in_the_subspace(gen):
    task = SingleIndexTasks(dim=6, subspace_dim=1, max_degree=2, noise_std=0.0)
    model = FeatureAttention(6, 64)
    before = projection_mass(model.W, task.basis)
    one_step_feature_update(model, task, n_tasks=8192, n=64, lr=1.0, weight_decay=1.0, generator=gen)
    after = projection_mass(model.W, task.basis)
    assert before < 0.3 and after > 0.8, (before, after)
    assert principal_angles(model.W, task.basis)[0] < 0.3


@pytest.mark.parametrize("chunk_elements", [None, 100])
def test_stage_two_ridge_matches_a_gradient_solve(chunk_elements, gen, monkeypatch):
    """Also with the context summarized in chunks of 3 prompts (width 3) or 1 (width 6)."""
    if chunk_elements is not None:
        monkeypatch.setattr(config, "CHUNK_ELEMENTS", chunk_elements)
    task = SingleIndexTasks(dim=4, subspace_dim=2, noise_std=0.1)
    lam = 1e-2
    for width, n_tasks in ((3, 64), (6, 20)):  # primal (m^2 <= T2) and kernel (m^2 > T2) forms
        model = FeatureAttention(4, width)
        state = gen.get_state()
        fit_attention_ridge(model, task, n_tasks=n_tasks, n=10, lam=lam, generator=gen)
        gen.set_state(state)
        p = task.sample(n_tasks, 10, gen)
        with torch.no_grad():
            a, f, y = model.context_summary(p).double(), model.features(p.x_query).double(), p.y_query.double()
        gamma = torch.zeros(width, width, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([gamma], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14)

        def closure(opt=opt, a=a, f=f, y=y, gamma=gamma):
            opt.zero_grad()
            loss = (y - ((a @ gamma) * f).sum(1)).square().mean() + lam * gamma.square().sum()
            loss.backward()
            return loss

        opt.step(closure)
        assert torch.allclose(model.gamma.double(), gamma.detach(), atol=1e-4)


def test_prompt_only_baselines_learn_an_easy_task(gen):
    task = SingleIndexTasks(dim=2, subspace_dim=1, max_degree=2, noise_std=0.0)
    p = task.sample(32, 200, gen)
    for estimator in (kernel_ridge, lambda q: two_layer_network(q, steps=400)):
        assert (estimator(p) - p.y_query).square().mean() < 0.15


def test_bad_arguments_raise_clear_errors(gen):
    with pytest.raises(ValueError, match="subspace_dim"):
        SingleIndexTasks(dim=3, subspace_dim=4)
    with pytest.raises(ValueError, match="max_degree"):
        SingleIndexTasks(dim=3, subspace_dim=1, min_degree=3, max_degree=2)
    with pytest.raises(ValueError, match="degree"):
        hermite(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="lead_mean"):
        SingleIndexTasks(dim=3, subspace_dim=1, lead_mean=0.0)
    with pytest.raises(ValueError, match="basis"):
        projection_mass(torch.zeros(4, 3), torch.zeros(5, 1))
    with pytest.raises(ValueError, match="lams"):
        kernel_ridge(SingleIndexTasks(dim=3, subspace_dim=1).sample(2, 5, gen), lams=())
    with pytest.raises(TypeError, match="AttentionOnFeatures"):
        fit_attention_ridge(
            torch.nn.Linear(2, 2), SingleIndexTasks(dim=2, subspace_dim=1), n_tasks=4, n=3, lam=1.0, generator=gen
        )
    broken = FeatureAttention(2, 4)
    with torch.no_grad():
        broken.W[0, 0] = float("nan")
    with pytest.raises(ValueError, match="of the stage-2 prompts are not finite"):
        fit_attention_ridge(broken, SingleIndexTasks(dim=2, subspace_dim=1), n_tasks=64, n=3, lam=1.0, generator=gen)


def test_fit_attention_ridge_solves_with_many_dead_features(gen):
    """Dead ReLU features make a block of the stage-2 system equal to lam * I (the case CUDA's LU solver called
    singular); the fit must still be the ridge solution: the gradient of the objective vanishes there."""
    task = SingleIndexTasks(dim=4, subspace_dim=1, min_degree=2, max_degree=2, noise_std=0.1)
    model = FeatureAttention(4, 6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.b[:4] = -100.0  # four of six neurons never fire
    lam = 1e-3
    fit_attention_ridge(model, task, n_tasks=2048, n=8, lam=lam, generator=torch.Generator().manual_seed(1))
    p = task.sample(2048, 8, torch.Generator().manual_seed(1))  # the same prompts
    gamma = model.gamma.detach().double().requires_grad_(True)
    a, f = model.context_summary(p).detach().double(), model.features(p.x_query).detach().double()
    objective = (p.y_query.double() - ((a @ gamma) * f).sum(1)).square().mean() + lam * gamma.square().sum()
    (grad,) = torch.autograd.grad(objective, gamma)
    assert grad.abs().max() < 1e-6 and bool(torch.isfinite(gamma).all())
    assert gamma[:4].abs().max() == 0 and gamma[:, :4].abs().max() == 0


def test_spd_solve_matches_a_direct_solve_and_refuses_an_indefinite_system(gen):
    x = torch.randn(50, 8, generator=gen, dtype=torch.float64)
    rhs = torch.randn(8, generator=gen, dtype=torch.float64)
    want = torch.linalg.solve(x.T @ x + 0.1 * torch.eye(8, dtype=torch.float64), rhs)
    torch.testing.assert_close(_spd_solve(x.T @ x, 0.1, rhs), want)
    with pytest.raises(ValueError, match="raise lam"):
        _spd_solve(-torch.eye(3, dtype=torch.float64), 1e-3, torch.ones(3, dtype=torch.float64))


def test_two_stage_fit_is_the_manual_sequence_bitwise():
    """two_stage_fit = stage 1 with lr = weight_decay = 1, rows of W rescaled to mean length one, biases redrawn from
    U[-bias_range, bias_range] with the generator, then stage 2: the same numbers as those steps by hand, from equal
    seeds."""

    task = SingleIndexTasks(dim=5, subspace_dim=2, noise_std=0.1)
    sizes = dict(stage1_tasks=300, stage1_n=12, stage2_tasks=200, stage2_n=9, lam=1e-2)

    def fitted(**bias_range):
        model = FeatureAttention(5, 8, generator=torch.Generator().manual_seed(7))
        two_stage_fit(model, task, generator=torch.Generator().manual_seed(11), **sizes, **bias_range)
        return model

    manual = FeatureAttention(5, 8, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(11)
    one_step_feature_update(manual, task, n_tasks=300, n=12, lr=1.0, weight_decay=1.0, generator=g)
    with torch.no_grad():
        manual.W /= manual.W.norm(dim=1).mean()
        manual.b.uniform_(-1, 1, generator=g)
    fit_attention_ridge(manual, task, n_tasks=200, n=9, lam=1e-2, generator=g)
    fit = fitted()  # the default bias_range, 1
    for name in ("W", "b", "gamma"):
        assert torch.equal(getattr(fit, name), getattr(manual, name)), name
    assert fit.W.norm(dim=1).mean().item() == pytest.approx(1.0, abs=1e-6)
    assert 0 < fit.b.abs().max() <= 1
    narrow = fitted(bias_range=0.5)  # control: another bias range draws other biases, and so another Gamma
    assert torch.equal(narrow.W, fit.W) and not torch.equal(narrow.b, fit.b) and narrow.b.abs().max() <= 0.5
    assert not torch.equal(narrow.gamma, fit.gamma)


def test_two_stage_fit_needs_a_feature_attention_model(gen):
    from icl_utils.models import LTB, MLPAttention

    task = SingleIndexTasks(dim=2, subspace_dim=1)
    kw = dict(stage1_tasks=8, stage1_n=3, stage2_tasks=8, stage2_n=3, lam=1.0, generator=gen)
    for model in (MLPAttention(2, 4), LTB(2)):
        state = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(TypeError, match="model must be a FeatureAttention"):
            two_stage_fit(model, task, **kw)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), state))  # left untouched
    with pytest.raises(ValueError, match=r"bias_range must be in \(0, "):
        two_stage_fit(FeatureAttention(2, 4), task, bias_range=0.0, **kw)
    two_stage_fit(FeatureAttention(2, 4), task, **kw)  # the control: a FeatureAttention is fitted


@pytest.mark.parametrize("bad", [{"lam": 0.0}, {"stage2_tasks": 0}, {"stage2_n": 1.5}, {"bias_range": -1.0}])
def test_two_stage_fit_checks_every_argument_before_changing_the_model(gen, bad):
    task = SingleIndexTasks(dim=4, subspace_dim=2)
    model = FeatureAttention(4, 8)
    before = [p.detach().clone() for p in model.parameters()]
    sizes = dict(stage1_tasks=8, stage1_n=4, stage2_tasks=8, stage2_n=4, lam=1e-3) | bad
    with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
        two_stage_fit(model, task, generator=gen, **sizes)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_subspace_fit_is_a_perfect_stage_one_and_stage_two_fit_is_the_rest():
    """subspace_fit projects the rows of W onto S, then does what follows stage 1 (stage_two_fit): the same
    numbers as the projection and those steps by hand. Its rows lie in S (mass 1, against about r/d for the
    control, stage_two_fit on the random initial rows), and its floor is far below the random features' one."""
    from icl_utils import risk

    task = SingleIndexTasks(dim=8, subspace_dim=2, noise_std=0.1)
    sizes = dict(stage2_tasks=512, stage2_n=32, lam=1e-3)

    def fitted(fit):
        model = FeatureAttention(8, 16, generator=torch.Generator().manual_seed(3))
        fit(model, task, generator=torch.Generator().manual_seed(5), **sizes)
        return model

    perfect, random = fitted(subspace_fit), fitted(stage_two_fit)
    manual = FeatureAttention(8, 16, generator=torch.Generator().manual_seed(3))
    u = task.basis.float()
    with torch.no_grad():
        manual.W.copy_(manual.W @ u @ u.T)
    stage_two_fit(manual, task, generator=torch.Generator().manual_seed(5), **sizes)
    for name in ("W", "b", "gamma"):
        assert torch.equal(getattr(perfect, name), getattr(manual, name)), name
    assert projection_mass(perfect.W, task.basis) == pytest.approx(1.0, abs=1e-5)
    assert projection_mass(random.W, task.basis) < 0.6
    assert perfect.W.norm(dim=1).mean().item() == pytest.approx(1.0, abs=1e-5)
    g = torch.Generator().manual_seed(9)
    floors = [risk.attention_risk_terms(m, task, 256, 64, g).floor for m in (perfect, random)]
    assert floors[0] < 0.6 * floors[1], floors


def test_subspace_fit_needs_a_task_with_a_basis_and_checks_before_changing_the_model(gen):
    from icl_utils.tasks import LinearRegression

    model = FeatureAttention(4, 8)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="basis"):
        subspace_fit(model, LinearRegression(dim=4), stage2_tasks=8, stage2_n=4, lam=1e-3, generator=gen)
    with pytest.raises(ValueError, match="lam"):
        subspace_fit(model, SingleIndexTasks(dim=4, subspace_dim=2), stage2_tasks=8, stage2_n=4, lam=0.0, generator=gen)
    with pytest.raises(ValueError, match="task.dim=5"):  # a task (and basis) of another dimension
        subspace_fit(
            model, SingleIndexTasks(dim=5, subspace_dim=2), stage2_tasks=8, stage2_n=4, lam=1e-3, generator=gen
        )
    with pytest.raises(TypeError, match="model must be a FeatureAttention"):
        stage_two_fit(
            torch.nn.Linear(2, 2),
            SingleIndexTasks(dim=4, subspace_dim=2),
            stage2_tasks=8,
            stage2_n=4,
            lam=1e-3,
            generator=gen,
        )
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_hermite_coefficients_give_the_polynomials():
    from icl_utils.tasks.single_index import hermite_coefficients

    z = torch.linspace(-3, 3, 13, dtype=torch.float64)
    coeffs = hermite_coefficients(5)
    powers = torch.stack([z**j for j in range(6)], dim=1)
    torch.testing.assert_close(powers @ coeffs.T, hermite(z, 5))


@pytest.mark.parametrize("r, min_degree", [(1, 2), (3, 2), (2, 4)])
def test_prompt_free_predictor_is_the_mean_over_tasks(r, min_degree, gen):
    """E[y | x] against the average label of many tasks at fixed inputs, and its risk against sampled prompts."""
    task = SingleIndexTasks(dim=5, subspace_dim=r, min_degree=min_degree, max_degree=min_degree + 1, noise_std=0.2)
    x = torch.randn(6, 5, generator=gen)
    beta = task.sample_directions(200_000, gen)
    coeffs = task.sample_links(200_000, gen)
    labels = task.link(beta @ x.T, coeffs)  # (tasks, inputs)
    se = labels.std(0) / labels.shape[0] ** 0.5
    assert ((labels.mean(0) - task.conditional_mean(x)).abs() < 4 * se).all()
    p = task.sample(200_000, 0, gen)
    errors = (p.y_query - task.conditional_mean(p.x_query)).square().double()
    assert abs(errors.mean().item() - task.prompt_free_risk()) < 4 * errors.std().item() / 200_000**0.5
    # Better than predicting zero by E[c_k]^2 E[(E_beta He_k)^2] > 0.
    assert task.prompt_free_risk() < 1 + 0.2**2


def test_prompt_free_risk_in_closed_form_for_degree_two():
    task = SingleIndexTasks(dim=8, subspace_dim=3, noise_std=0.1)
    assert task.prompt_free_risk() == pytest.approx(1.01 - task.lead_coefficient_mean**2 / 3)
    nodes, weights = np.polynomial.hermite_e.hermegauss(120)  # E[g1 / |g|] for g ~ N(2 e1, I_2)
    w = weights[:, None] * weights[None, :] / (2 * np.pi)
    g1, g2 = nodes[:, None] + 2.0, nodes[None, :]
    assert task.lead_coefficient_mean == pytest.approx((w * g1 / np.hypot(g1, g2)).sum(), abs=1e-3)


def test_tasks_to_recover_on_gradients_with_known_signal_and_noise():
    from icl_utils.tasks.single_index import tasks_to_recover

    g = torch.Generator().manual_seed(0)
    basis = torch.eye(6, dtype=torch.float64)[:, :2]
    mean = torch.zeros(3, 6, dtype=torch.float64)
    mean[:, :2] = 1.0  # signal energy in S: 6
    per_task_var, per_chunk = 0.5, 10  # noise energy outside S: 3 rows x 4 directions x 0.5 = 6
    chunks = mean + (per_task_var / per_chunk) ** 0.5 * torch.randn(4000, 3, 6, generator=g, dtype=torch.float64)
    assert tasks_to_recover(chunks, per_chunk, basis) == pytest.approx(1.0, rel=0.05)
    assert tasks_to_recover(chunks - mean, per_chunk, basis) > 50  # no signal: many tasks (or inf)
    with pytest.raises(ValueError, match="chunk_gradients must be .* with at least two rows"):
        tasks_to_recover(chunks[:1], per_chunk, basis)


def test_stage_one_gradients_read_one_stream_at_every_checkpoint(gen):
    from icl_utils.models.feature_attention import stage_one_gradients

    task = SingleIndexTasks(dim=5, subspace_dim=2, noise_std=0.1)
    model = FeatureAttention(5, 8)
    state = gen.get_state()
    first, second = stage_one_gradients(model, task, n_tasks=(30, 50), n=7, generator=gen, chunk_size=1000)
    gen.set_state(state)
    p = task.sample(30, 7, gen)
    loss = (model(p) - p.y_query).square().mean()
    (direct,) = torch.autograd.grad(loss, model.W)
    torch.testing.assert_close(first, direct)
    q = task.sample(20, 7, gen)
    (rest,) = torch.autograd.grad((model(q) - q.y_query).square().sum(), model.W)
    torch.testing.assert_close(second, (30 * direct + rest) / 50)
    # The update of stage 1 is this gradient (lr * weight_decay = 1 cancels the initial W).
    gen.set_state(state)
    one_step_feature_update(model, task, n_tasks=30, n=7, lr=1.0, weight_decay=1.0, generator=gen)
    torch.testing.assert_close(model.W.detach(), -first, rtol=1e-5, atol=1e-6)


def test_risk_terms_match_monte_carlo_and_vanish_without_attention(gen):
    from icl_utils import risk
    from icl_utils.prompts import swap_contexts

    task = SingleIndexTasks(dim=4, subspace_dim=2, noise_std=0.1)
    model = FeatureAttention(4, 6)
    with torch.no_grad():
        model.b.uniform_(-1, 1, generator=gen)
    fit_attention_ridge(model, task, n_tasks=2048, n=32, lam=1e-3, generator=gen)
    terms = risk.attention_risk_terms(model, task, 4000, 64, gen)
    for n in (4, 32):
        mc, se = risk.query_risk(model.predict, task, n, 200_000, gen)
        assert abs(terms.risk(n) - mc) < 4 * (se + terms.standard_error(n)[0]), (n, terms.risk(n), mc)
    # Contexts from other tasks: the swapped floor plus the same spread.
    swapped_se = terms.swapped_floors.std() / 4000**0.5
    mc, se = risk.query_risk(lambda p: model.predict(swap_contexts(p)), task, 32, 200_000, gen)
    assert abs(terms.swapped_floor + terms.spread / 32 - mc) < 4 * (se + swapped_se + terms.standard_error(32)[0])
    with torch.no_grad():
        model.gamma.zero_()
    silent = risk.attention_risk_terms(model, task, 2000, 16, gen)
    assert silent.spread == pytest.approx(0.0, abs=1e-12)
    assert silent.floor == pytest.approx(1.01, abs=4 * silent.floor_se)  # E y^2 = 1 + noise^2
    np.testing.assert_allclose(silent.swapped_floors, silent.floors)


def test_fitted_prompt_learners_agree_with_their_query_predictions(gen):
    from icl_utils.estimators import kernel_ridge_fit, two_layer_network_fit
    from icl_utils.prompts import Prompt

    task = SingleIndexTasks(dim=3, subspace_dim=1, noise_std=0.1)
    p = task.sample(5, 12, gen)
    queries = torch.randn(5, 7, 3, generator=gen)
    for fit, once in ((kernel_ridge_fit, kernel_ridge), (two_layer_network_fit, two_layer_network)):
        fitted = fit(p)
        torch.testing.assert_close(fitted(p.x_query[:, None, :])[:, 0], once(p))
        many = fitted(queries)
        assert many.shape == (5, 7)
        moved = Prompt(p.x, p.y, queries[:, 3], p.y_query)
        torch.testing.assert_close(many[:, 3], once(moved), rtol=1e-4, atol=1e-5)


def test_held_out_errors_score_many_queries_per_fitted_prompt(gen):
    from icl_utils import risk

    task = SingleIndexTasks(dim=3, subspace_dim=1, noise_std=0.1)
    zero = risk.held_out_errors(lambda p: lambda x: torch.zeros(x.shape[:2]), task, 5, 400, 50, gen)
    assert zero.shape == (400,)
    assert abs(zero.mean() - 1.01) < 4 * zero.std() / 20  # predicting zero: E y^2
    seen = {}

    def fit(prompt):
        seen["n"] = prompt.n_context
        return lambda x: torch.zeros(x.shape[:2])

    risk.held_out_errors(fit, task, 9, 3, 4, gen)
    assert seen["n"] == 9


def test_swapped_contexts_come_from_the_next_prompt_and_paired_errors_share_prompts(gen):
    from icl_utils import risk
    from icl_utils.prompts import swap_contexts

    task = SingleIndexTasks(dim=3, subspace_dim=1)
    p = task.sample(4, 5, gen)
    q = swap_contexts(p)
    torch.testing.assert_close(q.x[1], p.x[0])
    torch.testing.assert_close(q.y[0], p.y[3])
    torch.testing.assert_close(q.x_query, p.x_query)
    errs = risk.paired_query_errors({"a": lambda p: p.y.mean(1), "b": lambda p: p.y.mean(1)}, task, 6, 50, gen)
    np.testing.assert_array_equal(errs["a"], errs["b"])
    state = gen.get_state()
    one = risk.paired_query_errors({"a": lambda p: p.y.mean(1)}, task, 6, 50, gen)["a"]
    gen.set_state(state)
    assert one.mean() == pytest.approx(risk.query_risk(lambda p: p.y.mean(1), task, 6, 50, gen)[0])


@pytest.mark.parametrize(("tasks", "width"), [(7, 1), (40, 3), (300, 8)])
def test_kronecker_gram_is_phi_transpose_phi(tasks, width):
    """Stage 2's Gram matrix from the pair products equals ``phi^T phi`` for ``phi_t = vec(a_t f_t^T)`` written out,
    to rounding. A Gram that ignored the pairs' order (``a_i a_j f_k f_l`` placed at ``(i, j), (k, l)``) fails it."""
    from icl_utils.models.feature_attention import _kronecker_gram

    g = torch.Generator().manual_seed(tasks)
    a, f = (torch.randn(tasks, width, generator=g, dtype=torch.float64) for _ in range(2))
    phi = (a[:, :, None] * f[:, None, :]).reshape(tasks, width * width)
    torch.testing.assert_close(_kronecker_gram(a, f), phi.T @ phi, rtol=1e-12, atol=1e-12)
    if width > 1:  # the control
        wrong = (a[:, :, None] * a[:, None, :]).reshape(tasks, -1).T @ (f[:, :, None] * f[:, None, :]).reshape(
            tasks, -1
        )
        assert not torch.allclose(wrong, phi.T @ phi)
