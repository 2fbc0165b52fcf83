"""Property-based tests (hypothesis): invariances every in-context estimator must have, on random sizes and data.

Each example draws the sizes and a seed; the data come from torch with that seed, so a failure is reproducible
from the example hypothesis prints. Under CI=true the examples are derandomized (the same every run), so that CI
never flakes; a local run explores new examples each time (that is how a tie in kernel ridge's leave-one-out choice
of penalty was found).
"""

import os

import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from icl_utils.estimators import (
    averaging,
    bayes_linear_regression,
    kernel_ridge,
    least_squares,
    nearest_neighbours,
    one_step_gd,
    ridge,
)
from icl_utils.models.linear_attention import LSA, LTB, GDBeta
from icl_utils.prompts import Prompt
from icl_utils.tasks import LinearRegression

sizes = st.fixed_dictionaries(
    {
        "batch": st.integers(1, 4),
        "n": st.integers(0, 12),
        "dim": st.integers(1, 6),
        "seed": st.integers(0, 2**31),
        "dtype": st.sampled_from([torch.float32, torch.float64]),
    }
)
DERANDOMIZE = os.environ.get("CI", "").lower() == "true"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=DERANDOMIZE)


def draw(batch, n, dim, seed, dtype=torch.float32):
    """Prompts of ``n >= 0`` examples in float32 or float64 (the estimators compute in float64 and answer in the
    prompt's dtype; the models are converted to it)."""
    g = torch.Generator().manual_seed(seed)
    p = LinearRegression(dim=dim, noise_std=0.3).sample(batch, n, g)
    return Prompt(*(getattr(p, f).to(dtype) for f in ("x", "y", "x_query", "y_query")))


def bayes(p):
    return bayes_linear_regression(p, torch.zeros(p.dim), torch.eye(p.dim), 0.09)


def seeded(model_cls, p, **kw):
    """A model for ``p``'s dimension, seeded by it, in ``p``'s dtype; models need one example at least."""
    assume(p.n_context > 0)
    torch.manual_seed(p.dim)
    return model_cls(p.dim, **kw).to(p.x.dtype).eval()


def lsa(p):
    return seeded(LSA, p).predict(p)


def ltb(p):
    return seeded(LTB, p).predict(p)


def gd_beta(p):
    g = torch.Generator().manual_seed(p.dim)
    beta0, gamma = torch.randn(p.dim, generator=g), torch.randn(p.dim, p.dim, generator=g)
    return seeded(GDBeta, p, beta0=beta0, gamma=gamma).predict(p)


PERMUTATION_INVARIANT = {
    "least squares": least_squares,
    "ridge": lambda p: ridge(p, 0.5),
    "Bayes": bayes,
    "averaging": averaging,
    "one-step GD": lambda p: one_step_gd(p, 0.3),
    "LSA": lsa,
    "LTB": ltb,
    "GD-beta": gd_beta,
}
# Linear in the labels: the prediction for c * y is c times the prediction for y. (Not the LSA or LTB, whose
# prediction also has a term quadratic in y; not GD-beta with beta0 != 0, which is affine.)
LINEAR_IN_Y = {
    "least squares": least_squares,
    "ridge": lambda p: ridge(p, 0.5),
    "Bayes": bayes,
    "averaging": averaging,
    "one-step GD": lambda p: one_step_gd(p, 0.3),
    "3-NN": nearest_neighbours,
    "kernel ridge": kernel_ridge,
}


@pytest.mark.parametrize("name", PERMUTATION_INVARIANT)
@SETTINGS
@given(size=sizes)
@example(size={"batch": 2, "n": 0, "dim": 3, "seed": 1, "dtype": torch.float32})
@example(size={"batch": 2, "n": 5, "dim": 3, "seed": 1, "dtype": torch.float64})
def test_permuting_the_context_leaves_the_prediction_unchanged(name, size):
    p = draw(**size)
    perm = torch.randperm(p.n_context, generator=torch.Generator().manual_seed(size["seed"] + 1))
    shuffled = Prompt(p.x[:, perm], p.y[:, perm], p.x_query, p.y_query)
    estimator = PERMUTATION_INVARIANT[name]
    pred = estimator(p)
    assert pred.dtype == p.x.dtype and pred.shape == (p.batch_size,)
    torch.testing.assert_close(estimator(shuffled), pred, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", LINEAR_IN_Y)
@SETTINGS
@given(size=sizes, scale=st.floats(-4.0, 4.0).filter(lambda c: abs(c) > 0.05))
def test_rescaling_the_labels_rescales_the_prediction(name, size, scale):
    p = draw(**size)
    scaled = Prompt(p.x, scale * p.y, p.x_query, scale * p.y_query)
    estimator = LINEAR_IN_Y[name]
    torch.testing.assert_close(estimator(scaled), scale * estimator(p), rtol=1e-3, atol=1e-4)


PROMPT_ONLY = {
    name: f for name, f in {**PERMUTATION_INVARIANT, **LINEAR_IN_Y}.items() if name not in ("LSA", "LTB", "GD-beta")
}


@pytest.mark.parametrize("name", PROMPT_ONLY)
@SETTINGS
@given(size=sizes)
@example(size={"batch": 3, "n": 0, "dim": 2, "seed": 0, "dtype": torch.float64})  # always, not by chance
def test_float64_agrees_with_float32_and_no_context_gives_the_prior_guess(name, size):
    """The same prompts in float64 and float32 give the same predictions (to float32's precision: the estimators
    compute in float64 either way), and with n = 0 every prompt-only estimator predicts the prior guess, zero."""
    size = {**size, "dtype": torch.float64}
    p64 = draw(**size)
    p32 = Prompt(*(getattr(p64, f).float() for f in ("x", "y", "x_query", "y_query")))
    estimator = PROMPT_ONLY[name]
    pred64, pred32 = estimator(p64), estimator(p32)
    assert pred64.dtype == torch.float64 and pred32.dtype == torch.float32
    torch.testing.assert_close(pred32.double(), pred64, rtol=1e-3, atol=1e-3)
    if p64.n_context == 0:
        assert torch.equal(pred64, torch.zeros_like(pred64))


@settings(max_examples=25, deadline=None, derandomize=DERANDOMIZE)
@given(
    n=st.integers(1, 16),
    dim=st.integers(1, 6),
    noise=st.floats(0.1, 2.0),
    lam=st.floats(1e-3, 1e2),
    seed=st.integers(0, 2**31),
)
def test_bayes_is_never_beaten_by_ridge_with_another_penalty(n, dim, noise, lam, seed):
    """Under w ~ N(0, I) and noise sigma, the posterior mean (ridge with penalty sigma^2) has the least risk: any
    other penalty's Monte Carlo risk is not lower beyond 4 standard errors of the paired difference."""
    task = LinearRegression(dim=dim, noise_std=noise)
    p = task.sample(4000, n, torch.Generator().manual_seed(seed))
    gap = (ridge(p, lam) - p.y_query).square() - (task.posterior_mean(p) - p.y_query).square()
    assert gap.mean() > -4 * gap.std() / gap.numel() ** 0.5 - 1e-6
