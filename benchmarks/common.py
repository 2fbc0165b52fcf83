"""What the benchmark scripts share: the machine's description and atomic writes of results files."""

from __future__ import annotations

import platform
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from icl_utils.claims import write_json  # noqa: F401  (the benchmarks' results files are written with it)

RESULTS = Path(__file__).resolve().parent / "results"


def device_name(device: torch.device) -> str:
    """The accelerator's name (``NVIDIA H100 80GB HBM3``) or the CPU's, with its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def slug(device: torch.device) -> str:
    """A file-name-safe tag for the device: ``nvidia-h100-80gb-hbm3`` or ``cpu``."""
    return "cpu" if device.type != "cuda" else re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def commit() -> str | None:
    """The repository's commit (``+`` if the working tree has changes), or None outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def environment(device: torch.device) -> dict:
    """Device, versions, code and date, stored with every result."""
    info = {
        "device": device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "commit": commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
    return info


def float64_cpu_generator(seed: int = 0) -> torch.Generator:
    """Float64 by default, every library seeded, and a CPU generator: the start of chapter 2's benchmarks, whose
    mean-field dynamics run in float64 as the chapter does."""
    import icl_utils

    torch.set_default_dtype(torch.float64)
    icl_utils.seed_everything(seed)
    return icl_utils.make_generator(seed, "cpu")


def reference_seconds(repeats: int = 5) -> float:
    """The least seconds, over ``repeats``, of a fixed small workload on the CPU: 30 Adam steps of chapter 1's
    quick-mode GPT and 30 forward-backward passes of chapter 3's float64 student network at its prompt batch.
    Recorded beside a book run, it says how fast the machine was then: the same commit's chapter took 86 s and
    168 s on two days' machines of the same kind. It is a rough gauge: on a shared 2-core machine the least of 5
    ranged from 0.59 to 0.96 s within ten minutes (one repeat from 0.5 s), so only a larger difference between two
    runs says something."""
    import icl_utils
    from icl_utils.models.gpt import GPTConfig, ICLTransformer
    from icl_utils.tasks import LinearRegression
    from icl_utils.tasks.features import sigmoid_network
    from icl_utils.train import TrainConfig, train

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    config = TrainConfig(steps=30, batch_size=64, n_context=10, lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    particles = torch.randn(5, 60, 14, generator=gen, dtype=torch.float64)
    x = torch.randn(5, 2048, 10, generator=gen, dtype=torch.float64)
    times = []
    for _ in range(repeats):
        model = ICLTransformer(GPTConfig(n_dims=5, n_context=10, n_embd=32, n_layer=3, n_head=2))
        start = time.perf_counter()
        train(model, LinearRegression(dim=5), config, generator=icl_utils.make_generator(0, "cpu"), progress=False)
        for _ in range(30):
            p = particles.clone().requires_grad_(True)
            torch.autograd.grad(sigmoid_network(p, x, 3).square().sum(), [p])
        times.append(time.perf_counter() - start)
    return min(times)  # the least: interference only ever adds time
