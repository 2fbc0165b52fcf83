import copy

import numpy as np
import pytest
import torch

from icl_utils.models import GPTConfig, ICLTransformer
from icl_utils.models.linear_attention import LTB, MLPAttention
from icl_utils.prompts import Prompt
from icl_utils.risk import mean_and_band, model_errors
from icl_utils.tasks import LinearRegression
from icl_utils.train import Curriculum, TrainHistory, train, train_ensemble


def small_model(d=3, points=8, **kw):
    torch.manual_seed(0)
    return ICLTransformer(GPTConfig(n_dims=d, n_points=points, n_embd=32, n_layer=2, n_head=2, **kw))


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


def test_model_without_mlp_has_no_mlp_parameters():
    with_mlp, without = small_model(), small_model(mlp=False)
    assert without.num_parameters() < with_mlp.num_parameters()
    assert not any("mlp" in name for name, _ in without.named_parameters())


def test_model_rejects_prompts_it_cannot_read(gen):
    model = small_model(d=3, points=8)
    with pytest.raises(ValueError, match="n_dims"):
        model(LinearRegression(dim=4).sample(2, 3, gen))
    with pytest.raises(ValueError, match="n_points"):
        model(LinearRegression(dim=3).sample(2, 8, gen))
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(n_dims=3, n_points=8, n_embd=30, n_head=4)


def test_curriculum_schedule():
    cur = Curriculum(dims=(5, 20), points=(11, 41), every=2000)
    assert cur.at(0) == (5, 11)
    assert cur.at(1999) == (5, 11)
    assert cur.at(2000) == (6, 13)
    assert cur.at(10**6) == (20, 41)
    with pytest.raises(ValueError, match="dims"):
        Curriculum(dims=(5, 2), points=(1, 2), every=10)


def test_training_reduces_the_loss(gen):
    """A few hundred steps on 2-d noiseless regression beat the trivial zero predictor by a wide margin."""
    model = small_model(d=2, points=6)
    task = LinearRegression(dim=2)
    hist = train(model, task, steps=300, batch_size=64, n_points=6, generator=gen, lr=3e-3, progress=False)
    assert isinstance(hist, TrainHistory) and hist.losses.shape == (300,)
    assert hist.losses[-50:].mean() < 0.6 * hist.losses[:10].mean()
    errs = model_errors(model, task.sample(2000, 5, gen))
    mean, band = mean_and_band(errs)
    assert mean[-1] < 0.7 * mean[0] and torch.all(band > 0)


def test_training_with_curriculum_runs_and_is_seeded():
    def run():
        g = torch.Generator().manual_seed(3)
        model = small_model(d=4, points=8)
        cur = Curriculum(dims=(2, 4), points=(4, 8), every=5)
        return train(model, LinearRegression(dim=4), steps=20, batch_size=8, n_points=8, generator=g,
                     curriculum=cur, progress=False).losses

    assert np.array_equal(run(), run())


def test_training_stops_on_nan(gen):
    model = small_model(d=2, points=6)
    with torch.no_grad():
        model.read_out.bias.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="step 0"):
        train(model, LinearRegression(dim=2), steps=3, batch_size=4, n_points=6, generator=gen, progress=False)


def test_train_rejects_bad_arguments(gen):
    model = small_model(d=2, points=6)
    task = LinearRegression(dim=2)
    with pytest.raises(ValueError, match="steps"):
        train(model, task, steps=0, batch_size=4, n_points=6, generator=gen)
    with pytest.raises(ValueError, match="curriculum"):
        train(model, task, steps=1, batch_size=4, n_points=6, generator=gen,
              curriculum=Curriculum(dims=(1, 2), points=(2, 9), every=1))
    with pytest.raises(TypeError, match="generator"):
        train(model, task, steps=1, batch_size=4, n_points=6, generator=None)


class Recorder:
    """A task that records every batch it samples, so that another run can replay slices of it."""

    def __init__(self, task):
        self.task, self.dim, self.prompts = task, task.dim, []

    def sample(self, batch, n, generator, active_dims=None):
        self.prompts.append(self.task.sample(batch, n, generator, active_dims=active_dims))
        return self.prompts[-1]


class Replay:
    """Replays slice ``part`` (of ``parts``) of each recorded batch, one batch per call."""

    def __init__(self, recorded, part, parts):
        self.dim, self.batches, self.part, self.parts = recorded.dim, iter(recorded.prompts), part, parts

    def sample(self, batch, n, generator, active_dims=None):
        prompt = next(self.batches)
        return prompt.take(slice(self.part * batch, (self.part + 1) * batch))


@pytest.mark.parametrize("make", [lambda s: small_model(d=3, points=6), lambda s: LTB(3)])
def test_ensemble_training_equals_separate_runs(gen, make):
    """S models trained at once by vmap end where S separate runs on the same prompts end."""
    torch.manual_seed(0)
    models = [make(s) for s in range(3)]
    copies = [copy.deepcopy(m) for m in models]
    rec = Recorder(LinearRegression(dim=3, noise_std=0.1))
    test = LinearRegression(dim=3).sample(64, 5, torch.Generator().manual_seed(9))
    hist = train_ensemble(models, rec, steps=25, batch_size=16, n_points=6, generator=gen, lr=3e-3,
                          schedule="cosine", progress=False)
    assert hist.losses.shape == (25, 3) and hist.smoothed(5).shape == (25, 3)
    for s, single in enumerate(copies):
        h = train(single, Replay(rec, s, 3), steps=25, batch_size=16, n_points=6, generator=gen, lr=3e-3,
                  schedule="cosine", progress=False)
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
    tasks = [Recorder(LinearRegression(dim=3, noise_std=0.1)),
             Recorder(LinearRegression(dim=3, noise_std=1.0, prior_mean=torch.full((3,), 2.0)))]
    models = [LTB(3) for _ in tasks]
    copies = [copy.deepcopy(m) for m in models]
    hist = train_ensemble(models, tasks, steps=20, batch_size=16, n_points=6, generator=gen, lr=3e-3, progress=False)
    for s, (single, rec) in enumerate(zip(copies, tasks)):
        assert len(rec.prompts) == 20 and rec.prompts[0].batch_size == 16  # each task drew one model's block
        h = train(single, Replay(rec, 0, 1), steps=20, batch_size=16, n_points=6, generator=gen, lr=3e-3,
                  progress=False)
        np.testing.assert_allclose(hist.losses[:, s], h.losses, rtol=1e-4, atol=1e-6)
    assert hist.losses[-5:, 1].mean() > 3 * hist.losses[-5:, 0].mean()  # the noisy, shifted task stays harder
    with pytest.raises(ValueError, match="one per model"):
        train_ensemble(models, tasks[:1] * 3, steps=1, batch_size=2, n_points=6, generator=gen)
    with pytest.raises(ValueError, match="share one dimension"):
        train_ensemble(models, [LinearRegression(dim=3), LinearRegression(dim=2)], steps=1, batch_size=2,
                       n_points=6, generator=gen)


def test_bf16_is_ignored_on_the_cpu():
    def run(bf16):
        models = [small_model(d=3, points=6) for _ in range(2)]
        return train_ensemble(models, LinearRegression(dim=3), steps=5, batch_size=8, n_points=6, bf16=bf16,
                              generator=torch.Generator().manual_seed(4), lr=1e-3, progress=False).losses

    assert np.array_equal(run(True), run(False))
    with pytest.raises(TypeError, match="bf16 must be True or False"):
        train(small_model(d=3, points=6), LinearRegression(dim=3), steps=1, batch_size=2, n_points=6,
              generator=torch.Generator(), bf16="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("ensemble", [False, True])
def test_bf16_training_follows_float32_on_cuda(ensemble):
    """bfloat16 autocast changes the forward pass's round-off, not the optimization: the first losses agree to
    bfloat16's precision and the losses after training agree closely."""

    def run(bf16):
        torch.manual_seed(0)
        kw = dict(steps=300, batch_size=64, n_points=8, generator=torch.Generator("cuda").manual_seed(5), lr=3e-3,
                  schedule="cosine", bf16=bf16, progress=False)
        if ensemble:
            return train_ensemble([small_model(d=2).cuda() for _ in range(3)], LinearRegression(dim=2), **kw).losses
        return train(small_model(d=2).cuda(), LinearRegression(dim=2), **kw).losses[:, None]

    fp32, bf16 = run(False), run(True)
    np.testing.assert_allclose(bf16[0], fp32[0], rtol=2e-2)
    np.testing.assert_allclose(bf16[-50:].mean(0), fp32[-50:].mean(0), rtol=0.1)
    assert fp32[-50:].mean() < 0.8 * fp32[:10].mean()  # it did train (0.52 of the start on a CPU)


def test_ensemble_training_is_bitwise_reproducible_on_cpu():
    def run():
        torch.manual_seed(0)
        models = [small_model(d=3, points=6) for _ in range(2)]
        hist = train_ensemble(models, LinearRegression(dim=3, noise_std=0.2), steps=15, batch_size=8, n_points=6,
                              generator=torch.Generator().manual_seed(4), lr=1e-3, progress=False)
        return hist.losses, torch.cat([p.flatten() for m in models for p in m.parameters()])

    (l1, p1), (l2, p2) = run(), run()
    assert np.array_equal(l1, l2) and torch.equal(p1, p2)


def test_ensemble_rejects_mixed_architectures(gen):
    task = LinearRegression(dim=3)
    with pytest.raises(ValueError, match="architecture"):
        train_ensemble([small_model(d=3, points=6), small_model(d=3, points=6, mlp=False)], task, steps=1,
                       batch_size=2, n_points=6, generator=gen)
    with pytest.raises(TypeError, match="models"):
        train_ensemble([], task, steps=1, batch_size=2, n_points=6, generator=gen)


def test_cuda_graph_flag_needs_cuda(gen):
    with pytest.raises(ValueError, match="cuda_graph"):
        train(small_model(d=2, points=6), LinearRegression(dim=2), steps=1, batch_size=2, n_points=6, generator=gen,
              cuda_graph=True)


CUDA_GRAPH_MODELS = {
    "gpt": lambda: small_model(d=4, points=8),
    "ltb": lambda: LTB(4),
    "mlp_attention": lambda: MLPAttention(4, 8, hidden=16),
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("ensemble", [False, True])
@pytest.mark.parametrize("family", sorted(CUDA_GRAPH_MODELS))
def test_cuda_graph_step_matches_the_plain_step(family, ensemble):
    """The captured step (fused Adam in a CUDA graph, through a curriculum's shape changes) follows the plain
    step's losses on the same prompts, for every model family the chapters train (a model that builds a tensor
    on the host inside its forward pass cannot be captured: the LTB's mask once did)."""
    make = CUDA_GRAPH_MODELS[family]

    def run(graph):
        g = torch.Generator(device="cuda").manual_seed(5)
        torch.manual_seed(0)
        cur = Curriculum(dims=(2, 4), points=(4, 8), every=10)
        kw = dict(steps=40, batch_size=32, n_points=8, generator=g, lr=1e-3, schedule="cosine", curriculum=cur,
                  cuda_graph=graph, progress=False)
        if ensemble:
            models = [make().cuda() for _ in range(3)]
            return train_ensemble(models, LinearRegression(dim=4), **kw).losses
        return train(make().cuda(), LinearRegression(dim=4), **kw).losses

    plain, graphed = run(False), run(True)
    np.testing.assert_allclose(graphed, plain, rtol=2e-3, atol=1e-5)


def test_models_reject_prompts_of_another_dtype(gen):
    p = LinearRegression(dim=3).sample(4, 5, gen)
    p64 = Prompt(p.x.double(), p.y.double(), p.x_query.double(), p.y_query.double())
    for model in (small_model(d=3, points=8), LTB(3)):
        with pytest.raises(ValueError, match="float64.*parameters are torch.float32"):
            model(p64)
        model(p)
