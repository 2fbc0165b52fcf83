"""Every kind of bad input to a public entry point of icl_utils gets a ValueError or TypeError that names the
argument (one case per row; the config module's bad mode and device strings are tested in test_config.py)."""

import numpy as np
import pytest
import torch

from icl_utils import checks, risk
from icl_utils.dynamics import softmax_attention as sa
from icl_utils.estimators import bayes_linear_regression, gd_plus_plus, kernel_ridge, one_step_gd, ridge
from icl_utils.gd import gradient_descent
from icl_utils.models import LTB, FeatureAttention, GDBeta, GPTConfig, ICLTransformer, MLPAttention
from icl_utils.models.feature_attention import one_step_feature_update, two_stage_fit
from icl_utils.prompts import Prompt, squared_errors
from icl_utils.tasks import LinearRegression
from icl_utils.tasks.discrete import DiscreteFeatures
from icl_utils.tasks.single_index import SingleIndexTasks, projection_mass
from icl_utils.train import Curriculum, TrainConfig, train, train_ensemble

G = torch.Generator().manual_seed(0)


def prompt(batch=2, n=3, d=2, dtype=torch.float32):
    return Prompt(
        torch.zeros(batch, n, d, dtype=dtype),
        torch.zeros(batch, n, dtype=dtype),
        torch.zeros(batch, d, dtype=dtype),
        torch.zeros(batch, dtype=dtype),
    )


def gpt(d=2, n_context=3):
    return ICLTransformer(GPTConfig(n_dims=d, n_context=n_context, n_embd=8, n_layer=1, n_head=2))


def config(**kw):
    return TrainConfig(**{"steps": 1, "batch_size": 2, "n_context": 3, **kw})


CASES = {
    # wrong shapes
    "x not 3-d": (
        ValueError,
        r"x must be a float tensor of shape \(B, n, d\)",
        lambda: Prompt(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 1), torch.zeros(2)),
    ),
    "y does not match x": (
        ValueError,
        r"y must be a float tensor of shape \(B, n\), got a float32 tensor of shape \(2, 4\)",
        lambda: Prompt(torch.zeros(2, 3, 1), torch.zeros(2, 4), torch.zeros(2, 1), torch.zeros(2)),
    ),
    "projection basis shape": (
        ValueError,
        "basis must be a",
        lambda: projection_mass(torch.ones(3, 4), torch.ones(5, 2)),
    ),
    # dimensions that do not match
    "prompt dim vs GPT": (ValueError, "n_dims", lambda: gpt(d=3)(prompt(d=2))),
    "prompt too long for GPT": (ValueError, "n_context=2", lambda: gpt(n_context=2)(prompt(n=3))),
    "prompt dim vs LTB": (ValueError, "dim=3", lambda: LTB(3)(prompt(d=2))),
    "prior mean length": (
        ValueError,
        "prior_mean must be a float tensor of shape",
        lambda: LinearRegression(dim=3, prior_mean=torch.zeros(2)),
    ),
    "GD-beta gamma shape": (
        ValueError,
        r"gamma must be a float tensor of shape \(2, 2\)",
        lambda: GDBeta(2, gamma=torch.eye(3)),
    ),
    "subspace larger than d": (ValueError, "subspace_dim", lambda: SingleIndexTasks(dim=3, subspace_dim=4)),
    # sizes below 1
    "zero training steps": (ValueError, r"steps must be in \[1, ", lambda: config(steps=0)),
    "zero batch": (ValueError, "batch must be >= 1", lambda: LinearRegression(dim=2).sample(0, 3, G)),
    "model_errors chunk 0": (ValueError, "chunk_size must be >= 1", lambda: risk.model_errors(LTB(2), prompt(), 0)),
    "output neither per point nor per query": (
        ValueError,
        "preds \\(the predictions\\) must have shape",
        lambda: squared_errors(torch.zeros(2, 3), prompt(n=3)),
    ),
    "estimator output of shape (B, 1)": (
        ValueError,
        r"one prediction per prompt, shape \(2,\), got \(2, 1\)",
        lambda: risk.query_risk(lambda p: p.y_query[:, None], LinearRegression(dim=2), 3, 2, G),
    ),
    "model_errors on a tensor": (
        TypeError,
        "prompt must be an icl_utils.Prompt",
        lambda: risk.model_errors(LTB(2), torch.zeros(2, 3, 2)),
    ),
    "curriculum every 0": (
        ValueError,
        "every must be >= 1",
        lambda: Curriculum(dims=(1, 2), n_context=(1, 2), every=0),
    ),
    "one Monte Carlo prompt": (
        ValueError,
        r"n_prompts must be in \[2, ",
        lambda: risk.query_risk(lambda p: p.y_query, LinearRegression(dim=2), 3, 1, G),
    ),
    "non-positive ridge penalty": (ValueError, "lam must be > 0", lambda: ridge(prompt(), 0.0)),
    "zero feature width": (ValueError, r"width must be in \[1, ", lambda: FeatureAttention(2, 0, generator=G)),
    # probabilities
    "probabilities not summing to 1": (
        ValueError,
        "probs must be .*summing to 1",
        lambda: DiscreteFeatures(dim=3, probs=torch.tensor([0.6, 0.6])),
    ),
    "NaN probability": (ValueError, "positive", lambda: sa.sample_counts(torch.tensor([float("nan"), 1.0]), 3, 4, G)),
    # covariances
    "asymmetric covariance": (
        ValueError,
        "prior_cov must be symmetric",
        lambda: LinearRegression(dim=2, prior_cov=torch.tensor([[1.0, 0.5], [0.0, 1.0]])),
    ),
    "indefinite covariance": (
        ValueError,
        "x_cov must be positive semi-definite",
        lambda: LinearRegression(dim=2, x_cov=torch.tensor([[1.0, 2.0], [2.0, 1.0]])),
    ),
    "negative noise variance": (
        ValueError,
        "noise_var must be >= 0",
        lambda: bayes_linear_regression(prompt(), torch.zeros(2), torch.eye(2), -1.0),
    ),
    # devices and dtypes
    "prompt fields of two dtypes": (
        ValueError,
        "share device and dtype",
        lambda: Prompt(torch.zeros(2, 3, 1), torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 1), torch.zeros(2)),
    ),
    "float64 prompt into a float32 model": (
        ValueError,
        "parameters are torch.float32",
        lambda: gpt()(prompt(dtype=torch.float64)),
    ),
    "integer prompt": (
        ValueError,
        "x must be a float tensor",
        lambda: Prompt(torch.zeros(2, 3, 1, dtype=torch.long), torch.zeros(2, 3), torch.zeros(2, 1), torch.zeros(2)),
    ),
    # wrong types
    "generator missing": (
        TypeError,
        "generator must be a torch.Generator",
        lambda: train(gpt(), LinearRegression(dim=2), config(), generator=None),
    ),
    "model not a module": (
        TypeError,
        "model must be a torch.nn.Module",
        lambda: train("gpt", LinearRegression(dim=2), config(), generator=G),
    ),
    "ensemble of nothing": (
        ValueError,
        "models must be a non-empty",
        lambda: train_ensemble([], LinearRegression(dim=2), config(), generator=G),
    ),
    "training settings as keywords": (
        TypeError,
        "config must be a TrainConfig",
        lambda: train(gpt(), LinearRegression(dim=2), {"steps": 1}, generator=G),
    ),
    "curriculum on a task without active_dims": (
        ValueError,
        "active_dims",
        lambda: train(
            gpt(d=3),
            SingleIndexTasks(dim=3, subspace_dim=1),
            config(curriculum=Curriculum(dims=(1, 3), n_context=(1, 3), every=1)),
            generator=G,
        ),
    ),
    "task that is not a task family": (
        TypeError,
        "task must be a task family",
        lambda: train(gpt(), "linear", config(), generator=G),
    ),
    "stage 1 on an MLP attention": (
        TypeError,
        "model must be a FeatureAttention",
        lambda: one_step_feature_update(
            MLPAttention(2, 4), LinearRegression(dim=2), n_tasks=4, n=3, lr=1.0, weight_decay=1.0, generator=G
        ),
    ),
    "two-stage fit of an LTB": (
        TypeError,
        "model must be a FeatureAttention",
        lambda: two_stage_fit(
            LTB(2),
            LinearRegression(dim=2),
            stage1_tasks=4,
            stage1_n=3,
            stage2_tasks=4,
            stage2_n=3,
            lam=1.0,
            generator=G,
        ),
    ),
    "estimator given a tensor": (
        TypeError,
        "prompt must be an icl_utils.Prompt",
        lambda: kernel_ridge(torch.zeros(2, 3, 1)),
    ),
    "joining prompts of two lengths": (ValueError, "must share n, d", lambda: Prompt.cat([prompt(n=3), prompt(n=4)])),
    "loss that is not a scalar": (
        TypeError,
        "loss_fn must return a real scalar tensor",
        lambda: gradient_descent(lambda t: t.square(), torch.ones(2), steps=1, lr=0.1, progress=False),
    ),
    "per-coordinate lr tensor": (
        TypeError,
        "lr must be a real number or a mapping, got Tensor",
        lambda: gradient_descent(
            lambda t: t.square().sum(), torch.ones(2), steps=1, lr=torch.tensor([0.1, 0.2]), progress=False
        ),
    ),
    "lr dict naming another block": (
        ValueError,
        "lr must name the same blocks as init",
        lambda: gradient_descent(lambda t: t["a"].sum(), {"a": torch.ones(2)}, steps=1, lr={"b": 0.1}, progress=False),
    ),
    "block that is not a tensor": (
        TypeError,
        r"init\['b'\] must be a floating-point tensor",
        lambda: gradient_descent(
            lambda t: t["a"].sum(), {"a": torch.ones(2), "b": [1.0]}, steps=1, lr=0.1, progress=False
        ),
    ),
    "joining nothing": (TypeError, "non-empty list or tuple of icl_utils.Prompt", lambda: Prompt.cat([])),
    "splitting into pieces of 0": (ValueError, "size must be >= 1", lambda: prompt().split(0)),
    "bool as an int": (TypeError, "steps must be an int", lambda: checks.positive_int("steps", True)),
    "infinite float": (
        ValueError,
        "lr must be > 0 and finite",
        lambda: gradient_descent(lambda w: w.sum(), torch.ones(2), steps=1, lr=float("inf"), progress=False),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_gets_a_clear_error(case):
    error, message, call = CASES[case]
    with pytest.raises(error, match=message):
        call()


def test_same_device_resolves_the_current_cuda_index():
    assert checks.same_device("cpu", torch.device("cpu"))
    assert not checks.same_device("cpu", "meta")
    if torch.cuda.is_available():
        assert checks.same_device("cuda", f"cuda:{torch.cuda.current_device()}")
        assert not checks.same_device("cuda", "cpu")


def test_nonfinite_values_can_be_allowed_explicitly():
    """The finite-prompt check has an opt-out: inside checks.nonfinite_allowed() a NaN in a prompt reaches the
    estimator (and its prediction is NaN), outside it is a named error."""
    p = prompt()
    bad = Prompt(p.x, p.y.clone().fill_(float("nan")), p.x_query, p.y_query)
    with pytest.raises(ValueError, match=r"prompt.y holds 6 NaN or infinite value"):
        ridge(bad, 1.0)
    with checks.nonfinite_allowed():
        assert torch.isnan(ridge(bad, 1.0)).all()
        # the estimators that refuse a prediction their step made overflow let this one through, as ridge does
        assert torch.isnan(one_step_gd(bad, 0.5)).all() and torch.isnan(gd_plus_plus(bad, 0.5, 0.1, steps=2)).all()
    with pytest.raises(ValueError, match=r"prompt.y holds"):
        ridge(bad, 1.0)
    with pytest.raises(ValueError, match=r"prompt.y holds"):
        one_step_gd(bad, 0.5)


def test_two_layer_network_computes_in_the_prompts_dtype():
    from icl_utils.estimators import two_layer_network

    for dtype in (torch.float32, torch.float64):
        pred = two_layer_network(prompt(dtype=dtype), steps=3)
        assert pred.dtype == dtype and pred.shape == (2,)


def test_numpy_booleans_are_booleans():
    """A flag read from a numpy array is a boolean too; a truthy string or number is not."""
    assert LTB(2, mlp=np.False_).mlp is False and GPTConfig(n_dims=2, n_context=3, mlp=np.True_).mlp
    with pytest.raises(TypeError, match="mlp must be True or False"):
        LTB(2, mlp=np.int64(1))


def test_predict_restores_training_mode_after_an_error():
    model = gpt()
    model.train()
    with pytest.raises(ValueError):
        model.predict(prompt(n=5))
    assert model.training
