import numpy as np
import pytest
import torch

from icl_utils.models import GPTConfig, ICLTransformer
from icl_utils.risk import mean_and_band, model_errors
from icl_utils.tasks import LinearRegression
from icl_utils.train import Curriculum, TrainHistory, train


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
