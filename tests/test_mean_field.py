"""Chapter 2's teacher features, mean-field student, two-timescale loss and modified dynamics."""

import warnings

import pytest
import torch

from icl_utils.dynamics.mean_field import (
    BirthDeathPerturbation,
    attention_loss,
    gp_perturbation,
    init_particles,
    optimal_gamma,
    static_loss,
)
from icl_utils.tasks.features import TeacherFeatures, sigmoid_network
from icl_utils.gd import gradient_descent

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


def test_degenerate_student_covariance_warns_instead_of_nan(sample):
    _, x, f = sample
    same = init_particles(1, D, K, torch.Generator().manual_seed(0)).double().repeat(16, 1)  # Sigma_mu,mu of rank 1
    with pytest.warns(RuntimeWarning, match="nearly singular"):
        loss = static_loss(same, f, x, K)
    assert torch.isfinite(loss) and 0 < loss < K + 0.1


def test_a_run_through_degenerate_covariances_warns_once(sample):
    # Python shows a warning once per call site and text, so a text with changing numbers would show at every
    # step of a run: five different degenerate students must give one warning.
    _, x, f = sample
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for seed in range(5):
            same = init_particles(1, D, K, torch.Generator().manual_seed(seed)).double().repeat(16, 1)
            static_loss(same, f, x, K)
    assert [str(w.message)[:30] for w in caught] == ["Sigma_mu,mu is nearly singular"]


def test_gp_perturbation_moves_nearby_particles_together():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(5, 4, generator=gen, dtype=torch.float64) * 10
    p[1] = p[0]  # two particles at the same place, the others far apart
    xi = gp_perturbation(p, gen, size=1.0, bandwidth=1.0)
    assert (xi[0] - xi[1]).abs().max() < 1e-2 * xi[0].abs().max()
    assert (xi[0] - xi[2]).abs().max() > 0.1


def test_birth_death_intervenes_only_on_a_plateau():
    gen = torch.Generator().manual_seed(0)
    hook = BirthDeathPerturbation(lambda c: torch.zeros(c, 4), gen, patience=10, fraction=0.5, size=1e-3)
    particles = torch.ones(8, 4)
    for step in range(30):  # falling by 10% per step: no intervention
        hook(step, particles, 0.9**step)
    assert hook.events == [] and bool((particles == 1).all())
    for step in range(30, 60):  # flat
        hook(step, particles, 0.04)
    assert hook.events and (particles.abs() < 0.1).all(1).sum() >= 4  # half the particles reborn near 0


def test_gradient_descent_with_per_block_steps_and_a_hook():
    calls = []
    theta, _ = gradient_descent(lambda t: (t["a"] ** 2 + t["b"] ** 2).sum() / 2,
                                {"a": torch.tensor([1.0]), "b": torch.tensor([1.0])}, steps=3, lr={"a": 0.5, "b": 0.1},
                                hook=lambda s, t, loss: calls.append(s), progress=False)
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
        (lambda: attention_loss(torch.zeros(3, 7), torch.zeros(3, 2), torch.zeros(5, 3), torch.zeros(5, 3)),
         ValueError, "gamma must be a square"),
        (lambda: TeacherFeatures(dim=4, k=2).features(torch.zeros(3, 5)), ValueError, "last dimension dim=4"),
        (lambda: init_particles(0, 4, 2, torch.Generator()), ValueError, "width must be >= 1"),
    ],
)
def test_bad_arguments_raise(call, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error, match=match):
            call()
