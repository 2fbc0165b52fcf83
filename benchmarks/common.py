"""What the benchmark scripts share: the machine's description and atomic writes of results files."""

from __future__ import annotations

import platform
import re
import subprocess
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
