"""Gradient descent on the exact ICL risk of GD-beta (chapter 4; Zhang, Wu and Bartlett 2024).

The risk :func:`icl_utils.exact.gd_beta_risk` of one gradient step from ``beta0`` with matrix step ``Gamma`` is a
polynomial of degree four in ``(beta0, Gamma)`` and not convex (:func:`gd_beta_hessian` has negative eigenvalues at
the origin), yet gradient flow on it reaches the global optimum ``(beta*, Gamma*)``; :func:`gd_beta_flow` runs it
with a small step, on the parameters as named blocks ``{"beta0": (d,), "gamma": (d, d)}``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icl_utils import checks
from icl_utils.exact import gd_beta_risk, optimal_gd_step
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.tasks.linear import LinearRegression


def _dim(task: object) -> int:
    """The dimension of a Gaussian linear-regression task family, the only kind GD-beta's exact risk covers."""
    if not isinstance(task, LinearRegression):
        raise TypeError(f"task must be a LinearRegression, got {type(task).__name__}")
    return task.dim


def gd_beta_hessian(task: object, n: int, beta0: Tensor, gamma: Tensor) -> Tensor:
    """The Hessian of :func:`~icl_utils.exact.gd_beta_risk` in ``(beta0, Gamma)`` at one point, shape ``(d + d^2, d +
    d^2)``, float64.

    Coordinates are ``beta0`` first, then ``Gamma`` row by row. The risk is a polynomial of degree four and is not
    convex: at the origin this Hessian has negative eigenvalues.
    """
    d = _dim(task)
    beta0, gamma = checks.vector("beta0", beta0, d), checks.matrix("gamma", gamma, d)

    def flat_risk(theta: Tensor) -> Tensor:
        return gd_beta_risk(task, n, theta[:d], theta[d:].reshape(d, d))

    return torch.autograd.functional.hessian(flat_risk, torch.cat([beta0, gamma.flatten()]))


def gd_beta_flow(
    task: object,
    n: int,
    init: dict[str, Tensor],
    *,
    steps: int,
    lr: float,
    record_every: int = 1,
    progress: bool = False,
) -> GDHistory:
    """Small-step gradient descent (a proxy for gradient flow) on the exact GD-beta risk
    :func:`~icl_utils.exact.gd_beta_risk`.

    ``init`` is ``{"beta0": (d,), "gamma": (d, d)}``; the run is :func:`icl_utils.gd.gradient_descent` with step
    ``lr`` on both blocks. Every ``record_every`` steps it records the ``"excess risk"`` over the optimum
    ``(beta*, Gamma*)`` of Theorem 5.2 and the ``"parameter error"``, the Euclidean distance of ``(beta0, Gamma)``
    to that optimum.
    """
    d = _dim(task)
    if not isinstance(init, dict) or set(init) != {"beta0", "gamma"}:
        raise ValueError('init must be a dict {"beta0": (d,) tensor, "gamma": (d, d) tensor}')
    init = {
        "beta0": checks.vector("init['beta0']", init["beta0"], d),
        "gamma": checks.matrix("init['gamma']", init["gamma"], d),
    }
    mean, gamma_star = task.mean(), optimal_gd_step(task, n)
    best = gd_beta_risk(task, n, mean, gamma_star).item()

    def loss(theta: dict[str, Tensor]) -> Tensor:
        return gd_beta_risk(task, n, theta["beta0"], theta["gamma"])

    def distances(theta: dict[str, Tensor]) -> dict[str, Tensor]:
        error = (theta["beta0"] - mean).square().sum() + (theta["gamma"] - gamma_star).square().sum()
        return {"excess risk": loss(theta) - best, "parameter error": torch.sqrt(error)}

    _, history = gradient_descent(
        loss,
        init,
        steps=steps,
        lr=lr,
        record=distances,
        record_every=record_every,
        progress=progress,
        desc="GD-beta flow",
    )
    return history
