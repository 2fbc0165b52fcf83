import copy
import dataclasses

import numpy as np
import pytest
import torch

from icl_utils.config import make_generator
from icl_utils.models import LTB, GPTConfig, ICLTransformer, MLPAttention, evaluating
from icl_utils.prompts import Prompt
from icl_utils.risk import mean_and_band, model_errors
from icl_utils.tasks import LinearRegression
from icl_utils.tasks.single_index import SingleIndexTasks
from icl_utils.train import Curriculum, TrainConfig, TrainHistory, parallel_runs, train, train_ensemble, train_parallel


def small_model(d=3, n_context=7, **kw):
    torch.manual_seed(0)
    return ICLTransformer(GPTConfig(n_dims=d, n_context=n_context, n_embd=32, n_layer=2, n_head=2, **kw))


def cfg(steps=1, batch_size=2, n_context=5, **kw):
    return TrainConfig(steps=steps, batch_size=batch_size, n_context=n_context, **kw)


def test_forward_shape(gen):
    model = small_model()
    p = LinearRegression(dim=3).sample(5, 7, gen)
    assert model(p).shape == (5, 8)
    assert model.predict(p).shape == (5,)


def test_transformer_is_causal(gen):
    """Changing a later example leaves every earlier prediction unchanged, and does change later ones."""
    model = small_model().eval()
    p = LinearRegression(dim=3).sample(4, 7, gen)
    x2, y2 = p.x.clone(), p.y.clone()
    x2[:, 4] += 1.0
    y2[:, 4] -= 2.0
    q = type(p)(x=x2, y=y2, x_query=p.x_query, y_query=p.y_query)
    with torch.no_grad():
        a, b = model(p), model(q)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:], atol=1e-4)


def test_paired_tokens_read_the_token_matrix_and_predict_the_query(gen):
    """tokens="paired": one token (x_i, y_i) per example and (x_query, 0); the query's label is never read."""
    model = small_model(tokens="paired").eval()
    p = LinearRegression(dim=3).sample(4, 7, gen)
    assert model(p).shape == (4,) and model.predict(p).shape == (4,)
    assert model.pos.num_embeddings == 8
    hidden = type(p)(x=p.x, y=p.y, x_query=p.x_query, y_query=p.y_query + 5.0)
    assert torch.allclose(model.predict(p), model.predict(hidden))
    # control: a context label is read
    moved = type(p)(x=p.x, y=p.y + 1.0, x_query=p.x_query, y_query=p.y_query)
    assert not torch.allclose(model.predict(p), model.predict(moved), atol=1e-4)
    assert model_errors(model, p).shape == (4,)
    history = train(model, LinearRegression(dim=3), cfg(steps=3, n_context=7), generator=gen, progress=False)
    assert np.isfinite(history.losses).all()
    with pytest.raises(ValueError, match="tokens"):
        GPTConfig(n_dims=3, n_context=7, tokens="columns")


def test_residual_init_scales_the_output_projections():
    plain, scaled = small_model(), small_model(residual_init=True)
    no_mlp = small_model(residual_init=True, mlp=False)
    std = {name: p.std().item() for name, p in scaled.named_parameters() if p.ndim == 2}
    assert abs(std["blocks.0.attn.proj.weight"] - 0.02 / 4**0.5) < 0.002  # 2 layers x (attention, MLP)
    assert abs(std["blocks.0.mlp.2.weight"] - 0.02 / 4**0.5) < 0.002
    assert abs(dict(no_mlp.named_parameters())["blocks.0.attn.proj.weight"].std().item() - 0.02 / 2**0.5) < 0.002
    # control: without it, every projection starts at 0.02, and other weights are untouched
    assert abs(dict(plain.named_parameters())["blocks.0.attn.proj.weight"].std().item() - 0.02) < 0.002
    assert abs(std["blocks.0.attn.qkv.weight"] - 0.02) < 0.002


def test_model_without_mlp_has_no_mlp_parameters():
    with_mlp, without = small_model(), small_model(mlp=False)
    assert without.num_parameters() < with_mlp.num_parameters()
    assert not any("mlp" in name for name, _ in without.named_parameters())


def test_model_rejects_prompts_it_cannot_read(gen):
    model = small_model(d=3, n_context=7)
    with pytest.raises(ValueError, match="n_dims"):
        model(LinearRegression(dim=4).sample(2, 3, gen))
    with pytest.raises(ValueError, match="n_context"):
        model(LinearRegression(dim=3).sample(2, 8, gen))
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(n_dims=3, n_context=7, n_embd=30, n_head=4)


@pytest.mark.parametrize("n", [0, 1, 6])
def test_gpt_config_counts_context_examples(gen, n):
    """GPTConfig(n_context=n) reads prompts of n examples (and shorter ones), one prediction per point, and
    rejects n + 1 examples: the length counts the examples, not the query."""
    model = small_model(d=2, n_context=n)
    assert model.pos.num_embeddings == 2 * n + 1  # x and y tokens of n examples, and the query
    task = LinearRegression(dim=2)
    assert model(task.sample(3, n, gen)).shape == (3, n + 1)
    if n > 0:
        assert model(task.sample(3, n - 1, gen)).shape == (3, n)
    with pytest.raises(ValueError, match=f"{n + 1} examples, more than n_context={n}"):
        model(task.sample(3, n + 1, gen))
    with pytest.raises(ValueError, match="n_context must be >= 0"):
        GPTConfig(n_dims=2, n_context=-1)


def test_curriculum_schedule():
    cur = Curriculum(dims=(5, 20), n_context=(10, 40), every=2000)
    assert cur.at(0) == (5, 10)
    assert cur.at(1999) == (5, 10)
    assert cur.at(2000) == (6, 12)
    assert cur.at(10**6) == (20, 40)
    steps = Curriculum(dims=(1, 3), n_context=(0, 9), every=3, dims_step=2, n_context_step=4)
    assert [steps.at(t) for t in (0, 2, 3, 6, 9)] == [(1, 0), (1, 0), (3, 4), (3, 8), (3, 9)]
    with pytest.raises(ValueError, match="dims"):
        Curriculum(dims=(5, 2), n_context=(1, 2), every=10)
    with pytest.raises(ValueError, match="n_context must be"):
        Curriculum(dims=(1, 2), n_context=(5, 2), every=10)
    with pytest.raises(ValueError, match=r"n_context must be a tuple \(>= 0, >= 0\), got \(-1, 2\)"):
        Curriculum(dims=(1, 2), n_context=(-1, 2), every=10)
    with pytest.raises(ValueError, match="n_context_step must be >= 0"):
        Curriculum(dims=(1, 2), n_context=(1, 2), every=10, n_context_step=-1)


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(steps=0), ValueError, r"steps must be in \[1, "),
        (dict(steps=2.5), TypeError, "steps must be an int"),
        (dict(batch_size=0), ValueError, "batch_size must be >= 1"),
        (dict(n_context=-1), ValueError, "n_context must be >= 0"),
        (dict(n_context=True), TypeError, "n_context must be an int"),
        (dict(lr=0.0), ValueError, "lr must be > 0"),
        (dict(lr=float("nan")), ValueError, "lr must be > 0 and finite"),
        (dict(lr="big"), TypeError, "lr must be a real number"),
        (dict(schedule="linear"), ValueError, "schedule must be 'constant' or 'cosine'"),
        (dict(bf16="yes"), TypeError, "bf16 must be True or False"),
        (dict(cuda_graph="auto"), TypeError, "cuda_graph must be True or False or None"),
        (dict(curriculum=(5, 20)), TypeError, "curriculum must be a Curriculum or None"),
        (
            dict(curriculum=Curriculum(dims=(1, 2), n_context=(2, 6), every=1)),
            ValueError,
            "curriculum ends at 6 examples, more than n_context=5",
        ),
        (dict(log_every=0), ValueError, "log_every must be >= 1"),
    ],
)
def test_train_config_rejects_each_bad_field(change, error, match):
    good = TrainConfig(steps=10, batch_size=4, n_context=5)
    with pytest.raises(error, match=match):
        TrainConfig(**{**dataclasses.asdict(good), "curriculum": None, **change})
    with pytest.raises(error, match=match):  # a variant is validated too
        dataclasses.replace(good, **change)


def test_train_config_defaults_variants_and_schedules():
    base = TrainConfig(steps=100, batch_size=8, n_context=10)
    assert (base.lr, base.schedule, base.curriculum, base.bf16, base.cuda_graph, base.log_every) == (
        1e-4,
        "constant",
        None,
        False,
        None,
        50,
    )
    short = dataclasses.replace(base, steps=3)
    assert short.steps == 3 and base.steps == 100 and short.n_context == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.steps = 5
    assert TrainConfig(steps=1, batch_size=1, n_context=0).n_context == 0  # prompts of the query alone
    assert TrainConfig(
        steps=8, batch_size=1, n_context=5, curriculum=Curriculum(dims=(1, 2), n_context=(2, 5), every=1)
    ).curriculum.at(9) == (2, 5)
    cosine = dataclasses.replace(base, schedule="cosine")
    assert [base.lr_factor(t) for t in (0, 50, 99)] == [1.0, 1.0, 1.0]
    assert cosine.lr_factor(0) == pytest.approx(0.2) and cosine.lr_factor(3) == pytest.approx(0.8)  # 5-step warm-up
    assert cosine.lr_factor(50) == pytest.approx(0.5) and cosine.lr_factor(100) == pytest.approx(0.0, abs=1e-12)


def test_training_reduces_the_loss(gen):
    """A few hundred steps on 2-d noiseless regression beat the trivial zero predictor by a wide margin."""
    model = small_model(d=2, n_context=5)
    task = LinearRegression(dim=2)
    hist = train(model, task, cfg(steps=300, batch_size=64, n_context=5, lr=3e-3), generator=gen, progress=False)
    assert isinstance(hist, TrainHistory) and hist.losses.shape == (300,)
    assert hist.losses[-50:].mean() < 0.6 * hist.losses[:10].mean()
    errs = model_errors(model, task.sample(2000, 5, gen))
    mean, band = mean_and_band(errs)
    assert mean[-1] < 0.7 * mean[0] and torch.all(band > 0)


class Recorder:
    """A task that records every batch it samples (and the sizes asked for), so that another run can replay slices
    of it."""

    def __init__(self, task):
        self.task, self.dim, self.prompts, self.sizes = task, task.dim, [], []

    def sample(self, batch, n, generator, active_dims=None):
        self.sizes.append((active_dims, n))
        self.prompts.append(self.task.sample(batch, n, generator, active_dims=active_dims))
        return self.prompts[-1]


class Replay:
    """Replays slice ``part`` (of ``parts``) of each recorded batch, one batch per call."""

    def __init__(self, recorded, part, parts):
        self.dim, self.batches, self.part, self.parts = recorded.dim, iter(recorded.prompts), part, parts

    def sample(self, batch, n, generator, active_dims=None):
        prompt = next(self.batches)
        return prompt.take(slice(self.part * batch, (self.part + 1) * batch))


def test_training_with_curriculum_follows_it_and_is_seeded():
    cur = Curriculum(dims=(2, 4), n_context=(3, 7), every=5)

    def run():
        g = torch.Generator().manual_seed(3)
        model = small_model(d=4, n_context=7)
        task = Recorder(LinearRegression(dim=4))
        losses = train(
            model, task, cfg(steps=20, batch_size=8, n_context=7, curriculum=cur), generator=g, progress=False
        ).losses
        return losses, task

    (l1, task), (l2, _) = run(), run()
    assert np.array_equal(l1, l2)
    assert task.sizes == [cur.at(t) for t in range(20)]  # each step drew the curriculum's (dims, examples)
    assert task.sizes[0] == (2, 3) and task.sizes[-1] == (4, 7)
    assert torch.all(task.prompts[0].x[:, :, 2:] == 0) and not torch.all(task.prompts[-1].x[:, :, 3] == 0)
    # without a curriculum every step draws n_context examples and passes no active_dims
    plain = Recorder(LinearRegression(dim=4))
    train(small_model(d=4, n_context=7), plain, cfg(steps=3, n_context=7), generator=torch.Generator(), progress=False)
    assert plain.sizes == [(None, 7)] * 3


def test_curriculum_needs_a_task_that_takes_active_dims(gen):
    """Only LinearRegression's sampler takes active_dims: a curriculum on another task is refused before any step,
    for train and train_ensemble alike (the same configuration trains on LinearRegression)."""
    config = cfg(steps=2, batch_size=2, n_context=5, curriculum=Curriculum(dims=(1, 4), n_context=(2, 5), every=1))
    task = SingleIndexTasks(dim=4, subspace_dim=1)
    model = small_model(d=4, n_context=5)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="curriculum needs a task whose sample takes active_dims"):
        train(model, task, config, generator=gen, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # nothing trained
    with pytest.raises(ValueError, match="active_dims"):
        train_ensemble([LTB(4), LTB(4)], [LinearRegression(dim=4), task], config, generator=gen, progress=False)
    assert train(model, LinearRegression(dim=4), config, generator=gen, progress=False).losses.shape == (2,)
    assert train(
        model, task, dataclasses.replace(config, curriculum=None), generator=gen, progress=False
    ).losses.shape == (2,)


def test_training_stops_on_a_non_finite_loss(gen):
    model = small_model(d=2, n_context=5)
    with torch.no_grad():
        model.read_out.bias.fill_(3e38)  # finite, but its square overflows float32
    # a number, not [inf]; at step 0, before any update, the starting point is to blame, not lr
    with pytest.raises(FloatingPointError, match=r"training loss was inf at step 0, before any update"):
        train(model, LinearRegression(dim=2), cfg(steps=3, batch_size=4), generator=gen, progress=False)
    good, model = small_model(d=2, n_context=5), small_model(d=2, n_context=5)
    with torch.no_grad():
        model.read_out.bias.fill_(3e38)
    with pytest.raises(FloatingPointError, match=r"was \[[0-9.]+, inf\] at step 0,"):  # one loss per model
        train_ensemble(
            [good, model], LinearRegression(dim=2), cfg(steps=3, batch_size=4), generator=gen, progress=False
        )


class _NaNGradient(torch.nn.Module):
    """Predicts zero with a finite loss, but the gradient of sqrt|p| at p = 0 is infinite: Adam's step makes p NaN.
    Every loss it records is finite; only the parameters after the last step show the failure."""

    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, prompt):
        return torch.zeros_like(prompt.y_query) + 0 * self.p.abs().sqrt().sum()


def test_the_step_after_the_last_loss_is_checked(gen):
    """With one step, no recorded loss sees the NaN parameters; with more, the next loss does (a NaN loss)."""
    task, config = LinearRegression(dim=2), cfg(steps=1, batch_size=4)
    with pytest.raises(FloatingPointError, match="the model's parameters became non-finite at the last of 1 steps: p"):
        train(_NaNGradient(), task, config, generator=gen, progress=False)
    with pytest.raises(FloatingPointError, match="model 0's parameters became non-finite at the last of 1 steps: p"):
        train_ensemble([_NaNGradient(), _NaNGradient()], task, config, generator=gen, progress=False)
    with pytest.raises(FloatingPointError, match="training loss became nan at step 1"):
        train(_NaNGradient(), task, cfg(steps=3, batch_size=4), generator=gen, progress=False)


def test_non_finite_parameters_are_reported_before_training(gen):
    """Not as a loss at step 0 with advice to lower the learning rate: no step has been taken."""
    model = small_model(d=2, n_context=5)
    with torch.no_grad():
        model.read_out.bias.fill_(float("nan"))
    with pytest.raises(
        ValueError, match=r"model must have finite parameters before training, got NaN or inf in read_out.bias"
    ):
        train(model, LinearRegression(dim=2), cfg(steps=3, batch_size=4), generator=gen, progress=False)


def test_ensemble_of_models_in_different_modes(gen):
    """A model trained before is in eval mode, a new one in training mode: they still train together (one mode is
    set for all), and all end in eval mode."""
    trained, fresh = LTB(2), LTB(2)
    train(trained, LinearRegression(dim=2), cfg(steps=2), generator=gen, progress=False)
    assert not trained.training and fresh.training
    hist = train_ensemble([fresh, trained], LinearRegression(dim=2), cfg(steps=2), generator=gen, progress=False)
    assert hist.losses.shape == (2, 2) and not fresh.training and not trained.training


def test_train_rejects_bad_arguments(gen):
    model = small_model(d=2, n_context=5)
    task = LinearRegression(dim=2)
    with pytest.raises(ValueError, match="steps"):
        train(model, task, cfg(steps=0), generator=gen)
    with pytest.raises(ValueError, match="curriculum"):
        train(model, task, cfg(curriculum=Curriculum(dims=(1, 2), n_context=(1, 8), every=1)), generator=gen)
    with pytest.raises(TypeError, match="generator"):
        train(model, task, cfg(), generator=None)
    with pytest.raises(TypeError, match="config must be a TrainConfig, got dict"):
        train(model, task, dict(steps=1, batch_size=2, n_context=5), generator=gen)
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        train_ensemble([model], task, None, generator=gen)


@pytest.mark.parametrize("make", [lambda s: small_model(d=3, n_context=5), lambda s: LTB(3)])
def test_ensemble_training_equals_separate_runs(gen, make):
    """S models trained at once by vmap end where S separate runs on the same prompts end."""
    torch.manual_seed(0)
    models = [make(s) for s in range(3)]
    copies = [copy.deepcopy(m) for m in models]
    rec = Recorder(LinearRegression(dim=3, noise_std=0.1))
    test = LinearRegression(dim=3).sample(64, 5, torch.Generator().manual_seed(9))
    config = cfg(steps=25, batch_size=16, n_context=5, lr=3e-3, schedule="cosine")
    hist = train_ensemble(models, rec, config, generator=gen, batched=True, progress=False)
    assert hist.losses.shape == (25, 3) and hist.smoothed(5).shape == (25, 3)
    for s, single in enumerate(copies):
        h = train(single, Replay(rec, s, 3), config, generator=gen, progress=False)
        np.testing.assert_allclose(hist.losses[:, s], h.losses, rtol=1e-4, atol=1e-6)
        # Compare functions, not parameters: Adam turns round-off in the (exactly zero) gradient of the attention
        # keys' bias into steps of size lr, so that bias drifts apart while the predictions agree.
        with torch.no_grad():
            torch.testing.assert_close(models[s](test), single(test), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        assert not torch.allclose(models[0](test), models[1](test), atol=1e-3)


def test_ensemble_with_one_task_per_model_equals_separate_runs(gen):
    """Given a list of tasks, model s trains on task s: the same losses as training it alone on that task's
    prompts."""
    tasks = [
        Recorder(LinearRegression(dim=3, noise_std=0.1)),
        Recorder(LinearRegression(dim=3, noise_std=1.0, prior_mean=torch.full((3,), 2.0))),
    ]
    models = [LTB(3) for _ in tasks]
    copies = [copy.deepcopy(m) for m in models]
    config = cfg(steps=20, batch_size=16, n_context=5, lr=3e-3)
    hist = train_ensemble(models, tasks, config, generator=gen, progress=False)
    for s, (single, rec) in enumerate(zip(copies, tasks)):
        assert len(rec.prompts) == 20 and rec.prompts[0].batch_size == 16  # each task drew one model's block
        h = train(single, Replay(rec, 0, 1), config, generator=gen, progress=False)
        np.testing.assert_allclose(hist.losses[:, s], h.losses, rtol=1e-4, atol=1e-6)
    assert hist.losses[-5:, 1].mean() > 3 * hist.losses[-5:, 0].mean()  # the noisy, shifted task stays harder
    with pytest.raises(ValueError, match="one per model"):
        train_ensemble(models, tasks[:1] * 3, cfg(), generator=gen)
    with pytest.raises(ValueError, match="share one dimension"):
        train_ensemble(models, [LinearRegression(dim=3), LinearRegression(dim=2)], cfg(), generator=gen)


def test_bf16_is_ignored_on_the_cpu():
    def run(bf16):
        models = [small_model(d=3, n_context=5) for _ in range(2)]
        return train_ensemble(
            models,
            LinearRegression(dim=3),
            cfg(steps=5, batch_size=8, lr=1e-3, bf16=bf16),
            generator=torch.Generator().manual_seed(4),
            batched=True,
            progress=False,
        ).losses

    assert np.array_equal(run(True), run(False))
    with pytest.raises(TypeError, match="bf16 must be True or False"):
        cfg(bf16="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("ensemble", [False, True])
def test_bf16_training_follows_float32_on_cuda(ensemble):
    """bfloat16 autocast changes the forward pass's round-off, not the optimization: the first losses agree to
    bfloat16's precision and the losses after training agree closely."""

    def run(bf16):
        torch.manual_seed(0)
        config = cfg(steps=300, batch_size=64, n_context=7, lr=3e-3, schedule="cosine", bf16=bf16)
        kw = dict(generator=torch.Generator("cuda").manual_seed(5), progress=False)
        if ensemble:
            return train_ensemble(
                [small_model(d=2).cuda() for _ in range(3)], LinearRegression(dim=2), config, **kw
            ).losses
        return train(small_model(d=2).cuda(), LinearRegression(dim=2), config, **kw).losses[:, None]

    fp32, bf16 = run(False), run(True)
    np.testing.assert_allclose(bf16[0], fp32[0], rtol=2e-2)
    np.testing.assert_allclose(bf16[-50:].mean(0), fp32[-50:].mean(0), rtol=0.1)
    assert fp32[-50:].mean() < 0.8 * fp32[:10].mean()  # it did train (0.52 of the start on a CPU)


def test_ensemble_training_is_bitwise_reproducible_on_cpu():
    def run():
        torch.manual_seed(0)
        models = [small_model(d=3, n_context=5) for _ in range(2)]
        hist = train_ensemble(
            models,
            LinearRegression(dim=3, noise_std=0.2),
            cfg(steps=15, batch_size=8, lr=1e-3),
            generator=torch.Generator().manual_seed(4),
            batched=True,
            progress=False,
        )
        return hist.losses, torch.cat([p.flatten() for m in models for p in m.parameters()])

    (l1, p1), (l2, p2) = run(), run()
    assert np.array_equal(l1, l2) and torch.equal(p1, p2)


def test_ensemble_rejects_mixed_architectures(gen):
    task = LinearRegression(dim=3)
    with pytest.raises(ValueError, match="architecture"):
        train_ensemble(
            [small_model(d=3, n_context=5), small_model(d=3, n_context=5, mlp=False)], task, cfg(), generator=gen
        )
    with pytest.raises(ValueError, match="models must be a non-empty"):
        train_ensemble([], task, cfg(), generator=gen)


def test_cuda_graph_flag_needs_cuda(gen):
    with pytest.raises(ValueError, match="cuda_graph"):
        train(small_model(d=2, n_context=5), LinearRegression(dim=2), cfg(cuda_graph=True), generator=gen)


CUDA_GRAPH_MODELS = {
    "gpt": lambda: small_model(d=4, n_context=7),
    # chapter 4's GPT, whose query does not see itself: its mask once assigned an element (a host copy)
    "gpt_query_blind": lambda: small_model(d=4, n_context=7, tokens="paired", query_sees_itself=False),
    "ltb": lambda: LTB(4),
    "mlp_attention": lambda: MLPAttention(4, 8, hidden=16),
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("ensemble", [False, True])
@pytest.mark.parametrize("family", sorted(CUDA_GRAPH_MODELS))
def test_cuda_graph_step_matches_the_plain_step(family, ensemble):
    """The captured step (fused Adam in a CUDA graph, through a curriculum's shape changes) follows the plain
    step's losses on the same prompts, for every model family the chapters train (a model that builds a tensor
    on the host inside its forward pass cannot be captured: the LTB's and the GPT's masks once did)."""
    make = CUDA_GRAPH_MODELS[family]

    def run(graph):
        g = torch.Generator(device="cuda").manual_seed(5)
        torch.manual_seed(0)
        cur = Curriculum(dims=(2, 4), n_context=(3, 7), every=10)
        config = cfg(steps=40, batch_size=32, n_context=7, lr=1e-3, schedule="cosine", curriculum=cur, cuda_graph=graph)
        if ensemble:
            models = [make().cuda() for _ in range(3)]
            return train_ensemble(models, LinearRegression(dim=4), config, generator=g, progress=False).losses
        return train(make().cuda(), LinearRegression(dim=4), config, generator=g, progress=False).losses

    plain, graphed = run(False), run(True)
    np.testing.assert_allclose(graphed, plain, rtol=2e-3, atol=1e-5)


def test_models_reject_prompts_of_another_dtype(gen):
    p = LinearRegression(dim=3).sample(4, 5, gen)
    p64 = Prompt(p.x.double(), p.y.double(), p.x_query.double(), p.y_query.double())
    for model in (small_model(d=3, n_context=7), LTB(3)):
        with pytest.raises(ValueError, match=r"float64.*parameters are torch.float32"):
            model(p64)
        model(p)


@pytest.mark.parametrize("training", [True, False])
def test_evaluating_restores_the_mode_even_when_the_block_raises(training):
    model = LTB(2).train(training)
    with evaluating(model) as inside:
        assert inside is model and not model.training
    assert model.training is training
    with pytest.raises(RuntimeError, match="inside"), evaluating(model):
        assert not model.training
        raise RuntimeError("inside")
    assert model.training is training
    # and every submodule's flag too (a GPT's dropout layers)
    gpt = small_model(d=2, n_context=3, dropout=0.1).train(training)
    with pytest.raises(KeyError), evaluating(gpt):
        assert not any(m.training for m in gpt.modules())
        raise KeyError("inside")
    assert all(m.training is training for m in gpt.modules())


def test_predict_runs_in_eval_mode_and_restores_training(gen):
    """predict is the query prediction in eval mode (no dropout), whatever mode the model was in."""
    gpt = small_model(d=2, n_context=5, dropout=0.5).train()
    p = LinearRegression(dim=2).sample(8, 5, gen)
    first = gpt.predict(p)
    assert gpt.training
    torch.testing.assert_close(gpt.predict(p), first, rtol=0, atol=0)  # deterministic: dropout was off
    with torch.no_grad():
        torch.testing.assert_close(gpt.eval()(p)[:, -1], first, rtol=0, atol=0)
        assert not torch.equal(gpt.train()(p)[:, -1], first)  # control: dropout on in training mode
    ltb = LTB(2).train()
    ltb.predict(p)
    assert ltb.training


def _small_gpts(count):
    torch.manual_seed(0)
    return [ICLTransformer(GPTConfig(n_dims=3, n_context=4, n_embd=16, n_layer=1, n_head=2)) for _ in range(count)]


def test_parallel_training_equals_one_run_after_another_bitwise():
    """Processes or not, model i's run is train(model, task_i, config) on one thread with prompts seeded seeds[i]."""
    config = TrainConfig(steps=20, batch_size=8, n_context=4, lr=1e-2)
    tasks = [LinearRegression(dim=3), LinearRegression(dim=3, noise_std=0.5), LinearRegression(dim=3)]
    parallel, here, alone = _small_gpts(3), _small_gpts(3), _small_gpts(3)
    hp = train_parallel(parallel, tasks, config, seeds=[5, 6, 7], workers=2, progress=False)
    hh = train_parallel(here, tasks, config, seeds=[5, 6, 7], workers=1, progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ha = [
            train(m, t, config, generator=make_generator(s, "cpu"), progress=False)
            for m, t, s in zip(alone, tasks, [5, 6, 7])
        ]
    finally:
        torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads  # the runs here restore the thread count
    for a, b, c in zip(parallel, here, alone):
        assert not a.training
        for p, q, r in zip(a.parameters(), b.parameters(), c.parameters()):
            assert torch.equal(p, q) and torch.equal(p, r)
    for x, y, z in zip(hp, hh, ha):
        np.testing.assert_array_equal(x.losses, y.losses)
        np.testing.assert_array_equal(x.losses, z.losses)
    assert not torch.equal(next(parallel[0].parameters()), next(parallel[2].parameters()))  # seeds differ


def test_prompts_drawn_ahead_are_the_prompts_drawn_in_turn():
    """On a CPU each step's prompts are drawn on a second thread while the step before runs: the same draws in the
    same order, the generator left where drawing in turn leaves it, and no draw past the last step."""
    from icl_utils.checks import _CHECK_VALUES, nonfinite_allowed
    from icl_utils.train import _prompts

    task, calls = LinearRegression(dim=3), []

    def draw(generator):
        def one(step):
            calls.append((step, _CHECK_VALUES.get()))
            return task.sample(4, 5, generator)

        return one

    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ahead = list(_prompts(draw(g1), 6, ahead=True))
    in_turn = list(_prompts(draw(g2), 6, ahead=False))
    assert all(torch.equal(a.x, b.x) and torch.equal(a.y, b.y) for a, b in zip(ahead, in_turn))
    assert torch.equal(g1.get_state(), g2.get_state())
    assert [step for step, _ in calls] == [0, 1, 2, 3, 4, 5] * 2
    calls.clear()
    with nonfinite_allowed():  # the caller's settings hold on the drawing thread
        list(_prompts(draw(g1), 2, ahead=True))
    assert calls == [(0, False), (1, False)]


def test_a_separate_ensemble_is_train_parallel_with_seeds_from_the_generator():
    """batched=False: model s trains alone on prompts seeded by the s-th draw from the generator, bitwise as
    train_parallel trains it, whatever the number of processes; the generator advances by those draws only."""
    config = TrainConfig(steps=12, batch_size=8, n_context=4, lr=1e-2)
    tasks = [LinearRegression(dim=3), LinearRegression(dim=3, noise_std=0.5)]
    separate, one_process, parallel = _small_gpts(2), _small_gpts(2), _small_gpts(2)
    g1, g2, g3 = (torch.Generator().manual_seed(4) for _ in range(3))
    h1 = train_ensemble(separate, tasks, config, generator=g1, batched=False, workers=2, progress=False)
    h2 = train_ensemble(one_process, tasks, config, generator=g2, batched=False, workers=1, progress=False)
    seeds = torch.randint(0, 2**62, (2,), generator=g3).tolist()
    h3 = train_parallel(parallel, tasks, config, seeds=seeds, workers=1, progress=False)
    assert h1.losses.shape == (12, 2)
    np.testing.assert_array_equal(h1.losses, h2.losses)
    for s, history in enumerate(h3):
        np.testing.assert_array_equal(h1.losses[:, s], history.losses)
    for a, b, c in zip(separate, one_process, parallel):
        assert not a.training
        assert all(
            torch.equal(p, q) and torch.equal(p, r) for p, q, r in zip(a.parameters(), b.parameters(), c.parameters())
        )
    assert torch.equal(g1.get_state(), g3.get_state()) and torch.equal(g2.get_state(), g3.get_state())
    # control: the batched path draws its prompts from the generator itself, so the same models end elsewhere
    batched = _small_gpts(2)
    h4 = train_ensemble(
        batched, tasks, config, generator=torch.Generator().manual_seed(4), batched=True, progress=False
    )
    assert not np.allclose(h4.losses, h1.losses)


def test_the_default_path_batches_small_models_and_runs_gpts_separately():
    """The rule is the forward pass's cost, fixed by BATCHED_FLOPS: chapter 5's LTB at its quick size is batched,
    chapter 1's GPT is not; a GPT of width 16 and one layer on short prompts is."""
    from icl_utils.train import batched_by_default

    task = LinearRegression(dim=5)
    assert batched_by_default(LTB(5), task, cfg(batch_size=512, n_context=10))
    gpt = ICLTransformer(GPTConfig(n_dims=5, n_context=10, n_embd=32, n_layer=3, n_head=2))
    assert not batched_by_default(gpt, task, cfg(batch_size=64, n_context=10))
    assert batched_by_default(_small_gpts(1)[0], LinearRegression(dim=3), cfg(batch_size=16, n_context=4))
    assert batched_by_default(gpt, task, cfg(batch_size=4, n_context=2))  # the same GPT, on short prompts
    losses = []
    for batched in (None, False):
        g = torch.Generator().manual_seed(1)
        losses.append(
            train_ensemble(
                _small_gpts(2),
                task := LinearRegression(dim=3),
                cfg(steps=3, batch_size=64, n_context=4),
                generator=g,
                batched=batched,
                progress=False,
            ).losses
        )
    assert not np.array_equal(*losses)  # the tiny GPT took the batched path by default


def test_a_separate_ensemble_reports_a_diverging_model_and_bad_arguments(gen):
    with pytest.raises(FloatingPointError):
        train_ensemble(
            _small_gpts(2),
            LinearRegression(dim=3),
            TrainConfig(steps=30, batch_size=8, n_context=4, lr=1e6),
            generator=gen,
            batched=False,
            workers=2,
            progress=False,
        )
    with pytest.raises(TypeError, match="batched"):
        train_ensemble(_small_gpts(2), LinearRegression(dim=3), cfg(), generator=gen, batched="no")
    with pytest.raises(ValueError, match="workers"):
        train_ensemble(_small_gpts(2), LinearRegression(dim=3), cfg(), generator=gen, batched=False, workers=0)


def test_parallel_training_reports_a_failed_run():
    config = TrainConfig(steps=30, batch_size=8, n_context=4, lr=1e6)
    with pytest.raises(FloatingPointError):
        train_parallel(_small_gpts(2), LinearRegression(dim=3), config, seeds=[1, 2], workers=2, progress=False)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(seeds=[1]), ValueError, "one seed per model"),
        (dict(seeds=[1, -2]), ValueError, r"seeds must be .* ints in \[0, 2\^63\)"),
        (dict(seeds=[1, 2.0]), ValueError, r"seeds must be .* ints in \[0, 2\^63\)"),
        (dict(seeds=[1, 2], workers=0), ValueError, "workers"),
        (dict(seeds=[1, 2], task=[LinearRegression(dim=3)] * 3), ValueError, "one per model"),
        (dict(seeds=[1, 2], task="linear"), TypeError, "task must be a task family"),
        (dict(seeds=[1, 2], models=[]), ValueError, "models must be a non-empty"),
        (dict(seeds=[1], models=[torch.nn.ReLU()]), ValueError, r"models\[0\] has no parameters"),
        (dict(seeds=[1, 2], config=dict(steps=1)), TypeError, "config"),
    ],
)
def test_parallel_training_rejects_bad_arguments(kwargs, error, match):
    args = (
        dict(
            models=_small_gpts(2), task=LinearRegression(dim=3), config=TrainConfig(steps=2, batch_size=4, n_context=4)
        )
        | kwargs
    )
    with pytest.raises(error, match=match):
        train_parallel(args.pop("models"), args.pop("task"), args.pop("config"), progress=False, **args)


def test_parallel_training_of_gpu_models_is_one_ensemble_per_architecture():
    """Off the CPU, train_parallel trains each architecture's models as one train_ensemble seeded by the group's
    first seed; the grouping is checked here on CPU models, through the function that does it."""
    from icl_utils.train import _train_groups

    config = TrainConfig(steps=5, batch_size=4, n_context=4, lr=1e-2)
    task = LinearRegression(dim=3)
    torch.manual_seed(0)
    models = [
        ICLTransformer(GPTConfig(n_dims=3, n_context=4, n_embd=16, n_layer=1, n_head=2, mlp=mlp))
        for mlp in (True, False, True)
    ]
    twins = copy.deepcopy(models)
    hist = _train_groups(models, [task] * 3, config, [7, 8, 9], progress=False, desc="t")
    with_mlp = train_ensemble(
        [twins[0], twins[2]], [task, task], config, generator=make_generator(7, "cpu"), progress=False
    )
    without = train_ensemble([twins[1]], [task], config, generator=make_generator(8, "cpu"), progress=False)
    for a, b in zip(models, twins):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    np.testing.assert_array_equal(hist[2].losses, with_mlp.losses[:, 1])
    np.testing.assert_array_equal(hist[1].losses, without.losses[:, 0])


def test_an_ensemble_keeps_each_gpts_attention_mask(monkeypatch):
    """GPTs whose query sees itself and GPTs whose query does not have the same parameters; an ensemble, which runs
    copies of its first model, would train both with the first's mask. So train_ensemble refuses the mix, and
    train_parallel off the CPU puts them in separate ensembles (the grouping checked through its function)."""
    from icl_utils import train as train_module

    cfg = GPTConfig(n_dims=3, n_context=4, n_embd=16, n_layer=1, n_head=2, mlp=False, tokens="paired")
    models = [ICLTransformer(dataclasses.replace(cfg, query_sees_itself=s)) for s in (True, False, True)]
    config, task = TrainConfig(steps=2, batch_size=4, n_context=4), LinearRegression(dim=3)
    with pytest.raises(ValueError, match=r"models\[1\] differs in architecture"):
        train_ensemble(models[:2], task, config, generator=make_generator(0, "cpu"), progress=False)
    groups = []

    def record(group, *args, **kwargs):
        groups.append([models.index(m) for m in group])
        return train_module.TrainHistory(losses=np.zeros((2, len(group))), seconds=0.0)

    monkeypatch.setattr(train_module, "train_ensemble", record)
    train_module._train_groups(models, [task] * 3, config, [7, 8, 9], progress=False, desc="t")
    assert sorted(groups) == [[0, 2], [1]]


def test_a_gpt_whose_query_does_not_see_itself_reads_only_the_context_in_attention():
    """With query_sees_itself=False the query's row of attention averages the context's values only: with the
    query vectors zeroed (uniform attention), changing the query's own token leaves that row unchanged, while a
    query that sees itself moves with it; the context's rows are causal either way."""
    torch.manual_seed(0)
    cfg = GPTConfig(
        n_dims=3, n_context=4, n_embd=16, n_layer=1, n_head=2, mlp=False, tokens="paired", query_sees_itself=False
    )
    masked = ICLTransformer(cfg).blocks[0].attn
    seeing = ICLTransformer(dataclasses.replace(cfg, query_sees_itself=True)).blocks[0].attn
    seeing.load_state_dict(masked.state_dict())
    with torch.no_grad():
        for attn in (masked, seeing):
            attn.qkv.weight[:16].zero_()
            attn.qkv.bias[:16].zero_()
    h = torch.randn(2, 5, 16)
    moved = h.clone()
    moved[:, -1] += 1.0
    with torch.no_grad():
        assert torch.allclose(masked(h)[:, -1], masked(moved)[:, -1], atol=1e-6)
        assert not torch.allclose(seeing(h)[:, -1], seeing(moved)[:, -1], atol=1e-3)
        assert torch.allclose(masked(h)[:, :-1], seeing(h)[:, :-1], atol=1e-6)
    prompt = LinearRegression(dim=3).sample(5, 4, torch.Generator().manual_seed(1))
    assert ICLTransformer(cfg)(prompt).shape == (5,)
    with pytest.raises(ValueError, match="paired"):
        GPTConfig(n_dims=3, n_context=4, query_sees_itself=False)


def test_a_run_whose_loss_grows_by_orders_of_magnitude_is_flagged(gen):
    """An LTB at lr 10 diverges to a finite loss near 1e11-1e15 (it once returned normally); the same run at a
    sound lr trains."""
    task, bad = LinearRegression(dim=2), cfg(steps=60, batch_size=16, n_context=8, lr=10.0, log_every=20)
    with pytest.raises(FloatingPointError, match="training loss grew from .* at step 0 to a mean of"):
        train(LTB(2), task, bad, generator=gen, progress=False)
    history = train(LTB(2), task, dataclasses.replace(bad, lr=1e-2), generator=gen, progress=False)
    assert np.isfinite(history.losses).all() and history.losses[-20:].mean() < history.losses[0]


def test_a_curriculum_beyond_the_tasks_dimension_is_refused_before_training(gen):
    """Garg et al.'s curriculum on a 10-dimensional task once failed at step 12,000, or never in a short run."""
    garg = Curriculum(dims=(5, 20), n_context=(10, 40), every=2000)
    with pytest.raises(ValueError, match="curriculum grows to 20 dimensions, more than the task's dim=10"):
        train(
            LTB(10),
            LinearRegression(dim=10),
            cfg(steps=2, n_context=40, curriculum=garg),
            generator=gen,
            progress=False,
        )


def test_parallel_runs_is_the_processes_train_parallel_starts(monkeypatch):
    """A chapter that splits its runs over cells sizes them by this: the cores this process may use where it can
    fork workers (and no CUDA is present), else one."""
    import multiprocessing
    import os

    forks = "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_available()
    assert parallel_runs() == (len(os.sched_getaffinity(0)) if forks else 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # control: a GPU machine trains in this process
    assert parallel_runs() == 1


@pytest.mark.parametrize(
    ("cores", "jobs", "workers"),
    [(2, 1, 1), (2, 2, 2), (2, 3, 3), (2, 4, 2), (2, 5, 2), (4, 6, 6), (4, 8, 4), (1, 3, 1)],
)
def test_train_parallel_runs_uneven_jobs_at_once(monkeypatch, cores, jobs, workers):
    """Jobs the cores do not divide run all at once (up to two per core), so that no core idles in a last round;
    otherwise one per core. The control is the old rule, min(cores, jobs), which gives 2 for 3 jobs on 2 cores."""
    from icl_utils import train as train_module

    if "fork" not in __import__("multiprocessing").get_all_start_methods() or torch.cuda.is_available():
        pytest.skip("train_parallel trains in this process here")
    monkeypatch.setattr(train_module, "_cores", lambda: cores)
    assert train_module._workers(None, jobs) == workers
    assert train_module._workers(7, jobs) == 7  # a requested count is kept
