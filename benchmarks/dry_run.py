"""Full mode's code paths on any machine, before a GPU is spent on them: a notebook's cells with every training loop
capped at a few steps.

    python benchmarks/dry_run.py notebooks/02_mean_field.md              # full mode, 30 steps per training loop
    python benchmarks/dry_run.py --steps 5 --mode full notebooks/0*.md   # several notebooks, one after the other

Each code cell runs in order in one namespace, with the steps of :func:`icl_utils.train.train` and
:func:`~icl_utils.train.train_ensemble` (their :class:`~icl_utils.train.TrainConfig`'s ``steps``),
:func:`icl_utils.gd.gradient_descent` and :func:`icl_utils.dynamics.softmax_attention.run_gradient_descent` cut to
``--steps``, and everything else (sample sizes, widths, evaluation) at the mode's sizes. A cell that fails is
reported and the next one runs: an ``AssertionError`` is expected (the chapter's claims need their training
budgets), and so are errors of cells that use what a failed assertion did not define, or index a step past the short
run's end; any other error is what this is for (a shape that only full mode has, a tensor too large for memory).
Each cell's time and peak memory so far are printed, so the heavy cells show up too. Run it on the CPU with
``ICL_DEVICE=cpu`` to keep a GPU free; it exits with status 1 if any cell failed other than by an assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import os
import resource
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.cells import compiled  # noqa: E402  (the cells' future imports, and none of this file's)

#: The training loops, by module: ``"config"`` for those that take a :class:`~icl_utils.train.TrainConfig` (the
#: third argument, or ``config=``), ``"steps"`` or ``"max_iter"`` for those that take that keyword.
LOOPS = {
    "icl_utils.train": {"train": "config", "train_ensemble": "config", "fit_features_exact": "max_iter"},
    "icl_utils.gd": {"gradient_descent": "steps"},
    "icl_utils.dynamics.softmax_attention": {"run_gradient_descent": "steps"},
    "icl_utils.dynamics.mean_field": {"run_gradient_descent": "steps"},
}


def _cap_config(args: tuple, kwargs: dict, steps: int) -> tuple[tuple, dict]:
    """The arguments of ``train(model, task, config, ...)`` with the config's steps cut to at most ``steps``."""

    def capped(config):
        if not dataclasses.is_dataclass(config):
            return config  # not a TrainConfig: train itself says so
        return dataclasses.replace(config, steps=min(config.steps, steps))

    if "config" in kwargs:
        kwargs = {**kwargs, "config": capped(kwargs["config"])}
    elif len(args) > 2:
        args = (*args[:2], capped(args[2]), *args[3:])
    return args, kwargs


_cap: int | None = None  # the steps a training loop may run inside capped_training; None outside it


@contextlib.contextmanager
def capped_training(steps: int):
    """Within the block, every training loop in :data:`LOOPS` runs at most ``steps`` steps (its ``steps`` argument,
    or its config's); the loops are restored after it.

    A module imported inside the block that binds a loop by name (``from icl_utils.gd import gradient_descent``)
    keeps the wrapper after it, so the wrapper caps only while a block is open and passes through otherwise.
    """
    global _cap
    modules = {name: importlib.import_module(name) for name in LOOPS}  # all first: none binds a wrapper at import
    originals = []
    for module_name, loops in LOOPS.items():
        module = modules[module_name]
        for name, how in loops.items():
            loop = getattr(module, name)
            originals.append((module, name, loop))

            @functools.wraps(loop)
            def capped(*args, _loop=loop, _how=how, **kwargs):
                if _cap is not None:
                    if _how == "config":
                        args, kwargs = _cap_config(args, kwargs, _cap)
                    elif _how in kwargs:
                        kwargs[_how] = min(kwargs[_how], _cap)
                return _loop(*args, **kwargs)

            setattr(module, name, capped)
    previous, _cap = _cap, steps
    try:
        yield
    finally:
        _cap = previous
        for module, name, loop in reversed(originals):
            setattr(module, name, loop)


def run_cells(notebook: Path) -> list[dict]:
    """Run the notebook's code cells in order from its folder; one record per cell."""
    import jupytext

    cells = [c for c in jupytext.read(notebook).cells if c.cell_type == "code"]
    codes = compiled([c.source for c in cells], [f"{notebook.stem}, code cell {i}" for i in range(len(cells))])
    namespace: dict = {"__name__": "__main__"}
    records = []
    here = Path.cwd()
    os.chdir(notebook.parent)
    try:
        for i, cell in enumerate(cells):
            start = time.perf_counter()
            try:
                exec(codes[i], namespace)
                status = "ok"
            except AssertionError as err:
                status = f"assertion: {str(err)[:100]}"
            except Exception as err:
                traceback.print_exc()
                status = f"ERROR {type(err).__name__}: {str(err)[:300]}"
            peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kilobytes on Linux
            if "matplotlib.pyplot" in sys.modules:
                sys.modules["matplotlib.pyplot"].close("all")
            records.append({"cell": i, "seconds": time.perf_counter() - start, "status": status})
            first_line = cell.source.strip().splitlines()[0][:50] if cell.source.strip() else ""
            print(
                f"{notebook.stem} cell {i:2d} {records[-1]['seconds']:7.1f} s  peak {peak_gb:5.1f} GB  {status}"
                f"  | {first_line}",
                flush=True,
            )
    finally:
        os.chdir(here)
    return records


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="MyST notebooks to run")
    parser.add_argument("--steps", type=int, default=30, help="steps per training loop (default 30)")
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    args = parser.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps must be at least 1, got {args.steps}")
    saved = {key: os.environ.get(key) for key in ("ICL_MODE", "MPLBACKEND")}
    os.environ.update(ICL_MODE=args.mode, MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"))
    records = []
    try:
        with capped_training(args.steps):
            for notebook in args.notebooks:
                records += [{"notebook": notebook.stem, **r} for r in run_cells(notebook.resolve())]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    errors = [r for r in records if r["status"].startswith("ERROR")]
    print(f"{len(records)} cells, {len(errors)} error(s)")
    if errors:
        raise SystemExit(1)
    return records


if __name__ == "__main__":
    main()
