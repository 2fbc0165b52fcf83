"""One place for the run settings every notebook shares: mode, device and seeds.

* ``ICL_MODE``: ``quick`` (default; a chapter in at most 90 s on a 2-core CPU, the performance appendix gives
  the measured times) or ``full`` (the papers' sizes, meant for a GPU). Any other value is an error.
* ``ICL_DEVICE``: overrides the device (``cpu``, ``cuda``, ``cuda:1``, ...). Without it the device is CUDA
  when available, else the CPU.
* ``ICL_PROGRESS``: ``1`` (default) shows progress bars in training loops; ``0`` hides them. The book's build
  sets ``0`` (``book/_ext/quiet_build.py``), so bars show in Jupyter and never in a rendered page.
"""

from __future__ import annotations

import numbers
import os
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from tqdm import tqdm

#: Where the benchmark scripts write the results files that chapters quote (``benchmarks/results``).
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"

#: The environment the book's own runs give the Python processes that execute the chapters (the build's kernels,
#: pytest's under nbval, ``benchmarks/run_book.py``'s scripts): glibc's ``malloc`` keeps freed memory instead of
#: returning every large block to the kernel, which zeroes fresh pages on first write. The chapters allocate and
#: free the same sizes step after step, and ran 11-33% faster with it on the 2-core CPU (benchmarks/README.md). It is
#: not set for a
#: reader's own session, nor for the unit tests: kept blocks that glibc cannot reuse make the resident memory
#: outgrow the memory in use (``tests/test_memory.py``'s bound fails with it). Other C libraries ignore it.
CHAPTER_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "2147483647"}
#: Added to :data:`CHAPTER_ENV` when other processes already keep the CPU busy (:func:`cpu_busy`): PyTorch's OpenMP
#: threads then spin much less while they wait for each other. Spinning pays on a quiet machine (1/300 of libgomp's
#: default spin made chapter 6's first two cells 30% slower there) but not beside another job, which takes the core
#: a spinning thread waits for: beside a 2-thread PyTorch job on the 2-core CPU, those cells took 40 s with the
#: default and 18 s with this (7 s alone); ``OMP_WAIT_POLICY=PASSIVE`` gave 25 s, and 80% more alone. ``/proc/stat``
#: counts the whole host: in a container that shares it, its neighbours' load counts too.
BUSY_ENV = {"GOMP_SPINCOUNT": "1000"}
#: Cores' worth of CPU time that other processes must be using for :func:`chapter_env` to call the machine busy.
BUSY_CORES = 0.5


def cpu_busy(seconds: float = 0.3) -> float | None:
    """How many cores' worth of CPU time the whole machine used over the next ``seconds`` (Linux's
    ``/proc/stat``); ``None`` where there is no ``/proc/stat``."""
    import time

    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
    if not 0 < seconds <= 60:
        raise ValueError(f"seconds must be in (0, 60], got {seconds}")
    seconds = float(seconds)  # a NumPy float too (time.sleep takes no float32)

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
        return sum(fields) - idle, sum(fields)

    try:
        busy0, total0 = sample()
        time.sleep(seconds)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (busy1 - busy0) / max(total1 - total0, 1) * (os.cpu_count() or 1)


def chapter_env(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """The environment for a process that executes a chapter: ``environ`` with :data:`CHAPTER_ENV`, and with
    :data:`BUSY_ENV` when the machine is busy now (measured by :func:`cpu_busy` while the caller waits) unless
    ``environ`` sets OpenMP's waiting itself. Neither changes a number the chapter computes, only how fast."""
    if not isinstance(environ, Mapping):  # config sits below the declared checks: a hand check
        raise TypeError(f"environ must be a mapping of names to values (os.environ), got {type(environ).__name__}")
    if bad := [k for k, v in environ.items() if not isinstance(k, str) or not isinstance(v, str)]:
        raise TypeError(f"environ must map names to str values, as a process's environment does; not {bad[:3]}")
    env = {**environ, **CHAPTER_ENV}
    if "GOMP_SPINCOUNT" not in environ and "OMP_WAIT_POLICY" not in environ:
        busy = cpu_busy()
        if busy is not None and busy > BUSY_CORES:
            env.update(BUSY_ENV)
    return env


MODES = ("quick", "full")
#: Values computed at once by the loops that work through many prompts a chunk at a time (64 MB in float32):
#: enough to keep a GPU busy, few enough that full mode's largest batches never materialize whole.
CHUNK_ELEMENTS = 2**24
#: The most values one tensor may hold (4 GiB in float32): a request above it is an error that gives the size,
#: instead of an allocation that swaps for a minute and then fails.
MAX_ELEMENTS = 2**30
#: The largest counts the package accepts, in one place (:mod:`icl_utils.declared`'s ``Steps``, ``Draws``, ``Reps``
#: declare them on the arguments): a count above its limit is refused at once, with the count in the message,
#: instead of a loop that runs for days or a history that is allocated and fails. Far above anything the book asks
#: for: chapter 5's full mode trains 50,000 steps and scores 65,536 prompts; the largest bootstrap is 10^4.
MAX_STEPS = 10**7
#: prompts, tasks or Monte Carlo draws that one call works through, a chunk at a time
MAX_DRAWS = 10**8
#: bootstrap resamples, and other repetitions of a whole computation
MAX_REPS = 10**6
#: the widest dimension of a model or task (a width x width float32 matrix is 1 GiB) and the most layers
MAX_WIDTH = 2**14
MAX_DEPTH = 2**10
#: the largest scale of a task's inputs, weights, labels or noise (a standard deviation, a range, a mean): the
#: products that a prompt's label and a squared error form in float32 stay finite (1e6 * 1e6 summed over
#: MAX_WIDTH coordinates, squared, is 1e28 of float32's 3.4e38), where a scale of 1e39 gave inf and NaN labels
MAX_SCALE = 1e6
#: The most floating-point operations one call may spend on dense linear algebra sized by its arguments: products,
#: factorizations and solves of matrices as wide as a task, a feature map or a prompt, with the Monte Carlo loop of
#: them inside a closed form (an estimator's batch of prompts is the caller's data: there, what one prompt costs).
#: They are counted at the speed of a product: a product of d x d matrices is 2 d^3, a Cholesky factor d^3, an
#: inverse or a solve 4 d^3, a QR 5 d^3, an eigendecomposition 10 d^3 (4 d^3 for the eigenvalues alone), a symmetric
#: pseudo-inverse 12 d^3, an SVD of m x d 30 m d min(m, d), as each was timed against a product in float64 on two
#: CPU cores. There a product runs at about 100 GFLOP/s, so 2^42 is about 45 s: above it a call is refused at once
#: with its estimate instead of running for minutes. The book's largest is 3.6e12, chapter 2's Bayes oracle in full
#: mode (256 designs of 4,096 points on 1,024 functions, on the CPU); the next, 5.4e11.
MAX_FLOPS = 2**42
#: the most series or panels one figure draws (beyond it, colours cannot be told apart nor a legend read)
MAX_SERIES = 2**10
T = TypeVar("T")


def prompts_per_chunk(values_per_prompt: int) -> int:
    """How many prompts of ``values_per_prompt`` values each fill one chunk of :data:`CHUNK_ELEMENTS` (at least one)."""
    if isinstance(values_per_prompt, bool) or not isinstance(values_per_prompt, numbers.Integral):
        raise TypeError(f"values_per_prompt must be an int, got {type(values_per_prompt).__name__}")
    if values_per_prompt < 0:
        raise ValueError(f"values_per_prompt must be >= 0, got {values_per_prompt}")
    return max(1, CHUNK_ELEMENTS // max(1, values_per_prompt))


def mode() -> str:
    """The run mode, read from ``ICL_MODE`` (default ``quick``)."""
    value = os.environ.get("ICL_MODE", "quick").strip().lower()
    if value not in MODES:
        raise ValueError(f"ICL_MODE must be one of {MODES}, got {value!r}")
    return value


def show_progress() -> bool:
    """Whether training loops draw progress bars: ``ICL_PROGRESS`` is ``1`` (the default) or ``0``."""
    value = os.environ.get("ICL_PROGRESS", "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"ICL_PROGRESS must be 0 or 1, got {value!r}")
    return value == "1"


def progress_bar(iterable: Iterable[T], *, desc: str, enabled: bool = True) -> tqdm:
    """``iterable`` with a progress bar when ``enabled`` and :func:`show_progress` allow it; the one place the
    package draws bars (plain tqdm: ``tqdm.auto`` without ipywidgets writes a warning into the page)."""
    if not isinstance(iterable, Iterable):
        raise TypeError(f"iterable must be an iterable (a range, a list), got {type(iterable).__name__}")
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    if not isinstance(desc, str):
        raise TypeError(f"desc must be a str (the bar's label), got {type(desc).__name__}")
    return tqdm(iterable, desc=desc, disable=not (enabled and show_progress()), mininterval=1.0, leave=False)


def is_full() -> bool:
    """True in full mode."""
    return mode() == "full"


def by_mode(quick: T, full: T) -> T:
    """Pick the value for the current mode: ``by_mode(quick=2_000, full=500_000)``."""
    return full if is_full() else quick


def resolve_device(name: str, value: object) -> torch.device:
    """``value`` (a ``torch.device`` or a string such as ``cpu``, ``cuda:1``) as a device that exists here, or a
    ValueError/TypeError naming ``name``."""
    if not isinstance(value, (str, torch.device)):
        raise TypeError(
            f"{name} must be a torch.device or a string such as 'cpu' or 'cuda', got {type(value).__name__}"
        )
    try:
        dev = torch.device(value)
    except RuntimeError as err:
        raise ValueError(f"{name}={value!r} is not a device string such as 'cpu' or 'cuda'") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={value!r} asks for CUDA, but torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={value!r}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"{name}={value!r} asks for MPS, but torch sees no MPS device")
    elif dev.type != "cpu":
        raise ValueError(f"{name}={value!r}: supported device types are cpu, cuda and mps")
    return dev


def get_device() -> torch.device:
    """The device to compute on: ``ICL_DEVICE`` if set, else CUDA when available, else the CPU."""
    requested = os.environ.get("ICL_DEVICE", "").strip()
    if not requested:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return resolve_device("ICL_DEVICE", requested)


def _seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**64:  # torch's range (a negative seed wraps around); past it, torch's overflow
        raise ValueError(f"seed must be in [-2^63, 2^64), got {seed}")
    return int(seed)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a generator on the configured device seeded with ``seed``.

    Samplers take that generator explicitly; the global seeds cover model initialization.
    """
    seed = _seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return make_generator(seed)


def make_generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A torch generator on ``device`` (default: the configured device) seeded with ``seed``."""
    seed = _seed(seed)
    dev = resolve_device("device", device) if device is not None else get_device()
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    return gen


def describe() -> str:
    """One line for a notebook's setup cell: mode, device, torch version."""
    return f"mode={mode()}  device={get_device()}  torch={torch.__version__}"
