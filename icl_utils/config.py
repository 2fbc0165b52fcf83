"""One place for the run settings every notebook shares: mode, device and seeds.

* ``ICL_MODE``: ``quick`` (default; each notebook runs in about a minute on a laptop CPU) or ``full``
  (the papers' sizes, meant for a GPU). Any other value is an error.
* ``ICL_DEVICE``: overrides the device (``cpu``, ``cuda``, ``cuda:1``, ...). Without it the device is CUDA
  when available, else the CPU.
"""

from __future__ import annotations

import os
import random
from typing import TypeVar

import numpy as np
import torch

MODES = ("quick", "full")
#: Values computed at once by the loops that work through many prompts a chunk at a time (64 MB in float32):
#: enough to keep a GPU busy, few enough that full mode's largest batches never materialize whole.
CHUNK_ELEMENTS = 2**24
T = TypeVar("T")


def prompts_per_chunk(values_per_prompt: int) -> int:
    """How many prompts of ``values_per_prompt`` values each fill one chunk of :data:`CHUNK_ELEMENTS` (at least one)."""
    return max(1, CHUNK_ELEMENTS // max(1, values_per_prompt))


def mode() -> str:
    """The run mode, read from ``ICL_MODE`` (default ``quick``)."""
    value = os.environ.get("ICL_MODE", "quick").strip().lower()
    if value not in MODES:
        raise ValueError(f"ICL_MODE must be one of {MODES}, got {value!r}")
    return value


def is_full() -> bool:
    """True in full mode."""
    return mode() == "full"


def by_mode(quick: T, full: T) -> T:
    """Pick the value for the current mode: ``by_mode(quick=2_000, full=500_000)``."""
    return full if is_full() else quick


def get_device() -> torch.device:
    """The device to compute on: ``ICL_DEVICE`` if set, else CUDA when available, else the CPU."""
    requested = os.environ.get("ICL_DEVICE", "").strip()
    if not requested:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(requested)
    except RuntimeError as err:
        raise ValueError(f"ICL_DEVICE={requested!r} is not a device string such as 'cpu' or 'cuda'") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"ICL_DEVICE={requested!r} asks for CUDA, but torch sees no CUDA device")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"ICL_DEVICE={requested!r}: supported device types are cpu, cuda and mps")
    return dev


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a generator on the configured device seeded with ``seed``.

    Samplers take that generator explicitly; the global seeds cover model initialization.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return make_generator(seed)


def make_generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A torch generator on ``device`` (default: the configured device) seeded with ``seed``."""
    dev = torch.device(device) if device is not None else get_device()
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    return gen


def describe() -> str:
    """One line for a notebook's setup cell: mode, device, torch version."""
    return f"mode={mode()}  device={get_device()}  torch={torch.__version__}"
