"""Run a percent-format script (a chapter converted by jupytext) cell by cell, as ``python SCRIPT`` would run it
whole, and record the seconds each code cell takes, so that a slow cell is found by name rather than by profiling
again.

    python benchmarks/cells.py SCRIPT TIMES.json

The cells run in order in one ``__main__`` module, with the script's name in ``sys.argv`` and its folder first on
``sys.path``, and keep their line numbers in tracebacks; all are compiled before the first runs, so a syntax error
stops the script at once. ``TIMES.json`` is ``{"script": name, "cells": [{"cell": i, "line": n, "code": text,
"seconds": s}, ...]}`` (``i`` counts the code cells from 0, as the notebook's; ``n`` is the line of the cell's
first code in the script; ``text`` that line), rewritten as each cell starts and ends: a cell still running
when the process is killed has ``"seconds": null``. The times leave out the imports of this runner (torch), which
the first cell would otherwise pay."""

from __future__ import annotations
import __future__

import re
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_json

#: a cell marker of jupytext's percent format (``# %%`` alone or with a title or tags), not a commented cell magic
#: such as ``# %%time``; a marker at the start of a line inside a triple-quoted string would split it too
MARKER = re.compile(r"# %%(\s|$)")
#: every ``from __future__`` feature's compiler flag, or-ed together
FUTURES = sum(getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)


def cells(text: str) -> list[tuple[int, str]]:
    """``(first code line, code)`` of each code cell of a percent-format script; the code is padded with blank
    lines to keep its line numbers. Text before the first marker (jupytext's header) is a cell of its own; cells of
    comments only (markdown) are left out."""
    lines = text.splitlines(keepends=True)
    starts = [0] + [i for i, line in enumerate(lines) if MARKER.match(line) and i > 0]
    out = []
    for begin, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        body = lines[begin:end]
        code = [i for i, line in enumerate(body) if line.strip() and not line.lstrip().startswith("#")]
        if code:
            out.append((begin + code[0] + 1, "\n" * begin + "".join(body)))
    return out


def compiled(sources: list[str], filenames: list[str]) -> list[types.CodeType]:
    """Each source (named in tracebacks by its filename) compiled as the next part of one script: a
    ``from __future__`` import holds for the cells after it, and nothing is inherited from this file's imports."""
    flags, out = 0, []
    for source, filename in zip(sources, filenames, strict=True):
        code = compile(source, filename, "exec", flags=flags, dont_inherit=True)
        flags |= code.co_flags & FUTURES
        out.append(code)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python benchmarks/cells.py SCRIPT TIMES.json")
    script, out = Path(args[0]), Path(args[1])
    found = cells(script.read_text(encoding="utf-8"))
    codes = compiled([code for _, code in found], [str(script)] * len(found))
    module = types.ModuleType("__main__")
    module.__file__ = str(script)
    # what the script sees when run itself: its own name, folder and __main__ module, not this file's
    here = str(Path(__file__).resolve().parent)
    saved = sys.argv, sys.path[:], sys.modules["__main__"]
    sys.argv, sys.path[:] = [str(script)], [str(script.parent.resolve()), *(p for p in sys.path if p != here)]
    sys.modules["__main__"] = module
    times: list[dict] = []
    try:
        for i, ((line, source), code) in enumerate(zip(found, codes, strict=True)):
            first = source.splitlines()[line - 1].strip()[:60]
            times.append({"cell": i, "line": line, "code": first, "seconds": None})
            write_json(out, {"script": script.name, "cells": times})
            start = time.perf_counter()
            try:
                exec(code, module.__dict__)
            finally:
                times[-1]["seconds"] = round(time.perf_counter() - start, 2)
                write_json(out, {"script": script.name, "cells": times})
    finally:  # for a caller in this process (a test)
        sys.argv, sys.path[:], sys.modules["__main__"] = saved[0], saved[1], saved[2]
    return times


if __name__ == "__main__":
    main()
