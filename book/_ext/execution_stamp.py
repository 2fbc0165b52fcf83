"""Record which notebooks the build executed, and from what, so that ``pytest`` can check those executions
instead of running every notebook a second time.

A notebook's *stamp* hashes everything its outputs depend on: its own source, the package's source, the results
files the pages read (``benchmarks/results``), the run's settings (``ICL_MODE``, ``ICL_DEVICE``), Python's version
and every installed distribution's version. When the build reads (and so executes) a notebook under
``notebooks/``, this extension takes its stamp; when the build finishes, it writes ``_build/execution.json``
with, for each notebook executed, that stamp, the executed notebook's hash and the ledger the run wrote. A
notebook whose inputs changed while the build ran gets no record.

``conftest.py`` reuses a recorded execution only when the notebook's stamp *now* equals the recorded one and the
executed notebook is the file recorded; anything else, or ``pytest --nbval``, executes the notebook under nbval.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
RECORD = BUILD / "execution.json"
#: Each notebook's execution time in the current build, written as each one finishes, so that the performance
#: appendix, executed after the chapters, shows this build's times.
TIMES = BUILD / "execution-times.json"
#: The settings that change what a notebook computes (``ICL_PROGRESS`` only hides progress bars).
SETTINGS = ("ICL_MODE", "ICL_DEVICE")


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> str:
    """Python's version and every installed distribution's, one per line, sorted."""
    dists = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]})
    return "\n".join([f"python=={sys.version.split()[0]}", *dists])


def stamp(notebook: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """What ``notebook``'s execution depends on, each part hashed, under the settings in ``env`` (default
    ``os.environ``)."""
    env = os.environ if env is None else env
    return {
        "notebook": file_hash(notebook),
        "package": _digest(list((ROOT / "icl_utils").rglob("*.py"))),
        "results": _digest(list((ROOT / "benchmarks" / "results").glob("*.json"))),
        "settings": json.dumps({k: env.get(k, "").strip().lower() for k in SETTINGS}),
        "versions": hashlib.sha256(versions().encode()).hexdigest(),
    }


def executed_path(notebook: Path) -> Path:
    """Where myst-nb writes the build's execution of ``notebook``."""
    return BUILD / "jupyter_execute" / notebook.relative_to(ROOT).with_suffix(".ipynb")


def ledger_path(notebook: Path) -> Path:
    return BUILD / "claims" / f"{notebook.stem}.json"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def load() -> dict[str, dict]:
    """The build's record, ``{}`` when there is none."""
    return _read_json(RECORD)


def stale(notebook: Path, record: dict[str, dict] | None = None) -> str:
    """Why the build's execution of ``notebook`` cannot stand for running it now; ``""`` when it can."""
    entry = (load() if record is None else record).get(notebook.stem)
    if entry is None:
        return "the build did not record executing it"
    now = stamp(notebook)
    changed = [part for part in now if entry["stamp"].get(part) != now[part]]
    if changed:
        return f"changed since the build: {', '.join(changed)}"
    executed = executed_path(notebook)
    if not executed.exists() or file_hash(executed) != entry["executed"]:
        return f"{executed.relative_to(ROOT)} is not the build's execution"
    return ""


def error_outputs(nb: dict) -> list[str]:
    """Each error output of an executed notebook, as ``cell i: name: value`` (what fails a cell under nbval)."""
    return [f"cell {i}: {out.get('ename')}: {out.get('evalue')}" for i, cell in enumerate(nb["cells"])
            if cell["cell_type"] == "code" for out in cell.get("outputs", []) if out["output_type"] == "error"]


def ledger_problems(ledger: dict | None) -> list[str]:
    """Why the ledger a run wrote does not hold (what ``Ledger.verify`` raised on in that run); ``[]`` if it holds."""
    if ledger is None:
        return ["the execution wrote no ledger"]
    if not ledger.get("claims"):
        return ["the ledger holds no claim"]
    return list(ledger.get("problems", []))


def setup(app):
    taken: dict[str, dict] = {}

    def on_read(app, docname: str, source: list[str]) -> None:
        path = Path(app.env.doc2path(docname))
        if path.parent == NOTEBOOKS and path.suffix == ".md":
            taken[path.stem] = {"stamp": stamp(path), "read_at": time.time()}

    def on_parsed(app, doctree) -> None:
        name = Path(app.env.doc2path(app.env.docname)).stem
        if name not in taken or "seconds" in taken[name]:
            return
        taken[name]["seconds"] = time.time() - taken[name]["read_at"]
        times = _read_json(TIMES)
        if times.get("build") != started:  # a file from an earlier build
            times = {"build": started, "notebooks": {}}
        times["notebooks"][name] = {"seconds": round(taken[name]["seconds"], 1),
                                    "mode": os.environ.get("ICL_MODE", "quick").strip().lower() or "quick"}
        _write_json(TIMES, times)

    def on_finished(app, exception) -> None:
        if exception is not None or not taken:
            return
        record = load()
        for name, entry in taken.items():
            notebook = NOTEBOOKS / f"{name}.md"
            record.pop(name, None)
            executed, ledger = executed_path(notebook), ledger_path(notebook)
            if not executed.exists() or stamp(notebook) != entry["stamp"]:
                continue
            fresh = ledger.exists() and ledger.stat().st_mtime >= entry["read_at"]
            record[name] = {"stamp": entry["stamp"], "executed": file_hash(executed),
                            "ledger": json.loads(ledger.read_text()) if fresh else None}
        _write_json(RECORD, record)

    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    app.connect("source-read", on_read)
    app.connect("doctree-read", on_parsed)
    app.connect("build-finished", on_finished)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
