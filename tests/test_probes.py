"""The probe suite: bad inputs a user would plausibly give the public API, each of which must get a ValueError or
TypeError whose message names the argument, never a silent result, a NaN or an error from deep inside torch.

Each row is ``(id, pattern, call)``: ``call()`` must raise ValueError or TypeError and ``pattern`` (a regular
expression, usually the argument's name) must occur in the message. Rows are grouped by what is wrong: prompts
(types, NaN and infinite values), sizes, task families, models, training, gradient descent, risk, dynamics, exact
risks and settings. ``test_the_suite_is_large`` keeps the count honest; test_validation.py holds the older cases.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from icl_utils import checks, claims, config, exact, plotting, risk
from icl_utils import estimators as est
from icl_utils.dynamics import gd_beta
from icl_utils.dynamics import mean_field as mf
from icl_utils.dynamics import softmax_attention as sa
from icl_utils.estimators import kernel_ridge_fit, two_layer_network_fit
from icl_utils.gd import GDHistory, gradient_descent
from icl_utils.models import LTB, FeatureAttention, GDBeta, GDPlusPlus, GPTConfig, ICLTransformer, MLPAttention
from icl_utils.models.base import evaluating, fixed_sample, sample_memo
from icl_utils.models.feature_attention import (
    FixedFeatureAttention,
    fit_attention_ridge,
    fit_gamma,
    one_step_feature_update,
    stage_one_gradients,
)
from icl_utils.models.gpt import Block
from icl_utils.models.linear_attention import (
    attention_mask,
    gd_beta_from_ltb,
    ltb_from_gd_beta,
    moment_prompt,
    sample_moment_prompts,
    token_matrix,
)
from icl_utils.prompts import Prompt, squared_errors, swap_contexts
from icl_utils.tasks import LinearRegression
from icl_utils.tasks.discrete import DiscreteFeatures, imbalanced_probs
from icl_utils.tasks.features import TeacherFeatures, sigmoid_network
from icl_utils.tasks.nonparametric import NonparametricTasks, cardinal_bspline
from icl_utils.tasks.pool import PromptPool
from icl_utils.tasks.single_index import SingleIndexTasks, hermite, principal_angles, projection_mass, tasks_to_recover
from icl_utils.train import (
    Curriculum,
    TrainConfig,
    TrainHistory,
    batched_by_default,
    fit_gd_plus_plus_curvature,
    fit_lbfgs,
    train,
    train_ensemble,
    train_parallel,
)

NAN, INF = float("nan"), float("inf")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def prompt(batch=3, n=4, d=2, dtype=torch.float32) -> Prompt:
    p = LinearRegression(dim=d, noise_std=0.1).sample(batch, n, gen(1))
    return Prompt(*(getattr(p, f).to(dtype) for f in ("x", "y", "x_query", "y_query")))


def _nested(depth: int) -> list:
    """A list nested ``depth`` deep."""
    data: list = []
    for _ in range(depth):
        data = [data]
    return data


def spoiled(field: str, value: float = NAN, **kw) -> Prompt:
    """A prompt with one entry of ``field`` set to ``value``."""
    p = prompt(**kw)
    fields = {f: getattr(p, f).clone() for f in ("x", "y", "x_query", "y_query")}
    fields[field].view(-1)[0] = value
    return Prompt(**fields)


def gpt(d=2, n_context=4) -> ICLTransformer:
    return ICLTransformer(GPTConfig(n_dims=d, n_context=n_context, n_embd=8, n_layer=1, n_head=2))


def cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"steps": 2, "batch_size": 2, "n_context": 4, "log_every": 1, **kw})


LR = LinearRegression(dim=2)
PAIRED = GPTConfig(n_dims=2, n_context=4, n_embd=8, n_layer=1, n_head=2, mlp=False, tokens="paired")
PAIRED_BLIND = GPTConfig(**{**PAIRED.__dict__, "query_sees_itself": False})  # the same parameters
CASES: list[tuple[str, str, object]] = []


def case(id: str, pattern: str, call) -> None:
    CASES.append((id, pattern, call))


# --- prompts: every prompt-only estimator, given a non-prompt or a prompt with a NaN or an infinity --------------
ESTIMATORS = {
    "least_squares": est.least_squares,
    "ridge": lambda p: est.ridge(p, 1.0),
    "bayes": lambda p: est.bayes_linear_regression(p, torch.zeros(2), torch.eye(2), 0.1),
    "dmmse": lambda p: est.discrete_posterior_mean(p, torch.randn(5, 2, generator=gen()), 0.1),
    "one_step_gd": lambda p: est.one_step_gd(p, 0.5),
    "averaging": est.averaging,
    "nearest_neighbours": est.nearest_neighbours,
    "kernel_ridge": est.kernel_ridge,
    "two_layer_network": lambda p: est.two_layer_network(p, steps=2),
    "posterior_mean": LR.posterior_mean,
    "sa.predict": lambda p: sa.predict(p, torch.eye(2)),
}
for name, f in ESTIMATORS.items():
    case(f"{name}: a tensor for a prompt", "prompt must be an icl_utils.Prompt", lambda f=f: f(torch.zeros(3, 4, 2)))
    for field, value in (("x", NAN), ("y", INF), ("x_query", -INF), ("y", NAN)):
        case(
            f"{name}: {value} in prompt.{field}",
            f"prompt.{field} holds",
            lambda f=f, fv=(field, value): f(spoiled(*fv)),
        )
case("token_matrix: a tensor for a prompt", "prompt must be an icl_utils.Prompt", lambda: token_matrix(torch.zeros(3)))
for name, model in {
    "GPT": gpt(),
    "LTB": LTB(2),
    "GDBeta": GDBeta(2),
    "GD++": GDPlusPlus(2),
    "FeatureAttention": FeatureAttention(2, 4, generator=gen()),
}.items():
    case(f"{name}.predict: NaN in prompt.x", "prompt.x holds", lambda m=model: m.predict(spoiled("x")))
    case(f"{name}.predict: a tensor", "prompt must be an icl_utils.Prompt", lambda m=model: m.predict(torch.zeros(3)))
    case(
        f"{name}.predict: float64 prompt",
        "parameters are torch.float32",
        lambda m=model: m.predict(prompt(dtype=torch.float64)),
    )
case("model_errors: inf in y", "prompt.y holds", lambda: risk.model_errors(LTB(2), spoiled("y", INF)))
case(
    "prefix_errors: NaN in x_query",
    "prompt.x_query holds",
    lambda: risk.prefix_errors(est.averaging, spoiled("x_query")),
)
case("PromptPool of NaN prompts", "prompts.x holds", lambda: PromptPool(spoiled("x")))
case("Prompt fields not tensors", "x must be a torch.Tensor", lambda: Prompt([[[0.0]]], [[0.0]], [[0.0]], [0.0]))
case(
    "Prompt from numpy",
    "x must be a torch.Tensor",
    lambda: Prompt(np.zeros((1, 2, 1)), torch.zeros(1, 2), torch.zeros(1, 1), torch.zeros(1)),
)
case("prefix beyond n", "k must be an int in", lambda: prompt().prefix(5))
case("prefix of a float", "k must be an int", lambda: prompt().prefix(1.0))
case(
    "squared_errors of a list",
    "preds \\(the predictions\\) must be a torch.Tensor",
    lambda: squared_errors([0.0] * 3, prompt()),
)
case(
    "squared_errors (B, 1)",
    "preds \\(the predictions\\) must have shape",
    lambda: squared_errors(torch.zeros(3, 1), prompt()),
)

# --- estimators' own arguments ---------------------------------------------------------------------------------
case("ridge lam NaN", "lam must be", lambda: est.ridge(prompt(), NAN))
case("ridge lam a string", "lam must be a real number", lambda: est.ridge(prompt(), "1"))
case("ridge lam a tensor", "lam must be a real number", lambda: est.ridge(prompt(), torch.tensor([1.0, 2.0])))
case("one_step_gd lr negative", "lr must be >= 0", lambda: est.one_step_gd(prompt(), -1.0))
case("nearest_neighbours k=0", "k must be >= 1", lambda: est.nearest_neighbours(prompt(), 0))
case("nearest_neighbours k float", "k must be an int", lambda: est.nearest_neighbours(prompt(), 2.5))
case("kernel_ridge lams a number", "lams must be a tuple", lambda: est.kernel_ridge(prompt(), lams=0.1))
case("kernel_ridge lams empty", "lams must be a non-empty", lambda: est.kernel_ridge(prompt(), lams=()))
case("kernel_ridge lams negative", "lams must be", lambda: est.kernel_ridge(prompt(), lams=(1.0, -1.0)))
case("kernel_ridge bandwidth 0", "bandwidth must be > 0", lambda: est.kernel_ridge(prompt(), bandwidth=0.0))
case("kernel_ridge bandwidth empty", "bandwidth must be", lambda: est.kernel_ridge(prompt(), bandwidth=()))
case("two_layer_network width 0", r"width must be in \[1, ", lambda: est.two_layer_network(prompt(), width=0))
case("two_layer_network seed -1", r"seed must be in \[0, 2\^63\)", lambda: est.two_layer_network(prompt(), seed=-1))
case("two_layer_network lr 0", r"lr must be in \(0, ", lambda: est.two_layer_network(prompt(), lr=0.0))
case(
    "bayes prior_mean wrong length",
    r"prior_mean must be a float tensor of shape \(2,\)",
    lambda: est.bayes_linear_regression(prompt(), torch.zeros(3), torch.eye(2), 0.1),
)
case(
    "bayes prior_cov not PSD",
    "prior_cov must be positive semi-definite",
    lambda: est.bayes_linear_regression(prompt(), torch.zeros(2), -torch.eye(2), 0.1),
)
case(
    "bayes prior_cov NaN",
    "prior_cov must be finite",
    lambda: est.bayes_linear_regression(prompt(), torch.zeros(2), torch.full((2, 2), NAN), 0.1),
)
case(
    "bayes noise_var inf",
    "noise_var must be",
    lambda: est.bayes_linear_regression(prompt(), torch.zeros(2), torch.eye(2), INF),
)
case(
    "dmmse pool of wrong width",
    r"pool must be a float tensor of shape \(M, 2\)",
    lambda: est.discrete_posterior_mean(prompt(), torch.zeros(4, 3), 0.1),
)
case(
    "dmmse pool a list", "pool must be a torch.Tensor", lambda: est.discrete_posterior_mean(prompt(), [[0.0, 0.0]], 0.1)
)
case(
    "dmmse pool NaN",
    "pool must be .* with finite values",
    lambda: est.discrete_posterior_mean(prompt(), torch.full((4, 2), NAN), 0.1),
)
case(
    "dmmse residuals overflow",
    "overflow float64",
    lambda: est.discrete_posterior_mean(prompt(), torch.full((2, 2), 1e200, dtype=torch.float64), 0.1),
)
case(
    "dmmse noise_var 0", "noise_var must be > 0", lambda: est.discrete_posterior_mean(prompt(), torch.zeros(4, 2), 0.0)
)

# --- every task family's sampler: sizes and generators ---------------------------------------------------------
FAMILIES = {
    "LinearRegression": LR,
    "NonparametricTasks": NonparametricTasks(dim=1, smoothness=1.0, n_basis=8),
    "SingleIndexTasks": SingleIndexTasks(dim=3, subspace_dim=2),
    "DiscreteFeatures": DiscreteFeatures(dim=3, probs=torch.tensor([0.5, 0.5])),
    "TeacherFeatures": TeacherFeatures(dim=2, k=2, width=4, n_whiten=64),
    "PromptPool": PromptPool(prompt(batch=4, n=4)),
}
BAD_SIZES = [
    ("batch 0", "batch must be >= 1", (0, 4)),
    ("batch 2.5", "batch must be an int", (2.5, 4)),
    ("batch True", "batch must be an int", (True, 4)),
    ("batch '2'", "batch must be an int", ("2", 4)),
    ("n -1", "n must be >= 0", (2, -1)),
    ("n 3.0", "n must be an int", (2, 3.0)),
]
for name, family in FAMILIES.items():
    for label, pattern, (batch, n) in BAD_SIZES:
        case(f"{name}.sample {label}", pattern, lambda f=family, b=batch, n=n: f.sample(b, n, gen()))
    case(
        f"{name}.sample without a generator",
        "generator must be a torch.Generator",
        lambda f=family: f.sample(2, 4, None),
    )
    case(
        f"{name}.sample with a seed for a generator",
        "generator must be a torch.Generator",
        lambda f=family: f.sample(2, 4, 0),
    )
case(
    "DiscreteFeatures.sample_with_labels batch 0",
    "batch must be >= 1",
    lambda: FAMILIES["DiscreteFeatures"].sample_with_labels(0, 3, gen()),
)
case("LinearRegression.sample active_dims 3 > dim", "active_dims must be <= dim", lambda: LR.sample(2, 3, gen(), 3))
case(
    "LinearRegression.sample weights of wrong shape",
    "weights must be a float tensor of shape",
    lambda: LR.sample(2, 3, gen(), weights=torch.zeros(2, 3)),
)
case(
    "LinearRegression.sample NaN weights",
    "weights must be .* finite values",
    lambda: LR.sample(2, 3, gen(), weights=torch.full((2, 2), NAN)),
)
case(
    "LinearRegression.sample_weights no generator",
    "generator must be a torch.Generator",
    lambda: LR.sample_weights(2, None),
)
case(
    "NonparametricTasks.coefficients batch 0",
    "batch must be >= 1",
    lambda: FAMILIES["NonparametricTasks"].coefficients(0, gen()),
)
case(
    "NonparametricTasks.sample weights wrong shape",
    "weights must be a float tensor of shape",
    lambda: FAMILIES["NonparametricTasks"].sample(2, 3, gen(), weights=torch.zeros(2, 7)),
)
case(
    "SingleIndexTasks.sample_directions no generator",
    "generator must be a torch.Generator",
    lambda: FAMILIES["SingleIndexTasks"].sample_directions(2, None),
)
case(
    "SingleIndexTasks.sample_links batch 0",
    "batch must be >= 1",
    lambda: FAMILIES["SingleIndexTasks"].sample_links(0, gen()),
)
case("TeacherFeatures.inputs count 0", "count must be >= 1", lambda: FAMILIES["TeacherFeatures"].inputs(0, gen()))
case("PromptPool.sample other n", "asked for n=3", lambda: FAMILIES["PromptPool"].sample(2, 3, gen()))
case(
    "a sample too large for memory",
    r"batch \* \(n \+ 1\) \* dim",
    lambda: LinearRegression(dim=1000).sample(10**6, 10**4, gen()),
)

# --- task families' construction -------------------------------------------------------------------------------
case("LinearRegression dim 0", r"dim must be in \[1, ", lambda: LinearRegression(dim=0))
case("LinearRegression dim 2.0", "dim must be an int", lambda: LinearRegression(dim=2.0))
case("LinearRegression noise_std -1", r"noise_std must be in \[0, ", lambda: LinearRegression(dim=2, noise_std=-1.0))
case("LinearRegression noise_std NaN", "noise_std must be", lambda: LinearRegression(dim=2, noise_std=NAN))
case(
    "LinearRegression prior_mean NaN",
    "prior_mean must be .* finite values",
    lambda: LinearRegression(dim=2, prior_mean=torch.tensor([NAN, 0.0])),
)
case(
    "LinearRegression prior_cov wrong shape",
    "prior_cov must be a float tensor of shape",
    lambda: LinearRegression(dim=2, prior_cov=torch.eye(3)),
)
case("LinearRegression x_cov a string", "x_cov must be", lambda: LinearRegression(dim=2, x_cov="identity"))
case("NonparametricTasks dim 0", r"dim must be in \[1, ", lambda: NonparametricTasks(dim=0, smoothness=1.0))
case("NonparametricTasks smoothness 0", "smoothness must be > 0", lambda: NonparametricTasks(dim=1, smoothness=0.0))
case(
    "NonparametricTasks basis 'wavelet'",
    "basis must be 'fourier' or 'bspline'",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, basis="wavelet"),
)
case(
    "NonparametricTasks n_basis 0",
    r"n_basis must be in \[1, ",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, n_basis=0),
)
case(
    "NonparametricTasks order -1",
    r"order must be in \[0, ",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, basis="bspline", order=-1),
)
case(
    "NonparametricTasks noiseless_query 'yes'",
    "noiseless_query must be True or False",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, noiseless_query="yes"),
)
case(
    "NonparametricTasks too many basis functions",
    "n_basis",
    lambda: NonparametricTasks(dim=2, smoothness=1.0, n_basis=10**9),
)
case(
    "NonparametricTasks.features wrong width",
    "x must be a float tensor of shape",
    lambda: FAMILIES["NonparametricTasks"].features(torch.zeros(3, 2)),
)
case(
    "SingleIndexTasks subspace_dim 0", r"subspace_dim must be in \[1, ", lambda: SingleIndexTasks(dim=3, subspace_dim=0)
)
case(
    "SingleIndexTasks max < min degree",
    "max_degree must be >= min_degree",
    lambda: SingleIndexTasks(dim=3, subspace_dim=1, min_degree=3, max_degree=2),
)
case(
    "SingleIndexTasks lead_mean NaN",
    "lead_mean must be",
    lambda: SingleIndexTasks(dim=3, subspace_dim=1, lead_mean=NAN),
)
case(
    "SingleIndexTasks subspace_seed -1",
    r"subspace_seed must be in \[0, 2\^63\)",
    lambda: SingleIndexTasks(dim=3, subspace_dim=1, subspace_seed=-1),
)
case(
    "SingleIndexTasks.link coeffs of wrong width",
    "coeffs must",
    lambda: FAMILIES["SingleIndexTasks"].link(torch.zeros(2, 3), torch.zeros(2, 5)),
)
case(
    "DiscreteFeatures more features than dim",
    "at most dim=2",
    lambda: DiscreteFeatures(dim=2, probs=torch.full((3,), 1 / 3)),
)
case(
    "DiscreteFeatures negative probability",
    "probs must be .*with positive values summing to 1",
    lambda: DiscreteFeatures(dim=3, probs=torch.tensor([1.5, -0.5])),
)
case(
    "DiscreteFeatures probs a matrix",
    r"probs must be a float tensor of shape \(K,\)",
    lambda: DiscreteFeatures(dim=3, probs=torch.full((2, 2), 0.25)),
)
case(
    "DiscreteFeatures seed 1.5",
    "seed must be an int",
    lambda: DiscreteFeatures(dim=3, probs=torch.tensor([1.0]), seed=1.5),
)
case("imbalanced_probs one feature", r"n_features must be in \[2, ", lambda: imbalanced_probs(1, 0.5))
case("imbalanced_probs dominant 1", "dominant must be in", lambda: imbalanced_probs(3, 1.0))
case("TeacherFeatures rank > k", "rank must be at most k", lambda: TeacherFeatures(dim=2, k=2, rank=3))
case("TeacherFeatures scale 0", r"scale must be in \(0, ", lambda: TeacherFeatures(dim=2, k=2, scale=0.0))
case("TeacherFeatures n_whiten 1", r"n_whiten must be in \[2, ", lambda: TeacherFeatures(dim=2, k=2, n_whiten=1))
case(
    "TeacherFeatures.features wrong width",
    "x must be a float tensor of shape",
    lambda: FAMILIES["TeacherFeatures"].features(torch.zeros(3, 3)),
)
case(
    "sigmoid_network particles wrong width",
    "particles must",
    lambda: sigmoid_network(torch.zeros(4), torch.zeros(5, 2), k=1),
)
case("sigmoid_network k 0", "k must be >= 1", lambda: sigmoid_network(torch.zeros(4, 4), torch.zeros(5, 2), k=0))
case("PromptPool of a tensor", "prompts must be an icl_utils.Prompt", lambda: PromptPool(torch.zeros(2, 3, 1)))
case("cardinal_bspline of a list", "x must be a torch.Tensor", lambda: cardinal_bspline([0.5], 2))
case("cardinal_bspline order 1.5", "order must be an int", lambda: cardinal_bspline(torch.zeros(2), 1.5))
case("hermite degree -1", r"degree must be in \[0, ", lambda: hermite(torch.zeros(2), -1))
case("hermite of a list", "z must be a torch.Tensor", lambda: hermite([0.0], 2))
# complex tensors once lost their imaginary part in silence; integer inputs made the B-splines inf or NaN
for _name in ("prior_cov", "x_cov"):
    case(
        f"LinearRegression complex {_name}",
        f"{_name} must be a float tensor",
        lambda n=_name: LinearRegression(dim=2, **{n: torch.eye(2) * (1 + 1j)}),
    )
case(
    "LinearRegression complex prior_mean",
    "prior_mean must be a float tensor",
    lambda: LinearRegression(dim=2, prior_mean=torch.ones(2) * 1j),
)
case(
    "DiscreteFeatures complex probs",
    "probs must be a float tensor",
    lambda: DiscreteFeatures(dim=3, probs=torch.ones(1) + 0j),
)
case(
    "NonparametricTasks.features of an int64 tensor",
    "x must be a float tensor",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, basis="bspline", n_basis=8).features(torch.tensor([[0], [1]])),
)
case("cardinal_bspline of an int64 tensor", "x must be a float tensor", lambda: cardinal_bspline(torch.arange(3), 2))
# costs of 2^order tensor operations (order 40 once hung) and allocations torch once tried (seconds, then out of memory)
case("cardinal_bspline order 40", r"order must be in \[0, 10\].*got 40", lambda: cardinal_bspline(torch.zeros(2), 40))
case(
    "NonparametricTasks order 40",
    r"order must be in \[0, 10\].*got 40",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, basis="bspline", order=40),
)
case("hermite degree 10**6", r"degree must be in \[0, 170\]", lambda: hermite(torch.zeros(2), 10**6))
case(
    "TeacherFeatures n_whiten 1e8 in d = 20",
    r"n_whiten \* dim = 2e\+09 values",
    lambda: TeacherFeatures(dim=20, k=2, n_whiten=10**8),
)
case(
    "DiscreteFeatures dim 1e6", r"dim must be in \[1, 16384\]", lambda: DiscreteFeatures(dim=10**6, probs=torch.ones(1))
)
case(
    "SingleIndexTasks dim 1e6", r"dim must be in \[1, 16384\]", lambda: SingleIndexTasks(dim=10**6, subspace_dim=10**6)
)
for _name, _draw in {
    "LinearRegression.sample_weights": lambda: LR.sample_weights(10**10, gen()),
    "NonparametricTasks.coefficients": lambda: FAMILIES["NonparametricTasks"].coefficients(10**10, gen()),
    "SingleIndexTasks.sample_directions": lambda: FAMILIES["SingleIndexTasks"].sample_directions(10**10, gen()),
    "SingleIndexTasks.sample_links": lambda: FAMILIES["SingleIndexTasks"].sample_links(10**10, gen()),
    "TeacherFeatures.inputs": lambda: FAMILIES["TeacherFeatures"].inputs(10**10, gen()),
}.items():
    case(f"{_name} 1e10 draws", r"(batch|count) \* \w+ = \S+ values", _draw)
case(
    "projection_mass of zero weights",
    "weights must not be all zero",
    lambda: projection_mass(torch.zeros(3, 4), torch.eye(4)[:, :2]),
)
case(
    "projection_mass NaN weights",
    "weights must be .* finite values",
    lambda: projection_mass(torch.full((3, 4), NAN), torch.eye(4)[:, :2]),
)
case(
    "projection_mass basis not orthonormal",
    "basis must have orthonormal columns",
    lambda: projection_mass(torch.ones(3, 4), torch.ones(4, 2)),
)
case(
    "principal_angles fewer rows than r",
    "weights must have rank",
    lambda: principal_angles(torch.ones(1, 4), torch.eye(4)[:, :2]),
)
case(
    "principal_angles rank-deficient weights",
    "weights must have rank",
    lambda: principal_angles(torch.ones(3, 4), torch.eye(4)[:, :2]),
)

# --- models ----------------------------------------------------------------------------------------------------
for field, value, pattern in (
    ("n_dims", 0, r"n_dims must be in \[1, "),
    ("n_context", -1, "n_context must be >= 0"),
    ("n_embd", 6.0, "n_embd must be an int"),
    ("n_layer", 0, r"n_layer must be in \[1, "),
    ("n_head", 3, "must be divisible by n_head"),
    ("mlp", "no", "mlp must be True or False"),
    ("mlp", 1, "mlp must be True or False"),
    ("dropout", 1.0, "dropout must be in"),
    ("dropout", NAN, "dropout must be"),
    ("dropout", "0.1", "dropout must be a real"),
):
    case(
        f"GPTConfig {field}={value!r}",
        pattern,
        lambda f=field, v=value: GPTConfig(**{"n_dims": 2, "n_context": 4, "n_embd": 8, "n_head": 2, f: v}),
    )
case("ICLTransformer of a dict", "cfg must be a GPTConfig", lambda: ICLTransformer({"n_dims": 2}))
case("GPT: prompt too long", "n_context=4", lambda: gpt()(prompt(n=5)))
case("GPT: prompt of another dim", "n_dims", lambda: gpt(d=3)(prompt()))
case("GPT: tokens for a prompt", "prompt must be an icl_utils.Prompt", lambda: gpt()(prompt().tokens()))
case("LTB mlp 'False'", "mlp must be True or False", lambda: LTB(2, mlp="False"))
case("LTB dim 0", r"dim must be in \[1, ", lambda: LTB(0))
case("LTB mlp_width 0", r"mlp_width must be in \[1, ", lambda: LTB(2, mlp_width=0))
case("LTB init_std -1", r"init_std must be in \[0, ", lambda: LTB(2, init_std=-1.0))
case("LTB: prompt of another dim", "dim=2", lambda: LTB(2)(prompt(d=3)))
case("LTB: empty context", "at least one context example", lambda: LTB(2)(prompt(n=0)))
case("GDBeta gamma NaN", "gamma must be .*finite values", lambda: GDBeta(2, gamma=torch.eye(2) * NAN))
case("GDBeta beta0 a list", "beta0 must be a torch.Tensor", lambda: GDBeta(2, beta0=[1.0, 2.0]))
case(
    "sample_moment_prompts a string task",
    "task must be a task family",
    lambda: sample_moment_prompts("lr", 2, 3, gen()),
)
case(
    "scaling_exponent replicates not a sequence",
    "replicates must be a sequence",
    lambda: risk.scaling_exponent([1, 2], 3, np.median),
)
case("GDBeta learnable_init 0", "learnable_init must be True or False", lambda: GDBeta(2, learnable_init=0))
case("GDBeta beta0 NaN", "beta0 must be .*finite values", lambda: GDBeta(2, beta0=torch.tensor([NAN, 0.0])))
case("GDBeta gamma 3x3", r"gamma must be a float tensor of shape \(2, 2\)", lambda: GDBeta(2, gamma=torch.eye(3)))
case("GDPlusPlus dim 'two'", "dim must be an int", lambda: GDPlusPlus("two"))
case("ltb_from_gd_beta of an LTB", "model must be a GDBeta", lambda: ltb_from_gd_beta(LTB(2)))
case("gd_beta_from_ltb of an LSA", "model must be an LTB with its MLP", lambda: gd_beta_from_ltb(LTB(2, mlp=False)))
case("attention_mask n 0", "n must be >= 1", lambda: attention_mask(0))
case("attention_mask dtype a string", "dtype must be a torch.dtype", lambda: attention_mask(3, dtype="float32"))
case("FeatureAttention width 0", r"width must be in \[1, ", lambda: FeatureAttention(2, 0, generator=gen()))
case(
    "FeatureAttention gamma_scale NaN",
    "gamma_scale must be",
    lambda: FeatureAttention(2, 4, generator=gen(), gamma_scale=NAN),
)
case("FeatureAttention generator a seed", "generator must be", lambda: FeatureAttention(2, 4, generator=3))
case("MLPAttention depth 0", r"depth must be in \[1, ", lambda: MLPAttention(2, 4, depth=0))
case("MLPAttention input_scale 0", r"input_scale must be in \(0, ", lambda: MLPAttention(2, 4, input_scale=0.0))
case("MLPAttention n_features 0", r"n_features must be in \[1, ", lambda: MLPAttention(2, 0))
case(
    "fit_attention_ridge: float64 model",
    "parameters are torch.float64",
    lambda: fit_attention_ridge(
        FeatureAttention(2, 4, generator=gen()).double(), LR, n_tasks=4, n=3, lam=1.0, generator=gen()
    ),
)
case(
    "fit_attention_ridge: model of another dim",
    "task.dim=2",
    lambda: fit_attention_ridge(FeatureAttention(3, 4, generator=gen()), LR, n_tasks=4, n=3, lam=1.0, generator=gen()),
)
case(
    "fit_attention_ridge: lam 0",
    "lam must be > 0",
    lambda: fit_attention_ridge(FeatureAttention(2, 4, generator=gen()), LR, n_tasks=4, n=3, lam=0.0, generator=gen()),
)
case(
    "one_step_feature_update: model of another dim",
    "task.dim=2",
    lambda: one_step_feature_update(
        FeatureAttention(3, 4, generator=gen()), LR, n_tasks=4, n=3, lr=1.0, weight_decay=1.0, generator=gen()
    ),
)
case(
    "one_step_feature_update: n_tasks 0",
    "n_tasks must be in \\[1, ",
    lambda: one_step_feature_update(
        FeatureAttention(2, 4, generator=gen()), LR, n_tasks=0, n=3, lr=1.0, weight_decay=1.0, generator=gen()
    ),
)

# --- training --------------------------------------------------------------------------------------------------
for field, value, pattern in (
    ("steps", 0, r"steps must be in \[1, "),
    ("steps", 1.5, "steps must be an int"),
    ("batch_size", 0, "batch_size must be >= 1"),
    ("n_context", -1, "n_context must be"),
    ("lr", 0.0, "lr must be > 0"),
    ("lr", NAN, "lr must be"),
    ("lr", "1e-3", "lr must be a"),
    ("schedule", "linear", "schedule must be"),
    ("bf16", "yes", "bf16 must be True"),
    ("cuda_graph", 1, "cuda_graph must be"),
    ("log_every", 0, "log_every must be >= 1"),
    ("curriculum", (1, 2), "curriculum must be a Curriculum"),
):
    case(f"TrainConfig {field}={value!r}", pattern, lambda f=field, v=value: cfg(**{f: v}))
case(
    "TrainConfig curriculum longer than n_context",
    "curriculum ends at",
    lambda: cfg(curriculum=Curriculum(dims=(1, 2), n_context=(2, 8), every=1)),
)
case("Curriculum dims=5", "dims must be a tuple", lambda: Curriculum(dims=5, n_context=(1, 2), every=1))
case("Curriculum dims reversed", "dims must be", lambda: Curriculum(dims=(3, 1), n_context=(1, 2), every=1))
case(
    "Curriculum n_context of floats",
    r"n_context must be a tuple \(>= 0, >= 0\)",
    lambda: Curriculum(dims=(1, 2), n_context=(1.0, 2.0), every=1),
)
case("Curriculum every 0", "every must be >= 1", lambda: Curriculum(dims=(1, 2), n_context=(1, 2), every=0))
case("Curriculum.at step -1", "step must be >= 0", lambda: Curriculum(dims=(1, 2), n_context=(1, 2), every=1).at(-1))
case(
    "train a model that does not read prompts",
    "model must take a Prompt",
    lambda: train(torch.nn.Linear(2, 1), LR, cfg(), generator=gen(), progress=False),
)
case(
    "train a model without parameters",
    "model must have parameters to train",
    lambda: train(torch.nn.Identity(), LR, cfg(), generator=gen(), progress=False),
)
case("train a GPT of another dim", "n_dims", lambda: train(gpt(d=3), LR, cfg(), generator=gen(), progress=False))
case(
    "train with a NaN parameter",
    "must have finite parameters before training",
    lambda: train(_nan_model(), LR, cfg(), generator=gen(), progress=False),
)
case(
    "train progress 'no'",
    "progress must be True or False",
    lambda: train(LTB(2), LR, cfg(), generator=gen(), progress="no"),
)
case("train desc 3", "desc must be a str", lambda: train(LTB(2), LR, cfg(), generator=gen(), progress=False, desc=3))
case(
    "train_ensemble of one module",
    "models must be a list or a tuple",
    lambda: train_ensemble(LTB(2), LR, cfg(), generator=gen(), progress=False),
)
case(
    "train_ensemble a model not a module",
    "models must be a non-empty list or tuple of torch.nn.Modules",
    lambda: train_ensemble([LTB(2), 3], LR, cfg(), generator=gen(), progress=False),
)
case(
    "train_ensemble a task not a task family",
    "task must be a non-empty list or tuple of task families",
    lambda: train_ensemble([LTB(2), LTB(2)], [LR, "lr"], cfg(), generator=gen(), progress=False),
)
case(
    "train_parallel a negative seed",
    r"seeds must be a non-empty sequence or numpy array of ints in \[0, 2\^63\)",
    lambda: train_parallel([LTB(2)], LR, cfg(), seeds=[-1], progress=False),
)
case(
    "train_parallel a model not a module",
    "models must be a non-empty list or tuple of torch.nn.Modules",
    lambda: train_parallel([LTB(2), "gpt"], LR, cfg(), seeds=[1, 2], progress=False),
)
case(
    "train_parallel a task not a task family",
    "task must be a non-empty list or tuple of task families",
    lambda: train_parallel([LTB(2), LTB(2)], [LR, 3], cfg(), seeds=[1, 2], progress=False),
)
case(
    "train_ensemble of two architectures",
    "models\\[1\\] differs in architecture",
    lambda: train_ensemble([LTB(2), LTB(2, mlp=False)], LR, cfg(), generator=gen(), progress=False),
)
case(
    "train_ensemble of GPTs whose query does and does not see itself",
    "models\\[1\\] differs in architecture",
    lambda: train_ensemble(
        [ICLTransformer(PAIRED), ICLTransformer(PAIRED_BLIND)], LR, cfg(), generator=gen(), progress=False
    ),
)
case(
    "train_ensemble three tasks for two models",
    "task must be one task, or one per model",
    lambda: train_ensemble([LTB(2), LTB(2)], [LR, LR, LR], cfg(), generator=gen(), progress=False),
)
case(
    "train_ensemble tasks of two dims",
    "the tasks must share one dimension",
    lambda: train_ensemble([LTB(2), LTB(2)], [LR, LinearRegression(dim=3)], cfg(), generator=gen(), progress=False),
)
case(
    "train_ensemble with a NaN parameter",
    "must have finite parameters before training",
    lambda: train_ensemble([LTB(2), _nan_model()], LR, cfg(), generator=gen(), progress=False),
)
case(
    "TrainHistory.smoothed window 0",
    "window must be >= 1",
    lambda: train(LTB(2), LR, cfg(), generator=gen(), progress=False).smoothed(0),
)

# --- gradient descent ------------------------------------------------------------------------------------------
quad = lambda t: t.square().sum()  # noqa: E731
case(
    "gd loss_fn not callable",
    "loss_fn must be a callable",
    lambda: gradient_descent(1.0, torch.ones(2), steps=1, lr=0.1, progress=False),
)
case(
    "gd init a list",
    "init must be a torch.Tensor or a dict",
    lambda: gradient_descent(quad, [1.0, 2.0], steps=1, lr=0.1, progress=False),
)
case(
    "gd init an int tensor",
    "init must be a floating-point tensor",
    lambda: gradient_descent(quad, torch.ones(2, dtype=torch.long), steps=1, lr=0.1, progress=False),
)
case(
    "gd init NaN",
    "init must be finite",
    lambda: gradient_descent(quad, torch.tensor([NAN, 1.0]), steps=1, lr=0.1, progress=False),
)
case(
    "gd init empty dict",
    "init must be a tensor or a non-empty dict",
    lambda: gradient_descent(quad, {}, steps=1, lr=0.1, progress=False),
)
case(
    "gd steps 0",
    r"steps must be in \[1, ",
    lambda: gradient_descent(quad, torch.ones(2), steps=0, lr=0.1, progress=False),
)
# sizes that once allocated a 40 GB loss history up front, then failed: refused at once, with the size
case(
    "gd steps 1e10",
    r"steps must be in \[1, 1e\+07\] \(config.MAX_STEPS\), got 10000000000",
    lambda: gradient_descent(quad, torch.ones(2), steps=10**10, lr=0.1, progress=False),
)
case("TrainConfig steps 1e10", r"steps must be in \[1, .*got 10000000000", lambda: cfg(steps=10**10))
case("two_layer_network steps 1e9", r"steps must be in \[1, ", lambda: est.two_layer_network(prompt(), steps=10**9))
case("gd_plus_plus steps 1e9", r"steps must be in \[1, ", lambda: est.gd_plus_plus(prompt(), 0.1, 0.0, steps=10**9))
case("gd_plus_plus complex matrix step", "lr must be", lambda: est.gd_plus_plus(prompt(), torch.eye(2) * 1j, 0.0))
case(
    "gd lr of a block negative",
    "lr must be a non-empty mapping from block names to numbers > 0 and finite",
    lambda: gradient_descent(lambda p: p["w"].sum(), {"w": torch.ones(2)}, steps=1, lr={"w": -0.1}, progress=False),
)
case(
    "gd lr a string",
    "lr must be a real number or a mapping",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr="0.1", progress=False),
)
case(
    "gd lr negative", "lr must be > 0", lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=-0.1, progress=False)
)
case(
    "gd record_every 0",
    "record_every must be >= 1",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, record_every=0, progress=False),
)
case(
    "gd record not callable",
    "record must be a callable",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, record=1, progress=False),
)
case(
    "gd hook not callable",
    "hook must be a callable",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, hook="x", progress=False),
)
case(
    "gd until not callable",
    "until must be a callable",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, until=True, progress=False),
)
case(
    "gd record returning a list",
    "record must return a dict",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, record=lambda t: [t], progress=False),
)
case(
    "gd progress 1",
    "progress must be True or False",
    lambda: gradient_descent(quad, torch.ones(2), steps=1, lr=0.1, progress=1),
)

# --- risk ------------------------------------------------------------------------------------------------------
case(
    "query_risk (B, 1) predictions",
    r"shape \(64,\), got \(64, 1\)",
    lambda: risk.query_risk(lambda p: p.y_query[:, None] * 0, LR, 3, 64, gen()),
)
case("query_risk a GPT instead of its predict", "pass model.predict", lambda: risk.query_risk(gpt(), LR, 4, 5, gen()))
case(
    "query_risk a list of predictions",
    "one prediction per prompt",
    lambda: risk.query_risk(lambda p: [0.0] * p.batch_size, LR, 3, 8, gen()),
)
case(
    "query_risk NaN predictions",
    "predict's predictions must be finite",
    lambda: risk.query_risk(lambda p: p.y_query * NAN, LR, 3, 8, gen()),
)
case("query_risk not callable", "predict must be a callable", lambda: risk.query_risk(3, LR, 3, 8, gen()))
case(
    "query_risk task a string", "task must be a task family", lambda: risk.query_risk(est.averaging, "lr", 3, 8, gen())
)
case("query_risk n_prompts 1", r"n_prompts must be in \[2, ", lambda: risk.query_risk(est.averaging, LR, 3, 1, gen()))
case("query_risk n -1", "n must be >= 0", lambda: risk.query_risk(est.averaging, LR, -1, 8, gen()))
case(
    "query_risk chunk_size 0",
    "chunk_size must be >= 1",
    lambda: risk.query_risk(est.averaging, LR, 3, 8, gen(), chunk_size=0),
)
case(
    "query_risk no generator",
    "generator must be a torch.Generator",
    lambda: risk.query_risk(est.averaging, LR, 3, 8, None),
)
case(
    "prefix_errors (B, 1) predictions",
    r"got \(3, 1\)",
    lambda: risk.prefix_errors(lambda p: p.y_query[:, None] * 0, prompt()),
)
case("prefix_errors not callable", "estimator must be a callable", lambda: risk.prefix_errors(None, prompt()))
case(
    "model_errors of a function", "model must be a torch.nn.Module", lambda: risk.model_errors(est.averaging, prompt())
)
case("model_errors chunk_size 1.5", "chunk_size must be an int", lambda: risk.model_errors(LTB(2), prompt(), 1.5))
case("mean_and_band z -1", "z must be > 0", lambda: risk.mean_and_band(torch.ones(3, 2), z=-1))
case("mean_and_band NaN errors", "errors must be .*finite values", lambda: risk.mean_and_band(torch.tensor([1.0, NAN])))
case("mean_and_band one prompt", "errors must be .*at least two rows", lambda: risk.mean_and_band(torch.ones(1, 2)))
case("mean_and_band a list", "errors must be a torch.Tensor", lambda: risk.mean_and_band([1.0, 2.0]))
case(
    "fit_slope one distinct n",
    "ns must hold at least two distinct values",
    lambda: risk.fit_slope([2, 2, 2], [1, 2, 3]),
)
case("fit_slope a zero risk", "risks must be positive", lambda: risk.fit_slope([1, 2], [1.0, 0.0]))
case("fit_slope lengths differ", "same length", lambda: risk.fit_slope([1, 2, 3], [1.0, 2.0]))
case("local_slopes repeated n", "ns must not repeat", lambda: risk.local_slopes([1, 1, 2], [1.0, 2.0, 3.0]))
case("examples_to_reach NaN risk", "positive and finite", lambda: risk.examples_to_reach([1, 2], [NAN, 1.0], 0.5))
case(
    "examples_to_reach unsorted ns", "ns must increase", lambda: risk.examples_to_reach([4, 1, 2], [1.0, 0.1, 0.1], 0.5)
)
case("examples_to_reach level 0", "level must be > 0", lambda: risk.examples_to_reach([1, 2], [1.0, 1.0], 0.0))
# a NaN or negative term once read as a sample complexity ("never reached", or negative), and then as an exponent
case("examples_needed NaN floor", "floor must be finite", lambda: risk.examples_needed(NAN, 1.0, 0.5))
case("examples_needed negative spread", "spread finite and >= 0", lambda: risk.examples_needed(0.1, -1.0, 0.5))
_NAN_RUNS = [np.array([[NAN, 1.0], [NAN, 2.0]]), np.array([[NAN, 1.0], [NAN, 3.0]])]
case(
    "scaling_exponent of a NaN floor",
    "floor must be finite",
    lambda: risk.scaling_exponent([1, 2], _NAN_RUNS, lambda r: risk.examples_needed(r[:, 0], r[:, 1], 0.5).mean()),
)
case(
    "exponent_difference of a NaN floor",
    "floor must be finite",
    lambda: risk.exponent_difference(
        ([1, 2], _NAN_RUNS, lambda r: risk.examples_needed(r[:, 0], r[:, 1], 0.5).mean()),
        ([1, 2], [np.ones((2, 2)), np.ones((2, 2))], np.mean),
    ),
)
# sizes that once ran for hours: refused at once, with the size
case(
    "bootstrap_interval reps 1e9",
    r"reps must be in \[10, ",
    lambda: risk.bootstrap_interval(np.mean, [np.ones(3)], reps=10**9),
)
case(
    "query_risk n_prompts 1e15",
    r"n_prompts must be in \[2, ",
    lambda: risk.query_risk(est.averaging, LR, 3, 10**15, gen()),
)
case(
    "mean_and_band complex errors",
    "errors must be a float tensor",
    lambda: risk.mean_and_band(torch.ones(3, dtype=torch.complex64)),
)
case(
    "bootstrap_interval one replicate", "at least 2 replicates", lambda: risk.bootstrap_interval(np.mean, [np.ones(1)])
)
case(
    "bootstrap_interval level 1",
    r"level must be in \(0, 1\)",
    lambda: risk.bootstrap_interval(np.mean, [np.ones(3)], level=1.0),
)
case(
    "RiskTerms.examples_needed NaN level",
    "level must be finite",
    lambda: risk.RiskTerms(np.ones(2), np.ones(2), np.ones(2)).examples_needed(NAN),
)
case(
    "RiskTerms of different lengths",
    r"spreads must be a float numpy array of shape \(T,\).*axes so far: T=2",
    lambda: risk.RiskTerms(np.ones(2), np.ones(3), np.ones(2)),
)
case(
    "RiskTerms with a NaN",
    "floors must be .*finite values",
    lambda: risk.RiskTerms(np.array([1.0, NAN]), np.ones(2), np.ones(2)),
)
case(
    "attention_risk_terms on a GPT",
    "AttentionOnFeatures",
    lambda: risk.attention_risk_terms(
        ICLTransformer(GPTConfig(n_dims=3, n_context=4, n_embd=8, n_layer=1, n_head=1)),
        FAMILIES["SingleIndexTasks"],
        4,
        8,
        gen(),
    ),
)
case(
    "attention_risk_terms one point",
    r"n_points must be in \[2, ",
    lambda: risk.attention_risk_terms(FeatureAttention(3, 4), FAMILIES["SingleIndexTasks"], 4, 1, gen()),
)
case(
    "held_out_errors bad predictor shape",
    "must predict shape",
    lambda: risk.held_out_errors(lambda p: lambda x: x.sum(-1)[:, :1], FAMILIES["SingleIndexTasks"], 4, 3, 5, gen()),
)
case(
    "paired_query_errors not a dict",
    "predictors must be a mapping",
    lambda: risk.paired_query_errors([np.mean], FAMILIES["SingleIndexTasks"], 4, 3, gen()),
)
case(
    "paired_query_errors a value not callable",
    "predictors must be a non-empty mapping from names to estimators",
    lambda: risk.paired_query_errors({"avg": est.averaging, "bad": 3}, FAMILIES["SingleIndexTasks"], 4, 3, gen()),
)
case(
    "query_risk_curves a value not callable",
    "predictors must be a non-empty mapping from names to estimators",
    lambda: risk.query_risk_curves({"avg": est.averaging, "bad": 3}, LR, [1, 2], 4, gen()),
)
case("RiskTerms of a list", "floors must be a numpy array", lambda: risk.RiskTerms([1.0, 2.0], np.ones(2), np.ones(2)))
case(
    "effective_ridge curve of the wrong length",
    "curve must be a float tensor of shape",
    lambda: risk.effective_ridge(torch.ones(3, dtype=torch.float64), prompt(), [0.1]),
)
case(
    "effective_ridge curve a list",
    "curve must be a torch.Tensor",
    lambda: risk.effective_ridge([1.0] * 5, prompt(), [0.1]),
)
case("swap_contexts of a tensor", "prompt must be an icl_utils.Prompt", lambda: swap_contexts(torch.zeros(3, 2)))
case(
    "swap_contexts shift a float",
    "shift must be an int",
    lambda: swap_contexts(FAMILIES["SingleIndexTasks"].sample(4, 3, gen()), 1.5),
)
case(
    "FixedFeatureAttention features not callable", "features must be a callable", lambda: FixedFeatureAttention(3, 1, 4)
)
case(
    "FixedFeatureAttention n_features 0",
    r"n_features must be in \[1, ",
    lambda: FixedFeatureAttention(FAMILIES["NonparametricTasks"].features, 1, 0),
)
case(
    "swap_contexts batch of one",
    "at least 2 prompts",
    lambda: swap_contexts(FAMILIES["SingleIndexTasks"].sample(1, 3, gen())),
)
case(
    "swap_contexts shift of the batch",
    "shift must be an int that moves",
    lambda: swap_contexts(FAMILIES["SingleIndexTasks"].sample(4, 3, gen()), 4),
)
case(
    "stage_one_gradients decreasing",
    "n_tasks must increase",
    lambda: stage_one_gradients(
        FeatureAttention(3, 4), FAMILIES["SingleIndexTasks"], n_tasks=(8, 4), n=3, generator=gen()
    ),
)
case(
    "kernel_ridge_fit queries of the wrong dim",
    r"inputs must be a float tensor of shape \(2, Q, 3\)",
    lambda: kernel_ridge_fit(FAMILIES["SingleIndexTasks"].sample(2, 3, gen()))(torch.zeros(2, 5, 4)),
)
case(
    "two_layer_network_fit queries of the wrong batch",
    r"inputs must be a float tensor of shape \(2, Q, 3\)",
    lambda: two_layer_network_fit(FAMILIES["SingleIndexTasks"].sample(2, 3, gen()), steps=1)(torch.zeros(3, 5, 3)),
)
case(
    "kernel_ridge_fit queries a list",
    "inputs must be a torch.Tensor",
    lambda: kernel_ridge_fit(FAMILIES["SingleIndexTasks"].sample(2, 3, gen()))([[0.0, 0.0, 0.0]]),
)
case(
    "SingleIndexTasks.conditional_mean wrong dim",
    "x must be a float tensor of shape",
    lambda: FAMILIES["SingleIndexTasks"].conditional_mean(torch.zeros(4, 2)),
)
case(
    "query_risk_curves of a list",
    "predictors must be a mapping",
    lambda: risk.query_risk_curves([est.averaging], LR, [1, 2], 4, gen()),
)
case(
    "query_risk_curves ns a number",
    "ns must be a sequence",
    lambda: risk.query_risk_curves({"avg": est.averaging}, LR, 3, 4, gen()),
)
case(
    "empirical_and_expected_risk of an LTB",
    "model must be an AttentionOnFeatures",
    lambda: risk.empirical_and_expected_risk(LTB(2), FAMILIES["PromptPool"], LR),
)

# --- dynamics --------------------------------------------------------------------------------------------------
case(
    "sa.predict q of another dimension",
    r"q must be a float tensor of shape \(2, 2\)",
    lambda: sa.predict(prompt(), torch.eye(3)),
)
case(
    "gd_plus_plus matrix step of another dimension",
    r"lr must be .*a float tensor of shape \(2, 2\)",
    lambda: est.gd_plus_plus(prompt(), torch.eye(3), 0.0),
)
case("sa.predict NaN q", "q must be .* finite values", lambda: sa.predict(prompt(), torch.full((2, 2), NAN)))
case(
    "sa.sample_counts NaN probability",
    "probs must be .*with positive values summing to 1",
    lambda: sa.sample_counts(torch.tensor([NAN, 1.0]), 3, 4, gen()),
)
case(
    "sa.sample_counts n_samples 0",
    r"n_samples must be in \[1, ",
    lambda: sa.sample_counts(torch.tensor([0.5, 0.5]), 3, 0, gen()),
)
case(
    "sa.feature_attention counts of wrong width",
    "counts",
    lambda: sa.feature_attention(torch.zeros(2, 2), torch.zeros(5, 3)),
)
case("sa.feature_attention w not square", "w must", lambda: sa.feature_attention(torch.zeros(2, 3), torch.zeros(5, 2)))
case(
    "sa.population_loss probs of wrong length",
    "probs must",
    lambda: sa.population_loss(torch.zeros(2, 2), torch.ones(5, 2), torch.tensor([0.2, 0.3, 0.5])),
)
case(
    "sa.run_gradient_descent lr 0",
    "lr must be > 0",
    lambda: sa.run_gradient_descent(torch.tensor([0.5, 0.5]), 4, steps=2, lr=0.0, n_samples=4, generator=gen()),
)
case(
    "sa.run_gradient_descent n_context -1",
    "n_context must be >= 1",
    lambda: sa.run_gradient_descent(torch.tensor([0.5, 0.5]), -1, steps=2, lr=1.0, n_samples=4, generator=gen()),
)
case("sa.convergence_steps eps 0", "eps must be > 0", lambda: sa.convergence_steps(np.arange(3), np.ones((3, 2)), 0.0))
case(
    "sa.convergence_steps NaN loss",
    "loss_k must be numbers without NaN",
    lambda: sa.convergence_steps(np.arange(3), np.full((3, 2), NAN), 0.1),
)
case("sa.bound_terms lr 0", "lr must be > 0", lambda: sa.bound_terms(np.array([4]), np.array([0.1]), 0.0))
case("sa.convergence_steps no steps", "steps must be", lambda: sa.convergence_steps(np.arange(0), np.ones((0, 2)), 0.1))
case(
    "sa.convergence_steps a row short", "loss_k must", lambda: sa.convergence_steps(np.arange(3), np.ones((2, 2)), 0.1)
)
case(
    "sa.phase_boundaries loss_k of another K",
    "loss_k",
    lambda: sa.phase_boundaries(np.arange(3), np.zeros((3, 3, 3)), np.zeros((3, 4)), feature=1, eps=0.1),
)
case("sa.bound_terms complex eps", "eps must", lambda: sa.bound_terms(np.array([4]), np.array([0.1 + 1j]), 1.0))
case(
    "sa.fit_bound n_features of another shape",
    "n_features must be",
    lambda: sa.fit_bound(np.ones((2, 2)), np.array([4.0, 8.0]), 0.01, 1.0),
)
case(
    "sa.doubling_increments times a row short",
    r"times must .*\(6, S\)",
    lambda: sa.doubling_increments([4, 6, 8, 12, 16, 32], np.ones((5, 2))),
)
case(
    "sa.concentration_quantile quantile 1.5",
    r"quantile must be in \(0, 1\)",
    lambda: sa.concentration_quantile(
        torch.zeros(2, 2), torch.tensor([0.5, 0.5]), 4, n_samples=4, quantile=1.5, generator=gen()
    ),
)
case(
    "sa.convergence_times a problem without n_context",
    "problems must be a non-empty tuple or list of \\(probs, n_context\\) pairs",
    lambda: sa.convergence_times(
        [torch.tensor([0.5, 0.5])], eps=[0.1], n_seeds=1, steps=2, lr=1.0, n_samples=4, generator=gen()
    ),
)
case(
    "sa.convergence_times n_context 0",
    "problems must be .*an int >= 1",
    lambda: sa.convergence_times(
        [(torch.tensor([0.5, 0.5]), 0)], eps=[0.1], n_seeds=1, steps=2, lr=1.0, n_samples=4, generator=gen()
    ),
)
case(
    "sa.convergence_times probs not summing to 1",
    "problems must be .*probabilities summing to 1",
    lambda: sa.convergence_times(
        [(torch.tensor([0.5, 0.6]), 4)], eps=[0.1], n_seeds=1, steps=2, lr=1.0, n_samples=4, generator=gen()
    ),
)
case(
    "sa.convergence_times n_seeds 0",
    r"n_seeds must be in \[1, ",
    lambda: sa.convergence_times(
        [(torch.tensor([0.5, 0.5]), 4)], eps=[0.1], n_seeds=0, steps=2, lr=1.0, n_samples=4, generator=gen()
    ),
)


def _feature_prompts():
    return mf.FeaturePrompts(torch.zeros(3, 4, 2), torch.zeros(3, 4, 1), torch.zeros(3, 4))


case("mf.init_particles width 0", r"width must be in \[1, ", lambda: mf.init_particles(0, 2, 1, gen()))
case("mf.init_particles no generator", "generator must be a torch.Generator", lambda: mf.init_particles(4, 2, 1, None))
case("mf.init_particles scale NaN", "scale must be", lambda: mf.init_particles(4, 2, 1, gen(), scale=NAN))
case(
    "mf.gp_perturbation size -1",
    r"size must be in \(0, ",
    lambda: mf.gp_perturbation(torch.zeros(4, 4), gen(), -1.0, 1.0),
)
case(
    "mf.gp_perturbation bandwidth 0",
    "bandwidth must be a real number, between 1e-150",
    lambda: mf.gp_perturbation(torch.zeros(4, 4), gen(), 0.1, 0.0),
)
case(
    "mf.BirthDeathPerturbation size -1",
    "size must be > 0",
    lambda: mf.BirthDeathPerturbation(lambda p: p.sum(), lambda c: torch.zeros(c, 4), gen(), size=-1.0),
)
case(
    "mf.BirthDeathPerturbation bandwidth 0",
    "bandwidth must be a real number, between 1e-150",
    lambda: mf.BirthDeathPerturbation(lambda p: p.sum(), lambda c: torch.zeros(c, 4), gen(), bandwidth=0.0),
)
case(
    "mf.BirthDeathPerturbation fraction 2",
    "fraction must be in",
    lambda: mf.BirthDeathPerturbation(lambda p: p.sum(), lambda c: torch.zeros(c, 4), gen(), fraction=2.0),
)
case(
    "mf.BirthDeathPerturbation sample_init not callable",
    "sample_init must be a callable",
    lambda: mf.BirthDeathPerturbation(lambda p: p.sum(), None, gen()),
)
case(
    "mf.BirthDeathPerturbation no generator",
    "generator must be a torch.Generator",
    lambda: mf.BirthDeathPerturbation(lambda p: p.sum(), lambda c: torch.zeros(c, 4), None),
)
case(
    "mf.run_gradient_descent model 'mlp'",
    "model must be 'attention' or 'static' or 'modified', got 'mlp'",
    lambda: mf.run_gradient_descent("mlp", _feature_prompts(), torch.zeros(4, 4), steps=1, eta=0.1),
)
case(
    "mf.run_gradient_descent eta 0",
    r"eta must be in \(0, ",
    lambda: mf.run_gradient_descent("static", _feature_prompts(), torch.zeros(4, 4), steps=1, eta=0.0),
)
case(
    "mf.run_gradient_descent data not prompts",
    "data must be a FeaturePrompts",
    lambda: mf.run_gradient_descent("static", torch.zeros(3, 2), torch.zeros(4, 4), steps=1, eta=0.1),
)
case(
    "mf.attention_loss gamma of another number of students",  # the sizes particles fixed, not gamma's own k
    r"gamma must be a float tensor of shape \(\*#S, k, k\), with finite values, got .* \(3, 1, 1\) "
    r"\(axes so far: S=\(2,\) from [a-z]+\)$",
    lambda: mf.attention_loss(torch.zeros(2, 5, 4), torch.zeros(3, 1, 1), torch.zeros(7, 1), torch.zeros(7, 2)),
)
case(
    "mf.run_gradient_descent record with the optimal gamma",
    "record is for the static and modified models",
    lambda: mf.run_gradient_descent(
        "attention", _feature_prompts(), torch.zeros(4, 4), steps=1, eta=0.1, gamma="optimal", record=lambda p: {}
    ),
)
case(
    "mf.descent_rotation targets of another k",  # the student's k = p - d - 1 = 1 here
    r"x must be .* \(K, p-k-1\), with finite values, got .* \(3, 2\) "
    r"\(axes so far: p=4 from student, K=3 .* k=2 from targets\)$",
    lambda: mf.descent_rotation(torch.zeros(4, 4), torch.zeros(3, 2), torch.zeros(3, 2)),
)
case(
    "mf.path_losses a rotation of another k",  # was a silent number: the mixture split the student at the wrong k
    r"x must be .* \(K, p-k-1\), with finite values, got .* \(5, 2\) "
    r"\(axes so far: p=4 .* k=2 from rotation, K=5 from targets\)$",
    lambda: mf.path_losses(
        torch.zeros(4, 4), torch.zeros(3, 4), torch.eye(2), [0.0, 0.5], torch.zeros(5, 1), torch.zeros(5, 2)
    ),
)
case(
    "mf.icl_loss one point per prompt",
    "at least 2 points",
    lambda: mf.icl_loss(torch.zeros(4, 4), torch.eye(1), torch.zeros(3, 1, 2), torch.zeros(3, 1)),
)
case(
    "mf.FeaturePrompts y of wrong shape",
    r"y must be a float tensor of shape \(P, n\)",
    lambda: mf.FeaturePrompts(torch.zeros(3, 4, 2), torch.zeros(3, 4, 1), torch.zeros(3, 5)),
)
case(
    "mf.particle_spread float groups",
    "groups must be an integer tensor",
    lambda: mf.particle_spread(torch.zeros(4, 3), torch.zeros(4)),
)
case(
    "mf.static_loss centered 'no'",
    "centered must be True or False",
    lambda: mf.static_loss(torch.zeros(4, 4), torch.zeros(3, 1), torch.zeros(3, 2), k=1, centered="no"),
)
case(
    "mf.optimal_gamma ridge -1",
    "ridge must be > 0",
    lambda: mf.optimal_gamma(torch.zeros(4, 4), torch.zeros(3, 2), k=1, ridge=-1.0),
)
case(
    "gd_beta.gd_beta_flow steps 0",
    r"steps must be in \[1, ",
    lambda: gd_beta.gd_beta_flow(LR, 4, {"beta0": torch.zeros(2), "gamma": torch.eye(2)}, steps=0, lr=0.1),
)
case(
    "gd_beta.gd_beta_hessian gamma 3x3",
    "gamma must",
    lambda: gd_beta.gd_beta_hessian(LR, 4, torch.zeros(2), torch.eye(3)),
)
# issue 46's findings in the dynamics: each was accepted (or failed late, deep in torch) before
case(
    "mf.FeaturePrompts NaN x",
    "x must be .* finite values",
    lambda: mf.FeaturePrompts(torch.full((3, 4, 2), NAN), torch.zeros(3, 4, 1), torch.zeros(3, 4)),
)
case(
    "mf.FeaturePrompts integer y",
    "y must be a float tensor",
    lambda: mf.FeaturePrompts(torch.zeros(3, 4, 2), torch.zeros(3, 4, 1), torch.zeros(3, 4, dtype=torch.int64)),
)
case(
    "mf.FeaturePrompts.sample count 1e8",  # the teacher's hidden layer at 4e8 points: 16e8 values
    r"count \* length \* max\(teacher.dim, teacher.width, teacher.k\) = 1.6e\+09 values",
    lambda: mf.FeaturePrompts.sample(FAMILIES["TeacherFeatures"], 10**8, 4, gen()),
)
case(
    "mf.BirthDeathPerturbation NaN reference",  # every student would look converged: birth-death off
    "reference must be .* finite values",
    lambda: mf.BirthDeathPerturbation(
        lambda p: p.sum(), lambda c: torch.zeros(c, 4), gen(), reference=torch.tensor([NAN, 1.0])
    ),
)
case(
    "sa.sample_counts n_samples 1e7 of 1000 draws",  # 1e10 draws: torch ran out of memory after seconds
    r"n_samples \* max\(n_context, K\) = 1e\+10 values",
    lambda: sa.sample_counts(torch.tensor([0.5, 0.5]), 1000, 10**7, gen()),
)
case(
    "sa.sample_counts complex probs",  # the imaginary part was dropped with a warning
    "probs must be a float tensor",
    lambda: sa.sample_counts(torch.tensor([0.5 + 1j, 0.5]), 3, 4, gen()),
)
case(
    "sa.run_gradient_descent complex probs array",
    "probs must be",
    lambda: sa.run_gradient_descent(np.array([0.5 + 1j, 0.5]), 4, steps=2, lr=1.0, n_samples=4, generator=gen()),
)
case(
    "gd_beta.gd_beta_hessian complex beta0",
    "beta0 must be a float tensor",
    lambda: gd_beta.gd_beta_hessian(LR, 4, torch.zeros(2, dtype=torch.complex64), torch.eye(2)),
)
case(
    "mf.gp_perturbation integer particles",  # the displacements were cut to integers: all zero
    "particles must be a float tensor",
    lambda: mf.gp_perturbation(torch.arange(12).reshape(4, 3), gen(), 0.1, 1.0),
)
case(
    "sa.convergence_steps complex loss_k",  # numpy compares complex numbers by their real parts
    "loss_k must be a real numpy array",
    lambda: sa.convergence_steps(np.arange(3), np.full((3, 2), 0.001 + 1j), 0.1),
)
case(
    "sa.fit_bound complex times",  # cut to the real part, with a ComplexWarning
    "times must be a real numpy array",
    lambda: sa.fit_bound(np.array([10.0 + 1j, 20.0]), np.array([4.0, 8.0]), 0.1, 1.0),
)
case(
    "gd_beta.gd_beta_flow complex gamma",
    "gamma must be a float tensor",
    lambda: gd_beta.gd_beta_flow(LR, 4, {"beta0": torch.zeros(2), "gamma": torch.eye(2) * 1j}, steps=1, lr=0.1),
)

# --- exact risks -----------------------------------------------------------------------------------------------
case("optimal_gd_lr n 0", "n must be >= 1", lambda: exact.optimal_gd_lr(0, 2, 0.1))
case("optimal_gd_lr prior_var 0", r"prior_var must be in \(0, ", lambda: exact.optimal_gd_lr(4, 2, 0.1, 0.0))
case(
    "gd_beta_risk of a nonparametric task",
    "task must be a LinearRegression",
    lambda: exact.gd_beta_risk(FAMILIES["NonparametricTasks"], 4, torch.zeros(1), torch.eye(1)),
)
case(
    "gd_beta_risk gamma of wrong size",
    r"gamma must be a float tensor of shape \(2, 2\)",
    lambda: exact.gd_beta_risk(LR, 4, torch.zeros(2), torch.eye(3)),
)
case(
    "optimal_gd_step beta0 of wrong length",
    r"beta0 must be a float tensor of shape \(2,\)",
    lambda: exact.optimal_gd_step(LR, 4, torch.zeros(3)),
)
case(
    "best_gd_beta_risk beta0 NaN",
    "beta0 must be .*finite values",
    lambda: exact.best_gd_beta_risk(LR, 4, torch.tensor([NAN, 0.0])),
)
case(
    "lsa_risk u of wrong length",
    r"u must be a float tensor of shape \(3,\)",
    lambda: exact.lsa_risk(LR, 4, torch.zeros(2), torch.zeros(3, 2)),
)
case(
    "gd_beta_risk beta0 of wrong length",
    r"beta0 must be a float tensor of shape \(2,\)",
    lambda: exact.gd_beta_risk(LR, 4, torch.zeros(3), torch.eye(2)),
)
case(
    "gd_beta_risk NaN gamma",
    "gamma must be .* with finite values",
    lambda: exact.gd_beta_risk(LR, 4, torch.zeros(2), torch.full((2, 2), NAN)),
)
case("optimal_gd_step n 1.5", "n must be an int", lambda: exact.optimal_gd_step(LR, 1.5))
case("bayes_risk n_mc 1", r"n_mc must be in \[2, ", lambda: exact.bayes_risk(LR, 4, gen(), n_mc=1))
case(
    "bayes_risk a task without posterior_mean",
    "task must",
    lambda: exact.bayes_risk(FAMILIES["SingleIndexTasks"], 4, gen()),
)
case(
    "attention_gamma features not callable",
    "features must be a callable",
    lambda: exact.attention_gamma(None, FAMILIES["NonparametricTasks"], 4),
)
case(
    "profiled_attention_risk of a linear task",
    "features must take one argument",
    lambda: exact.profiled_attention_risk(LR.sample, LR, 4),
)
case(
    "AttentionMoments.of a linear task",
    "task must be a NonparametricTasks",
    lambda: exact.AttentionMoments.of(FAMILIES["NonparametricTasks"].features, LR),
)
case(
    "attention_gamma points 0",
    "points must be >= 1",
    lambda: exact.attention_gamma(FAMILIES["NonparametricTasks"].features, FAMILIES["NonparametricTasks"], 4, points=0),
)
case(
    "attention_risk NaN gamma",
    "gamma must be .* with finite values",
    lambda: exact.attention_risk(
        FAMILIES["NonparametricTasks"].features, FAMILIES["NonparametricTasks"], 4, torch.full((8, 8), NAN)
    ),
)
case(
    "attention_risk gamma of wrong size",
    r"gamma must be a float tensor of shape \(8, 8\)",
    lambda: exact.attention_risk(
        FAMILIES["NonparametricTasks"].features, FAMILIES["NonparametricTasks"], 4, torch.eye(3)
    ),
)

# --- settings --------------------------------------------------------------------------------------------------
case("make_generator 'gpu'", "device='gpu' is not a device", lambda: config.make_generator(0, "gpu"))
case("make_generator seed 1.5", "seed must be an int", lambda: config.make_generator(1.5, "cpu"))
case("make_generator device 3.0", "device must be", lambda: config.make_generator(0, 3.0))
case("seed_everything '3'", "seed must be an int", lambda: config.seed_everything("3"))
case("seed_everything True", "seed must be an int", lambda: config.seed_everything(True))
if not torch.cuda.is_available():
    case("make_generator 'cuda' without CUDA", "asks for CUDA", lambda: config.make_generator(0, "cuda"))
if not torch.backends.mps.is_available():
    case("make_generator 'mps' without MPS", "asks for MPS", lambda: config.make_generator(0, "mps"))

# --- figures (icl_utils.plotting) and ledgers (icl_utils.claims) -------------------------------------------------
ERRORS = torch.rand(4, 5, generator=gen())
NS = (4, 8, 16)
case("plot_error_curves a list of curves", "curves must be a mapping", lambda: plotting.plot_error_curves([ERRORS]))
case(
    "plot_error_curves numpy curves",
    "curves must be a non-empty mapping from names to finite float tensors",
    lambda: plotting.plot_error_curves({"a": ERRORS.numpy()}),
)
case(
    "plot_error_curves NaN curve",
    "curves must be a non-empty mapping from names to finite",
    lambda: plotting.plot_error_curves({"a": torch.full((4, 5), NAN)}),
)
case(
    "plot_error_curves normalize 0",
    "normalize must be > 0",
    lambda: plotting.plot_error_curves({"a": ERRORS}, normalize=0),
)
case(
    "plot_error_curves ylim of one",
    "ylim must be a pair",
    lambda: plotting.plot_error_curves({"a": ERRORS}, ylim=(1.0,)),
)
case(
    "plot_error_curves ylim 0 on a log axis",
    "ylim must be > 0 on a log axis",
    lambda: plotting.plot_error_curves({"a": ERRORS}, ylim=(0.0, 1.0), logy=True),
)
case("plot_error_curves logy 'yes'", "logy must be", lambda: plotting.plot_error_curves({"a": ERRORS}, logy="yes"))
case(
    "plot_error_curves x 2-d",
    "x must be a non-empty 1-D",
    lambda: plotting.plot_error_curves({"a": ERRORS}, x=np.ones((5, 2))),
)
case(
    "plot_error_curves reference a number",
    "reference must be a mapping",
    lambda: plotting.plot_error_curves({"a": ERRORS}, reference=0.5),
)
case(
    "plot_training_loss a list",
    "histories must be a non-empty mapping",
    lambda: plotting.plot_training_loss({"a": [1.0, 2.0]}),
)
case("plot_training_loss empty", "histories must be a non-empty mapping", lambda: plotting.plot_training_loss({}))
case(
    "plot_attention_heatmaps empty",
    "attn must be a non-empty",
    lambda: plotting.plot_attention_heatmaps([], [], axes=[]),
)
case(
    "plot_lines lengths",
    r"series\['a'\] must have shape \(3,\)",
    lambda: plotting.plot_lines(np.arange(3), {"a": np.ones(4)}),
)
case(
    "plot_lines style keyword",
    r"styles\['a'\] must hold keywords of a line",
    lambda: plotting.plot_lines(np.arange(3), {"a": np.ones(3)}, styles={"a": {"colour": "r"}}),
)
case(
    "plot_lines zeros on a log axis",
    r"series\['a'\] must hold a finite value > 0",
    lambda: plotting.plot_lines(np.arange(3), {"a": np.zeros(3)}, logy=True),
)
case(
    "plot_rate_curves empty",
    "curves must be a non-empty mapping",
    lambda: plotting.plot_rate_curves(NS, {}, oracle={}, oracle_n=[4]),
)
case(
    "plot_rate_curves oracle without standard errors",
    r"oracle\[1.0\] \(mean and standard error\) must have shape \(2, 2\)",
    lambda: plotting.plot_rate_curves(NS, {1.0: np.ones(3)}, oracle={1.0: np.ones(2)}, oracle_n=[4, 8]),
)
case(
    "plot_rate_curves curve too short",
    r"curves\[1.0\] must have shape \(3,\)",
    lambda: plotting.plot_rate_curves(NS, {1.0: np.ones(2)}, oracle={1.0: np.ones((2, 2))}, oracle_n=[4, 8]),
)
case(
    "plot_feature_maps rate inf",
    "rate must be > 0 and finite",
    lambda: plotting.plot_feature_maps(NS, {"a": np.ones(3)}, rate=INF),
)
case(
    "plot_feature_maps n = 0 on a log axis",
    "ns must be .* > 0",
    lambda: plotting.plot_feature_maps([0, 4, 8], {"a": np.ones(3)}, rate=0.5),
)
case(
    "plot_feature_maps all-NaN curve",
    r"curves\['a'\] must hold a finite value",
    lambda: plotting.plot_feature_maps(NS, {"a": np.full(3, NAN)}, rate=0.5),
)
case(
    "plot_pretraining_sets without gap",
    "curves must be a non-empty mapping from labels to mappings of ratio, empirical and gap",
    lambda: plotting.plot_pretraining_sets({"a": {"ratio": np.ones(2), "empirical": np.ones((2, 3))}}, noise_var=0.1),
)
case(
    "plot_pretraining_sets a ratio 0 on a log axis",
    "curves must be .* the ratios finite numbers > 0",
    lambda: plotting.plot_pretraining_sets(
        {"a": {"ratio": np.array([0.0, 1.0]), "empirical": np.ones((2, 3)), "gap": np.ones((2, 3))}}, noise_var=0.1
    ),
)
case(
    "plot_pretraining_sets noise_var '0.1'",
    "noise_var must be a real number",
    lambda: plotting.plot_pretraining_sets(
        {"a": {"ratio": np.ones(2), "empirical": np.ones((2, 3)), "gap": np.ones((2, 3))}}, noise_var="0.1"
    ),
)
case(
    "plot_learner_comparison no ns",
    "ns must be a non-empty",
    lambda: plotting.plot_learner_comparison([], {"d": ({"a": np.ones(0)}, {})}),
)
case(
    "plot_learner_comparison a panel not a pair",
    r"panels must be a non-empty mapping from titles to pairs \(exact, monte_carlo\)",
    lambda: plotting.plot_learner_comparison(NS, {"d": {"a": np.ones(3)}}),
)
case(
    "plot_learner_comparison a pair of lists",
    r"panels must be .* pairs \(exact, monte_carlo\), two mappings",
    lambda: plotting.plot_learner_comparison(NS, {"d": ([np.ones(3)], [])}),
)
case(
    "plot_learner_comparison a panel without curves",
    "panels must be .* at least one curve",
    lambda: plotting.plot_learner_comparison(NS, {"d": ({}, {})}),
)
case(
    "plot_task_diversity empty",
    "risks must be a non-empty mapping",
    lambda: plotting.plot_task_diversity([1, 2], {}, gaussian_best=0.1, bayes=0.05),
)
case(
    "plot_task_diversity ylim 0 on a log axis",
    "ylim must be a pair .* > 0",
    lambda: plotting.plot_task_diversity([1, 2], {"a": np.ones(2)}, gaussian_best=0.1, bayes=0.05, ylim=(0, 5)),
)
case(
    "plot_model_losses lengths",
    r"losses\['static'\] must have shape",
    lambda: plotting.plot_model_losses(np.arange(4), {"static": np.ones(3)}),
)
case(
    "plot_escape_times lengths",
    r"escapes\['static'\] must have shape",
    lambda: plotting.plot_escape_times(np.ones(3), {"static": np.ones(2)}, steps=10),
)
case(
    "plot_escape_by_variant empty",
    "escapes must be a non-empty mapping",
    lambda: plotting.plot_escape_by_variant({}, steps=10),
)
case(
    "plot_escape_by_variant steps 0",
    "steps must be >= 1",
    lambda: plotting.plot_escape_by_variant({"a": np.ones(2)}, steps=0),
)
case(
    "plot_readout_errors empty",
    "learned must be a non-empty mapping",
    lambda: plotting.plot_readout_errors(np.arange(3), {}, {}, {}),
)
case(
    "plot_subspace_mass share 1.5",
    r"trained must be .* in \[0, 1\]",
    lambda: plotting.plot_subspace_mass(["a"], [0.5], [1.5]),
)
case(
    "plot_subspace_mass labels a str",
    "labels must be a list or a tuple",
    lambda: plotting.plot_subspace_mass("ab", [0.5, 0.2], [0.5, 0.3]),
)
case(
    "plot_floor_by_width point a number",
    r"points must be a mapping from names to points \(x, y\)",
    lambda: plotting.plot_floor_by_width([1, 2], {"a": np.ones((2, 2))}, points={"p": 3.0}),
)
case(
    "plot_risk_against_examples no ns",
    "ns must be a non-empty",
    lambda: plotting.plot_risk_against_examples([], {}, {}, prompt_free={1: 0.5}, rank=1, rank_dim=4),
)
case(
    "plot_subspace_recovery no exponents",
    "exponents must be a non-empty",
    lambda: plotting.plot_subspace_recovery({2: [1, 2]}, {2: np.ones((2, 2))}, exponents=()),
)
case(
    "plot_sample_complexity values of another length",
    r"panels\['d'\]\[1\]\['a'\] must have shape \(2,\) or \(2, 3\)",
    lambda: plotting.plot_sample_complexity({"d": ([1, 2], {"a": np.ones(3)})}),
)
case(
    "plot_sample_complexity a panel not a pair",
    r"panels must be a non-empty mapping from titles to panels \(xs, \{learner: values\}\)",
    lambda: plotting.plot_sample_complexity({"d": [1, 2]}),
)
case(
    "plot_sample_complexity xs 0 on a log axis",
    "panels must be .* xs finite numbers > 0",
    lambda: plotting.plot_sample_complexity({"d": ([0, 2], {"a": np.ones(2)})}),
)
case(
    "plot_error_panels an empty panel",
    "panels must be a non-empty mapping from titles to a non-empty mapping from names to finite float tensors",
    lambda: plotting.plot_error_panels({"p": {}}),
)
case(
    "plot_risk_against_signal empty",
    "risks must be a non-empty mapping",
    lambda: plotting.plot_risk_against_signal([1.0, 2.0], {}),
)
case(
    "plot_gd_beta_reading numpy predictions",
    "pred_read must be a torch.Tensor",
    lambda: plotting.plot_gd_beta_reading(np.ones(3), np.ones(3), torch.eye(2), torch.eye(2)),
)
case(
    "plot_gd_beta_reading k 0",
    "k must be >= 1",
    lambda: plotting.plot_gd_beta_reading(torch.ones(3), torch.ones(3), torch.eye(2), torch.eye(2), k=0),
)
case("plot_gap_scaling empty", "trained must be a non-empty mapping", lambda: plotting.plot_gap_scaling(NS, {}, {}))
case(
    "plot_risk_ratios_against_n a ratio missing",
    r"ratios must give every method .* missing \[\(1.0, 8\)\]",
    lambda: plotting.plot_risk_ratios_against_n(
        [4, 8], {(1.0, 4): {"GD-β": 1.0, "GD-0": 1.1, "GD++": 1.2}}, snrs=[1.0]
    ),
)
case(
    "plot_gd_records a list for a run",
    "histories must be a non-empty mapping",
    lambda: plotting.plot_gd_records({"a": [1.0]}, keys=["loss"]),
)
case(
    "plot_gd_records keys a str",
    "keys must be a tuple or a list",
    lambda: plotting.plot_gd_records({"a": GDHistory(np.arange(3), {"loss": np.ones(3)})}, keys="loss"),
)
case(
    "plot_feature_errors without loss_k",
    r"histories must be .* records\['loss_k'\]",
    lambda: plotting.plot_feature_errors({"a": GDHistory(np.arange(3), {"loss": np.ones(3)})}),
)
case(
    "plot_attention_snapshots at empty",
    "at must be a non-empty",
    lambda: plotting.plot_attention_snapshots(np.arange(3), np.ones((3, 2, 2)), at=[]),
)
case(
    "plot_phase_weights feature 5 of 2",
    "feature and other must be < K = 2",
    lambda: plotting.plot_phase_weights(np.arange(3), np.ones((3, 2, 2)), feature=5, other=1, boundaries=[1, 2, 3]),
)
case(
    "plot_convergence_times without times",
    "panels must be a non-empty sequence of panels, mappings with x, xlabel and times",
    lambda: plotting.plot_convergence_times([{"x": [1, 2], "xlabel": "K"}]),
)
case(
    "plot_convergence_times x 0 on a log axis",
    "panels must be a non-empty sequence of panels, .* x finite numbers > 0",
    lambda: plotting.plot_convergence_times([{"x": [0, 2], "xlabel": "K", "times": {"a": np.ones((2, 3))}}]),
)
case(
    "plot_convergence_times times on their own x with a 0",
    r"panels\[0\]\['times'\]\['a'\]\[0\] must be finite numbers > 0",
    lambda: plotting.plot_convergence_times([{"x": [1, 2], "xlabel": "K", "times": {"a": ([0, 2], np.ones((2, 3)))}}]),
)
case(
    "plot_training_speed without rows",
    "results must be a non-empty sequence of .*results files",
    lambda: plotting.plot_training_speed([{"device": "CPU", "config": "small"}]),
)
case("plot_training_speed no results", "results must be a non-empty sequence", lambda: plotting.plot_training_speed([]))
case(
    "changed_since a bad commit ending in +",
    "commit must be a commit hash",
    lambda: claims.changed_since("abc; rm -rf .+"),
)
case("claims.overview ledgers None", "ledgers must be a mapping", lambda: claims.overview(["00_x"], None))
case("claims.table of None", "claims must be a sequence", lambda: claims.table(None))
case("claims.load folder 3", "folder must be", lambda: claims.load(3))


# issue 46, a fresh campaign: each row was silent (a NaN, a wrong or empty result), a deep error (torch's, an
# AttributeError) or an error that did not name the argument before
case(
    "mf.readout_error 2-D g of another K",  # named x alone: the union of g's shapes lost K's record
    r"x must be .* \(axes so far: S=\(\) from particles, K=9 from g\)$",
    lambda: mf.readout_error(torch.zeros(4, 4), torch.ones(9, 2), torch.zeros(10, 2)),
)
case(
    "mf.static_loss targets of another K",
    "K=9 from targets",
    lambda: mf.static_loss(torch.zeros(4, 4), torch.ones(9, 1), torch.zeros(10, 2), 1),
)
case(
    "mf.readout_error centered constant g",  # was NaN
    r"g must not be constant over the K inputs \(Var g = 0, centered=True\)$",
    lambda: mf.readout_error(torch.randn(4, 4, generator=gen()), torch.full((10,), 0.1), torch.randn(10, 2), True),
)
case(
    "mf.readout_error centered constant column",  # was NaN in that column
    r"g must not be constant .* but its column\(s\) \[0\] are",
    lambda: mf.readout_error(
        torch.randn(4, 4, generator=gen()),
        torch.stack([torch.ones(10), torch.arange(10.0)], 1),
        torch.randn(10, 2),
        True,
    ),
)
case(
    "mf.readout_error g zero",  # was NaN
    r"g must not be 0 at every input",
    lambda: mf.readout_error(torch.randn(4, 4, generator=gen()), torch.zeros(10), torch.randn(10, 2)),
)
case(
    "mf.attention_loss gamma of another k",  # named x, as sigmoid_network's
    r"x must be .* \(\*#S, K, p-k-1\).* k=2 from gamma",
    lambda: mf.attention_loss(torch.zeros(4, 4), torch.eye(2), torch.zeros(10, 1), torch.zeros(10, 2)),
)
case(
    "mf.icl_loss gamma of another k",
    "k=2 from gamma",
    lambda: mf.icl_loss(torch.zeros(4, 4), torch.eye(2), torch.zeros(3, 5, 2), torch.zeros(3, 5)),
)
case(
    "mf.critical_point NaN init",  # was torch's RuntimeError inside L-BFGS
    "init must be .* with finite values",
    lambda: mf.critical_point(torch.full((4, 4), NAN), torch.zeros(3, 1), torch.zeros(3, 2)),
)
case(
    "sa.population_loss NaN probs",  # was a NaN loss
    "probs must be .* summing to 1",
    lambda: sa.population_loss(torch.eye(2), torch.ones(4, 2), torch.tensor([NAN, 0.5])),
)
case(
    "sa.run_empirical_gradient_descent n_prompts 1e12",  # named the sampler's batch
    "n_prompts",
    lambda: sa.run_empirical_gradient_descent(
        DiscreteFeatures(dim=3, probs=torch.tensor([0.5, 0.5])),
        10**12,
        4,
        steps=2,
        lr=0.1,
        n_samples=8,
        generator=gen(),
    ),
)
case(
    "fit_attention_ridge n_tasks 1e12",  # named the sampler's batch
    "n_tasks",
    lambda: fit_attention_ridge(
        FeatureAttention(2, 4, generator=gen()), LR, n_tasks=10**12, n=4, lam=0.1, generator=gen()
    ),
)
case(
    "fit_gamma prompt of another dim",
    "prompt must have dim = 3",
    lambda: fit_gamma(FeatureAttention(3, 4, generator=gen()), prompt(), lam=0.1),
)
case(
    "train batch_size 1e9",  # named the sampler's batch
    "config.batch_size",
    lambda: train(LTB(2), LR, cfg(batch_size=10**9, n_context=10**3), generator=gen(), progress=False),
)
case(
    "posterior_mean prompt of another dim",  # named the task's prior_mean
    "prompt must have dim = 2",
    lambda: LR.posterior_mean(prompt(d=3)),
)
case(
    "dmmse empty pool",  # was an IndexError
    "pool must be .* not empty",
    lambda: est.discrete_posterior_mean(prompt(), torch.zeros(0, 2), 0.1),
)
case("squared_errors prompt None", "prompt must be an icl_utils.Prompt", lambda: squared_errors(torch.zeros(3), None))
case(
    "squared_errors integer predictions",  # was accepted
    "preds \\(the predictions\\) must be a float tensor",
    lambda: squared_errors(torch.zeros(3, dtype=torch.int64), prompt()),
)
case("GDHistory steps a list", "steps must be", lambda: GDHistory([0, 1], {"loss": np.ones(2)}))
case("GDHistory records a list", "records must be", lambda: GDHistory(np.arange(2), [np.ones(2)]))
case(
    "GDHistory records of another length",
    r"records must hold one row per step \(3 steps\)",
    lambda: GDHistory(np.arange(3), {"loss": np.ones(2)}),
)
case("TrainHistory losses a list", "losses must be", lambda: TrainHistory([1.0], 1.0))
case(
    "query_risk_curves ns empty",  # was an empty curve
    "ns must be a non-empty",
    lambda: risk.query_risk_curves({"a": est.averaging}, LR, [], 4, gen()),
)
case(
    "query_risk_curves ns negative",  # named n
    "ns must be",
    lambda: risk.query_risk_curves({"a": est.averaging}, LR, [-1, 2], 4, gen()),
)
case("examples_needed floor a str", "floor must be", lambda: risk.examples_needed("0.1", 1.0, 0.5))
case(
    "bootstrap_interval no groups",  # was the statistic's TypeError
    "groups must be a non-empty",
    lambda: risk.bootstrap_interval(np.mean, []),
)
case("fit_slopes NaN ys", "ys must be positive and finite", lambda: risk.fit_slopes([1, 2, 4], np.full((3, 2), NAN)))
case("attention_mask n 1e6", r"\(n \+ 1\)\^2 = 1e\+12 values", lambda: attention_mask(10**6))
case(
    "GPTConfig n_embd 1e6",  # was torch's allocator error
    r"n_embd must be in \[1, 16384\]",
    lambda: GPTConfig(n_dims=2, n_context=4, n_embd=10**6, n_head=1),
)
case("evaluating None", "model must be a torch.nn.Module", lambda: evaluating(None).__enter__())
case("method_color None", "label must be a str", lambda: plotting.method_color(None))
case("method_style an int", "label must be a str", lambda: plotting.method_style(3))
case("colors_for None", "labels must be a sequence", lambda: plotting.colors_for(None))
case("recurrences None", "labels must be a sequence", lambda: plotting.recurrences(None))
case("series_colors -1", r"n must be in \[1, 1024\] \(config.MAX_SERIES\) or 0", lambda: plotting.series_colors(-1))
case("series_colors a str", "n must be an int", lambda: plotting.series_colors("3"))
case("shade not a colour", "color must be a matplotlib colour", lambda: plotting.shade("notacolor", 0, 3))
case("shade i a str", "i must be an int", lambda: plotting.shade("red", "0", 3))
case("plain_log_ticks 0", "low must be > 0", lambda: plotting.plain_log_ticks(0.0, 10.0))
case("plain_log_ticks NaN", "high must be > 0", lambda: plotting.plain_log_ticks(1.0, NAN))
case("plain_log_ticks reversed", "high must be >= low", lambda: plotting.plain_log_ticks(10.0, 1.0))  # was []
case("tidy None", "fig must be", lambda: plotting.tidy(None))
case("off_style None", "fig must be", lambda: plotting.off_style(None))
case(
    "plot_task_diversity ylim reversed",  # was an upside-down axis
    r"ylim must be a pair \(bottom < top\) of numbers > 0",
    lambda: plotting.plot_task_diversity([1, 2], {"a": np.ones(2)}, gaussian_best=0.1, bayes=0.1, ylim=(5, 0.1)),
)
case("write_json path None", "path must be", lambda: claims.write_json(None, {}))
case("write_json data a list", "data must be a dict", lambda: claims.write_json("/nonexistent/x.json", [1]))
case(
    "write_json allow_nan a str",
    "allow_nan must be",
    lambda: claims.write_json("/nonexistent/x.json", {}, allow_nan="no"),
)
case(
    "write_json NaN with allow_nan=False",
    "data must hold only what JSON holds",
    lambda: claims.write_json("/nonexistent/x.json", {"a": NAN}, allow_nan=False),
)
case("prompts_per_chunk a str", "values_per_prompt must be an int", lambda: config.prompts_per_chunk("3"))


# --- an independent bad-input campaign (2026-11-27): sizes past the limits, seeds past 64 bits, overflowing steps,
# --- softmax-attention counts and weights, prompts selected by a bad index, labels with a gap or below 0 ---------
BIG = 10**6
TERMS = risk.RiskTerms(np.ones(2), np.ones(2), np.ones(2))
for name, call in {
    "LTB dim 1e6": lambda: LTB(BIG),
    "LTB mlp_width 1e12": lambda: LTB(2, mlp_width=10**12),
    "GDBeta dim 1e6": lambda: GDBeta(BIG),
    "GDPlusPlus dim 1e6": lambda: GDPlusPlus(BIG),
    "FeatureAttention width 1e11": lambda: FeatureAttention(2, 10**11, generator=gen()),
    "MLPAttention hidden 1e7": lambda: MLPAttention(2, 4, hidden=10**7),
    "MLPAttention n_features 1e7": lambda: MLPAttention(2, 10**7),
    "GPTConfig n_dims 1e12": lambda: GPTConfig(n_dims=10**12, n_context=4),
    "NonparametricTasks dim 1e6": lambda: NonparametricTasks(dim=BIG, smoothness=1.0, n_basis=8),
    "TeacherFeatures k 1e6": lambda: TeacherFeatures(dim=2, k=BIG),
    "LinearRegression dim 1e5": lambda: LinearRegression(dim=10**5),
    "two_layer_network_fit width 1e13": lambda: two_layer_network_fit(prompt(), width=10**13),
}.items():
    case(name, r"must be in \[1, 16384\] \(config.MAX_WIDTH\)", call)
case("MLPAttention depth 1e8", r"depth must be in \[1, 1024\]", lambda: MLPAttention(2, 4, depth=10**8))
case(
    "GPTConfig n_layer 1e9", r"n_layer must be in \[1, 1024\]", lambda: GPTConfig(n_dims=2, n_context=4, n_layer=10**9)
)
for name, call in {
    "two_layer_network_fit seed 2**64": lambda: two_layer_network_fit(prompt(), seed=2**64),
    "optimal_lsa seed 2**64": lambda: exact.optimal_lsa(LinearRegression(dim=2, noise_std=0.5), 4, seed=2**64),
    "SingleIndexTasks subspace_seed 2**64": lambda: SingleIndexTasks(dim=3, subspace_dim=1, subspace_seed=2**64),
    "DiscreteFeatures seed 2**64": lambda: DiscreteFeatures(dim=2, probs=torch.ones(1), seed=2**64),
    "TeacherFeatures seed 2**64": lambda: TeacherFeatures(dim=2, k=1, seed=2**64),
    "make_generator 2**64": lambda: config.make_generator(2**64),
    "seed_everything 2**64": lambda: config.seed_everything(2**64),
    "train_parallel a seed of 2**64": lambda: train_parallel(
        [LTB(2)], LinearRegression(dim=2), TrainConfig(steps=1, batch_size=2, n_context=2), seeds=[2**64]
    ),
}.items():
    case(name, r"seeds? must be .*2\^63", call)
case(
    "lsa_risk dim 300",
    r"\(task.dim \+ 1\)\^4",
    lambda: exact.lsa_risk(
        LinearRegression(dim=300), 4, torch.zeros(301, dtype=torch.float64), torch.zeros(301, 300, dtype=torch.float64)
    ),
)
case(
    "gd_beta_hessian dim 1000",
    r"task.dim",
    lambda: gd_beta.gd_beta_hessian(
        LinearRegression(dim=1000),
        4,
        torch.zeros(1000, dtype=torch.float64),
        torch.zeros(1000, 1000, dtype=torch.float64),
    ),
)
case(
    "gamma_erm_risks repeats 1e7",
    r"repeats must be in \[1, ",
    lambda: risk.gamma_erm_risks(
        FeatureAttention(1, 4, generator=gen()), NonparametricTasks(dim=1, smoothness=1.0), 4, [8], 10**7, gen()
    ),
)
case(
    "gd_plus_plus a diverging curvature",
    r"lr = 1.0 and gamma = 50.0 .* made the predictions overflow",
    lambda: est.gd_plus_plus(prompt(), 1.0, 50.0, steps=60),
)
case("one_step_gd lr 1e300", r"lr = 1e\+300 made the predictions overflow", lambda: est.one_step_gd(prompt(), 1e300))
W3, C3 = torch.zeros(3, 3), torch.tensor([[1.0, 0.0, 2.0]])
case("sa.feature_attention a negative count", "counts must be", lambda: sa.feature_attention(W3, -C3))
case("sa.feature_attention an empty context", "counts must be", lambda: sa.feature_attention(W3, 0 * C3))
case("sa.per_feature_loss infinite w", "w must be .* finite", lambda: sa.per_feature_loss(W3 + INF, C3))
case(
    "sa.population_loss probs not summing to 1",
    "probs must be .* summing to 1",
    lambda: sa.population_loss(W3, C3, torch.tensor([-1.0, 1.0, 1.0])),
)
case(
    "sa.feature_weights NaN q", "q must be .* finite", lambda: sa.feature_weights(torch.full((2, 2), NAN), torch.eye(2))
)
case(
    "sa.empirical_loss no prompts",
    "queries must be",
    lambda: sa.empirical_loss(W3, C3[:0], torch.zeros(0, dtype=torch.long), torch.zeros(0, 3)),
)
case("Prompt.take an index past the batch", "index must select", lambda: prompt().take(torch.tensor([10**3])))
case("Prompt.take a float index", "index must be", lambda: prompt().take(torch.tensor([0.5])))
case("Prompt.take an int", "index must be", lambda: prompt().take(1))
case("Prompt.take an empty mask", "index must select at least one", lambda: prompt().take(prompt().x[:, 0, 0] > INF))
case(
    "mf.particle_spread a negative label",
    "groups must be",
    lambda: mf.particle_spread(torch.zeros(4, 3, dtype=torch.float64), torch.tensor([-1, 0, 0, 1])),
)
case("RiskTerms.standard_error n 0", "n must hold positive", lambda: TERMS.standard_error(0))
case("RiskTerms.standard_error n -4", "n must hold positive", lambda: TERMS.standard_error(-4))
case("RiskTerms.risk n a str", "n must be a number", lambda: TERMS.risk("four"))
case(
    "lr_factor a negative step",
    "step must be >= 0",
    lambda: TrainConfig(steps=10, batch_size=2, n_context=2, schedule="cosine").lr_factor(-10),
)
case(
    "lr_factor an array",
    "step must be an int",
    lambda: TrainConfig(steps=10, batch_size=2, n_context=2).lr_factor(np.arange(3)),
)
case("TrainHistory NaN losses", "losses must be .* finite", lambda: TrainHistory(np.full(4, NAN), 1.0))
case("cpu_busy a negative time", "seconds must be in", lambda: config.cpu_busy(-1.0))
case("cpu_busy NaN", "seconds must be in", lambda: config.cpu_busy(NAN))
case("cpu_busy a str", "seconds must be a number", lambda: config.cpu_busy("0.3"))
case("prompts_per_chunk negative", "values_per_prompt must be >= 0", lambda: config.prompts_per_chunk(-5))

case(
    "bootstrap_interval a statistic of arrays",
    "statistic must return one real number",
    lambda: risk.bootstrap_interval(lambda g: g, [np.ones(4)]),
)
case(
    "bootstrap_interval a statistic of text",
    "statistic must return one real number",
    lambda: risk.bootstrap_interval(lambda g: "x", [np.ones(4)]),
)
case("claims.table a record without a value", r"claims\[0\] must be .* lacks", lambda: claims.table([{"id": "a"}]))
case(
    "claims.overview a record without a mode",
    r"ledgers\['x'\] must be .* lacks",
    lambda: claims.overview(["x"], {"x": {"chapter": "x"}}),
)
case(
    "Prompt.from_points ys of another length",
    "xs and ys must be",
    lambda: Prompt.from_points(torch.zeros(2, 3, 2), torch.zeros(2, 4)),
)
case("Prompt.from_points 2-d xs", "xs and ys must be", lambda: Prompt.from_points(torch.zeros(2, 3), torch.zeros(2, 3)))
case("Prompt.from_points lists", "xs and ys must be", lambda: Prompt.from_points([[0.0]], [[0.0]]))
case(
    "sigmoid_network float64 particles at float32 inputs",
    "x must have the particles' dtype",
    lambda: sigmoid_network(torch.zeros(3, 4, dtype=torch.float64), torch.zeros(5, 2), 1),
)

# --- a third campaign: callables, dtype mixes, scales, plotting, sizes named by the caller's argument ----------
NP_TASK = NonparametricTasks(dim=1, smoothness=1.0, n_basis=8)
quad = lambda t: t.square().sum()  # noqa: E731
TEACHER = TeacherFeatures(dim=2, k=2, width=4, n_whiten=64)
case("Prompt.cat of one Prompt", "prompts must be a non-empty list or tuple", lambda: Prompt.cat(prompt()))
case("Prompt.cat of a generator", "prompts must be a non-empty list", lambda: Prompt.cat(p for p in [prompt()]))
case("swap_contexts shift True", "shift must be an int", lambda: swap_contexts(prompt(), True))
case(
    "squared_errors NaN predictions",  # was NaN errors
    "preds \\(the predictions\\) must be finite",
    lambda: squared_errors(torch.full((3,), NAN), prompt()),
)
case(
    "kernel_ridge a prompt of d = 0",
    "prompt must have inputs of at least one coordinate",
    lambda: est.kernel_ridge(Prompt(torch.zeros(2, 3, 0), torch.zeros(2, 3), torch.zeros(2, 0), torch.zeros(2))),
)
case(
    "held_out_errors an estimator as fit",
    "fit must return a predictor",
    lambda: risk.held_out_errors(est.kernel_ridge, LR, 4, 3, 5, gen()),
)
case(
    "scaling_exponent xs holding 0",
    "xs must be a non-empty sequence",
    lambda: risk.scaling_exponent([0, 1], [np.ones(3), np.ones(3)], np.mean, reps=10),
)
case(
    "scaling_exponent xs a string",
    "xs must be",
    lambda: risk.scaling_exponent("ab", [np.ones(3), np.ones(3)], np.mean, reps=10),
)
case(
    "scaling_exponent needed returning an array",
    "needed must return one real number",
    lambda: risk.scaling_exponent([1, 2], [np.ones((3, 2)), np.ones((3, 2))], lambda r: r.mean(0), reps=10),
)
case(
    "scaling_exponent needed a number",
    "needed must be a callable",
    lambda: risk.scaling_exponent([1, 2], [np.ones(3), np.ones(3)], 3.0, reps=10),
)
case(
    "gamma_erm_risks a pool of 1e12 prompts",
    r"max\(sizes\)",
    lambda: risk.gamma_erm_risks(FeatureAttention(1, 4, generator=gen()), NP_TASK, 4, [10**12], 1, gen()),
)
case(
    "model_errors an nn.Linear",
    "model must take an icl_utils.Prompt",
    lambda: risk.model_errors(torch.nn.Linear(2, 1), prompt()),
)
case(
    "paired_query_errors a predictor of shape (B, 1)",
    r"predictors\['bad'\] must return one prediction per prompt",
    lambda: risk.paired_query_errors({"bad": lambda p: p.y_query[:, None]}, LR, 3, 4, gen()),
)
case(
    "empirical_and_expected_risk a task of another dim",
    "task must be of the model's dim=2",
    lambda: risk.empirical_and_expected_risk(FeatureAttention(2, 4, generator=gen()), PromptPool(prompt()), NP_TASK),
)
case(
    "fit_slopes ys of text",
    "ys must be a number or an array of real numbers",
    lambda: risk.fit_slopes([1, 2], [["a"], ["b"]]),
)
case(
    "attention_gamma a model's features of another dim",
    "features must read inputs of task.dim = 1",
    lambda: exact.attention_gamma(FeatureAttention(3, 4, generator=gen()).features, NP_TASK, 4),
)
case(
    "FeatureAttention.features inputs of another width",
    r"x must have shape \(\.\.\., 2\)",
    lambda: FeatureAttention(2, 4, generator=gen()).features(torch.zeros(5, 3)),
)
case(
    "FeatureAttention.features integer inputs",
    "x is torch.int64",
    lambda: FeatureAttention(2, 4, generator=gen()).features(torch.zeros(5, 2, dtype=torch.long)),
)
case(
    "MLPAttention.features inputs of another width",
    r"x must have shape \(\.\.\., 2\)",
    lambda: MLPAttention(2, 4).features(torch.zeros(5, 3)),
)
case(
    "FeatureAttention.context_summary of a tensor",
    "prompt must be an icl_utils.Prompt",
    lambda: FeatureAttention(2, 4, generator=gen()).context_summary(torch.zeros(3, 4, 2)),
)
case(
    "GDPlusPlus a diverging curvature",  # was NaN predictions
    r"predictions must be finite.*gamma = 50",
    lambda: GDPlusPlus(2, steps=60, lr=1.0, gamma=50.0).predict(prompt()),
)
case(
    "fit_lbfgs an nn.Linear",
    "model must take an icl_utils.Prompt",
    lambda: fit_lbfgs(torch.nn.Linear(2, 1), prompt(d=2)),
)
case(
    "fit_gd_plus_plus_curvature 1e12 prompts",
    r"n_prompts \* \(n \+ 1\)",
    lambda: fit_gd_plus_plus_curvature(LR, 4, 10**12, 0),
)
case(
    "batched_by_default an nn.Linear",
    "model must take an icl_utils.Prompt",
    lambda: batched_by_default(torch.nn.Linear(2, 1), LR, cfg()),
)
case(
    "gradient_descent a loss that ignores the parameters",
    "loss_fn must depend on every block of init",
    lambda: gradient_descent(lambda t: torch.tensor(1.0), torch.ones(2), steps=2, lr=0.1, progress=False),
)
case(
    "gradient_descent a block the loss never reads",
    "loss_fn must depend on every block of init",
    lambda: gradient_descent(
        lambda t: t["a"].square().sum(), {"a": torch.ones(2), "b": torch.ones(2)}, steps=2, lr=0.1, progress=False
    ),
)
case(
    "gradient_descent a record of text",
    "record must return a dict of tensors or numbers",
    lambda: gradient_descent(quad, torch.ones(2), steps=2, lr=0.1, record=lambda t: {"note": "x"}, progress=False),
)
case(
    "gradient_descent until on a vector",
    "until must return True or False",
    lambda: gradient_descent(
        quad, torch.ones(2), steps=3, lr=0.1, progress=False, record=lambda t: {"w": t}, until=lambda r: r["w"] < 0.5
    ),
)
case(
    "gradient_descent a hook of one argument",
    "hook must take three arguments",
    lambda: gradient_descent(quad, torch.ones(2), steps=2, lr=0.1, hook=lambda step: None, progress=False),
)
case(
    "gradient_descent a loss of no argument",
    "loss_fn must take one argument",
    lambda: gradient_descent(lambda: torch.tensor(0.0), torch.ones(2), steps=2, lr=0.1, progress=False),
)
case("LinearRegression noise_std 1e39", r"noise_std must be in \[0, 1e\+06\]", lambda: LinearRegression(2, 1e39))
case("LinearRegression x_range 1e39", r"x_range must be in \(0, 1e\+06\]", lambda: LinearRegression(2, x_range=1e39))
case(
    "LinearRegression prior_cov of variance 1e78",
    "prior_cov must have variances at most",
    lambda: LinearRegression(dim=2, prior_cov=torch.eye(2, dtype=torch.float64) * 1e78),
)
case(
    "NonparametricTasks noise_std 1e39",
    "noise_std must be in",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, n_basis=8, noise_std=1e39),
)
case(
    "SingleIndexTasks lead_mean 1e39",
    r"lead_mean must be in \[-1e\+06",
    lambda: SingleIndexTasks(dim=3, subspace_dim=2, lead_mean=1e39),
)
case(
    "NonparametricTasks.feature_prompt a prompt of another dim",
    "prompt must have the task's dim=1",
    lambda: NP_TASK.feature_prompt(prompt(d=2)),
)
case(
    "NonparametricTasks.posterior_mean a prompt of another dim",
    "prompt must have the task's dim=1",
    lambda: NP_TASK.posterior_mean(prompt(d=2)),
)
case(
    "mf.attention_loss a float64 gamma",
    "gamma must have the dtype of particles",
    lambda: mf.attention_loss(torch.zeros(4, 4), torch.eye(1).double(), torch.zeros(3, 1), torch.zeros(3, 2)),
)
case(
    "mf.mixture a float64 rotation",
    "rotation must have the dtype of student",
    lambda: mf.mixture(torch.zeros(4, 5), TEACHER.particles, 0.5, torch.eye(2, dtype=torch.float64)),
)
case(
    "mf.static_loss float64 targets",
    "targets must have the dtype of particles",
    lambda: mf.static_loss(torch.zeros(4, 5), torch.zeros(6, 2, dtype=torch.float64), torch.zeros(6, 2), 2),
)
case(
    "mf.FeaturePrompts.sample an integer dtype",
    "dtype must be a floating-point torch.dtype",
    lambda: mf.FeaturePrompts.sample(TEACHER, 4, 3, gen(), dtype=torch.int64),
)
case(
    "mf.run_gradient_descent float32 init, float64 data",
    "init must have the dtype of data's prompts",
    lambda: mf.run_gradient_descent(
        "static",
        mf.FeaturePrompts.sample(TEACHER, 4, 3, gen(), dtype=torch.float64),
        torch.zeros(4, 5),
        steps=1,
        eta=0.1,
        progress=False,
    ),
)
case(
    "mf.gp_perturbation NaN particles",
    "particles must be .* with finite values",
    lambda: mf.gp_perturbation(torch.full((4, 3), NAN), gen(), 0.1, 1.0),
)
case("config.chapter_env None", "environ must be a mapping", lambda: config.chapter_env(None))
case("plotting.series_colors 1e12", r"n must be in \[1, 1024\]", lambda: plotting.series_colors(10**12))
case("plotting.shade past n", "i must be below n = 3", lambda: plotting.shade("red", 5, 3))
case(
    "plot_rate_curves smoothness keys of text",
    "curves must be keyed by smoothness levels",
    lambda: plotting.plot_rate_curves(
        [4, 8, 16], {"1.0": np.ones(3)}, oracle={"1.0": np.ones((2, 2))}, oracle_n=[4, 8]
    ),
)
case(
    "plot_gap_scaling norm keys of text",
    "trained must be keyed by norms",
    lambda: plotting.plot_gap_scaling([4, 8], {"1.0": np.ones(2)}, {"1.0": np.ones(2)}),
)
case(
    "plot_lines a style for a series not drawn",
    "styles must be keyed by names of series",
    lambda: plotting.plot_lines(np.arange(3), {"loss": np.ones(3)}, styles={"loss ": {"color": "red"}}),
)
case(
    "plot_training_loss a history of no step",
    "histories must be a non-empty mapping .* of at least one step",
    lambda: plotting.plot_training_loss({"a": TrainHistory(np.ones(0), 0.0)}),
)
case(
    "plot_error_curves zero errors on a log axis",
    r"curves\['a'\] \(mean\) must hold a finite value > 0",
    lambda: plotting.plot_error_curves({"a": torch.zeros(4, 5)}, logy=True),
)
case(
    "plot_error_curves a negative reference on a log axis",
    r"reference\['floor'\] must be > 0",
    lambda: plotting.plot_error_curves({"a": torch.rand(4, 5) + 0.1}, reference={"floor": -1.0}, logy=True),
)
case(
    "plot_bases_and_tasks 1e12 tasks",
    r"n_tasks must be in \[1, 1024\]",
    lambda: plotting.plot_bases_and_tasks({1.0: NP_TASK}, n_tasks=10**12),
)
case(
    "plot_bases_and_tasks 1e12 examples",
    r"n_examples \+ 1",
    lambda: plotting.plot_bases_and_tasks({1.0: NP_TASK}, n_examples=10**12),
)
case(
    "plot_bases_and_tasks 1e9 orders",
    r"orders must be in \[1, 11\]",
    lambda: plotting.plot_bases_and_tasks({1.0: NP_TASK}, orders=10**9),
)

# --- a fourth round: a fresh campaign of inputs not written against the code --------------------------------
case(
    "kernel_ridge_fit's predictor on integer inputs",  # was integer predictions
    "inputs must be a float tensor",
    lambda: kernel_ridge_fit(prompt())(torch.zeros(3, 2, 2, dtype=torch.long)),
)
case(
    "LinearRegression prior_mean 1e30",
    "prior_mean must be .* of magnitude at most config.MAX_SCALE",
    lambda: LinearRegression(dim=2, prior_mean=torch.full((2,), 1e30)),
)
case(
    "NonparametricTasks.features NaN inputs",  # was NaN features
    "x must be .* with finite values",
    lambda: NP_TASK.features(torch.tensor([[NAN], [0.5]])),
)
case("hermite overflowing float32", "degree 170 overflows", lambda: hermite(torch.full((3,), 10.0), 170))
case(
    "projection_mass a basis of no column",  # was 0.0
    "basis must be .* with at least one column",
    lambda: projection_mass(torch.ones(3, 4), torch.zeros(4, 0)),
)
case(
    "sigmoid_network NaN particles",  # was NaN outputs
    "particles must be finite",
    lambda: sigmoid_network(torch.full((4, 4), NAN), torch.zeros(5, 2), 1),
)
case(
    "sigmoid_network integer particles",
    "particles must be a float tensor",
    lambda: sigmoid_network(torch.zeros(4, 4, dtype=torch.long), torch.zeros(5, 2, dtype=torch.long), 1),
)
case("LTB mlp_width without an MLP", "mlp_width must be None without an MLP", lambda: LTB(2, mlp=False, mlp_width=5))
case("fixed_sample of a tensor", "prompt must be an icl_utils.Prompt", lambda: fixed_sample(torch.zeros(3)).__enter__())
case(
    "query_risk predictions whose squares overflow",  # was (inf, nan)
    "predict's squared errors",
    lambda: risk.query_risk(lambda p: torch.full_like(p.y_query, 1e30), LR, 3, 8, gen()),
)
case("RiskTerms.risk text lengths", "n must be a number or an array of real numbers", lambda: _terms().risk(["4", "8"]))
case(
    "AttentionMoments.gamma rtol 2",  # was an all-zero Gamma
    r"rtol must be in \(0, 1\)",
    lambda: exact.AttentionMoments.of(NP_TASK.features, NP_TASK, points=64).gamma(4, rtol=2.0),
)
case(
    "AttentionMoments.of features returning numpy",
    "features must return a torch.Tensor",
    lambda: exact.AttentionMoments.of(lambda x: x.numpy(), NP_TASK, points=64),
)
case("optimal_gd_lr prior_var 1e308", "prior_var must be in", lambda: exact.optimal_gd_lr(4, 2, 0.0, 1e308))
case(
    "mf.static_loss NaN particles",
    "particles must be .* with finite values",
    lambda: mf.static_loss(torch.full((4, 4), NAN), torch.zeros(3, 2), torch.zeros(3, 2), 1),
)
case(
    "mf.static_loss no inputs",
    "with at least one row",
    lambda: mf.static_loss(torch.randn(4, 4), torch.zeros(0, 2), torch.zeros(0, 2), 1),
)
case(
    "mf.particle_spread no particles",
    "particles must be .* with at least one row",
    lambda: mf.particle_spread(torch.zeros(0, 3)),
)
case(
    "mf.mixture s 1.5",
    r"s must be in \[0, 1\]",
    lambda: mf.mixture(torch.zeros(4, 5), TEACHER.particles, 1.5, torch.eye(2)),
)
case(
    "mf.mixture a rotation that scales",
    "rotation must be orthogonal",
    lambda: mf.mixture(torch.zeros(4, 5), TEACHER.particles, 0.5, 5 * torch.eye(2)),
)
case("mf.init_particles scale 1e300", "scale must be in", lambda: mf.init_particles(4, 2, 1, gen(), scale=1e300))
case(
    "mf.BirthDeathPerturbation evaluate of no argument",
    "evaluate must take one argument",
    lambda: mf.BirthDeathPerturbation(lambda: 0.0, lambda c: torch.zeros(c, 4), gen()),
)
case(
    "mf.escape_steps a NaN loss",  # was inf, "never escaped"
    "history must have recorded finite losses",
    lambda: mf.escape_steps(GDHistory(np.arange(3), {"loss": np.array([NAN, 1.0, 0.1])})),
)
case(
    "sa.per_feature_loss no sample",
    "counts must be .* S >= 1",
    lambda: sa.per_feature_loss(torch.zeros(2, 2), torch.zeros(0, 2)),
)
case("sa.bound_terms lr 1e-307", "lr must be large enough", lambda: sa.bound_terms(4.0, 0.1, 1e-307))
case(
    "sa.sample_counts 1e9 tokens",
    "exceed the limit of one tensor",
    lambda: sa.sample_counts(torch.tensor([0.5, 0.5]), 10**9, 1, gen()),
)
case("config.chapter_env a value not text", "environ must map names to str", lambda: config.chapter_env({"PATH": 3}))
case("config.progress_bar of an int", "iterable must be an iterable", lambda: config.progress_bar(3, desc="x"))
case(
    "plot_attention_snapshots steps out of order",
    "steps must increase",
    lambda: plotting.plot_attention_snapshots([30, 20, 10], np.zeros((3, 2, 2)), at=[10, 20]),
)
case(
    "plot_gd_records a record of NaN",
    r"histories\['a'\].records\['loss'\] must hold a finite value",
    lambda: plotting.plot_gd_records({"a": GDHistory(np.arange(3), {"loss": np.full(3, NAN)})}, keys=["loss"]),
)
case(
    "plot_sample_complexity an interval out of order",
    "must hold rows \\(estimate, low, high\\)",
    lambda: plotting.plot_sample_complexity({"d": ([1, 2], {"a": [[1, 2, 3], [1, 0.5, 2]]})}),
)
case(
    "plot_lines a style that sets the label",
    "styles\\['a'\\] must be a dict of line keywords other than label",
    lambda: plotting.plot_lines(np.arange(3), {"a": np.ones(3)}, styles={"a": {"label": "A"}}),
)
case("claims.load a file", "folder must be a folder of ledgers", lambda: claims.load(__file__))
case("claims.write_json into a folder", "path must name a file", lambda: claims.write_json(tempfile.mkdtemp(), {}))
case(
    "claims.table a record without status",
    r"claims\[0\] must be .* lacks \['status'\]",
    lambda: claims.table([{k: v for k, v in _record().items() if k != "status"}]),
)
case(
    "claims.table a value of text",
    r"claims\[0\]\['value'\] must be a number",
    lambda: claims.table([{**_record(), "value": "abc"}]),
)
case(
    "claims.overview claims given as a dict",
    r"ledgers\['x'\]\['claims'\] must be a list",
    lambda: claims.overview(["x"], {"x": {"mode": "q", "device": "c", "commit": "h", "date": "d", "claims": {"a": 1}}}),
)
case(
    "Prompt.from_points no point",
    "xs and ys must be float tensors of one dtype with at least one point",
    lambda: Prompt.from_points(torch.zeros(2, 0, 2), torch.zeros(2, 0)),
)
case(
    "Prompt.from_points integer labels",
    "xs and ys must be float tensors",
    lambda: Prompt.from_points(torch.zeros(2, 4, 2), torch.zeros(2, 4, dtype=torch.long)),
)
case(
    "Prompt.take a reversed slice",
    "index must be a slice with a positive step",
    lambda: prompt().take(slice(None, None, -1)),
)
case(
    "squared_errors predictions on the meta device",
    "preds \\(the predictions\\) must be on the prompt's device",
    lambda: squared_errors(torch.zeros(3, device="meta"), prompt()),
)
case(
    "ridge a prompt on the meta device",
    "x must hold values, but is on the meta device",
    lambda: est.ridge(
        prompt()
        .take(slice(None))
        .__class__(
            *(
                torch.zeros(3, 4, 2, device="meta"),
                torch.zeros(3, 4, device="meta"),
                torch.zeros(3, 2, device="meta"),
                torch.zeros(3, device="meta"),
            )
        ),
        1.0,
    ),
)
case("imbalanced_probs 1e9 features", r"n_features must be in \[2, 16384\]", lambda: imbalanced_probs(10**9, 0.5))
case("sample_moment_prompts n 0", "n must be", lambda: sample_moment_prompts(LR, 2, 0, gen()))
case(
    "train a model of frozen parameters",
    "model must have trainable parameters",
    lambda: train(LTB(2).requires_grad_(False), LR, cfg(), generator=gen(), progress=False),
)
case(
    "gradient_descent a record of changing shape",
    "record must return quantities of fixed shapes",
    lambda: gradient_descent(
        quad, torch.tensor([1.0, 0.4, 0.9]), steps=3, lr=0.3, record=lambda t: {"big": t[t > 0.5]}, progress=False
    ),
)
case(
    "gradient_descent lr 1e30",  # a Diverged error: a FloatingPointError and a ValueError
    "lower lr",
    lambda: gradient_descent(quad, torch.ones(2), steps=50, lr=1e30, progress=False),
)
case(
    "FixedFeatureAttention a feature map of another dim",
    r"features must map inputs \(K, dim=2\)",
    lambda: FixedFeatureAttention(NP_TASK.features, 2, 8),
)
case(
    "query_risk a predict of no argument",
    "predict must take one argument",
    lambda: risk.query_risk(lambda: 0, LR, 3, 8, gen()),
)
case(
    "bootstrap_interval a statistic of one argument for two groups",
    "statistic must take two arguments",
    lambda: risk.bootstrap_interval(lambda a: 1.0, [np.ones(3), np.ones(3)], reps=10),
)
case(
    "exponent_difference a pair without needed",
    "first must be",
    lambda: risk.exponent_difference(
        ([1, 2], [np.ones(3), np.ones(3)]), ([1, 2], [np.ones(3), np.ones(3)], np.mean), reps=10
    ),
)
case(
    "model_errors a model of (B, 1) predictions",
    "model returned bad predictions",
    lambda: risk.model_errors(_ColumnModel(), prompt()),
)
case(
    "mf.path_losses s_values holding NaN",
    r"s_values must be .* numbers in \[0, 1\]",
    lambda: mf.path_losses(
        torch.zeros(4, 5), TEACHER.particles, torch.eye(2), np.array([0.0, NAN]), torch.zeros(3, 2), torch.zeros(3, 2)
    ),
)

# --- a fifth round: a third campaign, of inputs not written against the code ------------------------------------
HUGE_INT = 10**400  # an exact int no float holds (float() overflows)
case("ridge lam of an int too large for a float", "lam must be > 0 and finite", lambda: est.ridge(prompt(), HUGE_INT))
case("ridge lam 1e-320", "lam must be > 0 and finite", lambda: est.ridge(prompt(n=1, d=3), 1e-320))
case("mean_and_band z of an int too large", "z must be > 0", lambda: risk.mean_and_band(torch.ones(3, 2), z=HUGE_INT))
case(
    "optimal_gd_step n 10**20",
    "n must be >= 1, got 1e.20, past what a 64-bit integer holds",
    lambda: exact.optimal_gd_step(LR, 10**20),
)
case("kernel_ridge bandwidth 1e-320", "bandwidth must be", lambda: est.kernel_ridge(prompt(), bandwidth=1e-320))
case(
    "two_layer_network lr 1e30",  # was NaN predictions
    r"lr must be in \(0, 1e\+06\]",
    lambda: est.two_layer_network(prompt(), steps=5, lr=1e30),
)
case("LTB init_std 1e39", r"init_std must be in \[0, 1e\+06\]", lambda: LTB(2, init_std=1e39))
case("GDPlusPlus lr 1e39", r"lr must be in \[-1e\+06", lambda: GDPlusPlus(2, lr=1e39))
case(
    "FeatureAttention gamma_scale 1e39",
    "gamma_scale must be in",
    lambda: FeatureAttention(2, 4, generator=gen(), gamma_scale=1e39),
)
case("MLPAttention input_scale 1e39", "input_scale must be in", lambda: MLPAttention(2, 4, input_scale=1e39))
case(
    "LinearRegression.sample weights 1e39",
    "weights must be .* of magnitude at most",
    lambda: LR.sample(2, 3, gen(), weights=torch.full((2, 2), 1e39, dtype=torch.float64).float()),
)
case("hermite NaN z", "z must be .* with finite values", lambda: hermite(torch.tensor([NAN, 0.5]), 3))
case("cardinal_bspline NaN x", "x must be .* with finite values", lambda: cardinal_bspline(torch.tensor([NAN, 0.5]), 2))
case(
    "Curriculum dims_step 0 with room to grow",
    "dims_step must be >= 1 to grow dims",
    lambda: Curriculum(dims=(1, 5), n_context=(2, 8), every=1, dims_step=0),
)
case(
    "GDHistory NaN steps",
    "steps must be .* with finite values",
    lambda: GDHistory(np.array([0.0, NAN, 2.0]), {"loss": np.ones(3)}),
)
case(
    "mf.FeaturePrompts fields of two dtypes",
    "f and y must have the dtype of x",
    lambda: mf.FeaturePrompts(torch.zeros(3, 4, 2), torch.zeros(3, 4, 1, dtype=torch.float64), torch.zeros(3, 4)),
)
case(
    "mf.mixture NaN teacher",
    "teacher must be .* with finite values",
    lambda: mf.mixture(torch.randn(4, 4), torch.full((3, 4), NAN), 0.5, torch.eye(1)),
)
case(
    "sa.phase_boundaries repeated steps",
    "steps must be .* increasing",
    lambda: sa.phase_boundaries(np.array([0, 10, 10, 20]), np.ones((4, 2, 2)), np.ones((4, 2)), feature=1, eps=0.1),
)
case(
    "sa.feature_weights NaN features",
    "features must be .* with finite values",
    lambda: sa.feature_weights(torch.eye(2), torch.full((2, 2), NAN)),
)
case(
    "claims.overview ledgers keyed by a Path",
    "ledgers must be keyed by chapter names",
    lambda: claims.overview(["x"], {Path("x"): {}}),
)
case(
    "config.progress_bar enabled a str",
    "enabled must be True or False",
    lambda: config.progress_bar(range(3), desc="x", enabled="no"),
)
case("colors_for one str", "labels must be a sequence of .*labels, not one str", lambda: plotting.colors_for("ridge"))
case(
    "plot_sample_complexity slopes of a panel not drawn",
    "slopes must be keyed by titles of panels",
    lambda: plotting.plot_sample_complexity({"d": ([1, 2], {"a": np.ones(2)})}, slopes={"D": {"a": 1.0}}),
)
case(
    "mf.potential_hessians NaN at",
    "at must be .* with finite values",
    lambda: mf.potential_hessians(
        torch.randn(4, 4), torch.randn(5, 1), torch.randn(5, 2), 1, at=torch.full((1, 4), NAN)
    ),
)
case("exact.optimal_lsa 10**6 starts", r"starts must be in \[1, 1000\]", lambda: exact.optimal_lsa(LR, 4, starts=10**6))
case(
    "sigmoid_network 2 networks at inputs of 3",
    "x must have leading axes that broadcast",
    lambda: sigmoid_network(torch.zeros(2, 4, 4), torch.zeros(3, 5, 2), 1),
)
case(
    "fit_gd_plus_plus_curvature a first input of variance 0",
    "task must give its first input a variance of at least",
    lambda: fit_gd_plus_plus_curvature(LinearRegression(dim=2, x_cov=torch.diag(torch.tensor([0.0, 1.0]))), 4, 8, 0),
)
case(
    "gradient_descent a complex loss",
    "loss_fn must return a real scalar tensor",
    lambda: gradient_descent(lambda t: t.square().sum() * (1 + 1j), torch.ones(2), steps=2, lr=0.1, progress=False),
)
case(
    "mf.static_loss bfloat16 particles",
    "particles must be .* of dtype float32 or float64",
    lambda: mf.static_loss(torch.zeros(4, 4).bfloat16(), torch.zeros(6, 1).bfloat16(), torch.zeros(6, 2).bfloat16(), 1),
)
case(
    "mf.BirthDeathPerturbation evaluate of 3 losses for 2 students",
    "evaluate must return 2 finite loss",
    lambda: mf.BirthDeathPerturbation(lambda p: torch.ones(3), lambda c: torch.zeros(c, 4), gen(), patience=1)(
        0, torch.randn(2, 4, 4)
    ),
)
case(
    "mf.MeanFieldRun a history without loss",
    "history must be a GDHistory that recorded 'loss'",
    lambda: mf.MeanFieldRun(torch.zeros(4, 4), None, GDHistory(np.arange(2), {"spread": np.ones(2)}), []),
)
case(
    "plot_lines a line style matplotlib lacks",
    r"styles\['a'\] must hold keywords of a line",
    lambda: plotting.plot_lines(np.arange(3), {"a": np.ones(3)}, styles={"a": {"linestyle": "bogus"}}),
)
case(
    "bootstrap_interval a statistic returning None",
    "statistic must return one real number",
    lambda: risk.bootstrap_interval(lambda g: None, [np.ones(3)], reps=10),
)
case(
    "Prompt.from_points float64 xs and float32 ys",
    "xs and ys must be float tensors of one dtype",
    lambda: Prompt.from_points(torch.zeros(2, 4, 2, dtype=torch.float64), torch.zeros(2, 4)),
)
case(
    "query_risk_curves a GPT among predictors",
    r"predictors\['gpt'\]",
    lambda: risk.query_risk_curves({"gpt": gpt()}, LR, [2], 4, gen()),
)
case(
    "FixedFeatureAttention features giving NaN",
    "features must give finite features",
    lambda: FixedFeatureAttention(lambda x: torch.full((*x.shape[:-1], 4), NAN), 1, 4),
)
case(
    "fit_lbfgs a model of (B, 1) predictions",
    "model returned bad predictions",
    lambda: fit_lbfgs(_ColumnModel(), prompt(), max_iter=2),
)
case(
    "fit_lbfgs a model of NaN parameters",
    "model's parameters must be finite before the fit",
    lambda: fit_lbfgs(_nan_model(), prompt(), max_iter=2),
)
case(
    "claims.table an interval of one number",
    r"claims\[0\]\['interval'\] must be a pair",
    lambda: claims.table([{**_record(), "interval": 0.5}]),
)
case(
    "AttentionMoments built by hand of two dtypes",
    "must be a float64 tensor",
    lambda: exact.AttentionMoments(torch.tensor(1.0), torch.eye(3), torch.eye(3), torch.eye(3)),
)

case(
    "one_step_feature_update lr 1e39",
    "lr must be in",
    lambda: one_step_feature_update(
        FeatureAttention(2, 4, generator=gen()), LR, n_tasks=4, n=3, lr=1e39, weight_decay=1.0, generator=gen()
    ),
)
case(
    "SingleIndexTasks max_degree 60", r"max_degree must be in \[0, 30\]", lambda: SingleIndexTasks(3, 2, max_degree=60)
)


class _ColumnModel(torch.nn.Module):
    """A model that reads prompts but predicts a column, (B, 1)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, p: Prompt) -> torch.Tensor:
        return p.y_query[:, None] * self.w


def _terms() -> risk.RiskTerms:
    return risk.RiskTerms(np.full(3, 0.1), np.ones(3), np.full(3, 0.2))


def _record() -> dict:
    """A claim's JSON record with every field the tables read."""
    return {
        "id": "a",
        "statement": "s",
        "source": "Theorem 1",
        "value": 0.5,
        "check": "value <= 1",
        "tolerance_origin": "a closed form",
        "controls": [],
        "status": "demonstrated",
    }


def _load_from(text: str) -> dict:
    folder = Path(tempfile.mkdtemp())
    (folder / "x.json").write_text(text)
    return claims.load(folder)


case("claims.load invalid JSON", "folder holds x.json, which is not JSON", lambda: _load_from("{a"))
case("claims.load a JSON list", "folder holds x.json, a JSON list", lambda: _load_from("[1]"))


def _nan_model() -> LTB:
    model = LTB(2)
    with torch.no_grad():
        next(model.parameters())[0].fill_(NAN)
    return model


# --- a fourth campaign: internal helpers, outputs that overflow, sizes that allocate, records and plots ------------
PART = torch.randn(4, 5, generator=gen())  # four neurons, k = 2 of d = 2
CLAIM = claims.Claim(
    id="a",
    statement="s",
    source="Thm 1",
    value=0.5,
    check=claims.Check("<", 1.0, "separator", "fixed before the run"),
    controls=(claims.Control("untrained model", 2.0),),
)
A_FILE = Path(tempfile.mkdtemp()) / "afile"
A_FILE.write_text("")
case("progress_bar desc an int", "desc must be a str", lambda: config.progress_bar(range(3), desc=5))
case(
    "checks.psd_sqrt not symmetric",
    "cov must be symmetric",
    lambda: checks.psd_sqrt(torch.tensor([[1.0, 2.0], [0.0, 1.0]])),
)
case("checks.finite of a list", "v must be a tensor", lambda: checks.finite("v", [1.0, NAN]))
case(
    "checks.allocation dtype a str", "dtype must be a torch.dtype", lambda: checks.allocation("n", 10, dtype="float32")
)
case("checks.same_device 'gpu'", "b must be a device", lambda: checks.same_device("cpu", "gpu"))
case("checks.finite_flag of a list", "t must be a tensor", lambda: checks.finite_flag([1.0, 2.0]))
case("checks.takes of an int", "fn must be a callable", lambda: checks.takes(3, [int], "fn"))
case("checks.checked of an int", "fn must be a function or a class", lambda: checks.checked(3))
case(
    "a misspelt keyword",
    "ridge\\(\\) got an unexpected keyword argument 'lamda'",
    lambda: est.ridge(prompt(), lamda=1.0),
)
case(
    "checks.real_array meta",
    "floor must hold values",
    lambda: risk.examples_needed(torch.tensor([0.1], device="meta"), torch.tensor([1.0]), 0.5),
)
_P64 = prompt(dtype=torch.float64)
HUGE_PROMPT = Prompt(_P64.x * 1e200, _P64.y, _P64.x_query * 1e200, _P64.y_query)
case("ridge overflowing predictions", "prompt made the result of ridge overflow", lambda: est.ridge(HUGE_PROMPT, 1.0))
case(
    "bayes overflowing predictions",
    "prompt or prior_mean made the result of bayes_linear_regression",
    lambda: est.bayes_linear_regression(HUGE_PROMPT, torch.zeros(2), torch.eye(2), 0.1),
)
case(
    "bayes prior_mean 1e300",
    "prompt or prior_mean made the result of bayes_linear_regression",
    lambda: est.bayes_linear_regression(prompt(), torch.full((2,), 1e300, dtype=torch.float64), torch.eye(2), 0.1),
)
case(
    "averaging overflow blames the prompt",
    "prompt's values",
    lambda: est.averaging(Prompt(prompt().x * 1e25, prompt().y * 1e25, prompt().x_query * 1e25, prompt().y_query)),
)
case(
    "prompt_mean overflow",
    "prompt made the result of prompt_mean",
    lambda: est.prompt_mean(Prompt(prompt().x, torch.full((3, 4), 3e38), prompt().x_query, prompt().y_query)),
)
case(
    "nearest_neighbours distances overflow",
    "prompt's squared distances",
    lambda: est.nearest_neighbours(
        Prompt(prompt().x * 1e20, prompt().y, prompt().x_query * 1e20, prompt().y_query), k=1
    ),
)
case(
    "kernel_ridge an n x n kernel too large",
    "prompt's n x n kernel",
    lambda: est.kernel_ridge(prompt(batch=1, n=40_000, d=1)),
)
case(
    "bayes an n x n kernel too large",
    "prompt's B x n x n kernels",
    lambda: est.bayes_linear_regression(prompt(batch=1, n=40_000, d=1), torch.zeros(1), torch.eye(1), 0.0),
)
case(
    "AttentionMoments complex features",
    "features must return real floating-point features",
    lambda: exact.AttentionMoments.of(lambda x: torch.ones(len(x), 3, dtype=torch.complex64), NP_TASK),
)
case(
    "attention_gamma no features",
    "features must give at least one feature",
    lambda: exact.attention_gamma(lambda x: x[:, :0], NP_TASK, 4),
)
case(
    "FixedFeatureAttention complex features",
    "features must give real features",
    lambda: FixedFeatureAttention(lambda x: torch.zeros(len(x), 2, dtype=torch.complex64), dim=2, n_features=2),
)
case(
    "ConvergenceTimes eps a str",
    "eps must be a numpy array",
    lambda: sa.ConvergenceTimes(eps="0.1", first=None, rest=None, concentration=None),
)
case(
    "sa.bound_terms shapes apart",
    "n_features and eps must broadcast",
    lambda: sa.bound_terms(np.array([2.0, 4.0]), np.array([0.1, 0.2, 0.3]), 1.0),
)
case(
    "sa.CalibratedBound n_fit past the K",
    "n_fit must be below the 3 K",
    lambda: sa.CalibratedBound(a=1.0, b=1.0, bound=np.ones((3, 1)), ratio=np.ones((3, 1)), allowance=0.1, n_fit=5),
)
case(
    "sa.per_feature_loss logits too large",
    "counts' samples x K x K",
    lambda: sa.per_feature_loss(
        torch.zeros(2048, 2048, dtype=torch.float64), torch.ones(1000, 2048, dtype=torch.float64)
    ),
)
case(
    "mf.gp_perturbation bandwidth 1e-300",
    "bandwidth must be a real number, between",
    lambda: mf.gp_perturbation(PART, gen(), 0.1, 1e-300),
)
case(
    "mf.gp_perturbation M x M too large",
    "the particles' kernel, its eigenvectors",
    lambda: mf.gp_perturbation(torch.zeros(50_000, 5), gen(), 0.1, 1.0),
)
case(
    "mf.MeanFieldRun particles a str",
    "particles must be a tensor",
    lambda: mf.MeanFieldRun(
        particles="x", gamma=None, history=GDHistory(np.arange(2), {"loss": np.ones(2)}), events=[]
    ),
)
case(
    "mf.critical_point NaN targets",
    "targets must be",
    lambda: mf.critical_point(PART, torch.full((10, 2), NAN), torch.zeros(10, 2), max_iter=5, newton_steps=1),
)
case(
    "mf.BirthDeathPerturbation reference per student",
    "reference must hold one loss per student",
    lambda: mf.BirthDeathPerturbation(
        lambda p: p.sum((-1, -2)),
        lambda c: torch.zeros(c, 5),
        gen(),
        patience=1,
        tolerance=0.5,
        reference=torch.ones(3),
    )(0, torch.randn(2, 4, 5)),
)
case(
    "TeacherFeatures scale 1e300",
    "scale must be in",
    lambda: TeacherFeatures(dim=2, k=2, width=4, n_whiten=64, scale=1e300),
)
case(
    "held_out_errors NaN predictions",
    "fit\\(prompt\\) must predict finite values",
    lambda: risk.held_out_errors(
        lambda p: lambda x: torch.full(x.shape[:2], NAN), LinearRegression(dim=2), 3, 4, 5, gen()
    ),
)
case(
    "RiskTerms.standard_error n of two axes",
    "n must be a number or a 1-D array",
    lambda: risk.RiskTerms(np.array([1.0, 2.0]), np.array([1.0, 3.0]), np.array([1.0, 2.0])).standard_error(
        np.ones((2, 2))
    ),
)
case(
    "scaling_exponent one replicate",
    "replicates\\[0\\] must hold at least 2 replicates",
    lambda: risk.scaling_exponent([1, 2], [np.ones(1), np.ones(3)], lambda r: float(r.mean()), reps=10),
)
case(
    "exponent_difference one replicate in first",
    "first's replicates\\[0\\]",
    lambda: risk.exponent_difference(
        ([1, 2], [np.ones(1), np.ones(3)], lambda r: 1.0), ([1, 2], [np.ones(3), np.ones(3)], lambda r: 1.0), reps=10
    ),
)
case(
    "attention_risk_terms task of another dim",
    "task must be of the model's dim=2",
    lambda: risk.attention_risk_terms(
        FeatureAttention(2, 4, generator=gen()), SingleIndexTasks(dim=3, subspace_dim=1), 2, 2, gen()
    ),
)
case(
    "plot_attention_heatmaps titles a str",
    "titles must be",
    lambda: plotting.plot_attention_heatmaps([np.eye(2), np.eye(2)], "ab", axes=list(plt.subplots(1, 2)[1])),
)
case(
    "plot_attention_heatmaps not square",
    "attn\\[0\\] must have shape",
    lambda: plotting.plot_attention_heatmaps([np.zeros((2, 3))], ["a"], axes=[plt.subplots()[1]]),
)
case(
    "plot_attention_snapshots not square",
    "attn must have shape",
    lambda: plotting.plot_attention_snapshots([0, 1, 2], np.zeros((3, 2, 3)), at=[1]),
)
case("recurrences of one str", "labels must be", lambda: plotting.recurrences("lsa"))
case(
    "plot_floor_by_width reference 0",
    "reference\\['floor'\\] must be > 0",
    lambda: plotting.plot_floor_by_width([1, 2], {"a": np.ones((3, 2))}, reference={"floor": 0.0}),
)
case(
    "plot_training_loss reference -1",
    "reference\\['floor'\\] must be > 0",
    lambda: plotting.plot_training_loss({"a": TrainHistory(np.ones(5), 1.0)}, reference={"floor": -1.0}),
)
case(
    "plot_phase_weights other = feature",
    "other must be neither 0",
    lambda: plotting.plot_phase_weights([0, 1, 2, 3], np.zeros((4, 3, 3)), feature=1, other=1, boundaries=[1, 2, 3]),
)
case(
    "plot_escape_by_variant an empty list",
    "escapes\\['a'\\] must hold one or more",
    lambda: plotting.plot_escape_by_variant({"a": []}, steps=10),
)
case(
    "plot_rate_curves negative standard error",
    "oracle\\[1.0\\] must hold standard errors >= 0",
    lambda: plotting.plot_rate_curves(
        [2, 4], {1.0: [0.1, 0.05]}, oracle={1.0: np.array([[0.1, -0.01], [0.05, 0.01]])}, oracle_n=[2, 4]
    ),
)
case(
    "plot_training_speed negative speed",
    "results must be",
    lambda: plotting.plot_training_speed(
        [{"device": "cpu", "config": "q", "rows": [{"name": "a", "prompts_per_s": -5.0}], "ensembles": []}]
    ),
)
case(
    "plot_risk_ratios_against_n a str ratio",
    "ratios\\[\\(1.0, 2\\)\\]\\['GD-β'\\]",
    lambda: plotting.plot_risk_ratios_against_n(
        [2, 4], {(1.0, n): {"GD-β": "x" if n == 2 else 1.0, "GD-0": 1.0, "GD++": 1.0} for n in (2, 4)}, snrs=[1.0]
    ),
)
case("Ledger duplicate claims", "claims must have distinct ids", lambda: claims.Ledger("00_x", [CLAIM, CLAIM]))
case(
    "overview problems a str",
    "ledgers\\['00_x'\\]\\['problems'\\] must be a list of str",
    lambda: claims.overview(
        ["00_x"],
        {"00_x": {"mode": "quick", "device": "cpu", "commit": "c", "date": "d", "claims": [], "problems": "broken"}},
    ),
)
case(
    "Ledger.write under a file",
    "folder must be a folder",
    lambda: claims.Ledger("00_x", [CLAIM]).write(folder=A_FILE / "sub"),
)
case("write_json under a file", "path must be in a folder", lambda: claims.write_json(A_FILE / "x.json", {"a": 1}))
case(
    "NonparametricTasks index table too large",
    "n_basis \\* dim",
    lambda: NonparametricTasks(dim=16384, smoothness=1.0, n_basis=65536),
)
case(
    "GPTConfig parameters too many",
    "the blocks' parameters",
    lambda: GPTConfig(n_dims=4, n_context=1, n_embd=16384, n_layer=1024, n_head=1),
)
case(
    "gradient_descent NaN at the start",
    "check loss_fn and init",
    lambda: gradient_descent(lambda t: (t * NAN).sum(), torch.ones(2), steps=3, lr=0.1, progress=False),
)


# --- a fifth campaign: results that overflow inside, the least-probed helpers, records and plots ----------------
F64 = dict(dtype=torch.float64)
LR2 = LinearRegression(dim=2)
SI3 = SingleIndexTasks(dim=3, subspace_dim=2)
X10, T10 = torch.randn(10, 2, generator=gen()), torch.randn(10, 2, generator=gen(1))
case(
    "gd_beta_risk beta0 1e200",
    "beta0 or gamma made the result of gd_beta_risk overflow",
    lambda: exact.gd_beta_risk(LR2, 4, torch.full((2,), 1e200, **F64), torch.eye(2, **F64)),
)
case(
    "best_gd_beta_risk beta0 -1e200",
    "beta0 made the result of optimal_gd_step overflow",
    lambda: exact.best_gd_beta_risk(LR2, 4, torch.full((2,), -1e200, **F64)),
)
case(
    "lsa_risk u 1e200",
    "u or b made the result",
    lambda: exact.lsa_risk(LR2, 4, torch.full((3,), 1e200, **F64), torch.zeros(3, 2, **F64)),
)
case(
    "AttentionMoments negative E y^2",
    "second must be E y\\^2 >= 0",
    lambda: exact.AttentionMoments(
        torch.tensor(-1.0, **F64), torch.eye(2, **F64), torch.eye(2, **F64), torch.eye(2, **F64)
    ),
)
case(
    "best_attention_excess noise above the risk",
    "noise_var must be at most the risk",
    lambda: exact.best_attention_excess(exact.AttentionMoments.of(NP_TASK.features, NP_TASK, points=64), [4], 1e6),
)
case(
    "SingleIndexTasks.link z 1e30",
    "z made the result of link overflow",
    lambda: SI3.link(torch.full((2, 3), 1e30), SI3.sample_links(2, gen())),
)
case(
    "SingleIndexTasks.conditional_mean NaN", "x must be", lambda: SI3.conditional_mean(torch.tensor([[NAN, 0.0, 0.0]]))
)
case(
    "mf.static_loss targets 1e200",
    "targets made the result of static_loss overflow",
    lambda: mf.static_loss(PART.double(), T10.double() * 1e200, X10.double(), 2),
)
case(
    "mf.near_singular particles 1e200",
    "particles made Sigma",
    lambda: mf.near_singular(PART.double() * 1e200, X10.double(), 2),
)
case(
    "mf.descent_rotation targets 1e200",
    "targets made E\\[g f\\^T\\] overflow",
    lambda: mf.descent_rotation(PART.double(), T10.double() * 1e200, X10.double()),
)
case(
    "mf.SaddleEscape plateau_end 0",
    "plateau_end must be >= 1",
    lambda: mf.SaddleEscape(np.arange(10), np.ones(10), np.ones(10), plateau_end=0, rate=0.1, offset=0.0, r2=1.0),
)
case(
    "mf.fit_saddle_escape NaN loss",
    "history must hold finite 'loss' and 'spread'",
    lambda: mf.fit_saddle_escape(GDHistory(np.arange(10), {"loss": np.r_[NAN, np.ones(9)], "spread": np.ones(10)})),
)
case(
    "mf.MeanFieldRun events a str",
    "events must be a list",
    lambda: mf.MeanFieldRun(PART, None, GDHistory(np.arange(2), {"loss": np.ones(2)}), events="none"),
)
case("GDHistory steps decreasing", "steps must increase", lambda: GDHistory(np.array([2, 1, 0]), {"loss": np.ones(3)}))
case("TrainHistory negative losses", "losses must be", lambda: TrainHistory(np.array([-1.0, 0.5]), 1.0))
case(
    "sa.CalibratedBound negative allowance",
    "allowance must be >= 0",
    lambda: sa.CalibratedBound(a=1.0, b=1.0, bound=np.ones((3, 1)), ratio=np.ones((3, 1)), allowance=-0.5, n_fit=1),
)
case("sa.bound_terms n_features 1e300", "n_features must be at most", lambda: sa.bound_terms(1e300, 0.1, 1.0))
case(
    "sa.run_gradient_descent logits sized by n_samples",
    "n_samples \\* K \\* K",
    lambda: sa.run_gradient_descent(
        torch.full((2048,), 1 / 2048), 3, steps=1, lr=0.1, n_samples=1000, generator=gen(), progress=False
    ),
)
case(
    "least_squares overflow",
    "prompt made the result of least_squares",
    lambda: est.least_squares(
        Prompt(
            torch.ones(1, 2, 1, **F64),
            torch.full((1, 2), 1e308, **F64),
            torch.full((1, 1), 2.0, **F64),
            torch.zeros(1, **F64),
        )
    ),
)
case(
    "kernel_ridge labels whose errors overflow",
    "bandwidth and the prompt's labels make every leave-one-out error overflow",
    lambda: est.kernel_ridge(Prompt(_P64.x, _P64.y * 1e160, _P64.x_query, _P64.y_query * 1e160)),
)
case(
    "kernel_ridge a million bandwidths",
    "bandwidth must be .* of at most 1024",
    lambda: est.kernel_ridge(prompt(), bandwidth=[1.0] * 10**6),
)
case(
    "GPT predict on inputs 1e30",
    "prompt made the result of predict overflow",
    lambda: ICLTransformer(GPTConfig(n_dims=2, n_context=4, n_embd=8, n_layer=1, n_head=1)).predict(
        Prompt(prompt().x * 1e30, prompt().y, prompt().x_query * 1e30, prompt().y_query)
    ),
)
case(
    "held_out_errors complex predictions",
    "fit\\(prompt\\) must predict real numbers",
    lambda: risk.held_out_errors(
        lambda p: lambda x: torch.zeros(x.shape[:2], dtype=torch.complex64), LR2, 3, 4, 5, gen()
    ),
)
case(
    "bootstrap_interval groups of text",
    "groups\\[0\\] must be",
    lambda: risk.bootstrap_interval(np.mean, [np.array(["a", "b", "c"])], reps=10),
)
case(
    "mean_and_band errors 1e200",
    "errors made the result",
    lambda: risk.mean_and_band(torch.tensor([[1e200], [3e200], [2e200]], **F64)),
)
case(
    "swap_contexts a meta prompt",
    "x must hold values",
    lambda: swap_contexts(Prompt(*(torch.zeros(3, *s, device="meta") for s in ((4, 2), (4,), (2,), ())))),
)
case(
    "checks.prompt_fits a str module",
    "module must be a torch.nn.Module",
    lambda: checks.prompt_fits(torch.zeros(3, 2), "LTB"),
)
case("checks.psd_sqrt negative definite", "cov must be positive semi-definite", lambda: checks.psd_sqrt(-torch.eye(2)))
case("checks.same_dtype unknown name", "names must be arguments", lambda: checks.same_dtype("a", "c")(lambda a, b: a))
case(
    "claims.table status a number",
    "claims\\[0\\]\\['status'\\] must be a str",
    lambda: claims.table([{**CLAIM.as_dict(), "status": 3}]),
)
case(
    "write_json a name past 200 bytes",
    "path must name a file of at most 200 bytes",
    lambda: claims.write_json(A_FILE.parent / ("x" * 300 + ".json"), {"a": 1}),
)
case(
    "plot_attention_heatmaps weights of 5",
    "attn\\[0\\] must hold attention weights in \\[0, 1\\]",
    lambda: plotting.plot_attention_heatmaps([np.full((2, 2), 5.0)], ["a"], axes=[plt.subplots()[1]]),
)
case(
    "plot_phase_weights a negative boundary",
    "boundaries must be",
    lambda: plotting.plot_phase_weights([0, 1, 2, 3], np.zeros((4, 3, 3)), feature=1, other=2, boundaries=[-5, 1, 2]),
)
case(
    "plot_convergence_times no times",
    "panels must be",
    lambda: plotting.plot_convergence_times([{"x": [1, 2], "xlabel": "K", "times": {}}]),
)
case(
    "plot_risk_ratios_against_n 5 ratios",
    "snrs must hold at most 4",
    lambda: plotting.plot_risk_ratios_against_n([2, 4], {}, snrs=[0.5, 1.0, 2.0, 4.0, 8.0]),
)


# --- a sixth campaign (written without the tables above): the check helpers' own arguments, clouds of no neuron,
# hand-built results, divergence blamed on the step size, messages naming the caller's argument ---------------------
_LTB_HUGE = LTB(2)
with torch.no_grad():
    _LTB_HUGE.W_1.fill_(1e20)
    _LTB_HUGE.W_2.fill_(1e20)
_X5, _T5 = torch.randn(10, 2, generator=gen(2)), torch.randn(10, 2, generator=gen(3))
case("squared_errors (B, n) preds", "preds", lambda: squared_errors(torch.zeros(3, 4), prompt()))
case(
    "Prompt.from_points on the meta device",
    "xs and ys must hold values",
    lambda: Prompt.from_points(torch.zeros(2, 3, 2, device="meta"), torch.zeros(2, 3, device="meta")),
)
case("checks.sample_sizes a float dim", "dim must be", lambda: checks.sample_sizes(2, 3, gen(), dim=2.5))
case("checks.sample_sizes a negative dim", "dim must be", lambda: checks.sample_sizes(2, 3, gen(), dim=-1))
case("checks.allocation a negative count", "values must be a count", lambda: checks.allocation("x", -5))
case(
    "checks.psd_sqrt an int matrix",
    "cov must be a float tensor",
    lambda: checks.psd_sqrt(torch.eye(2, dtype=torch.long)),
)
case("checks.psd_sqrt an empty matrix", "cov must be a non-empty", lambda: checks.psd_sqrt(torch.zeros(0, 0)))
case("checks.task_fits no task", "task must be a task family", lambda: checks.task_fits(LTB(2), None))
case("checks.task_fits no model", "model must be a torch.nn.Module", lambda: checks.task_fits(None, LR))
case("checks.finite_losses a 0-dim loss", "losses must be", lambda: checks.finite_losses(torch.tensor(NAN), 0))
case("checks.finite_losses a str step", "first_step must be an int", lambda: checks.finite_losses(torch.ones(2), "3"))
case(
    "checks.warn_if_ill_conditioned an empty scale",
    "gram_scale must be a non-empty",
    lambda: checks.warn_if_ill_conditioned("lam", 1e-3, torch.zeros(0)),
)
case(
    "checks.warn_if_ill_conditioned a NaN penalty",
    "penalty must be finite",
    lambda: checks.warn_if_ill_conditioned("lam", NAN, torch.ones(3)),
)
case("checks.finite_result an int name", "names must be", lambda: checks.finite_result(5))
case("checks.declare an int base", "base, ok and constraint must be", lambda: checks.declare(5, bool, "x"))
case(
    "gd_beta_from_ltb weights that overflow",
    "model's weights must give a finite Gamma",
    lambda: gd_beta_from_ltb(_LTB_HUGE),
)
case(
    "GDBeta a gamma past float32",
    "gamma must be finite in float32",
    lambda: GDBeta(2, gamma=torch.eye(2, **F64) * 1e300),
)
case(
    "Ledger of a JSON record",
    r"claims\[0\] must be an icl_utils.claims.Claim",
    lambda: claims.Ledger("00_x", [{"id": "a"}]),
)


def _ledger_with_a_record_appended():
    ledger = claims.Ledger("00_x", [CLAIM])
    ledger.claims.append(CLAIM.as_dict())
    return ledger


case(
    "Ledger.counts a record appended", "claims must hold Claims only", lambda: _ledger_with_a_record_appended().counts()
)
case(
    "Ledger.record a record appended", "claims must hold Claims only", lambda: _ledger_with_a_record_appended().record()
)
case(
    "claims.table an interval of text",
    r"claims\[0\]\['interval'\]\[0\] must be a number",
    lambda: claims.table([{**CLAIM.as_dict(), "interval": ["a", "b"]}]),
)
case(
    "plot_rate_curves a NaN on the curve",
    r"curves\[1.0\] must be finite and > 0 at every n",
    lambda: plotting.plot_rate_curves(
        [2, 4, 8], {1.0: [1.0, NAN, 0.25]}, oracle={1.0: [[1, 0.1], [0.5, 0.1], [0.3, 0.1]]}, oracle_n=[2, 4, 8]
    ),
)
case(
    "train a task of another dim",
    "task must be of the model's dim=2",
    lambda: train(LTB(2, mlp=False), LinearRegression(dim=3), cfg(), generator=gen(), progress=False),
)
case(
    "mf.run_gradient_descent diverging eta",
    "lower eta",
    lambda: mf.run_gradient_descent(
        "attention",
        mf.FeaturePrompts.sample(TeacherFeatures(dim=2, k=2, width=4, n_whiten=256), 4, 3, gen()),
        mf.init_particles(4, 2, 2, gen()),
        steps=60,
        eta=1e6,
        gamma_lr=1e6,
        record_every=5,
        progress=False,
    ),
)
case(
    "gd_beta_flow a diverging lr",
    "lower lr",
    lambda: gd_beta.gd_beta_flow(LR2, 5, {"beta0": torch.zeros(2), "gamma": torch.eye(2)}, steps=50, lr=1e3),
)
case("mf.static_loss of no neuron", "particles must", lambda: mf.static_loss(torch.zeros(0, 5), _T5, _X5, 2))
case("mf.velocity of no neuron", "particles must", lambda: mf.velocity(torch.zeros(0, 5), _T5, _X5, 2))
case("mf.descent_rotation of no neuron", "student must", lambda: mf.descent_rotation(torch.zeros(0, 5), _T5, _X5))
case(
    "mf.gp_perturbation of no neuron", "particles must", lambda: mf.gp_perturbation(torch.zeros(0, 5), gen(), 0.1, 1.0)
)
case(
    "sigmoid_network of no neuron",
    "particles must hold at least one neuron",
    lambda: sigmoid_network(torch.zeros(0, 5), _X5, 2),
)
case(
    "exact.AttentionMoments a singular S(n)",
    "n = 1 and the moments c and w give a singular S",
    lambda: exact.AttentionMoments(
        torch.tensor(1.0, **F64), torch.zeros(2, 2, **F64), torch.eye(2, **F64), torch.zeros(2, 2, **F64)
    ).gamma(1),
)
case("gpt.Block of no config", "cfg must be a GPTConfig", lambda: Block("cfg"))
case(
    "sample_memo a compute of one argument",
    "compute must take no argument",
    lambda: sample_memo(prompt(), "k", lambda x: 1),
)
case(
    "FixedFeatureAttention a map that drops the batch",
    "features must give tensors of n_features=3 outputs per input",
    lambda: FixedFeatureAttention(lambda x: torch.ones(2, 3), 2, 3).predict(prompt()),
)
case(
    "mf.SaddleEscape a str plateau_end",
    "plateau_end must be an int",
    lambda: mf.SaddleEscape(np.arange(10), np.ones(10), np.ones(10), "3", 0.1, 0.0, 1.0),
)
case(
    "mf.SaddleEscape a zero spread",
    "spread must be > 0 on the fitted window",
    lambda: mf.SaddleEscape(np.arange(10), np.ones(10), np.zeros(10), 6, 0.1, 0.0, 1.0),
)
case(
    "sa.CalibratedBound a NaN constant",
    "a must be finite",
    lambda: sa.CalibratedBound(NAN, 1.0, np.ones((3, 1)), np.ones((3, 1)), 0.1, 1),
)
case(
    "PlainLogLocator no limit",
    "vmin and vmax must be numbers",
    lambda: plotting.PlainLogLocator().tick_values(None, 10.0),
)
case(
    "plot_convergence_times a times triple",
    "must be steps, or a pair",
    lambda: plotting.plot_convergence_times(
        [{"x": [2, 4], "xlabel": "K", "times": {"a": (np.array([2.0, 4.0]), np.ones((2, 3)), 5)}}]
    ),
)
case(
    "plot_training_speed a row named by a list",
    "results must be",
    lambda: plotting.plot_training_speed(
        [{"device": "cpu", "config": "s", "rows": [{"name": ["x"], "prompts_per_s": 1.0}], "ensembles": []}]
    ),
)
case(
    "plot_gd_records a key not recorded",
    "keys must be recorded by every run",
    lambda: plotting.plot_gd_records({"a": GDHistory(np.arange(3), {"loss": np.ones(3)})}, keys=["err"]),
)
case(
    "fit_saddle_escape no plateau",
    "history must hold a loss plateau",
    lambda: mf.fit_saddle_escape(GDHistory(np.arange(10), {"loss": np.linspace(1, 0, 10), "spread": np.ones(10)})),
)
case(
    "basis_bayes_excess a design too large",
    "n \\* the features of a point",
    lambda: exact.basis_bayes_excess(NP_TASK, 10**8, 2, gen()),
)
case(
    "tasks_to_recover gradients that overflow",
    "chunk_gradients or tasks_per_chunk made the squares overflow",
    lambda: tasks_to_recover(1e200 * torch.randn(3, 2, 3, generator=gen(), **F64), 4, torch.eye(3, **F64)[:, :2]),
)
case(
    "examples_needed a count that overflows",
    "spread / \\(level - floor\\) must be a finite count",
    lambda: risk.examples_needed(0.0, 1e300, 1e-300),
)
case(
    "FeatureAttention.features NaN inputs",
    "x must be finite",
    lambda: FeatureAttention(2, 4, generator=gen()).features(torch.tensor([[NAN, 0.0]])),
)
case(
    "one_step_feature_update a weight decay that overflows",
    "made the step overflow W",
    lambda: one_step_feature_update(
        FeatureAttention(2, 4, generator=gen()), LR2, n_tasks=4, n=3, lr=1.0, weight_decay=1e300, generator=gen()
    ),
)


# --- work: dense linear algebra that a width within MAX_WIDTH makes minutes long is refused before it starts ------
F64_ONE = torch.ones((), dtype=torch.float64)  # expanded into a matrix of any size without its memory
case(
    "optimal_gd_step a task of 8192 dims",
    "optimal_gd_step at task.dim = 8192 .* exceed the limit of one call",
    lambda: exact.optimal_gd_step(LinearRegression(8192), 10),
)
case(
    "best_gd_beta_risk a task of 8192 dims",
    "task.dim = 8192",
    lambda: exact.best_gd_beta_risk(LinearRegression(8192, noise_std=0.1), 10),
)
case(
    "bayes_risk 20,000 draws of 8192 examples",
    "bayes_risk at task.dim = 4, n = 8192, n_mc = 20000 .*config.MAX_FLOPS",
    lambda: exact.bayes_risk(LinearRegression(4, noise_std=0.1), 8192, gen()),
)
case(
    "optimal_lsa a task of 60 dims",
    "optimal_lsa at task.dim = 60, starts = 8, max_iter = 200",
    lambda: exact.optimal_lsa(LinearRegression(60, noise_std=0.1), 10),
)
case(
    "AttentionMoments.of 65,536 Fourier functions",
    "task.n_basis = 65536 functions",
    lambda: (lambda t: exact.AttentionMoments.of(t.features, t))(
        NonparametricTasks(dim=1, smoothness=1.0, n_basis=65536)
    ),
)
case(
    "AttentionMoments.gamma of 8192 features",
    "AttentionMoments.gamma on moments c, g, w of 8192 features",
    lambda: exact.AttentionMoments(F64_ONE, *(F64_ONE.expand(8192, 8192),) * 3).gamma(10),
)
case(
    "basis_bayes_excess 8192 functions",
    "basis_bayes_excess of task.n_basis = 8192",
    lambda: exact.basis_bayes_excess(NonparametricTasks(dim=1, smoothness=1.0, n_basis=8192), 4, 8, gen()),
)
case(
    "NonparametricTasks 65,536 B-splines in 8192 dims",
    "5 \\* n_basis \\* dim \\(the B-spline index\\)",
    lambda: NonparametricTasks(dim=8192, smoothness=1.0, basis="bspline", n_basis=65536),
)
case(
    "LinearRegression a prior_cov of 12000 dims",
    "prior_cov's eigenvalues and square root at dim = 12000",
    lambda: LinearRegression(12000, prior_cov=F64_ONE.expand(12000, 12000)),
)
case(
    "ridge a prompt of 16384 dims",
    "ridge on a prompt of n = 2 examples of dim = 16384",
    lambda: est.ridge(prompt(1, 2, 16384), 1.0),
)
case(
    "least_squares a prompt of 4096 examples in 16384 dims",
    "least_squares on a prompt of n = 4096 examples of dim = 16384",
    lambda: est.least_squares(Prompt.from_points(torch.zeros(1, 4097, 16384), torch.zeros(1, 4097))),
)
case(
    "bayes_linear_regression a prior_cov of 16384 dims",
    "bayes_linear_regression on a prompt of n = 2 examples of dim = 16384",
    lambda: est.bayes_linear_regression(prompt(1, 2, 16384), torch.zeros(16384), F64_ONE.expand(16384, 16384), 0.1),
)
case(
    "kernel_ridge_fit prompts of 8192 examples",
    "kernel_ridge_fit on prompts of n = 8192 examples",
    lambda: kernel_ridge_fit(prompt(1, 8192, 1)),
)
case(
    "DiscreteFeatures a frame of 12000 dims",
    "a QR of the random frame at dim = 12000",
    lambda: DiscreteFeatures(12000, torch.ones(4) / 4),
)
case(
    "SingleIndexTasks a subspace of 8192 in 16384 dims",
    "a QR of the subspace at dim = 16384, subspace_dim = 8192",
    lambda: SingleIndexTasks(16384, 8192),
)
case(
    "principal_angles weights of 8192 x 8192",
    "an SVD of weights of shape \\(8192, 8192\\)",
    lambda: principal_angles(F64_ONE.expand(8192, 8192), torch.eye(8192, 1, dtype=torch.float64)),
)
case(
    "NonparametricTasks.posterior_mean a prior of 65,536 functions",
    "n_basis\\^2 \\(the prior's covariance\\)",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, n_basis=65536).posterior_mean(prompt(2, 4, 1)),
)
case(
    "NonparametricTasks.feature_prompt the basis of 2000 prompts",
    "prompt's B \\* \\(n \\+ 1\\) points",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, n_basis=65536).feature_prompt(prompt(2000, 100, 1)),
)
case(
    "NonparametricTasks.features 20,000 points of 65,536 functions",
    "x's points \\* the values of a point's basis",
    lambda: NonparametricTasks(dim=1, smoothness=1.0, n_basis=65536).features(torch.rand(20000, 1)),
)
case(
    "gd_beta_risk a task of 8192 dims",
    "gd_beta_risk at task.dim = 8192",
    lambda: exact.gd_beta_risk(LinearRegression(8192), 10, torch.zeros(8192), F64_ONE.expand(8192, 8192)),
)
case(
    "checks.psd_sqrt a 8192 x 8192 matrix",
    "prior's square root at 8192 x 8192",
    lambda: checks.psd_sqrt(F64_ONE.expand(8192, 8192), "prior"),
)
case(
    "AttentionMoments.of a map to 16,384 features",
    "the moments of the 16384 features at 4096 points",
    lambda: exact.AttentionMoments.of(lambda x: x.expand(-1, 16384), NP_TASK),
)
case(
    "LinearRegression an x_cov of 8192 dims",
    "x_cov's eigenvalues and square root at dim = 8192",
    lambda: LinearRegression(8192, x_cov=F64_ONE.expand(8192, 8192)),
)
# --- a seventh campaign's finds --------------------------------------------------------------------------------------
case(
    "checks.allocation an int past float64",
    "batch = about 10\\^400 values",
    lambda: checks.allocation("batch", 10**400),
)
case("checks.work an int past float64", "x = about 10\\^400 floating-point", lambda: checks.work("x", 10**400))
case(
    "DiscreteFeatures.sample a batch past float64",
    "batch \\* \\(n \\+ 1\\) \\* dim = about",
    lambda: DiscreteFeatures(4, torch.ones(2) / 2).sample(10**300, 10**10, gen()),
)
case("checks.psd_sqrt a NaN", "cov must be finite", lambda: checks.psd_sqrt(torch.tensor([[NAN, 0.0], [0.0, 1.0]])))
case(
    "claims.write_json a null character in path",
    "path must not hold a null character",
    lambda: claims.write_json(Path(tempfile.mkdtemp()) / "a\0b.json", {}),
)
case(
    "claims.write_json data nested past the recursion limit",
    "data must be nested less deeply",
    lambda: claims.write_json(Path(tempfile.mkdtemp()) / "deep.json", {"a": _nested(100_000)}),
)
case(
    "NonparametricTasks.sample weights past MAX_SCALE",
    "weights must be .* of magnitude at most config.MAX_SCALE",
    lambda: NonparametricTasks(dim=1, smoothness=1.0).sample(4, 5, gen(), weights=torch.full((4, 64), 3e38)),
)
case(
    "plot_error_curves a normalize that overflows the curves",
    "normalize = 2.3e-308 makes the curves overflow",
    lambda: plotting.plot_error_curves({"a": torch.ones(4, 3) * 10}, normalize=2.3e-308),
)
case(
    "gd_plus_plus 1e7 steps in 64 dims",
    "GD\\+\\+ over steps = 10000000 at dim = 64",
    lambda: est.gd_plus_plus(prompt(1, 2, 64), lr=0.01, gamma=0.0, steps=10**7),
)
case(
    "GDPlusPlus 1e7 steps in 64 dims",
    "GD\\+\\+ over steps = 10000000 at dim = 64",
    lambda: GDPlusPlus(64, steps=10**7)(prompt(1, 2, 64)),
)
case(
    "gd_beta_flow 1e7 steps in 64 dims",
    "gd_beta_flow over steps = 10000000 at task.dim = 64",
    lambda: gd_beta.gd_beta_flow(
        LinearRegression(64), 5, {"beta0": torch.zeros(64), "gamma": torch.zeros(64, 64)}, steps=10**7, lr=1e-3
    ),
)
case(
    "two_layer_network 1e5 steps of width 4096",
    "two_layer_network_fit over steps = 100000 of width = 4096",
    lambda: est.two_layer_network(prompt(2, 64, 64), width=4096, steps=10**5),
)
case(
    "two_layer_network activations of 16 GiB",
    "4 \\* prompt's B \\* n \\* width",
    lambda: est.two_layer_network(prompt(1024, 256, 1), width=16384, steps=1),
)
case(
    "one_step_feature_update 1e12 tasks",
    "n_tasks must be in \\[1, 1e\\+08\\]",
    lambda: one_step_feature_update(
        FeatureAttention(2, 4, generator=gen()), LR2, n_tasks=10**12, n=2, lr=1.0, weight_decay=1.0, generator=gen()
    ),
)
case(
    "stage_one_gradients 1e12 tasks",
    "n_tasks must be .* ints in \\[1, 1e\\+08\\] \\(config.MAX_DRAWS\\)",
    lambda: stage_one_gradients(
        FeatureAttention(2, 4, generator=gen()), LR2, n_tasks=[10, 10**12], n=2, generator=gen()
    ),
)
case(
    "stage_one_gradients a million counts",
    "n_tasks must be .* of at most 1024 \\(config.MAX_SERIES\\) ints",
    lambda: stage_one_gradients(
        FeatureAttention(2, 4, generator=gen()), LR2, n_tasks=list(range(1, 10**6)), n=2, generator=gen()
    ),
)
case(
    "icl_optimal_gamma features of 1e7 points",
    "students \\* B n \\* k\\^2",
    lambda: mf.icl_optimal_gamma(torch.randn(2, 22), torch.randn(1000, 10**4, 1), torch.randn(1000, 10**4)),
)
case(
    "icl_optimal_gamma y's students",
    "students \\* B n \\* k\\^2",
    lambda: mf.icl_optimal_gamma(
        torch.randn(2, 22), torch.randn(100, 100, 1), torch.randn(1, 100, 100).expand(10**4, 100, 100)
    ),
)
case(
    "icl_optimal_gamma 5000 neurons on 1e7 points",
    "the hidden layer of particles and x",
    lambda: mf.icl_optimal_gamma(torch.randn(5000, 3), torch.randn(1000, 10**4, 1), torch.randn(1000, 10**4)),
)
case(
    "optimal_gamma k of 12000",
    "optimal_gamma of k = 12000",
    lambda: mf.optimal_gamma(torch.randn(1, 12002), torch.randn(1, 1), 12000),
)
case(
    "gp_perturbation 8000 neurons",
    "gp_perturbation of particles' M = 8000",
    lambda: mf.gp_perturbation(torch.randn(8000, 3), gen(), 0.1, 1.0),
)
case(
    "icl_optimal_gamma k of 400",
    "students \\* k\\^4 \\(the Gram matrix",
    lambda: mf.icl_optimal_gamma(torch.randn(2, 402), torch.randn(1, 2, 1), torch.randn(1, 2)),
)
case(
    "path_losses a million points",
    "s_values must be .* of at most 1024",
    lambda: mf.path_losses(
        torch.randn(3, 5),
        torch.randn(3, 5),
        torch.eye(2),
        np.linspace(0, 1, 10**6),
        torch.randn(5, 2),
        torch.randn(5, 2),
    ),
)
case(
    "effective_ridge 1e5 penalties",
    "lams must be .* of at most 1024",
    lambda: risk.effective_ridge(torch.zeros(6), prompt(1, 5, 2), list(np.logspace(-3, 3, 10**5))),
)
case(
    "kernel_ridge a million penalties",
    "lams must be .* of at most 1024",
    lambda: est.kernel_ridge(prompt(), lams=tuple(np.logspace(-3, 3, 10**6))),
)
case(
    "best_attention_excess a million lengths",
    "ns must hold at most 1024",
    lambda: exact.best_attention_excess(
        exact.AttentionMoments(F64_ONE, *(torch.eye(2, **F64),) * 3), list(range(1, 10**6)), 0.0
    ),
)
case("LTB 16384 dims with an MLP as wide", "the LTB's parameters", lambda: LTB(16384, mlp_width=16384))
case("MLPAttention 1024 layers of 16384", "the MLP's parameters", lambda: MLPAttention(1, 1, hidden=16384, depth=1024))
case(
    "two_layer_network a step size of 1e6",
    "lr = 1e\\+06 made the fit diverge",
    lambda: est.two_layer_network(prompt(8, 16, 4), lr=1e6),
)
case("checks.work an int past 4300 digits", "x = about 10\\^5000", lambda: checks.work("x", 10**5000))
case(
    "two_layer_network_fit a width past 4300 digits",
    "width must be in \\[1, 16384\\]",
    lambda: est.two_layer_network_fit(prompt(), width=10**5000),
)
case("checks.work a negative estimate", "flops must be an estimate >= 0", lambda: checks.work("x", -1.0))
case("checks.work a NaN estimate", "flops must be an estimate >= 0", lambda: checks.work("x", float("nan")))
case("checks.work a str estimate", "flops must be a number", lambda: checks.work("x", "1e9"))
case("checks.work a what that is not a str", "what must be a str", lambda: checks.work(3, 1.0))
case("checks.psd_sqrt a name that is not a str", "name must be a str", lambda: checks.psd_sqrt(torch.eye(2), name=1))
case(
    "TeacherFeatures 4096 neurons' activations on 65,536 inputs",
    "3 \\* n_whiten \\* width",
    lambda: TeacherFeatures(dim=4, k=2, width=4096),
)


# --- an eighth campaign: plots of too many series, claims' records, a model without gradients, hidden layers ----
class _NoGrad(torch.nn.Module):
    """A model whose predictions do not depend on its one parameter."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, p: Prompt) -> torch.Tensor:
        return p.y_query * 0


def _ledger_with(**fields) -> claims.Ledger:
    ledger = claims.Ledger("ch", [CLAIM])
    for name, value in fields.items():
        setattr(ledger, name, value)
    return ledger


def _under_no_grad() -> None:
    with torch.no_grad():  # a notebook's evaluation block left open: training still trains
        train(LTB(2), LR, cfg(), generator=gen())
        fit_lbfgs(LTB(2), prompt(), max_iter=2)


def _twice() -> None:
    model = LTB(2)
    train_ensemble([model, model], LR, cfg(), generator=gen(), batched=True)


case(
    "plot_error_curves 1100 curves",
    "curves must be .*at most 1024",
    lambda: plotting.plot_error_curves({str(i): torch.rand(2, 2) for i in range(1100)}),
)
case(
    "plot_error_curves errors whose band overflows",
    "curves\\['a'\\] must have a finite mean",
    lambda: plotting.plot_error_curves({"a": torch.rand(8, 6, dtype=torch.float64) * 1e300}),
)
case(
    "plot_training_loss 2000 models",
    "histories must be .*at most config.MAX_SERIES models",
    lambda: plotting.plot_training_loss({"a": TrainHistory(np.ones((5, 2000)), 1.0)}),
)
case(
    "plot_lines 2000 columns",
    "series must hold at most 1024",
    lambda: plotting.plot_lines([1, 2, 3], {"a": np.ones((3, 2000))}),
)
case(
    "plot_lines a zorder of high",
    "styles\\['a'\\] must hold keywords of a line",
    lambda: plotting.plot_lines([1, 2, 3], {"a": [1, 2, 3]}, styles={"a": {"zorder": "high"}}),
)
case(
    "plot_lines a transform of 5",
    "styles\\['a'\\] must hold keywords of a line",
    lambda: plotting.plot_lines([1, 2, 3], {"a": [1, 2, 3]}, styles={"a": {"transform": 5}}),
)
case(
    "plot_attention_heatmaps NaN weights",
    "attn\\[0\\] must hold attention weights in \\[0, 1\\]",
    lambda: plotting.plot_attention_heatmaps([np.full((2, 2), NAN)], ["a"], axes=[plt.subplots()[1]]),
)
case(
    "plot_attention_heatmaps none",
    "attn, titles and axes must have the same length, at least one",
    lambda: plotting.plot_attention_heatmaps(np.zeros((0, 2, 2)), [], axes=[]),
)
case(
    "plot_readout_errors a NaN random map",
    "random\\['t'\\] must hold finite values",
    lambda: plotting.plot_readout_errors([1, 2], {"t": [0.5, 0.4]}, {"t": [NAN, 0.6]}, {"t": 0.3}),
)
case(
    "plot_readout_errors a figure a million inches high",
    "figsize must be a pair .*\\(0, 100\\]",
    lambda: plotting.plot_readout_errors([1, 2], {"t": [0.5, 0.4]}, {"t": [0.6]}, {"t": 0.3}, figsize=(5, 1e6)),
)
case(
    "plot_readout_errors 1200 panels",
    "learned must be .*at most 1024",
    lambda: plotting.plot_readout_errors(
        [1, 2], {str(i): [0.5, 0.4] for i in range(1200)}, {str(i): [0.6] for i in range(1200)}, {}
    ),
)
case(
    "plot_subspace_recovery an exponent of 1e308",
    "exponents must be in \\[-100, 100\\]",
    lambda: plotting.plot_subspace_recovery({2: [1.0, 2.0]}, {2: [0.5, 0.6]}, exponents=[1e308]),
)
case(
    "plot_sample_complexity every value inf",
    "panels\\['t'\\] must hold a finite value",
    lambda: plotting.plot_sample_complexity({"t": ([1.0, 2.0], {"a": [INF, INF]})}),
)
case(
    "plot_sample_complexity a negative value",
    "panels\\['t'\\]\\[1\\]\\['a'\\] must hold values > 0",
    lambda: plotting.plot_sample_complexity({"t": ([1.0, 2.0], {"a": [-1.0, 2.0]})}),
)
case(
    "plot_sample_complexity no learner",
    "panels\\['t'\\]\\[1\\] must map 1 to 1024 learners",
    lambda: plotting.plot_sample_complexity({"t": ([1.0, 2.0], {})}),
)
case(
    "plot_gd_beta_reading an empty gamma",
    "gamma_star must be",
    lambda: plotting.plot_gd_beta_reading(torch.rand(5), torch.rand(5), torch.zeros(0, 0), torch.zeros(0, 0)),
)
case(
    "plot_gap_scaling a norm of 1e200",
    "trained must be keyed by norms",
    lambda: plotting.plot_gap_scaling([4.0, 8.0], {1e200: [0.1, 0.2]}, {1e200: [0.1, 0.2]}),
)
case(
    "plot_rate_curves oracle_n of one value",
    "oracle_n must hold at least two distinct values",
    lambda: plotting.plot_rate_curves(
        [4.0, 8.0], {1.0: [0.1, 0.05]}, oracle={1.0: [[0.1, 0.01], [0.05, 0.01]]}, oracle_n=[4.0, 4.0]
    ),
)
case(
    "plot_feature_errors no feature",
    "histories\\['t'\\] must record 1 to 1024",
    lambda: plotting.plot_feature_errors({"t": GDHistory(np.arange(3.0), {"loss_k": np.ones((3, 0))})}),
)
case(
    "colors_for 2000 labels",
    "labels must be .*at most 1024",
    lambda: plotting.colors_for([str(i) for i in range(2000)]),
)
case(
    "claims.table a bool value",
    "claims\\[0\\]\\['value'\\] must be a number, not NaN or a bool",
    lambda: claims.table([{**_record(), "value": True}]),
)
case(
    "claims.table a NaN value",
    "claims\\[0\\]\\['value'\\] must be a number",
    lambda: claims.table([{**_record(), "value": "nan"}]),
)
case(
    "claims.table a control's fails an array",
    "claims\\[0\\]\\['controls'\\]\\[0\\]\\['fails'\\] must be a bool",
    lambda: claims.table([{**_record(), "controls": [{"name": "c", "value": 2, "fails": np.array([True, False])}]}]),
)
case("claims.overview a chapter an int", "chapters must be notebook names", lambda: claims.overview([5], {}))
case("claims.load a null character", "folder must not hold a null character", lambda: claims.load("/tmp/\0x"))
case(
    "claims.Ledger a chapter of 250 bytes",
    "chapter must be .*at most 128 bytes",
    lambda: claims.Ledger("a" * 250, [CLAIM]),
)
case(
    "claims.Ledger.write a null character",
    "folder must not hold a null character",
    lambda: claims.Ledger("ch", [CLAIM]).write(folder="/tmp/a\0b"),
)
case("claims.Ledger claims set to None", "claims must be a list of Claims", lambda: _ledger_with(claims=None).verify())
case("claims.changed_since a null character", "paths must be", lambda: claims.changed_since("HEAD", paths=["a\0b"]))
case(
    "train a model without gradients",
    "model must make predictions that depend on its parameters",
    lambda: train(_NoGrad(), LR, cfg(), generator=gen()),
)
case(
    "fit_lbfgs a model without gradients",
    "model must make predictions that depend on its parameters",
    lambda: fit_lbfgs(_NoGrad(), prompt()),
)
case("train_ensemble one module twice", "models must be distinct modules: models\\[1\\] is models\\[0\\]", _twice)
case(
    "moment_prompt d of 10000",
    "the moment prompts of 1 prompts of n = 1 in prompt's d = 10000",
    lambda: moment_prompt(Prompt.from_points(torch.randn(1, 2, 10000), torch.randn(1, 2))),
)
case(
    "sample_moment_prompts d of 10000",
    "task's d = 10000",
    lambda: sample_moment_prompts(LinearRegression(dim=10000), 1, 1, gen()),
)
case(
    "static_loss students broadcast to a million",
    "the hidden layer of particles and x",
    lambda: mf.static_loss(
        torch.randn(1000, 1, 10, 5), torch.randn(1, 1000, 200, 1), torch.randn(1, 1000, 200, 2), k=2
    ),
)
case(
    "sigmoid_network students broadcast to a million",
    "the hidden layer of particles and x",
    lambda: sigmoid_network(torch.randn(1000, 1, 10, 5), torch.randn(1, 1000, 200, 2), 2),
)
case(
    "sample_counts 2^25 categories",
    "probs must have at most 2\\^24 categories",
    lambda: sa.sample_counts(torch.full((2**25,), 2.0**-25), 1, 1, gen()),
)
case(
    "fit_slopes a million columns",
    "ys must have shape .*1 <= S <= 1024",
    lambda: risk.fit_slopes([1.0, 2.0], np.ones((2, 10**6))),
)
case(
    "RiskTerms a negative mean spread",
    "spreads must have a mean >= 0",
    lambda: risk.RiskTerms(np.ones(3), -np.ones(3), np.ones(3)).examples_needed(2.0),
)
case(
    "kernel_ridge a bandwidth of 1e-300",
    "bandwidth and the prompt's labels",
    lambda: est.kernel_ridge(prompt(), bandwidth=1e-300),
)
case(
    "bootstrap_interval a million resamples of 2e7 values",
    "bootstrap_interval's reps = 1000000",
    lambda: risk.bootstrap_interval(lambda a: float(a[0, 0]), [np.ones((2, 10**7))], reps=10**6),
)
case(
    "GDPlusPlus ten million steps",
    "GD\\+\\+ over steps = 10000000",
    lambda: GDPlusPlus(2, steps=10**7, lr=0.01).predict(prompt()),
)
case(
    "bayes_risk 1e8 draws",
    "bayes_risk at task.dim = 2, n = 5, n_mc = 100000000",
    lambda: exact.bayes_risk(LinearRegression(dim=2, noise_std=0.1), 5, gen(), n_mc=10**8),
)
case(
    "AttentionMoments.of vanishing features",
    "features must not vanish",
    lambda: exact.AttentionMoments.of(
        lambda x: torch.zeros(x.shape[0], 3, dtype=x.dtype),
        NonparametricTasks(dim=2, smoothness=1.0, n_basis=8),
        points=256,
    ),
)


# a prompt of 1e200 makes ridge's Gram matrix huge, which warns before the overflow is refused
@pytest.mark.filterwarnings("ignore:lam=1 is below 1e-10 of the Gram matrix's scale:RuntimeWarning")
@pytest.mark.parametrize("id, pattern, call", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_named_error(id, pattern, call):
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()


def test_the_suite_is_large():
    assert len(CASES) >= 200, len(CASES)
    assert len({c[0] for c in CASES}) == len(CASES), "case ids must be unique"


# Valid inputs that are unusual: each must work (a check too strict would refuse it).
VALID = {
    "Counts as a numpy array": lambda: exact.best_attention_excess(
        exact.AttentionMoments.of(NP_TASK.features, NP_TASK, points=64), np.array([4, 8]), 0.1
    ),
    "axis limits as a list": lambda: plotting.plot_error_curves({"a": torch.rand(4, 5) + 0.1}, ylim=[0.0, 2.0]),
    "histories keyed by ints": lambda: plotting.plot_training_loss({64: TrainHistory(np.ones(5), 1.0)}, window=2),
    "write_json numpy numbers": lambda: claims.write_json(Path(tempfile.mkdtemp()) / "a.json", {"n": np.int64(3)}),
    "a colour as a numpy array": lambda: plotting.shade(np.array([0.2, 0.4, 0.6]), 0, 3),
    "changed_since a Path": lambda: claims.changed_since("HEAD", paths=(Path("notebooks"),)),
    "particle_spread int32 groups": lambda: mf.particle_spread(
        torch.randn(4, 3), torch.tensor([0, 0, 1, 1], dtype=torch.int32)
    ),
    "bayes prior_cov a numpy array": lambda: est.bayes_linear_regression(prompt(), torch.zeros(2), np.eye(2), 0.1),
    "fit_slope a tensor that requires a gradient": lambda: risk.fit_slope(
        [1, 2, 4], torch.tensor([1.0, 0.5, 0.25], requires_grad=True)
    ),
    "plot_lines a tensor that requires a gradient": lambda: plotting.plot_lines(
        np.arange(3), {"a": torch.ones(3, requires_grad=True)}
    ),
    "swap_contexts a shift past 2^64": lambda: swap_contexts(prompt(), 10**30),
    "kernel_ridge bandwidths a numpy array": lambda: est.kernel_ridge(prompt(), bandwidth=np.array([0.5, 1.0])),
    "convergence_times a numpy int context length": lambda: sa.convergence_times(
        [(torch.tensor([0.5, 0.5]), np.int64(3))],
        eps=[0.4],
        steps=2,
        lr=0.1,
        n_samples=4,
        n_seeds=1,
        generator=gen(),
        quantile=None,
    ),
    "plot_lines steps that require a gradient": lambda: plotting.plot_lines(
        torch.arange(3.0, requires_grad=True), {"a": torch.ones(3, requires_grad=True)}
    ),
    "figsize a list": lambda: plotting.plot_error_panels({"a": {"b": torch.rand(4, 5) + 0.1}}, figsize=[12, 4]),
    "colors_for a numpy array of labels": lambda: plotting.colors_for(np.array(["lsa", "ridge"])),
    "plot_error_curves x that requires a gradient": lambda: plotting.plot_error_curves(
        {"a": torch.rand(3, 4) + 0.1}, x=torch.arange(4.0, requires_grad=True)
    ),
    "plot_rate_curves oracle as nested lists": lambda: plotting.plot_rate_curves(
        [2, 4], {1.0: [0.1, 0.05]}, oracle={1.0: [[0.1, 0.01], [0.05, 0.01]]}, oracle_n=[2, 4]
    ),
    "particle_spread uint8 labels": lambda: mf.particle_spread(
        torch.randn(2, 4, 5), groups=torch.tensor([0, 0, 1, 1], dtype=torch.uint8)
    ),
    "cpu_busy a numpy float": lambda: config.cpu_busy(np.float32(0.01)),
    "fit_slopes xs a tensor": lambda: risk.fit_slopes(torch.tensor([1.0, 2.0, 4.0]), np.ones((3, 2))),
    "discrete_posterior_mean a noise past 1e307": lambda: est.discrete_posterior_mean(
        prompt(), torch.randn(5, 2, generator=gen(4)), 1e308
    ),
    "plot_attention_heatmaps a 3-D array": lambda: plotting.plot_attention_heatmaps(
        np.stack([np.eye(2), np.eye(2)]), ["a", "b"], axes=plt.subplots(1, 2)[1]
    ),
    # an eighth campaign: 0-d arrays (np.median's result) are numbers, as NumPy scalars are
    "train and fit_lbfgs under torch.no_grad": _under_no_grad,
    "a Check's bound a 0-d array": lambda: claims.Check("<", np.array(1.0), "closed form"),
    "a Claim's value a 0-d array": lambda: claims.Claim(
        id="a", statement="s", source="Thm 1", value=np.array(0.5), check=claims.Check("<", 1.0, "closed form")
    ),
    "ridge's lam a 0-d array": lambda: est.ridge(prompt(), lam=np.array(1.0)),
    "examples_needed's level a 0-d array": lambda: risk.examples_needed(np.float64(0.1), 1.0, np.array(0.5)),
    "plot_phase_weights a phase that never ends after one that never ends": lambda: plotting.plot_phase_weights(
        [0, 1, 2], np.zeros((3, 3, 3)), feature=1, other=2, boundaries=[0, INF, INF]
    ),
}


@pytest.mark.parametrize("call", VALID.values(), ids=list(VALID))
def test_unusual_valid_input_works(call):
    call()


def test_a_nan_prompt_under_nonfinite_allowed_gives_a_nan_prediction_from_two_layer_network():
    y = prompt().y.clone()
    y[0, 0] = NAN
    p = prompt()
    with checks.nonfinite_allowed():
        pred = est.two_layer_network(Prompt(p.x, y, p.x_query, p.y_query), steps=5)
    assert torch.isnan(pred[0]) and torch.isfinite(pred[1:]).all()


def test_jaxtyping_formats_a_refused_call_s_arguments_briefly():
    # jaxtyping pretty-prints every argument of a failed check; declared.py shortens it (a million penalties: 26 s)
    import jaxtyping._decorator

    assert jaxtyping._decorator._pformat(tuple(range(10**6)), short_self=False).endswith("...)")
