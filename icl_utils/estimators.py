"""Estimators that see one prompt at a time, batched over prompts.

Each takes a :class:`~icl_utils.prompts.Prompt` (and its own parameters) and returns the prediction at the query,
shape ``(B,)``. Linear algebra runs in float64 and the result comes back in the prompt's dtype. An empty context
(``n = 0``) predicts the prior guess: zero, or the prior mean for the Bayes estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from icl_utils import checks, config
from icl_utils.checks import Count, NonNegative, Positive, Real, Seed, Steps, Width, checked
from icl_utils.prompts import Prompt


def _predict_linear(prompt: Prompt, w: Tensor) -> Tensor:
    """``<w, x_query>`` for float64 weights ``w`` of shape ``(B, d)``, in the prompt's dtype."""
    return (w * prompt.x_query.double()).sum(-1).to(prompt.x.dtype)


@checks.finite_result("prompt")
def least_squares(prompt: Prompt) -> Tensor:
    """Minimum-norm least squares: ``w = X^+ y`` (the interpolant of least norm when ``n < d``)."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    n, d = prompt.n_context, prompt.dim
    checks.work(
        f"least_squares on a prompt of n = {n} examples of dim = {d} (a pseudo-inverse, 30 n d min(n, d))",
        checks.svd_flops(n, d),
    )
    x = prompt.x.double()
    w = (torch.linalg.pinv(x) @ prompt.y.double()[..., None])[..., 0]
    return _predict_linear(prompt, w)


@checks.finite_result("prompt")
@checked
def ridge(prompt: Prompt, lam: Positive) -> Tensor:
    """Ridge regression ``w = (X^T X + lam I)^{-1} X^T y`` (the penalty is on the sum, not the mean, of losses)."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    n, d = prompt.n_context, prompt.dim
    checks.work(
        f"ridge on a prompt of n = {n} examples of dim = {d} (X^T X and a solve, 2 n d^2 + 4 d^3)",
        2 * n * d**2 + 4 * d**3,
    )
    x, y = prompt.x.double(), prompt.y.double()
    checks.warn_if_ill_conditioned("lam", lam, x.square().sum((1, 2)))
    gram = x.transpose(1, 2) @ x + lam * torch.eye(prompt.dim, dtype=x.dtype, device=x.device)
    try:
        w = torch.linalg.solve(gram, (x.transpose(1, 2) @ y[..., None]))[..., 0]
    except torch.linalg.LinAlgError as err:  # fewer examples than dimensions, and lam lost in rounding
        raise ValueError(f"lam = {lam} is too small for these prompts: X^T X + lam I is singular ({err})") from None
    return _predict_linear(prompt, w)


@checks.finite_result("prompt", "prior_mean")
@checked
def bayes_linear_regression(
    prompt: Prompt,
    prior_mean: Annotated[Float[Tensor, " {prompt.dim}"], checks.Finite],
    prior_cov: Tensor | np.ndarray,
    noise_var: NonNegative,
) -> Tensor:
    """The posterior mean of ``<w, x_query>`` under ``w ~ N(prior_mean, prior_cov)`` and Gaussian label noise.

    In kernel form, ``m + Psi X^T (X Psi X^T + noise_var I)^{-1} (y - X m)``, which needs no inverse of
    ``Psi`` and so allows a singular prior covariance; with more examples than dimensions (and noise) the same
    formula is evaluated in the primal, a ``d x d`` solve per prompt. This is the Bayes-optimal prediction under
    squared loss.
    With ``noise_var = 0`` the inverse becomes a pseudo-inverse: the noiseless limit, which for ``Psi = I`` is
    minimum-norm least squares.
    """
    prompt = checks.prompt(prompt)
    if noise_var == 0 or prompt.n_context <= prompt.dim:  # the kernel form holds an n x n matrix per prompt
        checks.allocation("prompt's B x n x n kernels", prompt.batch_size * prompt.n_context**2, torch.float64)
    n, d = prompt.n_context, prompt.dim
    # prior_cov's eigenvalues (4 d^3) and X Psi X^T or L X^T X L (4 n d^2); then, with noise and n > d, Psi's square
    # root and a d x d solve, else an n x n solve (a pseudo-inverse if noiseless)
    primal = noise_var > 0 and n > d
    checks.work(
        f"bayes_linear_regression on a prompt of n = {n} examples of dim = {d} (4 n d^2 + 4 d^3, then 20 d^3 with "
        "noise and n > d, else 2 n^2 d + 4 n^3 (12 n^3 noiseless))",
        4 * n * d**2 + 4 * d**3 + (20 * d**3 if primal else 2 * n**2 * d + (4 if noise_var > 0 else 12) * n**3),
    )
    dev = prompt.x.device
    mean = prior_mean.double().to(dev)
    cov = checks.psd_matrix("prior_cov", prior_cov, prompt.dim).to(dev)
    if prompt.n_context == 0:
        return _predict_linear(prompt, mean.expand(prompt.batch_size, -1))
    x, y = prompt.x.double(), prompt.y.double()
    resid = y - x @ mean
    if primal:
        # The same estimator in the primal, a d x d solve instead of n x n: with L = Psi^(1/2),
        # Psi X^T (X Psi X^T + s I)^-1 = L (L X^T X L + s I)^-1 L X^T (push-through identity).
        root = checks.psd_sqrt(cov, "prior_cov")
        gram = root @ x.transpose(1, 2) @ x @ root
        checks.warn_if_ill_conditioned("noise_var", noise_var, gram.diagonal(dim1=1, dim2=2).sum(-1))
        gram = gram + noise_var * torch.eye(prompt.dim, dtype=x.dtype, device=dev)
        rhs = root @ (x.transpose(1, 2) @ resid[..., None])
        w = mean + (root @ torch.linalg.solve(gram, rhs))[..., 0]
        return _predict_linear(prompt, w)
    kernel = x @ cov @ x.transpose(1, 2)
    if noise_var > 0:
        checks.warn_if_ill_conditioned("noise_var", noise_var, kernel.diagonal(dim1=1, dim2=2).sum(-1))
    kernel = kernel + noise_var * torch.eye(prompt.n_context, dtype=x.dtype, device=dev)
    solve = torch.linalg.solve if noise_var > 0 else (lambda a, b: torch.linalg.pinv(a, hermitian=True) @ b)
    alpha = solve(kernel, resid[..., None])
    w = mean + ((cov @ x.transpose(1, 2)) @ alpha)[..., 0]
    return _predict_linear(prompt, w)


@checked
def discrete_posterior_mean(
    prompt: Prompt,
    pool: Annotated[Float[Tensor, "M {prompt.dim}"], checks.NonEmpty, checks.Finite],
    noise_var: Positive,
) -> Tensor:
    """The Bayes posterior mean when the task's weights are uniform on a finite pool ``pool`` (shape ``(M, d)``)
    and the noise is Gaussian with variance ``noise_var``: the pool members are weighted by their likelihood on the
    context, ``p_m ∝ exp(-||y - X w_m||^2 / (2 sigma^2))``, and the prediction is ``sum_m p_m <w_m, x_query>``.
    Raventós et al. (2023) call it dMMSE: the optimum for the pretraining pool, a poor guess on a new task."""
    prompt = checks.prompt(prompt)
    pool = pool.to(prompt.x.device, torch.float64)
    # A softmax over the pool computed in a stream: the residuals of a block of pool members on a chunk of prompts,
    # (B', n, M'), are the largest array; no (B, M) array is built. Sums are kept relative to the least squared
    # error so far (rescaled when it drops), so the weights never overflow and a tiny noise_var tends to the
    # member of least error instead of 0/0.
    members = min(len(pool), config.prompts_per_chunk(prompt.n_context + 1))
    chunk = config.prompts_per_chunk((prompt.n_context + 1) * members)
    preds = []
    for part in prompt.split(chunk):
        x, y, xq = part.x.double(), part.y.double(), part.x_query.double()
        least = torch.full_like(xq[:, 0], float("inf"))
        weight, weighted = torch.zeros_like(least), torch.zeros_like(least)
        for block in pool.split(members):
            sse = (y[:, :, None] - x @ block.T).square().sum(1)  # (B', M')
            if not bool(torch.isfinite(sse).all()):
                raise ValueError("the pool's squared errors on the context overflow float64: rescale pool or prompt")
            new_least = torch.minimum(least, sse.min(1).values)
            # halved before the division: 2 * noise_var overflows for a noise_var past 9e307
            scale = torch.exp((new_least - least) / 2 / noise_var)  # 0 on the first block (least = inf)
            lik = torch.exp((new_least[:, None] - sse) / 2 / noise_var)
            weight = weight * scale + lik.sum(1)
            weighted = weighted * scale + (lik * (xq @ block.T)).sum(1)
            least = new_least
        preds.append(weighted / weight)
    return _finite(torch.cat(preds).to(prompt.x.dtype), "pool, prompt or noise_var")


@checked
def one_step_gd(prompt: Prompt, lr: NonNegative) -> Tensor:
    """One gradient step from ``w = 0`` on ``(1/2n) sum_i (y_i - <w, x_i>)^2``: ``w = (lr / n) X^T y``."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    return _one_step_gd(prompt, lr, f"lr = {lr}")


def _one_step_gd(prompt: Prompt, lr: float, said: str) -> Tensor:
    """:func:`one_step_gd` on a checked prompt of at least one example; ``said`` names the arguments an overflow
    is blamed on."""
    w = lr * (prompt.x.double() * prompt.y.double()[..., None]).mean(1)
    return _finite(_predict_linear(prompt, w), said)


def _finite(pred: Tensor, arguments: str) -> Tensor:
    """``pred``, refused when the step made it overflow on a prompt checked finite (a diverging recursion); inside
    :func:`~icl_utils.checks.nonfinite_allowed` a NaN prompt's NaN prediction is returned, as documented."""
    if checks.values_checked() and not bool(checks.finite_flag(pred)):
        raise ValueError(
            f"{arguments} made the predictions overflow to inf or NaN in {pred.dtype} on these prompts: take a "
            "smaller step or rescale the prompts"
        )
    return pred


def _gd_plus_plus_moments(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """``(X^T X, X^T y)`` of each prompt, where :func:`_gd_plus_plus` starts."""
    return x.transpose(1, 2) @ x, (x.transpose(1, 2) @ y[..., None])[..., 0]


def _gd_plus_plus(
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    lr: Tensor,
    gamma: Tensor,
    steps: int,
    moments: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """The recursion of :func:`gd_plus_plus` on raw tensors (``lr`` a 0-d or ``(d, d)`` tensor), differentiable in
    ``lr`` and ``gamma``: the shared code of the estimator and of :class:`~icl_utils.models.GDPlusPlus`.

    It runs on the moments ``S = X^T X`` and ``c = X^T r`` (``r`` the residuals), which the corrections map to
    ``(I - gamma S) S (I - gamma S)`` and ``(I - gamma S)(c - S delta)``: ``O(d^3)`` per step whatever ``n``.
    ``moments`` are :func:`_gd_plus_plus_moments` of ``x`` and ``y`` when the caller has them already.
    """
    n, d = x.shape[1], x.shape[-1]
    checks.work(  # and a step's dozen small operations in Python: about 30 us, 3e6 products' time
        f"GD++ over steps = {steps} at dim = {d} (two d x d products a step and a prompt, 4 d^3 + 3e6 a step)",
        steps * (4 * d**3 + 3_000_000),
    )
    s, c = _gd_plus_plus_moments(x, y) if moments is None else moments
    query, pred = x_query, torch.zeros_like(y[:, 0])
    eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
    for _ in range(steps):
        # Every update of a layer reads the tokens as they entered it, as one self-attention layer does.
        delta = c * lr / n if lr.ndim == 0 else c @ lr.T / n
        pred = pred + (delta * query).sum(-1)
        correction = eye - gamma * s  # I - gamma X^T X, not divided by n: von Oswald et al.'s convention
        c = ((c - (s @ delta[..., None])[..., 0])[:, None, :] @ correction)[:, 0]
        query = (query[:, None, :] @ correction)[:, 0]
        s = correction @ s @ correction
    return pred


@checked
def gd_plus_plus(
    prompt: Prompt,
    lr: Real | Annotated[Float[Tensor, ""] | Float[Tensor, "{prompt.dim} {prompt.dim}"], checks.Finite],
    gamma: Real | Annotated[Float[Tensor, ""], checks.Finite],
    steps: Steps = 1,
) -> Tensor:
    """Von Oswald et al.'s GD++: ``steps`` gradient steps from ``w = 0``, each in one layer with the curvature
    correction ``x <- (I - gamma X^T X) x`` of every input, the query's included.

    A step on ``(1/2n) sum_i (y_i - <w, x_i>)^2`` moves ``w`` by ``lr X^T r / n`` (``r`` the residuals), with
    ``lr`` a step size or a ``(d, d)`` matrix step as in GD-beta; the correction then uses the inputs as the step
    found them (``X^T X`` of the current inputs, not divided by ``n``), and the recurrent version repeats both with
    the same ``lr`` and ``gamma``. The correction acts from the second step on, so one step is :func:`one_step_gd`
    whatever ``gamma``; ``steps`` steps with ``gamma = 0`` are plain gradient descent. An empty context predicts 0.
    """
    prompt = checks.prompt(prompt)
    lr = torch.as_tensor(lr, dtype=torch.float64).cpu()
    gamma = float(gamma)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    dev = prompt.x.device
    pred = _gd_plus_plus(
        prompt.x.double(),
        prompt.y.double(),
        prompt.x_query.double(),
        lr.to(dev),
        torch.tensor(gamma, dtype=torch.float64, device=dev),
        steps,
    )
    return _finite(pred.to(prompt.x.dtype), f"lr = {lr.tolist()} and gamma = {gamma} (over {steps} steps)")


def averaging(prompt: Prompt) -> Tensor:
    """Garg et al.'s averaging estimator ``w = (1/n) sum_i y_i x_i``: one GD step of size one."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    return _one_step_gd(prompt, 1.0, "prompt's values (their products x_i y_i x_query)")


@checks.finite_result("prompt")
def prompt_mean(prompt: Prompt) -> Tensor:
    """The mean of the context's labels: a learner that reads the prompt but fits only a constant (zero when
    ``n = 0``)."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    return prompt.y.mean(1)


@checked
def nearest_neighbours(prompt: Prompt, k: Count = 3) -> Tensor:
    """The mean label of the ``k`` context inputs nearest to the query (all of them when ``n < k``)."""
    prompt = checks.prompt(prompt)
    if prompt.n_context == 0:
        return torch.zeros_like(prompt.y_query)
    dist = (prompt.x - prompt.x_query[:, None, :]).square().sum(-1)
    if checks.values_checked() and not bool(checks.finite_flag(dist)):  # inf distances make every neighbour tie
        raise ValueError(f"prompt's squared distances to the query overflow {dist.dtype}: rescale the prompt")
    idx = dist.topk(min(k, prompt.n_context), dim=1, largest=False).indices
    return prompt.y.gather(1, idx).mean(1)


def kernel_ridge(
    prompt: Prompt,
    lams: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0),
    bandwidth: float | tuple[float, ...] | None = None,
    *,
    additive: bool = False,
    center: bool = False,
) -> Tensor:
    """Gaussian-kernel ridge regression on the prompt alone, tuned per prompt by leave-one-out: the prediction at
    each query of :func:`kernel_ridge_fit`."""
    prompt = checks.prompt(prompt)
    fitted = kernel_ridge_fit(prompt, lams, bandwidth, additive=additive, center=center)
    return fitted(prompt.x_query[:, None, :])[:, 0]


@checked
def kernel_ridge_fit(
    prompt: Prompt,
    lams: checks.Positives = (1e-3, 1e-2, 1e-1, 1.0, 10.0),
    bandwidth: Positive | checks.Positives | None = None,
    *,
    additive: bool = False,
    center: bool = False,
) -> Callable[[Tensor], Tensor]:
    """Gaussian-kernel ridge regression fitted to each prompt's examples, tuned per prompt by leave-one-out; returns
    the fitted functions, a map from inputs ``(B, Q, d)`` to predictions ``(B, Q)`` (prompt ``b``'s function at its
    ``Q`` inputs).

    The kernel is ``exp(-||x - x'||^2 / (2 h^2))`` with ``h = sqrt(d)`` (1 for the additive kernel) unless
    ``bandwidth`` is given; a tuple of bandwidths is tuned together with the penalty. For each pair ``(h, lam)``
    the leave-one-out residuals have the closed form ``alpha_i / [(K + lam I)^{-1}]_ii``; each prompt uses the pair
    with the smallest leave-one-out error.
    """
    prompt = checks.prompt(prompt)
    # the kernel, its eigenvectors and their squares, n x n each
    checks.allocation("prompt's n x n kernels per prompt, 3 of them", 3 * prompt.n_context**2, torch.float64)
    lams = tuple(float(lam) for lam in lams)
    if bandwidth is None:  # the typical distance between two inputs: over all coordinates, or along one
        bandwidths = (1.0 if additive else prompt.dim**0.5,)
    else:
        many = isinstance(bandwidth, (tuple, list, np.ndarray, Tensor))
        bandwidths = tuple(float(h) for h in (bandwidth if many else (bandwidth,)))
    # per bandwidth and prompt: the kernel (a product for the Gaussian; for the additive, d passes of exponentials at
    # about 10 ns a value, 1000 products' worth), its eigendecomposition, and a pass per penalty
    n, d = prompt.n_context, prompt.dim
    checks.work(
        f"kernel_ridge_fit on prompts of n = {n} examples of dim = {d}, {len(bandwidths)} in bandwidth and "
        f"{len(lams)} in lams (per width: {'1000' if additive else '2'} n^2 d + 10 n^3 + 4 len(lams) n^2)",
        len(bandwidths) * ((1000 if additive else 2) * n**2 * d + 10 * n**3 + 4 * len(lams) * n**2),
    )
    x = prompt.x.double()
    offset = prompt.y.double().mean(1) if center and prompt.n_context > 0 else x.new_zeros(prompt.batch_size)
    if center:
        prompt = Prompt(prompt.x, prompt.y - offset[:, None].to(prompt.y.dtype), prompt.x_query, prompt.y_query)
    if prompt.n_context == 0:
        alpha, width = x.new_zeros(prompt.batch_size, 0), x.new_ones(prompt.batch_size)
    else:
        # A chunk of prompts at a time: each holds several n x n kernels in float64.
        chunk = config.prompts_per_chunk(prompt.n_context * (prompt.n_context + prompt.dim))
        fits = [_kernel_ridge(part, lams, bandwidths, additive) for part in prompt.split(chunk)]
        alpha, width = torch.cat([a for a, _ in fits]), torch.cat([h for _, h in fits])

    def predict(inputs: Tensor) -> Tensor:
        inputs = _queries(inputs, prompt.batch_size, prompt.dim)
        kernel = _gaussian_kernel(inputs.double(), x, width[:, None, None], additive)
        return ((kernel @ alpha[..., None])[..., 0] + offset[:, None]).to(inputs.dtype)

    return predict


@checked
def _queries(inputs: Annotated[Float[Tensor, "{batch} Q {dim}"], checks.Finite], batch: int, dim: int) -> Tensor:
    """``inputs`` given to a fitted predictor: ``Q`` query points for each of the ``batch`` prompts it was fitted to."""
    return inputs


def _gaussian_kernel(a: Tensor, b: Tensor, width: float | Tensor, additive: bool) -> Tensor:
    """The Gaussian kernel between ``a`` (B, P, d) and ``b`` (B, Q, d), or its additive version, one coordinate at a
    time so that no (B, P, Q, d) tensor is held."""
    if not additive:
        return torch.exp(-torch.cdist(a, b).square() / (2 * width**2))
    out = torch.zeros(a.shape[0], a.shape[1], b.shape[1], dtype=a.dtype, device=a.device)
    for k in range(a.shape[2]):
        out += torch.exp(-(a[..., k, None] - b[..., None, :, k]).square() / (2 * width**2))
    return out / a.shape[2]


def _kernel_ridge(
    prompt: Prompt, lams: tuple[float, ...], bandwidths: tuple[float, ...], additive: bool
) -> tuple[Tensor, Tensor]:
    """The dual weights ``alpha`` (B, n) and bandwidth (B,) that :func:`kernel_ridge_fit` picks on a chunk of
    prompts, its arguments checked."""
    x, y = prompt.x.double(), prompt.y.double()
    best_loo = torch.full_like(y[:, 0], float("inf"))
    best_alpha, best_width = torch.zeros_like(y), torch.ones_like(y[:, 0])
    for h in bandwidths:
        # One eigendecomposition per bandwidth serves every penalty: (K + lam I)^-1 = U diag(1 / (e + lam)) U^T.
        evals, evecs = torch.linalg.eigh(_gaussian_kernel(x, x, h, additive))
        evals = evals.clamp(min=0)  # K is positive semi-definite; rounding can leave tiny negative eigenvalues
        projected, squares = (evecs.transpose(1, 2) @ y[..., None])[..., 0], evecs.square()
        for lam in lams:
            weights = 1 / (evals + lam)
            alpha = (evecs @ (weights * projected)[..., None])[..., 0]
            diagonal = (squares @ weights[..., None])[..., 0]  # [(K + lam I)^-1]_ii
            loo = (alpha / diagonal).square().mean(1)
            better = loo < best_loo * (1 - 1e-9)  # a relative margin: ties (n = 1) break the same way at any y scale
            best_loo = torch.where(better, loo, best_loo)
            best_alpha = torch.where(better[:, None], alpha, best_alpha)
            best_width = torch.where(better, torch.full_like(best_width, h), best_width)
    if checks.values_checked() and not bool(checks.finite_flag(best_loo)):  # every penalty's errors overflowed
        raise ValueError(
            "bandwidth and the prompt's labels make every leave-one-out error overflow float64: widen the bandwidth "
            "or rescale the prompt"
        )
    return best_alpha, best_width


def two_layer_network(
    prompt: Prompt, width: int = 64, steps: int = 300, lr: float = 1e-2, weight_decay: float = 1e-3, seed: int = 0
) -> Tensor:
    """A two-layer ReLU network fitted to each prompt's examples alone (:func:`two_layer_network_fit`), evaluated at
    each query."""
    prompt = checks.prompt(prompt)
    fitted = two_layer_network_fit(prompt, width, steps, lr, weight_decay, seed)
    return _finite(fitted(prompt.x_query[:, None, :])[:, 0], f"lr = {lr}")


@checked
def two_layer_network_fit(
    prompt: Prompt,
    width: Width = 64,
    steps: Steps = 300,
    lr: checks.PositiveScale = 1e-2,
    weight_decay: checks.Scale = 1e-3,
    seed: Seed = 0,
) -> Callable[[Tensor], Tensor]:
    """A two-layer ReLU network ``sum_j a_j ReLU(<w_j, x> + b_j)`` fitted to each prompt's examples alone; returns
    the fitted networks, a map from inputs ``(B, Q, d)`` to predictions ``(B, Q)``.

    One network per prompt, all trained at once (batched parameters) by ``steps`` full-batch Adam steps on the
    mean squared error plus ``weight_decay`` times the squared weights; first-layer rows start uniform on the
    sphere, the output layer at zero.
    """
    prompt = checks.prompt(prompt)
    batch, dim, n = prompt.batch_size, prompt.dim, prompt.n_context
    # the activations of a step (pre-activation, ReLU, their gradients), and its work per prompt: the products, 6 n
    # width d, and about 25 ns a value of elementwise passes (2600 products' worth), timed on two CPU cores
    checks.allocation("4 * prompt's B * n * width (a step's activations)", 4 * batch * n * width, prompt.x.dtype)
    checks.work(
        f"two_layer_network_fit over steps = {steps} of width = {width} on a prompt of n = {n} examples of dim = "
        f"{dim} (steps n width (6 d + 2600))",
        steps * n * width * (6 * dim + 2600),
    )
    g = torch.Generator(device=prompt.x.device).manual_seed(seed)
    like = {"device": prompt.x.device, "dtype": prompt.x.dtype}  # the network computes in the prompt's dtype
    w = torch.randn(batch, width, dim, generator=g, **like)
    w = (w / w.norm(dim=2, keepdim=True)).requires_grad_(True)
    b = torch.zeros(batch, width, **like, requires_grad=True)
    a = torch.zeros(batch, width, **like, requires_grad=True)

    def net(x: Tensor) -> Tensor:
        return (torch.relu(x @ w.transpose(1, 2) + b[:, None, :]) * a[:, None, :]).sum(-1)

    if prompt.n_context > 0:
        optimizer = torch.optim.Adam([w, b, a], lr=lr, fused=True)
        with torch.enable_grad():
            for _ in range(steps):
                loss = (net(prompt.x) - prompt.y).square().mean(1).sum()
                loss = loss + weight_decay * (w.square().sum() + a.square().sum())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        with torch.no_grad():  # the networks start at zero: ten times that loss is worse than predicting nothing
            start, end = prompt.y.square().mean(1).sum(), (net(prompt.x) - prompt.y).square().mean(1).sum()
            if checks.values_checked() and not bool(end <= 10 * start + 1e-12):  # NaN prompts give NaN, as elsewhere
                raise checks.Diverged(
                    f"lr = {lr:g} made the fit diverge: the loss went from {start.item():.3g} to {end.item():.3g} in "
                    f"{steps} steps; lower lr"
                )

    @torch.no_grad()
    def predict(inputs: Tensor) -> Tensor:
        return net(_queries(inputs, batch, dim).to(**like))

    return predict
