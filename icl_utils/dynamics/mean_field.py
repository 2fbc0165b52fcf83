"""Chapter 3's population objective: a mean-field MLP of sigmoid neurons feeding linear attention (Kim and Suzuki 2024).

The student is a set of ``M`` particles ``(a_m, w_m, b_m)`` (rows of one tensor), its features the mean-field
network ``h_mu(x) = (1/M) sum_m a_m sigmoid(w_m^T x + b_m)`` in ``R^k``
(:func:`icl_utils.tasks.features.sigmoid_network`). For tasks ``y = v^T f(x)`` with ``v ~ N(0, I_k)`` and
infinitely long prompts, linear attention predicts ``E[y h(x)]^T Gamma h(x_q) = v^T Sigma_{o,mu} Gamma h(x_q)``, so the
ICL loss averaged over tasks is (the paper's eq. 2)

    L(mu, Gamma) = E_x || f(x) - Sigma_{o,mu} Gamma h_mu(x) ||^2,

with ``Sigma_{o,mu} = E f h_mu^T`` and ``Sigma_{mu,mu} = E h_mu h_mu^T`` (uncentered). Minimizing over ``Gamma`` (a
least-squares problem, the fast timescale) gives ``Gamma = Sigma_{mu,mu}^-1`` and the two-timescale objective

    L(mu) = E ||f||^2 - tr(Sigma_{o,mu} Sigma_{mu,mu}^-1 Sigma_{mu,o}),

the *static* model's loss. The *modified* dynamics add the birth-death and Gaussian-process perturbation steps of
the paper's Algorithm 1 (:class:`BirthDeathPerturbation`). Expectations are averages over a sample of inputs.

Every loss takes one student's particles ``(M, p)`` or ``S`` students' ``(S, M, p)`` (seeds trained together, one
loss each). :func:`run_gradient_descent` trains any of the three models (:data:`MODELS`) by SGD on a fixed set of
prompts (:class:`FeaturePrompts`, the paper's protocol; the attention model reads them through :func:`icl_loss`)
or by gradient descent on all of them. :func:`critical_point`, :func:`velocity` and :func:`potential_hessians`
build and check a saddle; :func:`fit_saddle_escape` and :func:`escape_steps` measure the escape from it;
:func:`descent_rotation` and :func:`path_losses` follow Theorem 3.3's path towards the teacher; and
:func:`readout_error` says what a student's features explain of another function of the inputs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args

import numpy as np
import torch
from beartype.vale import Is
from jaxtyping import Float, Integer
from jaxtyping import Real as RealArray
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import (
    Count,
    Finite,
    NonNegative,
    Positive,
    Probability,
    Rows,
    Several,
    Size,
    Steps,
    Width,
    checked,
)
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.tasks.features import TeacherFeatures, _sigmoid_network

# The declared shapes: one student's particles (M, p), p = k + d + 1, or S students' (S, M, p); the inputs and the
# teacher's features there, shared by the students or one sample each. Leading axes broadcast.
PathPoints = checks.sequence_of(Probability, "numbers in [0, 1]", base=Sequence | np.ndarray, most=config.MAX_SERIES)
# Finite particles (a NaN one gives a NaN loss) and at least one input (a mean over none is NaN).
Particles = Annotated[
    Float[Tensor, "*#S M p"],
    Rows,  # at least one neuron: the network averages over them
    Finite,
    checks.says(
        Is[lambda t: t.dtype in (torch.float32, torch.float64)], "of dtype float32 or float64 (its linear algebra's)"
    ),
]
Inputs = Annotated[Float[Tensor, "*#S K d"], Rows, Finite]
Features = Annotated[Float[Tensor, "*#S K ko"], Rows, Finite]
Gamma = Annotated[Float[Tensor, "*#S k k"], Finite]
# inputs read with a given Gamma: of width d = p - k - 1, with the particles' p and Gamma's k
# a kernel's width, whose square the kernel divides by: a float64 (1e-200 squared is 0, and every entry NaN)
Bandwidth = Annotated[
    float, checks.says(Is[lambda b: not isinstance(b, bool) and 1e-150 < b < 1e150], "between 1e-150 and 1e150")
]
GammaInputs = Annotated[Float[Tensor, "*#S K p-k-1"], Rows, Finite]


@checked
def init_particles(
    width: Width,
    dim: Width,
    k: Width,
    generator: torch.Generator,
    scale: checks.PositiveScale = 1.0,
    seeds: Count | None = None,
) -> Tensor:
    """``width`` particles from the initial distribution ``rho_0``: ``a ~ N(0, I_k)``, ``w ~ N(0, (scale^2/d) I)``,
    ``b ~ N(0, 1)``; shape ``(width, k + d + 1)``, or ``(seeds, width, k + d + 1)`` for ``seeds`` independent
    students trained together; on the generator's device."""
    lead = () if seeds is None else (seeds,)
    checks.allocation("seeds * width * (k + dim + 1)", (seeds or 1) * width * (k + dim + 1))
    z = torch.randn(*lead, width, k + dim + 1, generator=generator, device=generator.device)
    z[..., k:-1] *= scale / dim**0.5
    return z


def _moments(
    particles: Tensor, targets: Tensor, x: Tensor, k: int, centered: bool = False
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(targets, h, Sigma_{o,mu}, Sigma_{mu,mu})`` on the sample ``x`` (``(..., K, d)``) with teacher features
    ``targets`` (``(..., K, k_o)``); with ``centered`` both have their sample means removed first. Leading dimensions
    broadcast as in :func:`~icl_utils.tasks.features.sigmoid_network`."""
    h = _sigmoid_network(particles, x, k)
    if centered:
        h, targets = h - h.mean(-2, keepdim=True), targets - targets.mean(-2, keepdim=True)
    count = x.shape[-2]
    return targets, h, targets.mT @ h / count, h.mT @ h / count


@checks.finite_result("gamma", "targets")
@checks.same_dtype("particles", "gamma", "targets", "x")
@checked
def attention_loss(particles: Particles, gamma: Gamma, targets: Features, x: GammaInputs) -> Tensor:
    """``L(mu, Gamma) = E || f - Sigma_{o,mu} Gamma h_mu ||^2``, the ICL loss of the attention model with infinitely
    long prompts, averaged over tasks ``v ~ N(0, I)``; ``targets = f(x)`` on the sample ``x``. Stacked particles
    ``(S, M, p)`` with ``gamma`` ``(S, k, k)`` give the ``S`` losses."""
    return _attention_loss(particles, gamma, targets, x)


def _attention_loss(particles: Tensor, gamma: Tensor, targets: Tensor, x: Tensor) -> Tensor:
    """:func:`attention_loss` on checked arguments (the training loop's)."""
    return _attention_loss_of(_moments(particles, targets, x, gamma.shape[-1]), gamma)


def _attention_loss_of(moments: tuple[Tensor, Tensor, Tensor, Tensor], gamma: Tensor) -> Tensor:
    """:func:`attention_loss` from the sample's :func:`_moments`."""
    targets, h, cross, _ = moments
    return (targets - h @ (cross @ gamma).mT).square().sum(-1).mean(-1)


def _two_points(x: Tensor) -> None:
    """A ValueError unless the prompts ``x`` (``(..., n, d)``) hold at least 2 points each."""
    if x.shape[-2] < 2:
        n = x.shape[-2]
        raise ValueError(f"x must hold prompts of at least 2 points (each point's context is the others), got {n}")


@checks.finite_result("gamma", "y")
@checks.same_dtype("particles", "gamma", "x", "y")
@checked
def icl_loss(
    particles: Particles,
    gamma: Gamma,
    x: Annotated[Float[Tensor, "*#S B n p-k-1"], Finite],
    y: Annotated[Float[Tensor, "*#S B n"], Finite],
) -> Tensor:
    """The attention model's in-context loss on finite prompts: each of a prompt's ``n`` points in turn is the
    query and the other ``n - 1`` its context, ``y_hat_j = (1/(n-1)) sum_{i != j} y_i h(x_i)^T Gamma h(x_j)``;
    the mean squared error over points and prompts. ``x`` is ``(..., B, n, d)``, ``y`` ``(..., B, n)``; stacked
    particles ``(S, M, p)`` and ``gamma`` ``(S, k, k)`` read prompts ``(S, B, n, d)`` and give ``S`` losses. Its
    expectation is :func:`attention_loss` plus a variance term of order ``1/n``."""
    _two_points(x)
    return _icl_loss(particles, gamma, x, y)


def _icl_loss(particles: Tensor, gamma: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """:func:`icl_loss` on checked arguments (the training loop's)."""
    return _icl_loss_of(*_icl_features(particles, x, y, gamma.shape[-1]), gamma, y)


def _icl_features(particles: Tensor, x: Tensor, y: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``(h, context)`` of the prompts: each point's features ``(..., B, n, k)``, and the mean of ``y_i h(x_i)``
    over the other points of its prompt, the context it reads (shared by the loss and the optimal ``Gamma``)."""
    # the prompts' points as one sample per student: one product per student, not one per prompt (15-25% faster)
    h = _sigmoid_network(particles, x.flatten(-3, -2), k).unflatten(-2, x.shape[-3:-1])  # (..., B, n, k)
    total = (y[..., None] * h).sum(-2, keepdim=True)  # (..., B, 1, k)
    return h, (total - y[..., None] * h) / (x.shape[-2] - 1)


def _icl_loss_of(h: Tensor, context: Tensor, gamma: Tensor, y: Tensor) -> Tensor:
    """:func:`icl_loss` from the prompts' :func:`_icl_features`."""
    k = gamma.shape[-1]
    g = gamma.reshape(*gamma.shape[:-2], 1, k, k)
    pred = ((context @ g) * h).sum(-1)
    return (y - pred).square().mean((-1, -2))


@checks.finite_result("y")
@checks.same_dtype("particles", "x", "y")
@checked
def icl_optimal_gamma(
    particles: Particles,
    x: Annotated[Float[Tensor, "*#S B n d"], Finite],
    y: Annotated[Float[Tensor, "*#S B n"], Finite],
    ridge: Positive = 1e-8,
) -> Tensor:
    """The ``Gamma`` that minimizes :func:`icl_loss` on the given prompts, for the particles as they are: a
    least-squares
    problem in the ``k^2`` entries of ``Gamma`` (``y_hat_j`` is linear in them), with ``ridge`` times the mean
    eigenvalue of its Gram matrix. The fast timescale's limit on finite prompts; shapes as in :func:`icl_loss`,
    ``(S, k, k)`` for stacked particles."""
    _two_points(x)
    k = _student_k(particles, x)
    # the declared axes broadcast, y's too (it multiplies the features)
    students = math.prod(torch.broadcast_shapes(particles.shape[:-2], x.shape[:-3], y.shape[:-2]))
    points, neurons, width = math.prod(x.shape[-3:-1]), particles.shape[-2], particles.shape[-1]
    # a least-squares problem in the k^2 entries of each student's Gamma (the hidden layer is sized where it is
    # built, in the network): the points' features of those entries, their Gram matrix and a solve
    checks.allocation(
        "students * B n * k^2 (each point's features of Gamma's entries)", students * points * k**2, x.dtype
    )
    checks.allocation("students * k^4 (the Gram matrix of Gamma's entries)", students * k**4, x.dtype)
    checks.work(
        f"icl_optimal_gamma of k = {k} for {students} students of M = {neurons} neurons on B n = {points} points "
        "(2 B n M (d + k) + 2 B n k^4 + 4 k^6 each)",
        students * (2 * points * neurons * width + 2 * points * k**4 + 4 * k**6),
    )
    return _icl_optimal_gamma(particles, x, y, k, ridge)


def _icl_optimal_gamma(particles: Tensor, x: Tensor, y: Tensor, k: int, ridge: float = 1e-8) -> Tensor:
    """:func:`icl_optimal_gamma` on checked arguments (the training loop's)."""
    return _icl_gamma_of(*_icl_features(particles, x, y, k), y, ridge)


def _icl_gamma_of(h: Tensor, context: Tensor, y: Tensor, ridge: float = 1e-8) -> Tensor:
    """:func:`icl_optimal_gamma` from the prompts' :func:`_icl_features`."""
    k = h.shape[-1]
    phi = (context[..., :, None] * h[..., None, :]).flatten(-2).flatten(-3, -2)  # (..., B n, k^2)
    count = phi.shape[-2]
    gram = phi.mT @ phi / count
    rhs = phi.mT @ y.flatten(-2)[..., None] / count
    return torch.linalg.solve(_regularized(gram, ridge), rhs).reshape(*context.shape[:-3], k, k)


@checks.same_dtype("particles", "x")
@checked
def optimal_gamma(particles: Particles, x: Inputs, k: Count, ridge: Positive = 1e-8) -> Tensor:
    """The fast timescale's limit ``Gamma = (Sigma_{mu,mu} + ridge * tr(Sigma_{mu,mu})/k I)^-1``."""
    students, inputs = math.prod(torch.broadcast_shapes(particles.shape[:-2], x.shape[:-2])), x.shape[-2]
    checks.work(
        f"optimal_gamma of k = {k} for particles' {students} students on x's {inputs} inputs (features, covariance "
        "and inverse: 2 K M (d + k) + 2 K k^2 + 4 k^3 each)",
        students * (2 * inputs * particles.shape[-2] * particles.shape[-1] + 2 * inputs * k**2 + 4 * k**3),
    )
    return _optimal_gamma(particles, x, k, ridge)


def _optimal_gamma(particles: Tensor, x: Tensor, k: int, ridge: float = 1e-8) -> Tensor:
    """:func:`optimal_gamma` on checked arguments (the training loop's)."""
    h = _sigmoid_network(particles, x, k)
    cov = h.mT @ h / x.shape[-2]
    return torch.linalg.inv(_regularized(cov, ridge))


def _regularized(cov: Tensor, ridge: float) -> Tensor:
    """``cov`` plus ``ridge`` times its mean eigenvalue: finite where the student's features are collinear (a
    saddle), and no host sync, so no branch on the eigenvalues here (:func:`near_singular` checks them). Where
    ``cov`` is 0 (features all 0, or all constant when centered: zero output weights), ``ridge`` itself, so that the
    readout from such features is 0 (it explains nothing) instead of a singular solve."""
    k = cov.shape[-1]
    mean_eig = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1) / k
    mean_eig = torch.where(mean_eig > 0, mean_eig, 1.0)
    return cov + ridge * mean_eig[..., None, None] * torch.eye(k, dtype=cov.dtype, device=cov.device)


@checks.same_dtype("particles", "x")
@checked
def near_singular(particles: Particles, x: Inputs, k: Count, ridge: Positive = 1e-8) -> bool:
    """Whether some student's ``Sigma_{mu,mu}`` is so nearly singular that the ridge of :func:`static_loss` shapes
    its loss (smallest eigenvalue below ``1000 * ridge`` times the largest): the student's features are nearly
    collinear, as at a saddle where neurons coincide."""
    h = _sigmoid_network(particles, x, k)
    cov = h.mT @ h / x.shape[-2]
    if not bool(checks.finite_flag(cov)):  # an overflow reads as no eigenvalue small: a wrong "no"
        raise ValueError("particles made Sigma_{mu,mu} overflow: rescale particles (or x)")
    return _singular(cov, ridge)


def _singular(cov: Tensor, ridge: float = 1e-8) -> bool:
    """:func:`near_singular` from the students' ``Sigma_{mu,mu}``."""
    evals = torch.linalg.eigvalsh(cov.detach())
    return bool((evals[..., 0] < 1e3 * ridge * evals[..., -1].clamp(min=1e-30)).any())


@checks.finite_result("targets")
@checks.same_dtype("particles", "targets", "x")
@checked
def static_loss(
    particles: Particles, targets: Features, x: Inputs, k: Count, ridge: Positive = 1e-8, centered: bool = False
) -> Tensor:
    """The two-timescale objective ``L(mu) = E ||f||^2 - tr(Sigma_{o,mu} Sigma_{mu,mu}^-1 Sigma_{mu,o})``: the
    attention loss at the optimal ``Gamma``, which is the error of the best linear readout of ``targets`` from the
    student's features. With ``centered`` the readout may also add a constant (means removed from both). A (nearly)
    singular ``Sigma_{mu,mu}`` gets a small ridge instead of a NaN. Stacked particles ``(S, M, p)`` give ``S``
    losses."""
    return _static_loss(particles, targets, x, k, ridge, centered)


def _explained(cross: Tensor, cov: Tensor, ridge: float = 1e-8) -> Tensor:
    """``Sigma_{o,mu}`` entrywise times ``Sigma_{o,mu} (Sigma_{mu,mu} + ridge)^-1`` (``(..., ko, k)``): summed over
    its last axis, what the best linear readout from the student's features explains of each target."""
    return cross * torch.linalg.solve(_regularized(cov, ridge), cross.mT).mT


def _static_loss(
    particles: Tensor, targets: Tensor, x: Tensor, k: int, ridge: float = 1e-8, centered: bool = False
) -> Tensor:
    """:func:`static_loss` on checked arguments (the training loop's)."""
    return _static_loss_of(_moments(particles, targets, x, k, centered), ridge)


def _static_loss_of(moments: tuple[Tensor, Tensor, Tensor, Tensor], ridge: float = 1e-8) -> Tensor:
    """:func:`static_loss` from the sample's :func:`_moments`."""
    targets, _, cross, cov = moments
    explained = _explained(cross, cov, ridge).sum((-1, -2))
    return targets.square().sum(-1).mean(-1) - explained


@checks.finite_result("targets")
@checks.same_dtype("particles", "targets", "x")
@checked
def velocity(particles: Particles, targets: Features, x: Inputs, k: Count) -> Tensor:
    """The mean-field velocity field at each particle, ``-grad_theta (dL/dmu)(theta_m) = -M grad_{theta_m} L`` for
    the static loss: zero at every particle exactly when ``mu`` is a critical point of the flow."""
    p = particles.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_static_loss(p, targets, x, k).sum(), p)
    return -grad * particles.shape[-2]


def _loss_gradient(particles: Tensor, targets: Tensor, x: Tensor, k: int) -> Tensor:
    """``g = dL/dh`` at the sample's inputs, ``(K, k)``, for one student's static loss (with the sample mean's 1/K)."""
    h = _sigmoid_network(particles.detach(), x, k).requires_grad_(True)
    cross, cov = targets.mT @ h / len(x), h.mT @ h / len(x)
    explained = _explained(cross, cov).sum()
    (g,) = torch.autograd.grad(-explained, h)  # E ||f||^2 does not depend on h
    return g


@checks.same_dtype("particles", "targets", "x", "at")
@checked
def potential_hessians(
    particles: Annotated[Float[Tensor, "M p"], Rows, Finite],
    targets: Annotated[Float[Tensor, "K ko"], Finite],
    x: Annotated[Float[Tensor, "K d"], Finite],
    k: Count,
    at: Annotated[Float[Tensor, "m p"], Rows, Finite] | None = None,
) -> Tensor:
    """The Hessian of the first variation ``V = dL/dmu`` of the static loss of the cloud ``particles``, at each of
    the neurons ``at`` (``(m, k + d + 1)``; by default the particles themselves): ``(m, p, p)``. A negative
    eigenvalue at a critical point means that splitting that neuron's copies along its eigenvector lowers the loss
    at second order, a direction of negative curvature. ``V`` is linear in the output weights ``a``, so wherever
    ``dL/dh`` is not zero its Hessian has such eigenvalues: at a critical point with positive loss, a saddle."""
    k = _student_k(particles, x)
    at = particles if at is None else at
    if len(at) > config.MAX_SERIES:  # a Hessian each, by p backward passes through the whole sample
        raise ValueError(f"at must hold at most {config.MAX_SERIES} neurons (one Hessian each), got {len(at)}")
    g = _loss_gradient(particles, targets, x, k)

    def potential(theta: Tensor) -> Tensor:
        return (g * _sigmoid_network(theta[None], x, k)).sum()  # one neuron: h = a sigma(w^T x + b)

    return torch.stack([torch.autograd.functional.hessian(potential, theta) for theta in at.detach()])


@checks.same_dtype("init", "targets", "x")
@checked
def critical_point(
    init: Annotated[Float[Tensor, "M p"], Rows, checks.Finite],
    targets: Annotated[Float[Tensor, "K ko"], checks.Finite],
    x: Annotated[Float[Tensor, "K d"], checks.Finite],
    *,
    max_iter: Steps = 500,
    newton_steps: Steps = 20,
    tol: Positive = 1e-6,
) -> Tensor:
    """A critical point of the static loss near ``init`` (``(M0, k + d + 1)`` particles, few of them): L-BFGS with a
    strong-Wolfe line search on the sample, then Newton steps with the pseudo-inverse of the full Hessian (the
    loss is flat along ``a -> R a``, so the Hessian is singular) until no particle's :func:`velocity` exceeds
    ``tol``. With ``M0 = k`` neurons (the loss then depends only on the span of their ``k`` sigmoids) this is
    usually a strict local minimum of the ``M0``-neuron problem, up to the flat ``a``, with positive loss: a saddle
    of the mean-field landscape (Theorem 3.3: no spurious local minima). Raises a
    ValueError if the velocity is still above ``tol`` after ``newton_steps``."""
    k = _student_k(init, x, "init")
    if init.numel() > config.MAX_SERIES:  # Newton's steps take the full Hessian: one backward pass per coordinate
        raise ValueError(
            f"init must hold at most {config.MAX_SERIES} coordinates (M0 x p, few neurons), got {init.numel()}"
        )
    if tol < 1e-14:  # velocities are computed in float64 at best: a smaller one is never reached
        raise ValueError(f"tol must be at least 1e-14 (what float64 resolves), got {tol}")
    theta = init.detach().clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [theta],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = _static_loss(theta, targets, x, k)
        loss.backward()
        return loss

    optimizer.step(closure)
    theta = theta.detach()
    shape = theta.shape

    def flat_loss(flat: Tensor) -> Tensor:
        return _static_loss(flat.view(shape), targets, x, k)

    for _ in range(newton_steps):
        speed = velocity(theta, targets, x, k).norm(dim=-1).max()
        if speed < tol:
            return theta
        flat = theta.flatten().requires_grad_(True)
        (grad,) = torch.autograd.grad(flat_loss(flat), flat)
        hess = torch.autograd.functional.hessian(flat_loss, flat.detach())
        theta = (flat.detach() - torch.linalg.pinv(hess, rtol=1e-8, hermitian=True) @ grad).view(shape)
    speed = velocity(theta, targets, x, k).norm(dim=-1).max()
    if speed >= tol:
        raise ValueError(
            f"no critical point reached: the largest particle velocity is {speed:.1e} after "
            f"{newton_steps} Newton steps; try another init"
        )
    return theta


@checks.finite_result("targets")
@checks.same_dtype("student", "targets", "x")
@checked
def descent_rotation(
    student: Annotated[Float[Tensor, "M p"], Rows, Finite],
    targets: Annotated[Float[Tensor, "K k"], Finite],
    x: Annotated[Float[Tensor, "K p-k-1"], Finite],
) -> tuple[Tensor, float]:
    """The ``R`` in the unit ball of the operator norm (the convex hull of ``O(k)``) along whose mixture
    ``(1 - s) mu + s R#mu_o`` the static loss falls fastest at ``s = 0`` (Theorem 3.3's direction of decrease), and
    that slope. The slope is ``<g, R f - h>`` for ``g = dL/dh``, and ``<g, h> = 0`` because the loss does not change
    when ``h`` is scaled, so the best ``R`` is minus the polar factor of ``G = E[g f^T]``, with slope ``-||G||_*``.
    ``targets`` are the teacher's ``k`` features ``f`` on ``x``, as many as the student's (so ``x``'s width is
    ``d = p - k - 1``)."""
    k = _student_k(student, x, "student")
    g = _loss_gradient(student, targets, x, k)
    cross = g.mT @ targets
    if not bool(checks.finite_flag(cross)):
        raise ValueError("targets made E[g f^T] overflow: rescale targets (or the student)")
    u, sing, vh = torch.linalg.svd(cross, full_matrices=False)  # G = E[g f^T], with the 1/K in g
    return -(u @ vh), -sing.sum().item()


@checked
def gp_perturbation(
    particles: Annotated[Float[Tensor, "M p"], Rows, checks.Finite],
    generator: torch.Generator,
    size: checks.PositiveScale,
    bandwidth: Bandwidth,
) -> Tensor:
    """A displacement of every particle drawn from a vector-valued Gaussian process ``xi ~ GP(0, K(theta, theta') I)``
    with the Gaussian kernel of ``bandwidth``, evaluated at the particles: nearby particles move together, as a
    smooth velocity field on parameter space would move them (the paper's Definition E.8). Scaled by ``size``."""
    # the kernel, its eigenvectors and the root: three M x M matrices
    checks.allocation(
        "3 * M * M (the particles' kernel, its eigenvectors and root)", 3 * particles.shape[0] ** 2, torch.float64
    )
    m = particles.shape[0]
    checks.work(
        f"gp_perturbation of particles' M = {m} neurons (an eigendecomposition and a product, 12 M^3)", 12 * m**3
    )
    p = particles.detach().double()
    kernel = torch.exp(-torch.cdist(p, p).square() / (2 * bandwidth**2))
    # The symmetric square root, not a Cholesky factor with jitter: coincident particles have equal rows of the
    # kernel, so they get equal displacements. Eigenvalues at round-off level are dropped, since their square roots
    # (1e-8 for 1e-16) would split coincident particles where a smooth field cannot.
    evals, evecs = torch.linalg.eigh(kernel)
    evals = torch.where(evals > 1e-10 * evals[-1], evals, torch.zeros_like(evals))
    root = evecs * evals.sqrt() @ evecs.mT
    z = torch.randn(p.shape, generator=generator, device=generator.device, dtype=p.dtype)
    return (size * root @ z).to(particles.dtype)


@checked
@dataclass
class BirthDeathPerturbation:
    """The modified dynamics of the paper's Algorithm 1, as a ``hook`` for :func:`icl_utils.gd.gradient_descent`
    on stacked students ``(S, M, p)``. Every ``patience`` steps it evaluates ``evaluate(particles)`` (the ``S``
    training losses); for each student whose loss has not dropped by the relative ``threshold`` since the last
    check, a ``fraction`` of its particles, chosen at random, are replaced by fresh draws from the initial
    distribution (``birth_death``) and all of its particles are displaced by a Gaussian-process perturbation
    (``perturbation``). Once a student's loss is below ``tolerance`` times its ``reference`` loss (by default its
    loss at the first call; the algorithm's convergence error epsilon, relative) it is left alone: near a minimum
    the loss always stalls. ``events`` records ``(step, student)`` for each intervention. Its fields are checked
    on construction, not when the first intervention fires mid-run."""

    evaluate: Callable[[Tensor], Tensor]  # particles (S, M, p) -> losses (S,)
    sample_init: Callable[[int], Tensor]  # count -> fresh particles from rho_0, (count, p)
    generator: torch.Generator
    patience: Count = 100
    threshold: NonNegative = 0.01
    fraction: Probability = 0.05
    size: Positive = 0.1
    bandwidth: Bandwidth = 1.0
    tolerance: NonNegative = 0.0
    birth_death: bool = True
    perturbation: bool = True
    # (S,) losses (or one, 0-d); by default those at the first call. A NaN would make every student look converged.
    reference: Annotated[Float[Tensor, "*S"], checks.Finite] | None = None
    events: list[tuple[int, int]] = field(default_factory=list)
    _checked: list[np.ndarray] = field(default_factory=list, repr=False)

    def _losses(self, particles: Tensor) -> np.ndarray:
        with torch.no_grad():
            losses = np.atleast_1d(torch.as_tensor(self.evaluate(particles)).detach().cpu().numpy())
        students = particles.shape[0] if particles.ndim == 3 else 1
        if losses.shape != (students,) or not np.isfinite(losses).all():
            raise ValueError(f"evaluate must return {students} finite loss(es), one per student, got {losses!r:.80}")
        return losses

    def __call__(self, step: int, particles: Tensor, loss: object = None) -> None:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):  # gradient_descent's step number
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        if not isinstance(particles, Tensor) or particles.ndim not in (2, 3):
            shape = f" of shape {tuple(particles.shape)}" if isinstance(particles, Tensor) else ""
            raise TypeError(
                f"particles must be a tensor (M, p), or stacked students (S, M, p), got a {type(particles).__name__}"
                f"{shape}"
            )
        if not 0 <= self.fraction <= 1:  # a field set after construction
            raise ValueError(f"fraction must be in [0, 1], got {self.fraction}")
        if not self._checked:  # the first call
            current = self._losses(particles)
            self._checked.append(current)
            if self.reference is None:
                self.reference = current
            self.reference = np.atleast_1d(torch.as_tensor(self.reference).detach().cpu().numpy())
            if self.reference.shape not in ((1,), current.shape):
                raise ValueError(
                    f"reference must hold one loss per student ({current.shape[0]}), got shape {self.reference.shape}"
                )
        if (step + 1) % self.patience:
            return
        current = self._losses(particles)
        self._checked.append(current)
        stalled = (current > (1 - self.threshold) * self._checked[-2]) & (current >= self.tolerance * self.reference)
        stacked = particles if particles.ndim == 3 else particles[None]
        for s in np.flatnonzero(stalled):
            cloud = stacked[s]
            if self.birth_death:
                count = math.ceil(self.fraction * len(cloud))
                idx = torch.randperm(len(cloud), generator=self.generator, device=self.generator.device)[:count]
                fresh = self.sample_init(count)
                if not isinstance(fresh, Tensor) or tuple(fresh.shape) != (count, cloud.shape[-1]):
                    said = tuple(fresh.shape) if isinstance(fresh, Tensor) else type(fresh).__name__
                    raise ValueError(f"sample_init must return ({count}, {cloud.shape[-1]}) particles, got {said}")
                if not bool(checks.finite_flag(fresh)):
                    raise ValueError("sample_init must return finite particles, got a NaN or an infinity")
                cloud[idx.to(cloud.device)] = fresh.to(cloud.device, cloud.dtype)
            if self.perturbation:
                cloud += gp_perturbation(cloud, self.generator, self.size, self.bandwidth)
            self.events.append((step + 1, int(s)))
        if stalled.any():  # the next check compares with the loss after the intervention
            self._checked[-1] = np.where(stalled, self._losses(particles), current)


#: The three models of the chapter: linear attention with Gamma trained jointly, the static (two-timescale) model,
#: and the modified dynamics with birth-death and perturbation.
Model = Literal["attention", "static", "modified"]
#: the same names, as a tuple
MODELS = get_args(Model)


def _student_k(particles: Tensor, x: Tensor, name: str = "particles") -> int:
    """The student's output dimension ``k``, read off particles of width ``k + d + 1`` and inputs ``x`` of width d."""
    if particles.shape[-1] < x.shape[-1] + 2:
        raise ValueError(
            f"{name} must have width k + d + 1 with k >= 1 for inputs of width d = {x.shape[-1]}, "
            f"got {particles.shape[-1]}"
        )
    return particles.shape[-1] - x.shape[-1] - 1


@checked
@dataclass(frozen=True)
class FeaturePrompts:
    """A fixed training set of prompts for the feature-regression tasks: inputs ``x`` ``(P, n, d)``, the teacher's
    features there ``f`` ``(P, n, k_o)``, and labels ``y = v^T f`` ``(P, n)`` with one task ``v ~ N(0, I)`` per
    prompt. The static and modified models read ``f`` (the loss over tasks in closed form), the attention model
    reads ``y``, as a transformer would."""

    x: Annotated[Float[Tensor, "P n d"], checks.Finite, checks.NonEmpty]
    f: Annotated[Float[Tensor, "P n ko"], checks.Finite]
    y: Annotated[Float[Tensor, "P n"], checks.Finite]

    def __post_init__(self) -> None:
        if not self.x.dtype == self.f.dtype == self.y.dtype:  # the losses read them together
            raise TypeError(f"f and y must have the dtype of x, {self.x.dtype}, got {self.f.dtype} and {self.y.dtype}")

    @classmethod
    @checked
    def sample(
        cls,
        teacher: TeacherFeatures,
        count: Count,
        length: Several,
        generator: torch.Generator,
        dtype: checks.FloatDtype | None = None,
    ) -> FeaturePrompts:
        """``count`` prompts of ``length`` points each from ``teacher`` (a
        :class:`~icl_utils.tasks.features.TeacherFeatures`), drawn by the teacher's own sampler (its prompts of
        ``length - 1`` examples and a query, all ``length`` points kept), in ``dtype`` (by default the default
        dtype), with the teacher's features of every point."""
        # the teacher's hidden layer at every point is the largest tensor
        widest = max(teacher.dim, teacher.width, teacher.k)
        checks.allocation("count * length * max(teacher.dim, teacher.width, teacher.k)", count * length * widest)
        dtype = torch.get_default_dtype() if dtype is None else dtype
        x, y = teacher.sample(count, length - 1, generator).points()
        x, y = x.to(dtype), y.to(dtype)
        return cls(x, teacher.features(x), y)

    @checked
    def head(self, count: Count) -> FeaturePrompts:
        """The first ``count`` prompts."""
        return FeaturePrompts(self.x[:count], self.f[:count], self.y[:count])

    @checked
    def inputs(self, count: Count | None = None) -> tuple[Tensor, Tensor]:
        """The first ``count`` inputs and their features, flattened to ``(count, d)`` and ``(count, k_o)`` (all of
        them by default): the sample the population losses are averaged over."""
        x, f = self.x.reshape(-1, self.x.shape[-1]), self.f.reshape(-1, self.f.shape[-1])
        count = len(x) if count is None else min(count, len(x))
        return x[:count], f[:count]

    @checked
    def draw(self, seeds: Count, batch: Count, generator: torch.Generator) -> _Drawn:
        """``batch`` prompts drawn at random (with replacement) for each of ``seeds`` students: ``(seeds, batch,
        ...)`` tensors."""
        self._fits(seeds, batch)
        return self._draw(seeds, batch, generator)

    def _fits(self, seeds: int, batch: int) -> None:
        """A ValueError with the size when ``seeds * batch`` drawn prompts would not fit in a tensor."""
        values = seeds * batch * self.x.shape[1] * max(self.x.shape[2], self.f.shape[2])
        checks.allocation("seeds * batch * n * max(d, k_o)", values, self.x.dtype)

    def _draw(self, seeds: int, batch: int, generator: torch.Generator) -> _Drawn:
        """:meth:`draw` on checked arguments (the training loop's)."""
        idx = torch.randint(len(self.x), (seeds, batch), generator=generator, device=generator.device)
        idx = idx.to(self.x.device)
        return _Drawn(self.x[idx], self.f[idx], self.y[idx])


@dataclass(frozen=True)
class _Drawn:
    """Prompts drawn per student: ``x`` ``(S, B, n, d)``, ``f`` ``(S, B, n, k_o)``, ``y`` ``(S, B, n)``."""

    x: Tensor
    f: Tensor
    y: Tensor


@dataclass
class MeanFieldRun:
    """What :func:`run_gradient_descent` returns: the final particles (and ``Gamma`` for the attention model, else
    None), the history of :func:`icl_utils.gd.gradient_descent` (each record has one value per student), and the
    ``(step, student)`` pairs at which the modified dynamics intervened (empty for the other models)."""

    particles: Tensor
    gamma: Tensor | None
    history: GDHistory
    events: list[tuple[int, int]]

    def __post_init__(self) -> None:
        if not isinstance(self.particles, Tensor):
            raise TypeError(f"particles must be a tensor, got {type(self.particles).__name__}")
        if not isinstance(self.events, list):
            raise TypeError(f"events must be a list of (step, student) pairs, got {type(self.events).__name__}")
        if self.gamma is not None and not isinstance(self.gamma, Tensor):
            raise TypeError(f"gamma must be a tensor or None, got {type(self.gamma).__name__}")
        if not isinstance(self.history, GDHistory) or "loss" not in self.history.records:
            raise ValueError("history must be a GDHistory that recorded 'loss', as run_gradient_descent's does")

    @property
    def steps(self) -> np.ndarray:
        return self.history.steps

    @property
    def losses(self) -> np.ndarray:
        """The recorded training loss, ``(len(steps), S)`` (``(len(steps),)`` for a single student)."""
        return self.history.records["loss"]


def _descend(*args, **kwargs):
    """:func:`~icl_utils.gd.gradient_descent`, its divergence blamed on this module's step sizes, ``eta`` and
    ``gamma_lr``, which the caller gave, not on ``lr``."""
    try:
        return gradient_descent(*args, **kwargs)
    except checks.Diverged as err:
        raise checks.Diverged(str(err).replace("lower lr", "lower eta (or gamma_lr)")) from None


@checked
def run_gradient_descent(
    model: Model,
    data: FeaturePrompts,
    init: Annotated[Float[Tensor, "M p"] | Float[Tensor, "S M p"], Rows, checks.Finite],
    *,
    steps: Steps,
    eta: checks.PositiveScale,
    batch: Count | None = None,
    gamma_lr: Positive | None = None,
    gamma: Literal["trained", "optimal"] = "trained",
    generator: torch.Generator | None = None,
    tolerance: NonNegative = 0.0,
    birth_death: bool = True,
    perturbation: bool = True,
    eval_size: Count | None = None,
    record: Callable[[Tensor], Mapping] | None = None,
    record_every: Count = 20,
    progress: bool = True,
    desc: str | None = None,
) -> MeanFieldRun:
    """(Stochastic) gradient descent of one of the three models of :data:`MODELS` from the particles ``init``
    (``(M, k + d + 1)``, or ``(S, M, k + d + 1)`` for ``S`` students trained together) on the prompts ``data``.

    With ``batch``, each step draws ``batch`` prompts of ``data`` per student (SGD on prompts, the paper's
    protocol; needs ``generator``); without, each step uses every prompt (gradient descent on the sample). Each
    particle moves by ``eta * M`` times its gradient (the mean-field time scaling, which makes the dynamics of
    the cloud independent of ``M``).

    - ``"attention"``: particles and ``Gamma`` (from ``I_k``, step ``gamma_lr``) jointly on :func:`icl_loss`
      (full batch: on :func:`attention_loss`, the infinitely long prompts); with ``gamma="optimal"``, ``Gamma`` on
      its own infinitely fast timescale instead, set at each step to its optimum for the step's prompts
      (:func:`icl_optimal_gamma`; full batch: :func:`optimal_gamma`) and the particles moved on :func:`icl_loss` at
      that ``Gamma``. Its recorded loss is then :func:`static_loss`, the features' loss at the best ``Gamma``: the
      paper's two-timescale limit, on finite prompts;
    - ``"static"``: particles alone on :func:`static_loss` over the drawn prompts' inputs, ``Gamma`` at its
      optimum;
    - ``"modified"``: the static model with :class:`BirthDeathPerturbation` (patience 100 steps, threshold 1%, 5%
      of the particles reborn from :func:`init_particles`, perturbation size 0.1, silent below ``tolerance`` times
      the loss at ``init``; ``birth_death`` and ``perturbation`` switch its two moves, for ablations).

    The training loss recorded every ``record_every`` steps is the population loss (:func:`attention_loss` at the
    current ``Gamma``, or :func:`static_loss`) on the first ``eval_size`` inputs of ``data`` (all by default), one
    value per student; ``record(particles)`` (static and modified models) adds quantities to it. Warns once per
    run if a student's ``Sigma_{mu,mu}`` was nearly singular at a record.
    """
    if generator is None and (batch is not None or model == "modified"):
        raise TypeError("generator must be a torch.Generator for SGD (batch) and for the modified model, got None")
    k = _student_k(init, data.x, "init")
    if init.dtype != data.x.dtype:
        raise TypeError(f"init must have the dtype of data's prompts, {data.x.dtype}, got {init.dtype}")
    seeds = init.shape[0] if init.ndim == 3 else 1
    if batch is not None:
        data._fits(seeds, batch)
    x_eval, f_eval = data.inputs(eval_size)
    desc = model if desc is None else desc
    options = dict(steps=steps, record_every=record_every, progress=progress, desc=desc)
    warned = False

    def evaluated(particles: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The evaluation sample's moments, checked for a nearly singular ``Sigma_{mu,mu}`` (warned once): a record
        computes its loss and the check from one evaluation of the features."""
        nonlocal warned
        moments = _moments(particles, f_eval, x_eval, k)
        if not warned and _singular(moments[3]):
            warned = True
            warnings.warn(
                "Sigma_mu,mu is nearly singular: some student's features are nearly collinear; the inverse "
                "uses a small ridge",
                RuntimeWarning,
                stacklevel=3,
            )
        return moments

    if gamma == "optimal" and model != "attention":
        raise ValueError("gamma='optimal' is for the attention model (the others have no Gamma of their own)")
    if model == "attention" and record is not None:
        raise ValueError("record is for the static and modified models; the attention model records its loss")
    if model == "attention" and gamma == "optimal":

        def fast_fn(particles):
            if batch is None:
                x, f = data.x.flatten(0, 1), data.f.flatten(0, 1)
                with torch.no_grad():
                    best = _optimal_gamma(particles, x, k)
                return _attention_loss(particles, best, f, x).sum()
            drawn = data._draw(seeds, batch, generator)
            x, y = (drawn.x[0], drawn.y[0]) if init.ndim == 2 else (drawn.x, drawn.y)
            h, context = _icl_features(particles, x, y, k)  # one evaluation for Gamma and the loss
            with torch.no_grad():
                best = _icl_gamma_of(h, context, y)
            return _icl_loss_of(h, context, best, y).sum()

        def record_fast(particles):
            return {"loss": _static_loss_of(evaluated(particles))}

        particles, history = _descend(fast_fn, init, lr=float(eta) * init.shape[-2], record=record_fast, **options)
        return MeanFieldRun(particles, None, history, events=[])
    if model == "attention":
        if gamma_lr is None:
            raise ValueError("gamma_lr must be given for the attention model")
        eye = torch.eye(k, dtype=init.dtype, device=init.device)
        theta0 = {"particles": init, "gamma": eye.expand(*init.shape[:-2], k, k).clone()}

        def loss_fn(theta):
            if batch is None:
                return _attention_loss(
                    theta["particles"], theta["gamma"], data.f.flatten(0, 1), data.x.flatten(0, 1)
                ).sum()
            drawn = data._draw(seeds, batch, generator)
            particles, gamma = theta["particles"], theta["gamma"]
            if init.ndim == 2:
                return _icl_loss(particles, gamma, drawn.x[0], drawn.y[0])
            return _icl_loss(particles, gamma, drawn.x, drawn.y).sum()

        def record_attention(theta):
            return {"loss": _attention_loss_of(evaluated(theta["particles"]), theta["gamma"])}

        theta, history = _descend(
            loss_fn,
            theta0,
            lr={"particles": float(eta) * init.shape[-2], "gamma": float(gamma_lr)},
            record=record_attention,
            **options,
        )
        return MeanFieldRun(theta["particles"], theta["gamma"], history, events=[])

    def static_fn(particles):
        if batch is None:
            return _static_loss(particles, data.f.flatten(0, 1), data.x.flatten(0, 1), k).sum()
        drawn = data._draw(seeds, batch, generator)
        x, f = drawn.x.flatten(-3, -2), drawn.f.flatten(-3, -2)  # (S, batch * n, .)
        return _static_loss(particles, f[0] if init.ndim == 2 else f, x[0] if init.ndim == 2 else x, k).sum()

    def record_static(particles):
        moments = evaluated(particles)
        extra = record(particles) if record is not None else {}
        if not isinstance(extra, Mapping):
            raise TypeError(f"record must return a dict of named quantities, got {type(extra).__name__}")
        if "loss" in extra:  # it would replace the training loss
            raise ValueError("record must not return 'loss', the name of the recorded training loss")
        return {"loss": _static_loss_of(moments)} | dict(extra)

    hook = None
    if model == "modified":
        dim = data.x.shape[-1]
        hook = BirthDeathPerturbation(
            lambda particles: _static_loss(particles, f_eval, x_eval, k),
            lambda count: init_particles(count, dim, k, generator).to(init.dtype),
            generator,
            patience=100,
            threshold=0.01,
            fraction=0.05,
            size=0.1,
            tolerance=tolerance,
            reference=_static_loss(init, f_eval, x_eval, k).detach(),
            birth_death=birth_death,
            perturbation=perturbation,
        )
    particles, history = _descend(
        static_fn, init, lr=float(eta) * init.shape[-2], record=record_static, hook=hook, **options
    )
    return MeanFieldRun(particles, None, history, hook.events if hook is not None else [])


# one label >= 0 per particle (a comment, not an autodoc member: Sphinx cannot resolve the jaxtyping type)
Labels = Annotated[Integer[Tensor, " M"], Is[lambda g: bool((g >= 0).all())]]
checks.describe(Labels, "an integer tensor", "an integer tensor of shape (M,) of labels >= 0")


@checked
def particle_spread(
    particles: Annotated[Float[Tensor, "M p"] | Float[Tensor, "S M p"], Rows, Finite], groups: Labels | None = None
) -> Tensor:
    """The particles' root-mean-square distance from their mean, or from the mean of their group when ``groups``
    (one integer label per particle) is given: zero at a configuration of coincident neurons (all equal, or equal
    within each group), the deviation that grows when the flow leaves such a saddle. One value per student for
    stacked particles ``(S, M, p)``."""
    if groups is None:
        centred = particles - particles.mean(-2, keepdim=True)
    else:
        checks.allocation("M * (largest label of groups + 1)", len(groups) * (int(groups.max()) + 1), particles.dtype)
        onehot = torch.nn.functional.one_hot(groups.to(particles.device, torch.long)).to(particles.dtype)  # (M, G)
        means = (onehot / onehot.sum(0).clamp_min(1)).mT @ particles  # (..., G, p); a label no particle has: 0
        centred = particles - onehot @ means
    return centred.square().sum((-1, -2)).sqrt() / particles.shape[-2] ** 0.5


@checked
def escape_steps(history: GDHistory) -> np.ndarray:
    """Per student, the first recorded step at which the loss is below half its starting value (``inf`` if it never
    is): shape ``(S,)``, or ``()`` for a single student."""
    if "loss" not in history.records:
        raise ValueError(f"history must have recorded 'loss', got {sorted(history.records)}")
    loss = np.asarray(history.records["loss"], dtype=float)
    if not np.isfinite(loss).all():  # a NaN is never below half the start: it would read as "never escaped"
        raise ValueError("history must have recorded finite losses, got a NaN or an infinity")
    below = loss < 0.5 * loss[0]
    first = history.steps[np.argmax(below, axis=0)].astype(float)
    return np.where(below.any(0), first, np.inf)


@checked
@dataclass
class SaddleEscape:
    """A log-linear fit ``spread ~ exp(offset + rate * t)`` of the particles' spread on the plateau of a run
    started near a saddle, as made by :func:`fit_saddle_escape`. ``plateau_end`` indexes the first recorded step
    at which the loss has fallen half-way; the fit uses the records ``window``."""

    steps: RealArray[np.ndarray, " T"]
    loss: Annotated[Float[np.ndarray, " T"], Finite]
    spread: Annotated[
        Float[np.ndarray, " T"], Finite, checks.says(Is[lambda a: bool((a >= 0).all())], "with values >= 0")
    ]
    plateau_end: Count
    rate: checks.Real
    offset: checks.Real
    r2: float

    def __post_init__(self) -> None:
        if not self.plateau_end <= len(self.steps):
            raise ValueError(f"plateau_end must index the records, 1 to {len(self.steps)}, got {self.plateau_end}")
        if not (self.spread[self.window] > 0).all():  # fitted on a log scale, as fit_saddle_escape requires
            raise ValueError(
                f"spread must be > 0 on the fitted window, records {self.window.start} to {self.plateau_end}"
            )

    @property
    def window(self) -> slice:
        """The records fitted: after the initial transient (the plateau's first third), up to the drop."""
        return slice(self.plateau_end // 3, self.plateau_end)

    @property
    def plateau_step(self) -> int:
        """The last recorded step of the plateau."""
        return self.steps[self.plateau_end - 1]

    @property
    def growth(self) -> float:
        """By how much the spread grew on the plateau."""
        return float(self.spread[self.plateau_end - 1] / self.spread[0]) if self.spread[0] > 0 else math.inf

    def fitted(self) -> np.ndarray:
        """The fitted exponential on the steps of ``window``."""
        return np.exp(self.offset + self.rate * self.steps[self.window])


@checked
def fit_saddle_escape(history: GDHistory, student: Size | None = None) -> SaddleEscape:
    """Fit the exponential growth of the spread (a record ``"spread"``, e.g. :func:`particle_spread`) on the loss
    plateau of a run (a record ``"loss"``), of one ``student`` where the records hold several: the plateau lasts
    until the loss has fallen half-way from its first to its last value. Raises a ValueError when it is shorter
    than 6 records, too short to fit."""
    if not {"loss", "spread"} <= set(history.records):
        raise ValueError(f"history must have recorded 'loss' and 'spread', got {sorted(history.records)}")
    loss, spread, steps = history.records["loss"], history.records["spread"], history.steps
    if loss.ndim == 2:
        if student is None or student >= loss.shape[1]:
            raise ValueError(f"student must say which of the history's {loss.shape[1]} students to fit, got {student}")
        loss, spread = loss[:, student], spread[:, student]
    if not (np.isfinite(loss).all() and np.isfinite(spread).all()):
        raise ValueError("history must hold finite 'loss' and 'spread' records, got a NaN or an infinity")
    plateau = loss > loss[0] - 0.5 * (loss[0] - loss[-1])
    plateau_end = int(np.argmin(plateau)) if not plateau.all() else len(plateau)
    if plateau_end < 6:
        raise ValueError(
            f"history must hold a loss plateau of at least 6 records to fit, but its loss went {loss[0]:.3f} -> "
            f"{loss[-1]:.3f} in {steps[-1]} steps"
        )
    grow = slice(plateau_end // 3, plateau_end)
    if not (spread[grow] > 0).all():  # a spread of 0 (coincident neurons that never split) has no logarithm
        raise ValueError(f"history's spread must be > 0 on the plateau to fit its growth, got {spread[grow].min()}")
    rate, offset = np.polyfit(steps[grow], np.log(spread[grow]), 1)
    r2 = np.corrcoef(steps[grow], np.log(spread[grow]))[0, 1] ** 2
    return SaddleEscape(steps, loss, spread, plateau_end, rate, offset, r2)


@checks.same_dtype("student", "rotation")
@checked
def mixture(
    student: Annotated[Float[Tensor, "M p"], Rows, Finite],
    teacher: Annotated[Float[Tensor, "Mo p"], Finite],
    s: Probability,
    rotation: Annotated[Float[Tensor, "k k"], Finite],
) -> Tensor:
    """Particles whose network is ``(1 - s) h_student + s R f``: the mixture ``(1 - s) mu + s R#mu_o`` of the
    student's particles ``(M, k + d + 1)`` and the teacher's ``(M_o, k + d + 1)`` rotated by ``R`` (``(k, k)``),
    realized by concatenating the two sets with output weights scaled by ``(1 - s)`` and ``s``."""
    k = rotation.shape[0]
    eye = torch.eye(k, dtype=rotation.dtype, device=rotation.device)
    if not torch.allclose(rotation @ rotation.T, eye, atol=1e-4):  # a scaled R would scale the teacher's output
        raise ValueError("rotation must be orthogonal (R R^T = I)")
    if student.shape[1] <= k + 1:
        raise ValueError(f"student must have width k + d + 1 > k + 1 with the rotation's k = {k}")
    t = teacher.to(student.device, student.dtype)
    t = torch.cat([t[:, :k] @ rotation.T, t[:, k:]], 1)
    total = len(student) + len(t)
    return torch.cat(
        [
            torch.cat([student[:, :k] * (1 - s) * total / len(student), student[:, k:]], 1),
            torch.cat([t[:, :k] * s * total / len(t), t[:, k:]], 1),
        ]
    )


@checks.same_dtype("student", "rotation", "targets", "x")
@checked
def path_losses(
    student: Annotated[Float[Tensor, "M p"], Rows, Finite],
    teacher: Annotated[Float[Tensor, "Mo p"], Finite],
    rotation: Annotated[Float[Tensor, "k k"], Finite],
    s_values: PathPoints,
    targets: Annotated[Float[Tensor, "K ko"], Finite],
    x: Annotated[Float[Tensor, "K p-k-1"], Finite],
) -> np.ndarray:
    """The static loss of :func:`mixture` ``(student, teacher, s, rotation)`` at each ``s`` of ``s_values`` (each
    checked there): the landscape along the path from ``mu`` to the rotated teacher ``R#mu_o``. The student's
    ``k`` is the rotation's (so ``x``'s width is ``d = p - k - 1``)."""
    k = _student_k(student, x, "student")
    return np.array([_static_loss(mixture(student, teacher, s, rotation), targets, x, k).item() for s in s_values])


@checks.finite_result("g")
@checks.same_dtype("particles", "g", "x")
@checked
def readout_error(
    particles: Particles,
    g: Annotated[Float[Tensor, " K"] | Float[Tensor, "K J"], Finite],
    x: Inputs,
    centered: bool = False,
) -> np.ndarray:
    """The error of the best linear readout of ``g`` (shape ``(K,)``, values at the inputs ``x``, ``(K, d)``) from
    the features of ``particles``, relative to ``E g^2`` (the error of predicting zero): what linear attention with
    long prompts leaves of the task ``y = g(x)`` (the paper's Proposition 2.3; no constant, as the paper's linear
    attention has none). With ``centered`` the readout may add a constant and the error is relative to ``Var g``
    (the error of predicting the mean): what the features explain beyond a constant. One value per student for
    stacked particles ``(S, M, p)``; ``g`` of shape ``(K, J)`` gives one value per column (a last axis of ``J``),
    each the error of reading that column alone, from one evaluation of the features. A column of ``g`` that is 0
    everywhere (constant, with ``centered``) has no error to be relative to: a ValueError names it."""
    k = _student_k(particles, x)
    columns = g[:, None] if g.ndim == 1 else g
    targets, _, cross, cov = _moments(particles, columns, x, k, centered)
    explained = _explained(cross, cov).sum(-1)  # one per column
    scale = columns.var(0, correction=0) if centered else columns.square().mean(0)
    # exactly constant (or 0), not "small": a column of tiny but real variation is informative, and float32 rounds
    # the variance of a constant to a few eps^2 rather than to 0
    if bool((flat := (columns == (columns[:1] if centered else 0)).all(0)).any()):
        what = "constant over the K inputs (Var g = 0, centered=True)" if centered else "0 at every input (E g^2 = 0)"
        where = "" if g.ndim == 1 else f", but its column(s) {flat.nonzero().flatten().tolist()} are"
        raise ValueError(f"g must not be {what}{where}")
    errors = (targets.square().mean(-2) - explained) / scale
    return (errors[..., 0] if g.ndim == 1 else errors).detach().cpu().numpy()
