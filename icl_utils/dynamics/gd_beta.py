"""Gradient descent on the exact ICL risk of GD-beta (chapter 5; Zhang, Wu and Bartlett 2024).

The risk :func:`icl_utils.exact.gd_beta_risk` of one gradient step from ``beta0`` with matrix step ``Gamma`` is a
polynomial of degree four in ``(beta0, Gamma)`` and not convex (:func:`gd_beta_hessian` has negative eigenvalues at
the origin), yet gradient flow on it reaches the global optimum ``(beta*, Gamma*)``; :func:`gd_beta_flow` runs it
with a small step, on the parameters as named blocks ``{"beta0": (d,), "gamma": (d, d)}``.
"""

from __future__ import annotations

from typing import Annotated

import torch
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks
from icl_utils.checks import Count, Positive, Steps, checked
from icl_utils.exact import gd_beta_risk, optimal_gd_step
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.tasks.linear import LinearRegression


@checked
def _point(
    task: LinearRegression,
    beta0: Annotated[Float[Tensor, " d"], checks.Finite],
    gamma: Annotated[Float[Tensor, "d d"], checks.Finite],
) -> tuple[Tensor, Tensor]:
    """A point ``(beta0, Gamma)`` of the risk, of ``task``'s dimension, as float64 on the CPU (Gaussian linear
    regression is the only task family whose GD-beta risk is exact)."""
    if len(beta0) != task.dim:
        raise ValueError(f"beta0 must have the task's dimension {task.dim}, got {len(beta0)}")
    return beta0.double().cpu(), gamma.double().cpu()


#: the most coordinates of a Hessian by autograd (task.dim 44): one backward pass each, at O(d^3) apiece
_MAX_HESSIAN = 2048


@checks.finite_result("beta0", "gamma")
@checked
def gd_beta_hessian(task: LinearRegression, n: Count, beta0: Tensor, gamma: Tensor) -> Tensor:
    """The Hessian of :func:`~icl_utils.exact.gd_beta_risk` in ``(beta0, Gamma)`` at one point, shape ``(d + d^2, d +
    d^2)``, float64.

    Coordinates are ``beta0`` first, then ``Gamma`` row by row. The risk is a polynomial of degree four and is not
    convex: at the origin this Hessian has negative eigenvalues. ``beta0`` is ``(d,)`` and ``gamma`` ``(d, d)``,
    finite floats.
    """
    d = task.dim
    checks.allocation("(task.dim + task.dim^2)^2 (the Hessian)", (d + d * d) ** 2, torch.float64)
    if d + d * d > _MAX_HESSIAN:  # one backward pass per coordinate, each of O(d^3)
        raise ValueError(f"task must have dim + dim^2 <= {_MAX_HESSIAN} (one backward pass each), got dim = {d}")
    beta0, gamma = _point(task, beta0, gamma)

    def flat_risk(theta: Tensor) -> Tensor:
        return gd_beta_risk(task, n, theta[:d], theta[d:].reshape(d, d))

    return torch.autograd.functional.hessian(flat_risk, torch.cat([beta0, gamma.flatten()]))


@checked
def gd_beta_flow(
    task: LinearRegression,
    n: Count,
    init: dict,
    *,
    steps: Steps,
    lr: Positive,
    record_every: Count = 1,
    progress: bool = False,
) -> GDHistory:
    """Small-step gradient descent (a proxy for gradient flow) on the exact GD-beta risk
    :func:`~icl_utils.exact.gd_beta_risk`.

    ``init`` is ``{"beta0": (d,), "gamma": (d, d)}``; the run is :func:`icl_utils.gd.gradient_descent` with step
    ``lr`` on both blocks. Every ``record_every`` steps it records the ``"excess risk"`` over the optimum
    ``(beta*, Gamma*)`` of Theorem 5.2 and the ``"parameter error"``, the Euclidean distance of ``(beta0, Gamma)``
    to that optimum.
    """
    if set(init) != {"beta0", "gamma"}:
        raise ValueError(f'init must be a dict {{"beta0": (d,) tensor, "gamma": (d, d) tensor}}, got keys {set(init)}')
    init = dict(zip(("beta0", "gamma"), _point(task, **init)))  # its blocks checked as gd_beta_hessian's point
    # each step the risk (24 d^3) and its gradient (about twice that)
    checks.work(
        f"gd_beta_flow over steps = {steps} at task.dim = {task.dim} (72 dim^3 a step)", 72 * steps * task.dim**3
    )
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
