"""Run a percent-format script (a chapter converted by jupytext) cell by cell, as a kernel would, and record the
seconds each code cell takes, so that a slow cell is found by name rather than by profiling again.

    python benchmarks/cells.py SCRIPT TIMES.json

The cells share one namespace, run in order in this process, and keep their line numbers in tracebacks. The times
are written after every cell, so a chapter that fails or is stopped still says how far it got and where the time went:
``[{"line": first line of the cell's code, "seconds": ...}, ...]``, in the script's order.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_json

MARKER = "# %%"


def cells(text: str) -> list[tuple[int, str]]:
    """``(first line, code)`` of each cell of a percent-format script; the code is padded with blank lines to keep
    its line numbers. Text before the first marker (jupytext's header) is a cell of its own."""
    lines = text.splitlines(keepends=True)
    starts = [0] + [i for i, line in enumerate(lines) if line.startswith(MARKER) and i > 0]
    out = []
    for begin, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        body = lines[begin:end]
        code = [i for i, line in enumerate(body) if line.strip() and not line.lstrip().startswith("#")]
        if code:
            out.append((begin + code[0] + 1, "\n" * begin + "".join(body)))
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python benchmarks/cells.py SCRIPT TIMES.json")
    script, out = Path(args[0]), Path(args[1])
    # what the script sees when run itself: its own name and folder, not this file's
    here = str(Path(__file__).resolve().parent)
    saved = sys.argv, sys.path[:]
    sys.argv, sys.path[:] = [str(script)], [str(script.parent.resolve()), *(p for p in sys.path if p != here)]
    namespace = {"__name__": "__main__", "__file__": str(script)}
    times: list[dict] = []
    try:
        for line, code in cells(script.read_text()):
            compiled = compile(code, str(script), "exec")
            start = time.perf_counter()
            try:
                exec(compiled, namespace)
            finally:
                times.append({"line": line, "seconds": round(time.perf_counter() - start, 2)})
                write_json(out, {"script": script.name, "cells": times})
    finally:  # for a caller in this process (a test)
        sys.argv, sys.path[:] = saved[0], saved[1]
    return times


if __name__ == "__main__":
    main()
