"""Execute every chapter as a script, in quick or full mode, and record each chapter's time.

    python benchmarks/run_book.py --mode full          # every notebook in notebooks/, on the GPU when there is one
    python benchmarks/run_book.py --mode full 00 04    # only the notebooks whose names start with 00 or 04
    python benchmarks/run_book.py --mode quick         # the CI budget: every notebook in quick mode

Each MyST notebook is converted to a plain script with jupytext (or taken from ``--scripts DIR``, converted
elsewhere, for a machine without jupytext) and run in a fresh Python process from ``notebooks/`` with ``ICL_MODE``
set and a non-interactive matplotlib backend; its assertions are the chapter's checks, so a failed claim fails
the run. Times, exit codes and the last lines of each log go to ``results/book-<mode>-<device>.json``, which the
performance appendix reads.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import RESULTS, environment, slug, write_json  # noqa: E402


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
    args = parser.parse_args(argv)

    notebooks = sorted(p for p in args.notebooks.glob("*.md")
                       if not args.prefixes or p.stem.startswith(tuple(args.prefixes)))
    if not notebooks:
        raise SystemExit(f"no notebook in {args.notebooks} starts with {args.prefixes}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = {**os.environ, "ICL_MODE": args.mode, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    chapters = []
    with tempfile.TemporaryDirectory() as tmp:
        for notebook in notebooks:
            script = args.scripts.resolve() / f"{notebook.stem}.py" if args.scripts else convert(notebook, Path(tmp))
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, str(script)], cwd=notebook.parent, env=env,
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - start
            log = proc.stdout + proc.stderr
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                (args.logs / f"{notebook.stem}.log").write_text(log)
            # A passing chapter's printed numbers are on stdout; a failing one's traceback is on stderr (where the
            # progress bars also go, so a passing chapter's stderr is not worth keeping).
            tail = (proc.stderr if proc.returncode else proc.stdout)[-2000:]
            chapters.append({"notebook": notebook.stem, "seconds": seconds, "returncode": proc.returncode,
                             "log_tail": tail})
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"{notebook.stem:28s} {seconds:8.1f} s  {status}", flush=True)
            if proc.returncode:
                print(log[-3000:], flush=True)
    total = sum(c["seconds"] for c in chapters)
    print(f"{'total':28s} {total:8.1f} s")
    result = {"mode": args.mode, **environment(device), "total_seconds": total, "chapters": chapters}
    name = "-".join([f"book-{args.mode}", slug(device), *args.prefixes])
    write_json(args.out / f"{name}.json", result)
    if any(c["returncode"] for c in chapters):
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
