"""Chapter 2's teacher features, mean-field student, two-timescale loss and modified dynamics."""

import warnings

import pytest
import torch

from icl_utils.dynamics.mean_field import (
    BirthDeathPerturbation,
    FeaturePrompts,
    attention_loss,
    critical_point,
    descent_rotation,
    gp_perturbation,
    icl_loss,
    icl_optimal_gamma,
    init_particles,
    mixture,
    near_singular,
    optimal_gamma,
    potential_hessians,
    readout_error,
    run_gradient_descent,
    static_loss,
    velocity,
)
from icl_utils.gd import gradient_descent
from icl_utils.tasks.features import TeacherFeatures, sigmoid_network

D, K = 6, 3


@pytest.fixture
def sample():
    teacher = TeacherFeatures(dim=D, k=K, width=12, seed=3)
    x = teacher.inputs(4096, torch.Generator().manual_seed(1)).double()
    return teacher, x, teacher.features(x)


def test_whitened_teacher_has_identity_covariance_and_degenerate_one_has_rank_r():
    x = torch.randn(200_000, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = TeacherFeatures(dim=D, k=K, width=12).features(x)
    assert (f.T @ f / len(x) - torch.eye(K, dtype=f.dtype)).abs().max() < 0.02  # whitened on another sample
    g = TeacherFeatures(dim=D, k=K, width=12, rank=2).features(x)
    evals = torch.linalg.eigvalsh(g.T @ g / len(x))
    assert evals[0] < 1e-10 and (evals[1:] - 1).abs().max() < 0.02  # a projection of rank 2


def test_teacher_particles_reproduce_its_features(sample):
    teacher, x, f = sample
    torch.testing.assert_close(sigmoid_network(teacher.particles, x, K), f)
    assert static_loss(teacher.particles, f, x, K).abs() < 1e-6  # the student equal to the teacher is a global min


def test_optimal_gamma_is_the_minimizer_and_gives_the_static_loss(sample):
    _, x, f = sample
    particles = init_particles(32, D, K, torch.Generator().manual_seed(2)).double()
    gamma = optimal_gamma(particles, x, K).requires_grad_(True)
    loss = attention_loss(particles, gamma, f, x)
    (grad,) = torch.autograd.grad(loss, gamma)
    assert grad.abs().max() < 1e-6 * (1 + gamma.abs().max())
    torch.testing.assert_close(loss.detach(), static_loss(particles, f, x, K), rtol=1e-6, atol=1e-9)
    assert attention_loss(particles, gamma.detach() * 1.1, f, x) > loss


def test_static_loss_is_invariant_to_rotating_the_outputs(sample):
    _, x, f = sample
    particles = init_particles(32, D, K, torch.Generator().manual_seed(4)).double()
    rot = torch.linalg.qr(torch.randn(K, K, generator=torch.Generator().manual_seed(5), dtype=torch.float64))[0]
    rotated = torch.cat([particles[:, :K] @ rot.T, particles[:, K:]], 1)  # R # mu
    torch.testing.assert_close(static_loss(rotated, f, x, K), static_loss(particles, f, x, K))


def test_misspecified_loss_is_bounded_by_the_pca_error():
    """A k-feature student cannot beat the best rank-k approximation of 5 teacher features (Eckart-Young)."""
    teacher = TeacherFeatures(dim=D, k=5, width=12, seed=3)
    x = teacher.inputs(4096, torch.Generator().manual_seed(1)).double()
    f = teacher.features(x)
    bound = torch.linalg.eigvalsh(f.T @ f / len(x))[:2].sum()
    for seed in range(3):
        particles = init_particles(32, D, K, torch.Generator().manual_seed(seed)).double()
        assert static_loss(particles, f, x, K) >= bound - 1e-9


def test_degenerate_student_covariance_gets_a_ridge_and_is_detected(sample):
    _, x, f = sample
    same = init_particles(1, D, K, torch.Generator().manual_seed(0)).double().repeat(16, 1)  # Sigma_mu,mu of rank 1
    loss = static_loss(same, f, x, K)
    assert torch.isfinite(loss) and 0 < loss < K + 0.1
    assert near_singular(same, x, K)
    assert not near_singular(init_particles(16, D, K, torch.Generator().manual_seed(0)).double(), x, K)


def test_stacked_students_give_the_losses_of_each(sample):
    """S students as one (S, M, p) tensor: each loss is that student's own, for both losses."""
    _, x, f = sample
    stack = init_particles(8, D, K, torch.Generator().manual_seed(1), seeds=3).double()
    gamma = torch.randn(3, K, K, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(static_loss(stack, f, x, K), torch.stack([static_loss(p, f, x, K) for p in stack]))
    torch.testing.assert_close(
        attention_loss(stack, gamma, f, x), torch.stack([attention_loss(p, g, f, x) for p, g in zip(stack, gamma)])
    )


def test_icl_loss_is_the_leave_one_out_prompt_error_and_tends_to_the_population_loss(sample):
    teacher, x, f = sample
    gen = torch.Generator().manual_seed(3)
    particles = init_particles(8, D, K, gen).double()
    gamma = torch.eye(K, dtype=torch.float64) * 30
    data = FeaturePrompts.sample(teacher, 3, 5, gen, torch.float64)
    h = sigmoid_network(particles, data.x, K)  # (3, 5, K)
    manual = []
    for b in range(3):
        for j in range(5):
            others = [i for i in range(5) if i != j]
            context = (data.y[b, others, None] * h[b, others]).mean(0)
            manual.append((data.y[b, j] - context @ gamma @ h[b, j]) ** 2)
    torch.testing.assert_close(icl_loss(particles, gamma, data.x, data.y), torch.stack(manual).mean())
    long = FeaturePrompts.sample(
        teacher, 200, 400, gen, torch.float64
    )  # long prompts: close to the infinite-prompt loss
    pop = attention_loss(particles, gamma, f, x)
    assert abs(icl_loss(particles, gamma, long.x, long.y) / pop - 1) < 0.1


def test_critical_point_has_zero_velocity_and_negative_splitting_curvature(sample):
    _, x, f = sample
    small = critical_point(init_particles(3, D, K, torch.Generator().manual_seed(4)).double(), f, x)
    start = velocity(init_particles(3, D, K, torch.Generator().manual_seed(4)).double(), f, x, K).norm(dim=1).max()
    saddle = small.repeat_interleave(4, 0)
    assert velocity(saddle, f, x, K).norm(dim=1).max() < 1e-4 * start
    assert static_loss(saddle, f, x, K) > 1e-3  # not a global minimum ...
    assert torch.linalg.eigvalsh(potential_hessians(saddle, f, x, K))[:, 0].min() < 0  # ... so a saddle
    # splitting a repeated neuron along that eigenvector lowers the loss at second order
    hess = potential_hessians(small, f, x, K)
    torch.testing.assert_close(potential_hessians(saddle, f, x, K, at=small), hess)  # copies share h, so V
    evals, evecs = torch.linalg.eigh(hess)
    j = int(evals[:, 0].argmin())
    split = saddle.clone()
    eps = 1e-3
    split[4 * j : 4 * j + 2] += eps * evecs[j, :, 0]
    split[4 * j + 2 : 4 * j + 4] -= eps * evecs[j, :, 0]
    change = static_loss(split, f, x, K) - static_loss(saddle, f, x, K)
    predicted = 0.5 * eps**2 * evals[j, 0] * 4 / len(saddle)  # (1/2) eps^2 u^T H u times the cluster's mass
    assert change < 0 and abs(change / predicted - 1) < 0.05


def test_descent_rotation_gives_the_steepest_mixture_slope(sample):
    teacher, x, f = sample
    student = init_particles(16, D, K, torch.Generator().manual_seed(5)).double()
    best, predicted = descent_rotation(student, f, x)
    assert torch.linalg.matrix_norm(best, ord=2) < 1 + 1e-9

    def slope(rotation):
        s = 1e-6
        return (
            (static_loss(mixture(student, teacher.particles, s, rotation), f, x, K) - static_loss(student, f, x, K)) / s
        ).item()

    assert slope(best) == pytest.approx(predicted, rel=1e-3) and predicted < 0
    gen = torch.Generator().manual_seed(6)
    others = [torch.linalg.qr(torch.randn(K, K, generator=gen, dtype=torch.float64))[0] for _ in range(20)]
    assert all(slope(best) <= slope(r) + 1e-6 for r in others)
    assert slope(best.T) > slope(best) + 1e-3  # a wrong polar factor (transposed) is not the steepest
    with pytest.raises(
        ValueError,
        match=r"x must be a float tensor of shape \(K, p-k-1\), .* \(axes so far: p=10 from student, K=4096 .*k=4",
    ):
        descent_rotation(student, torch.cat([f, f[:, :1]], 1), x)


def test_gp_perturbation_moves_nearby_particles_together():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(5, 4, generator=gen, dtype=torch.float64) * 10
    p[1] = p[0]  # two particles at the same place, the others far apart
    xi = gp_perturbation(p, gen, size=1.0, bandwidth=1.0)
    assert (xi[0] - xi[1]).abs().max() < 1e-12  # coincident particles cannot be split by a smooth field
    assert (xi[0] - xi[2]).abs().max() > 0.1


def test_birth_death_intervenes_only_on_a_plateau_and_per_student():
    gen = torch.Generator().manual_seed(0)
    losses = {"value": None}
    hook = BirthDeathPerturbation(
        lambda p: losses["value"],
        lambda c: torch.zeros(c, 4),
        gen,
        patience=10,
        fraction=0.5,
        size=1e-3,
        perturbation=False,
    )
    particles = torch.ones(2, 8, 4)
    for step in range(30):  # both falling by 10% per step: no intervention
        losses["value"] = torch.tensor([0.9**step, 0.9**step])
        hook(step, particles, None)
    assert hook.events == [] and bool((particles == 1).all())
    for step in range(30, 50):  # student 1 flat, student 0 still falling: one check finds the stall
        losses["value"] = torch.tensor([0.9**step, 0.04])
        hook(step, particles, None)
    assert hook.events and {s for _, s in hook.events} == {1}
    assert bool((particles[0] == 1).all()) and (particles[1] == 0).all(1).sum() == 4  # half of student 1 reborn
    quiet = BirthDeathPerturbation(
        lambda p: torch.tensor([0.04]), lambda c: torch.zeros(c, 4), gen, patience=10, tolerance=2.0
    )  # below twice the first loss: converged, left alone
    for step in range(40):
        quiet(step, torch.ones(8, 4), None)
    assert quiet.events == []
    nudged = BirthDeathPerturbation(
        lambda p: torch.tensor([0.04]), lambda c: torch.zeros(c, 4), gen, patience=10, birth_death=False, size=0.5
    )  # the perturbation alone: every particle moves
    cloud = torch.randn(8, 4, generator=gen)
    before = cloud.clone()
    for step in range(10):
        nudged(step, cloud, None)
    assert nudged.events == [(10, 0)] and bool(((cloud - before).abs().sum(1) > 0).all())
    assert not bool((cloud == 0).all(1).any())  # nobody reborn


def test_gradient_descent_with_per_block_steps_and_a_hook():
    calls = []
    theta, _ = gradient_descent(
        lambda t: (t["a"] ** 2 + t["b"] ** 2).sum() / 2,
        {"a": torch.tensor([1.0]), "b": torch.tensor([1.0])},
        steps=3,
        lr={"a": 0.5, "b": 0.1},
        hook=lambda s, t, loss: calls.append(s),
        progress=False,
    )
    torch.testing.assert_close(theta["a"], torch.tensor([0.5**3]))
    torch.testing.assert_close(theta["b"], torch.tensor([0.9**3]))
    assert calls == [0, 1, 2]
    with pytest.raises(ValueError, match="lr must name the same blocks as init"):
        gradient_descent(lambda t: t["a"].sum(), {"a": torch.zeros(2)}, steps=1, lr={"b": 1.0}, progress=False)
    with pytest.raises(TypeError, match="lr must be a real number"):  # a per-coordinate tensor is not a step size
        gradient_descent(lambda t: t.sum(), torch.zeros(2), steps=1, lr=torch.ones(2), progress=False)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: TeacherFeatures(dim=4, k=2, rank=3), ValueError, "rank must be at most k"),
        (lambda: sigmoid_network(torch.zeros(3, 7), torch.zeros(5, 4), 3), ValueError, "x must have last dimension"),
        (
            lambda: attention_loss(torch.zeros(3, 7), torch.zeros(3, 2), torch.zeros(5, 3), torch.zeros(5, 3)),
            ValueError,
            r"gamma must be a float tensor of shape \(\*#S, k, k\)",
        ),
        (
            lambda: TeacherFeatures(dim=4, k=2).features(torch.zeros(3, 5)),
            ValueError,
            "x must (have last dimension dim=4|be a float tensor of shape)",
        ),
        (lambda: init_particles(0, 4, 2, torch.Generator()), ValueError, r"width must be in \[1, "),
    ],
)
def test_bad_arguments_raise(call, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error, match=match):
            call()


def test_icl_optimal_gamma_minimizes_the_prompt_loss_per_student(sample):
    """Autograd: the ICL loss's gradient in Gamma vanishes at icl_optimal_gamma, per student of a stack, and
    moving Gamma raises the loss; with long prompts it nears the infinite-prompt optimum's loss (the control: the
    identity, a Gamma that is not fitted, is worse)."""
    teacher, _, _ = sample
    data = FeaturePrompts.sample(teacher, 16, 32, torch.Generator().manual_seed(4), dtype=torch.float64)
    particles = init_particles(24, D, K, torch.Generator().manual_seed(5), seeds=2).double()
    x, y = data.x.expand(2, *data.x.shape), data.y.expand(2, *data.y.shape)
    best = icl_optimal_gamma(particles, x, y).requires_grad_(True)
    assert best.shape == (2, K, K)
    loss = icl_loss(particles, best, x, y)
    (grad,) = torch.autograd.grad(loss.sum(), best)
    assert grad.abs().max() < 1e-6 * (1 + best.abs().max())
    nudged = best.detach() + 0.05 * torch.randn(2, K, K, generator=torch.Generator().manual_seed(6), dtype=best.dtype)
    assert torch.all(icl_loss(particles, nudged, x, y) > loss)
    eye = torch.eye(K, dtype=best.dtype).expand(2, K, K)
    assert torch.all(icl_loss(particles, eye, x, y) > loss)
    with pytest.raises(ValueError, match="at least 2 points"):
        icl_optimal_gamma(particles, x[..., :1, :], y[..., :1])


def test_attention_with_optimal_gamma_follows_the_static_flow_on_the_full_sample(sample):
    """Full batch, Gamma at its optimum at every step: by the envelope theorem the particles' gradient is the static
    loss's, so the two runs agree step for step (the control: Gamma trained jointly from I does not)."""
    teacher, _, _ = sample
    data = FeaturePrompts.sample(teacher, 8, 16, torch.Generator().manual_seed(7), dtype=torch.float64)
    init = init_particles(20, D, K, torch.Generator().manual_seed(8)).double()
    kw = dict(steps=30, eta=0.2, progress=False, record_every=10)
    fast = run_gradient_descent("attention", data, init, gamma="optimal", **kw)
    static = run_gradient_descent("static", data, init, **kw)
    # one step's gradients agree to the solver's precision (~1e-7); 30 steps of size eta M = 4 amplify that
    torch.testing.assert_close(fast.particles, static.particles, rtol=0, atol=1e-3)
    torch.testing.assert_close(torch.as_tensor(fast.losses), torch.as_tensor(static.losses), rtol=1e-3, atol=0)
    joint = run_gradient_descent("attention", data, init, gamma_lr=1.0, **kw)
    assert (joint.particles - static.particles).abs().max() > 3e-2
    with pytest.raises(ValueError, match="gamma must be"):
        run_gradient_descent("attention", data, init, gamma="fast", **kw)
    with pytest.raises(ValueError, match="for the attention model"):
        run_gradient_descent("static", data, init, gamma="optimal", **kw)


def test_centered_readout_error_removes_the_constant(sample):
    """With a constant allowed, a task that is a constant plus noise has nothing left to explain beyond its mean:
    the centered error of a constant-plus-a-feature task is 0 (the control: without a constant it is not), and the
    centered error of noise independent of x is about 1 (Var g)."""
    _teacher, x, _f = sample
    particles = init_particles(32, D, K, torch.Generator().manual_seed(9)).double()
    h = sigmoid_network(particles, x, K)
    g = 5.0 + h[:, 0]
    assert readout_error(particles, g, x, centered=True) < 1e-6
    assert readout_error(particles, g, x) > 1e-4
    noise = torch.randn(len(x), generator=torch.Generator().manual_seed(10), dtype=x.dtype)
    assert 0.95 < readout_error(particles, 3.0 + noise, x, centered=True) <= 1.0


def test_a_student_with_zero_features_explains_nothing(monkeypatch):
    """All-zero output weights give features that are 0 at every input (Sigma_mu,mu = 0): the best readout is 0, so
    the static loss is E||f||^2 and the readout error 1. The control is the ridge scaled by the mean eigenvalue
    alone (the rule before), under which the solve fails."""
    from icl_utils.dynamics import mean_field

    torch.manual_seed(0)
    x = torch.randn(64, 3, dtype=torch.float64)
    f = torch.randn(64, 2, dtype=torch.float64)
    zero = torch.zeros(4, 1 + 3 + 1, dtype=torch.float64)
    torch.testing.assert_close(static_loss(zero, f, x, 1), f.square().sum(-1).mean())
    assert readout_error(zero, f[:, 0], x) == pytest.approx(1.0)

    def old_rule(cov, ridge):
        mean_eig = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1) / cov.shape[-1]
        return cov + ridge * mean_eig[..., None, None] * torch.eye(cov.shape[-1], dtype=cov.dtype)

    monkeypatch.setattr(mean_field, "_regularized", old_rule)
    with pytest.raises(RuntimeError):
        static_loss(zero, f, x, 1)


def test_readout_error_refuses_only_exactly_constant_columns():
    """A centered column of tiny but real variation (1000 + 1e-3 x, float32) is read, not refused: the variance of
    such a column is below the (10 eps)^2 relative bound an earlier rule used (the control, which refused it); an
    exactly constant column is refused by name."""
    torch.manual_seed(0)
    x = torch.randn(256, 3)
    particles = init_particles(8, 3, 1, torch.Generator().manual_seed(0)).float()
    g = 1000 + 1e-3 * x[:, 0]
    assert 0 < float(readout_error(particles, g, x, centered=True)) < 1
    assert g.var(correction=0) <= (10 * torch.finfo(g.dtype).eps) ** 2 * g.square().mean()  # the old rule's refusal
    with pytest.raises(ValueError, match="g must not be constant"):
        readout_error(particles, torch.full((256,), 3.0), x, centered=True)
