"""Execute every chapter as a script, in quick or full mode, and record each chapter's time.

    python benchmarks/run_book.py --mode full          # every notebook in notebooks/, on the GPU when there is one
    python benchmarks/run_book.py --mode full 00 04    # only the notebooks whose names start with 00 or 04
    python benchmarks/run_book.py --mode quick         # the CI budget: every notebook in quick mode
    python benchmarks/run_book.py --mode full --jobs 4 --timeout 900   # four chapters at a time on one GPU

Each MyST notebook is converted to a plain script with jupytext (or taken from ``--scripts DIR``, converted
elsewhere, for a machine without jupytext) and run in a fresh Python process from ``notebooks/`` with ``ICL_MODE``
set and a non-interactive matplotlib backend; its assertions are the chapter's checks, so a failed claim fails
the run. The script runs cell by cell (``benchmarks/cells.py``), so each code cell's time is recorded too, and the
slowest one named (a chapter stopped by ``--timeout`` names the cell it was in). Times, exit codes and the last
lines of each log go to ``results/book-<mode>-<device>.json``, which the performance appendix reads, with the
seconds of a fixed reference workload on the CPU before and after the chapters (``common.reference_seconds``;
``--reference-repeats 0`` skips it): a rough gauge of how fast the CPU was while it ran them.

With ``--jobs N`` the chapters run N at a time (each child gets its share of the CPU threads). Small models leave
most of a GPU idle, so this shortens the whole run; a chapter's own time is then an upper bound on its time alone,
and the total recorded is the wall time of the whole run. ``--timeout`` stops a chapter that runs longer (exit code
124 in the results file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
#: the runner that executes a chapter's script cell by cell and records each cell's time
CELLS = Path(__file__).resolve().parent / "cells.py"
sys.path.insert(0, str(ROOT))
from benchmarks.common import RESULTS, environment, reference_seconds, slug, write_json  # noqa: E402
from icl_utils.config import chapter_env  # noqa: E402


def convert(notebook: Path, folder: Path) -> Path:
    """The notebook's code cells as a percent-format script in ``folder``."""
    import jupytext

    script = folder / f"{notebook.stem}.py"
    nb = jupytext.read(notebook)
    if not any(cell.cell_type == "code" for cell in nb.cells):
        raise SystemExit(f"{notebook} has no code cell: is it a MyST notebook with a jupytext header?")
    jupytext.write(nb, script, fmt="py:percent")
    return script


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefixes", nargs="*", help="run only notebooks whose names start with these")
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="folder of MyST notebooks")
    parser.add_argument("--scripts", type=Path, default=None, help="folder of scripts already converted")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results file")
    parser.add_argument("--logs", type=Path, default=None, help="folder for each chapter's full log")
    parser.add_argument("--jobs", type=int, default=1, help="chapters run at a time (default 1)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds after which a chapter is stopped")
    parser.add_argument(
        "--reference-repeats", type=int, default=5, help="repeats of the reference workload (0: none; default 5)"
    )
    args = parser.parse_args(argv)

    notebooks = sorted(
        p for p in args.notebooks.glob("*.md") if not args.prefixes or p.stem.startswith(tuple(args.prefixes))
    )
    if not notebooks:
        raise SystemExit(f"no notebook in {args.notebooks} starts with {args.prefixes}")
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    repeats = args.reference_repeats
    if repeats < 0:
        raise SystemExit(f"--reference-repeats must be at least 0, got {repeats}")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = {
        **os.environ,
        "ICL_MODE": args.mode,
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if args.jobs > 1:  # each chapter gets its share of the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.jobs))

    def run(notebook: Path, script: Path, times: Path) -> dict:
        child_env = chapter_env(env)  # measures the machine's load before the chapter's clock starts
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, str(CELLS), str(script), str(times)],
                check=False,
                cwd=notebook.parent,
                env=child_env,
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as err:
            returncode = 124
            stdout, stderr = (_text(err.stdout), _text(err.stderr) + f"\nstopped after --timeout {args.timeout} s")
        seconds = time.perf_counter() - start
        log = stdout + stderr
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            (args.logs / f"{notebook.stem}.log").write_text(log)
        status = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
        print(f"{notebook.stem:28s} {seconds:8.1f} s  {status}", flush=True)
        if returncode:
            print(log[-3000:], flush=True)
        cells = json.loads(times.read_text())["cells"] if times.exists() else []  # as far as the chapter got
        if cells and cells[-1]["seconds"] is None:  # the cell that was running when the chapter ended
            # at least this long: the chapter's time less the other cells' (start-up included)
            rest = round(seconds - sum(c["seconds"] for c in cells[:-1]), 2)
            cells[-1] |= {"seconds": rest, "unfinished": "stopped by --timeout" if returncode == 124 else "killed"}
        # A passing chapter's printed numbers are on stdout; a failing one's traceback is on stderr (where the
        # progress bars also go, so a passing chapter's stderr is not worth keeping).
        return {
            "notebook": notebook.stem,
            "seconds": seconds,
            "returncode": returncode,
            "GOMP_SPINCOUNT": child_env.get("GOMP_SPINCOUNT", "default"),
            "log_tail": (stderr if returncode else stdout)[-2000:],
            "cells": cells,
            "slowest_cell": max(cells, key=lambda c: c["seconds"], default=None),
        }

    with tempfile.TemporaryDirectory() as tmp:
        # the chapters' ledgers go beside the scripts, not over the build's in _build/claims
        env.setdefault("ICL_CLAIMS_DIR", str(Path(tmp) / "claims"))
        scripts = [
            args.scripts.resolve() / f"{nb.stem}.py" if args.scripts else convert(nb, Path(tmp)) for nb in notebooks
        ]
        times = [Path(tmp) / f"{nb.stem}.cells.json" for nb in notebooks]
        pace = [reference_seconds(repeats)] if repeats else None  # the CPU's pace, outside the chapters' clocks
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            chapters = list(pool.map(run, notebooks, scripts, times))
        wall = time.perf_counter() - start
        if pace:  # and after
            pace.append(reference_seconds(repeats))
    total = sum(c["seconds"] for c in chapters) if args.jobs == 1 else wall
    print(f"{'total':28s} {total:8.1f} s" + (f" (wall time, {args.jobs} at a time)" if args.jobs > 1 else ""))
    result = {
        "mode": args.mode,
        **environment(device),
        "jobs": args.jobs,
        "total_seconds": total,
        "reference_seconds": pace,
        "chapters": chapters,
    }
    name = "-".join([f"book-{args.mode}", slug(device), *args.prefixes])
    write_json(args.out / f"{name}.json", result)
    if any(c["returncode"] for c in chapters):
        raise SystemExit(1)
    return result


def _text(output: bytes | str | None) -> str:
    """What a timed-out child had printed (bytes, text or nothing)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


if __name__ == "__main__":
    main()
