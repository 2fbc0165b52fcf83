"""Chapter 2's population objective: a mean-field MLP of sigmoid neurons feeding linear attention (Kim and Suzuki 2024).

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
the paper's Algorithm 1 (:class:`BirthDeathPerturbation`). Expectations are averages over a fixed sample of inputs.

:func:`run_gradient_descent` trains any of the three models (:data:`MODELS`); :func:`fit_saddle_escape` measures
the exponential escape from a saddle, :func:`path_losses` the loss along the mixture path towards a rotated teacher,
and :func:`readout_error` what a student's features explain of another function of the inputs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from icl_utils import checks
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.tasks.features import sigmoid_network


def init_particles(width: int, dim: int, k: int, generator: torch.Generator, scale: float = 1.0) -> Tensor:
    """``width`` particles from the initial distribution ``rho_0``: ``a ~ N(0, I_k)``, ``w ~ N(0, (scale^2/d) I)``,
    ``b ~ N(0, 1)``; shape ``(width, k + d + 1)``, on the generator's device."""
    width, dim, k = (checks.positive_int(n, v) for n, v in (("width", width), ("dim", dim), ("k", k)))
    scale = checks.nonnegative_float("scale", scale, strict=True)
    generator = checks.generator(generator)
    z = torch.randn(width, k + dim + 1, generator=generator, device=generator.device)
    z[:, k:-1] *= scale / dim**0.5
    return z


def _moments(particles: Tensor, targets: Tensor, x: Tensor, k: int,
             centered: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(targets, h, Sigma_{o,mu}, Sigma_{mu,mu})`` on the sample ``x`` with teacher features ``targets`` (shape
    ``(K, k_o)``); with ``centered`` both have their sample means removed first."""
    if not isinstance(targets, Tensor) or targets.ndim != 2 or not isinstance(x, Tensor) or len(targets) != len(x):
        raise ValueError("targets and x must be tensors with one row per sample input")
    h = sigmoid_network(particles, x, k)
    if centered:
        h, targets = h - h.mean(0), targets - targets.mean(0)
    return targets, h, targets.T @ h / len(x), h.T @ h / len(x)


def attention_loss(particles: Tensor, gamma: Tensor, targets: Tensor, x: Tensor) -> Tensor:
    """``L(mu, Gamma) = E || f - Sigma_{o,mu} Gamma h_mu ||^2``, the ICL loss of the attention model with infinitely
    long prompts, averaged over tasks ``v ~ N(0, I)``; ``targets = f(x)`` on the sample ``x``."""
    k = gamma.shape[0] if isinstance(gamma, Tensor) and gamma.ndim == 2 else 0
    if k == 0 or tuple(gamma.shape) != (k, k):
        raise ValueError("gamma must be a square (k, k) tensor")
    _, h, cross, _ = _moments(particles, targets, x, k)
    return (targets - h @ (cross @ gamma).T).square().sum(1).mean()


def optimal_gamma(particles: Tensor, x: Tensor, k: int, ridge: float = 1e-8) -> Tensor:
    """The fast timescale's limit ``Gamma = (Sigma_{mu,mu} + ridge * tr(Sigma_{mu,mu})/k I)^-1``."""
    h = sigmoid_network(particles, x, k)
    cov = h.T @ h / len(x)
    return torch.linalg.inv(_regularized(cov, ridge))


def _regularized(cov: Tensor, ridge: float) -> Tensor:
    ridge = checks.nonnegative_float("ridge", ridge, strict=True)
    k = cov.shape[0]
    evals = torch.linalg.eigvalsh(cov.detach())
    if evals.min() < 1e3 * ridge * evals.max().clamp(min=1e-30):
        # No changing numbers in the text: Python shows a warning once per call site and text, and a text with
        # the eigenvalues in it would repeat at every step of a run.
        warnings.warn(
            f"Sigma_mu,mu is nearly singular: the student's features are nearly collinear; the inverse uses a ridge "
            f"of {ridge:g} times the mean eigenvalue", RuntimeWarning, stacklevel=3)
    return cov + ridge * torch.trace(cov) / k * torch.eye(k, dtype=cov.dtype, device=cov.device)


def static_loss(particles: Tensor, targets: Tensor, x: Tensor, k: int, ridge: float = 1e-8,
                centered: bool = False) -> Tensor:
    """The two-timescale objective ``L(mu) = E ||f||^2 - tr(Sigma_{o,mu} Sigma_{mu,mu}^-1 Sigma_{mu,o})``: the
    attention loss at the optimal ``Gamma``, which is the error of the best linear readout of ``targets`` from the
    student's features. With ``centered`` the readout may also add a constant (means removed from both). A (nearly)
    singular ``Sigma_{mu,mu}`` gets a small ridge and a warning instead of a NaN."""
    targets, _, cross, cov = _moments(particles, targets, x, k, checks.boolean("centered", centered))
    explained = torch.trace(cross @ torch.linalg.solve(_regularized(cov, ridge), cross.T))
    return targets.square().sum(1).mean() - explained


def gp_perturbation(particles: Tensor, generator: torch.Generator, size: float, bandwidth: float) -> Tensor:
    """A displacement of every particle drawn from a vector-valued Gaussian process ``xi ~ GP(0, K(theta, theta') I)``
    with the Gaussian kernel of ``bandwidth``, evaluated at the particles: nearby particles move together, as a
    smooth velocity field on parameter space would move them (the paper's Definition E.8). Scaled by ``size``."""
    size = checks.nonnegative_float("size", size, strict=True)
    bandwidth = checks.nonnegative_float("bandwidth", bandwidth, strict=True)
    p = particles.detach().double()
    kernel = torch.exp(-torch.cdist(p, p).square() / (2 * bandwidth**2))
    root = torch.linalg.cholesky(kernel + 1e-6 * torch.eye(len(p), dtype=p.dtype, device=p.device))
    z = torch.randn(p.shape, generator=generator, device=generator.device, dtype=p.dtype)
    return (size * root @ z).to(particles.dtype)


@dataclass
class BirthDeathPerturbation:
    """The modified dynamics of the paper's Algorithm 1, as a ``hook`` for
    :func:`icl_utils.gd.gradient_descent`: when the loss has not dropped by ``threshold`` (relative) over the last
    ``patience`` steps, a ``fraction`` of the particles, chosen at random, are replaced by fresh draws from the
    initial distribution (birth-death) and every particle is displaced by a Gaussian-process perturbation; then the
    dynamics wait another ``patience`` steps. Once the loss is below ``tolerance`` (the algorithm's convergence
    error epsilon) it no longer intervenes: near a minimum the loss always stalls, and a perturbation there only
    undoes progress. ``events`` records the steps at which it intervened."""

    sample_init: Callable[[int], Tensor]  # count -> fresh particles from rho_0
    generator: torch.Generator
    patience: int = 100
    threshold: float = 0.01
    fraction: float = 0.05
    size: float = 0.1
    bandwidth: float = 1.0
    tolerance: float = 0.0
    events: list[int] = field(default_factory=list)
    _losses: list[float] = field(default_factory=list, repr=False)
    _last: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        # Checked here, not when the first intervention fires mid-run.
        if not callable(self.sample_init):
            raise TypeError(f"sample_init must be callable as sample_init(count), got {type(self.sample_init).__name__}")
        checks.generator(self.generator)
        self.size = checks.nonnegative_float("size", self.size, strict=True)
        self.bandwidth = checks.nonnegative_float("bandwidth", self.bandwidth, strict=True)
        self.patience = checks.positive_int("patience", self.patience)
        self.threshold = checks.nonnegative_float("threshold", self.threshold)
        self.tolerance = checks.nonnegative_float("tolerance", self.tolerance)
        self.fraction = checks.nonnegative_float("fraction", self.fraction)
        if self.fraction > 1:
            raise ValueError(f"fraction must be in [0, 1], got {self.fraction}")

    def __call__(self, step: int, particles: Tensor, loss: float) -> None:
        self._losses.append(loss)
        if step - self._last < self.patience or len(self._losses) <= self.patience or loss < self.tolerance:
            return
        before = self._losses[-self.patience - 1]
        if loss > (1 - self.threshold) * before:
            count = math.ceil(self.fraction * len(particles))
            dev = particles.device
            idx = torch.randperm(len(particles), generator=self.generator, device=self.generator.device)[:count].to(dev)
            particles[idx] = self.sample_init(count).to(particles.dtype)
            particles += gp_perturbation(particles, self.generator, self.size, self.bandwidth)
            self.events.append(step)
            self._last = step


#: The three models of the chapter: linear attention with Gamma trained jointly, the static (two-timescale) model,
#: and the modified dynamics with birth-death and perturbation.
MODELS = ("attention", "static", "modified")


def _student_k(particles: object, x: object) -> int:
    """The student's output dimension ``k``, read off particles of width ``k + d + 1`` and inputs ``x`` of width d."""
    if not isinstance(x, Tensor) or x.ndim != 2:
        raise ValueError("x must be a tensor of shape (K, d)")
    if not isinstance(particles, Tensor) or particles.ndim != 2 or particles.shape[1] < x.shape[1] + 2:
        raise ValueError(f"particles must be a tensor of shape (M, k + d + 1) with d = {x.shape[1]} and k >= 1")
    return particles.shape[1] - x.shape[1] - 1


@dataclass
class MeanFieldRun:
    """What :func:`run_gradient_descent` returns: the final particles (and ``Gamma`` for the attention model, else
    None), the history of :func:`icl_utils.gd.gradient_descent`, and the steps at which the modified dynamics
    intervened (empty for the other two models)."""

    particles: Tensor
    gamma: Tensor | None
    history: GDHistory
    events: list[int]

    @property
    def steps(self) -> np.ndarray:
        return self.history.steps

    @property
    def losses(self) -> np.ndarray:
        """The recorded loss, one value per recorded step."""
        return self.history.records["loss"]


def run_gradient_descent(model: str, targets: Tensor, x: Tensor, init: Tensor, *, steps: int, eta: float,
                         gamma_lr: float | None = None, generator: torch.Generator | None = None,
                         tolerance: float = 0.0, record=None, record_every: int = 20, progress: bool = True,
                         desc: str | None = None) -> MeanFieldRun:
    """Full-batch gradient descent of one of the three models of :data:`MODELS` from the particles ``init``
    (shape ``(M, k + d + 1)``) on the sample ``x`` (``(K, d)``) with teacher features ``targets`` (``(K, k_o)``).

    Each particle moves by ``eta * M`` times its gradient (the mean-field time scaling, which makes the dynamics of
    the cloud independent of ``M``).

    - ``"attention"``: particles and ``Gamma`` (from ``I_k``, step ``gamma_lr``) jointly on :func:`attention_loss`;
    - ``"static"``: particles alone on :func:`static_loss`, ``Gamma`` at its optimum;
    - ``"modified"``: the static model with :class:`BirthDeathPerturbation` (patience 100, threshold 1%, 5% of the
      particles reborn from :func:`init_particles` with ``generator``, perturbation size 0.1, silent below the
      loss ``tolerance``).

    ``record(particles)`` (static and modified models) returns the quantities to keep every ``record_every`` steps;
    by default the loss.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    k = _student_k(init, x)
    if not isinstance(targets, Tensor) or targets.ndim != 2 or len(targets) != len(x):
        raise ValueError("targets must be a tensor of shape (K, k_o), one row per row of x")
    eta = checks.nonnegative_float("eta", eta, strict=True)
    desc = model if desc is None else desc
    options = dict(steps=steps, record_every=record_every, progress=progress, desc=desc)
    if model == "attention":
        if record is not None:
            raise ValueError("record is for the static and modified models; the attention model records its loss")
        if gamma_lr is None:
            raise ValueError("gamma_lr must be given for the attention model")
        gamma_lr = checks.nonnegative_float("gamma_lr", gamma_lr, strict=True)
        theta0 = {"particles": init, "gamma": torch.eye(k, dtype=init.dtype, device=init.device)}
        theta, history = gradient_descent(
            lambda theta: attention_loss(theta["particles"], theta["gamma"], targets, x), theta0,
            lr={"particles": eta * len(init), "gamma": gamma_lr}, **options)
        return MeanFieldRun(theta["particles"], theta["gamma"], history, events=[])
    hook = None
    if model == "modified":
        generator = checks.generator(generator)
        dim = x.shape[1]
        hook = BirthDeathPerturbation(lambda count: init_particles(count, dim, k, generator).to(init.dtype), generator,
                                      patience=100, threshold=0.01, fraction=0.05, size=0.1, tolerance=tolerance)
    particles, history = gradient_descent(lambda theta: static_loss(theta, targets, x, k), init,
                                          lr=eta * len(init), record=record, hook=hook, **options)
    return MeanFieldRun(particles, None, history, hook.events if hook is not None else [])


def particle_spread(particles: Tensor) -> Tensor:
    """The particles' root-mean-square distance from their mean: zero at the symmetric configuration (all neurons
    equal), the deviation that grows when the flow leaves that saddle."""
    if not isinstance(particles, Tensor) or particles.ndim != 2:
        raise ValueError("particles must be a tensor of shape (M, p)")
    return (particles - particles.mean(0)).norm() / len(particles) ** 0.5


def escape_step(history: GDHistory) -> int | None:
    """The first recorded step at which the loss is below half its starting value (None if it never is)."""
    if not isinstance(history, GDHistory) or "loss" not in history.records:
        raise TypeError("history must be an icl_utils.gd.GDHistory that recorded the loss")
    below = history.records["loss"] < 0.5 * history.records["loss"][0]
    return int(history.steps[np.argmax(below)]) if below.any() else None


@dataclass
class SaddleEscape:
    """A log-linear fit ``spread ~ exp(offset + rate * t)`` of the particles' spread on the plateau of a run
    started near a saddle, as made by :func:`fit_saddle_escape`. ``plateau_end`` indexes the first recorded step
    at which the loss has fallen half-way; the fit uses the records ``window``."""

    steps: np.ndarray
    loss: np.ndarray
    spread: np.ndarray
    plateau_end: int
    rate: float
    offset: float
    r2: float

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
        return self.spread[self.plateau_end - 1] / self.spread[0]

    def fitted(self) -> np.ndarray:
        """The fitted exponential on the steps of ``window``."""
        return np.exp(self.offset + self.rate * self.steps[self.window])


def fit_saddle_escape(history: GDHistory) -> SaddleEscape:
    """Fit the exponential growth of the spread (a record ``"spread"``, e.g. :func:`particle_spread`) on the loss
    plateau of a run (a record ``"loss"``): the plateau lasts until the loss has fallen half-way from its first to
    its last value. Raises a ValueError when it is shorter than 6 records, too short to fit."""
    if not isinstance(history, GDHistory) or not {"loss", "spread"} <= set(history.records):
        raise TypeError("history must be an icl_utils.gd.GDHistory that recorded 'loss' and 'spread'")
    loss, spread, steps = history.records["loss"], history.records["spread"], history.steps
    plateau = loss > loss[0] - 0.5 * (loss[0] - loss[-1])
    plateau_end = int(np.argmin(plateau)) if not plateau.all() else len(plateau)
    if plateau_end < 6:
        raise ValueError(f"no plateau to fit: the loss went {loss[0]:.3f} -> {loss[-1]:.3f} in {steps[-1]} steps")
    grow = slice(plateau_end // 3, plateau_end)
    rate, offset = np.polyfit(steps[grow], np.log(spread[grow]), 1)
    r2 = np.corrcoef(steps[grow], np.log(spread[grow]))[0, 1] ** 2
    return SaddleEscape(steps, loss, spread, plateau_end, rate, offset, r2)


def mixture(student: Tensor, teacher: Tensor, s: float, rotation: Tensor) -> Tensor:
    """Particles whose network is ``(1 - s) h_student + s R f``: the mixture ``(1 - s) mu + s R#mu_o`` of the
    student's particles ``(M, k + d + 1)`` and the teacher's ``(M_o, k + d + 1)`` rotated by ``R`` (``(k, k)``),
    realized by concatenating the two sets with output weights scaled by ``(1 - s)`` and ``s``."""
    k = rotation.shape[0] if isinstance(rotation, Tensor) and rotation.ndim == 2 else 0
    if k == 0 or tuple(rotation.shape) != (k, k):
        raise ValueError("rotation must be a square (k, k) tensor")
    for name, p in (("student", student), ("teacher", teacher)):
        if not isinstance(p, Tensor) or p.ndim != 2 or p.shape[1] <= k + 1:
            raise ValueError(f"{name} must be a tensor of shape (count, k + d + 1) with k = {k}")
    if student.shape[1] != teacher.shape[1]:
        raise ValueError("student and teacher particles must have the same width k + d + 1")
    t = teacher.to(student.device, student.dtype)
    t = torch.cat([t[:, :k] @ rotation.T, t[:, k:]], 1)
    total = len(student) + len(t)
    return torch.cat([torch.cat([student[:, :k] * (1 - s) * total / len(student), student[:, k:]], 1),
                      torch.cat([t[:, :k] * s * total / len(t), t[:, k:]], 1)])


def path_losses(student: Tensor, teacher: Tensor, rotation: Tensor, s_values: np.ndarray, targets: Tensor,
                x: Tensor) -> np.ndarray:
    """The static loss of :func:`mixture` ``(student, teacher, s, rotation)`` at each ``s`` of ``s_values``: the
    landscape along the path from ``mu`` to the rotated teacher ``R#mu_o``."""
    k = _student_k(student, x)
    return np.array([static_loss(mixture(student, teacher, s, rotation), targets, x, k).item() for s in s_values])


def readout_error(particles: Tensor, g: Tensor, x: Tensor) -> float:
    """The error of the best affine readout of ``g`` (shape ``(K,)``, values at the inputs ``x``, ``(K, d)``) from
    the features of ``particles``, relative to the variance of ``g``: what linear attention with long prompts
    leaves of the task ``y = g(x)``."""
    k = _student_k(particles, x)
    if not isinstance(g, Tensor) or g.shape != (len(x),):
        raise ValueError(f"g must be a tensor of shape ({len(x)},), one value per row of x")
    return (static_loss(particles, g[:, None], x, k, centered=True) / g.var()).item()
