import os

import pytest
import torch
from needs import need

from icl_utils import config


def test_default_mode_is_quick(monkeypatch):
    monkeypatch.delenv("ICL_MODE", raising=False)
    assert config.mode() == "quick"
    assert config.by_mode(quick=1, full=2) == 1


def test_full_mode(monkeypatch):
    monkeypatch.setenv("ICL_MODE", "FULL")
    assert config.is_full()
    assert config.by_mode(quick=1, full=2) == 2


def test_bad_mode_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ICL_MODE", "fast")
    with pytest.raises(ValueError, match="ICL_MODE"):
        config.mode()


def test_device_override(monkeypatch):
    monkeypatch.setenv("ICL_DEVICE", "cpu")
    assert config.get_device() == torch.device("cpu")


@pytest.mark.parametrize("value", ["gpu", "tpu:0", "banana"])
def test_bad_device_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("ICL_DEVICE", value)
    with pytest.raises(ValueError, match="ICL_DEVICE"):
        config.get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where CUDA is missing")
def test_cuda_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ICL_DEVICE", "cuda")
    with pytest.raises(ValueError, match="no CUDA"):
        config.get_device()


def test_seed_everything_is_reproducible(monkeypatch):
    monkeypatch.setenv("ICL_DEVICE", "cpu")
    a = torch.randn(3, generator=config.seed_everything(7)), torch.randn(3)
    b = torch.randn(3, generator=config.seed_everything(7)), torch.randn(3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(TypeError, match="seed"):
        config.seed_everything(1.5)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_mps_is_a_clear_error(monkeypatch):
    """describe() is where a notebook first reads the device: it must fail there, naming ICL_DEVICE."""
    monkeypatch.setenv("ICL_DEVICE", "mps")
    with pytest.raises(ValueError, match="ICL_DEVICE='mps' asks for MPS"):
        config.describe()


@pytest.mark.parametrize("value, drawn", [("1", True), ("0", False)])
def test_progress_bars_follow_icl_progress(monkeypatch, capsys, value, drawn):
    from icl_utils.gd import gradient_descent

    monkeypatch.setenv("ICL_PROGRESS", value)
    assert config.show_progress() is drawn
    gradient_descent(lambda p: p["t"] ** 2, {"t": torch.ones(())}, steps=3, lr=0.1)
    assert bool(capsys.readouterr().err) is drawn  # the bar is written to stderr, or nothing is


def test_progress_setting_is_checked(monkeypatch):
    monkeypatch.setenv("ICL_PROGRESS", "yes")
    with pytest.raises(ValueError, match="ICL_PROGRESS must be 0 or 1"):
        config.show_progress()


def test_cpu_busy_measures_the_whole_machine():
    busy = config.cpu_busy(0.05)
    need("Linux's /proc/stat", busy is not None)
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 1e-9


@pytest.mark.parametrize("busy, spins", [(0.0, False), (config.BUSY_CORES + 0.1, True), (None, False)])
def test_chapter_env_spins_less_only_on_a_busy_machine(monkeypatch, busy, spins):
    monkeypatch.setattr(config, "cpu_busy", lambda seconds=0.3: busy)
    env = config.chapter_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and all(env[k] == v for k, v in config.CHAPTER_ENV.items())
    assert ("GOMP_SPINCOUNT" in env) == spins


@pytest.mark.parametrize("own", [{"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "ACTIVE"}])
def test_chapter_env_keeps_the_users_own_openmp_waiting(monkeypatch, own):
    monkeypatch.setattr(config, "cpu_busy", lambda seconds=0.3: 2.0)
    assert config.chapter_env(own) == {**own, **config.CHAPTER_ENV}
