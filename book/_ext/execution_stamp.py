"""Record which notebooks the build executed, and from what, so that ``pytest`` can check those executions
instead of running every notebook a second time.

Only the chapters (``notebooks/NN_*.md``) are recorded: the appendix pages read what the build itself writes
(the chapters' ledgers, their times), so they run under nbval again, in seconds. A chapter's *stamp* hashes
everything its outputs depend on: its own source, the package's source, the results files it reads
(``benchmarks/results``), the mode and device it runs in, Python's version and every installed distribution's
version. When the build reads (and so executes) a chapter, this extension takes its stamp; when the build
finishes, it writes ``_build/execution.json`` with, for each chapter that myst-nb executed in this build and
reports as succeeded, that stamp, the executed notebook's hash and the ledger the run wrote (in its mode). A
chapter whose inputs changed while the build ran gets no record.

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

from icl_utils import config
from icl_utils.claims import claims_dir, write_json

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
RECORD = BUILD / "execution.json"
#: Each notebook's execution time in the current build, written as each one finishes, so that the performance
#: appendix, executed after the chapters, shows this build's times.
TIMES = BUILD / "execution-times.json"


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in paths if p.is_file()):  # not an editor's dangling lock file
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> str:
    """Python's version and every installed distribution's, one per line, sorted."""
    dists = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]})
    return "\n".join([f"python=={sys.version.split()[0]}", *dists])


def settings() -> str:
    """The mode and device a notebook would run in now (``ICL_MODE``, ``ICL_DEVICE``, CUDA's presence), as the
    package resolves them, and PyTorch's CPU threads (they order its parallel sums); ``ICL_PROGRESS`` only hides
    progress bars. The CPU's model is not part of it: a build and a test run on two machines of one kind (CI's
    two jobs) reuse the execution, though their last digits may differ."""
    import torch

    return json.dumps({"mode": config.mode(), "device": str(config.get_device()), "threads": torch.get_num_threads()})


def is_chapter(notebook: Path) -> bool:
    return notebook.parent == NOTEBOOKS and notebook.suffix == ".md" and notebook.stem[:2].isdigit()


def stamp(notebook: Path) -> dict[str, str]:
    """What ``notebook``'s execution depends on, each part hashed."""
    return {
        "notebook": file_hash(notebook),
        "package": _digest(list((ROOT / "icl_utils").rglob("*.py"))),
        "results": _digest(list((ROOT / "benchmarks" / "results").glob("*.json"))),
        "settings": settings(),
        "versions": hashlib.sha256(versions().encode()).hexdigest(),
    }


def executed_path(notebook: Path) -> Path:
    """Where myst-nb writes the build's execution of ``notebook``."""
    return BUILD / "jupyter_execute" / notebook.relative_to(ROOT).with_suffix(".ipynb")


def ledger_path(notebook: Path) -> Path:
    return claims_dir() / f"{notebook.stem}.json"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def load() -> dict[str, dict]:
    """The build's record, ``{}`` when there is none; entries of another shape are left out."""
    record = _read_json(RECORD)
    if not isinstance(record, dict):
        return {}
    return {
        name: entry
        for name, entry in record.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("stamp"), dict)
        and isinstance(entry.get("executed"), str)
        and isinstance(entry.get("ledger"), (dict, type(None)))
    }


def stale(notebook: Path, record: dict[str, dict] | None = None) -> str:
    """Why the build's execution of ``notebook`` cannot stand for running it now; ``""`` when it can."""
    if not is_chapter(notebook):
        return "not a chapter: it reads what the build writes"
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
    """Each error output of an executed notebook, as ``cell i: name: value`` (what fails a cell under nbval), and
    each code cell that was not executed (a run cut short leaves no error output)."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        found += [
            f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
            for out in cell.get("outputs", [])
            if out["output_type"] == "error"
        ]
        if "".join(cell.get("source", "")).strip() and cell.get("execution_count") is None:
            found.append(f"cell {i}: not executed")
    return found


def ledger_problems(ledger: dict | None) -> list[str]:
    """Why the ledger a run wrote does not hold (what ``Ledger.verify`` raised on in that run); ``[]`` if it holds."""
    if ledger is None:
        return ["the execution wrote no ledger"]
    if not ledger.get("claims"):
        return ["the ledger holds no claim"]
    return list(ledger.get("problems", []))


def setup(app):
    from myst_nb.sphinx_ import NbMetadataCollector

    taken: dict[str, dict] = {}

    def on_read(app, docname: str, source: list[str]) -> None:
        path = Path(app.env.doc2path(docname))
        if is_chapter(path):
            taken[path.stem] = {"docname": docname, "stamp": stamp(path), "read_at": time.time()}

    def executed_here(entry: dict) -> dict | None:
        """myst-nb's record of executing the chapter in this build, if it ran to the end."""
        data = NbMetadataCollector.get_exec_data(app.env, entry["docname"])
        if not data or not data["succeeded"] or data["method"] != "force" or data["mtime"] < entry["read_at"]:
            return None
        return data

    def on_parsed(app, doctree) -> None:
        name = Path(app.env.doc2path(app.env.docname)).stem
        data = executed_here(taken[name]) if name in taken else None
        if data is None:
            return
        times = _read_json(TIMES)
        if not isinstance(times, dict) or not isinstance(times.get("notebooks"), dict):
            times = {"notebooks": {}}
        # chapters an incremental build does not execute keep the time of the build that last did
        times["build"] = started
        times["notebooks"] = {k: v for k, v in times["notebooks"].items() if (NOTEBOOKS / f"{k}.md").exists()}
        times["notebooks"][name] = {
            "seconds": round(data["runtime"] or 0.0, 1),
            "mode": config.mode(),
            "build": started,
            # set by quiet_build.py when the machine was busy as the kernel started
            "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", "default"),
        }
        write_json(TIMES, times)

    def on_finished(app, exception) -> None:
        if not taken:
            return
        record = {
            name: entry
            for name, entry in load().items()
            if is_chapter(NOTEBOOKS / f"{name}.md") and (NOTEBOOKS / f"{name}.md").exists()
        }
        for name, entry in taken.items():
            notebook = NOTEBOOKS / f"{name}.md"
            record.pop(name, None)
            executed, ledger = executed_path(notebook), _ledger(ledger_path(notebook), entry["read_at"])
            if exception is None and executed_here(entry) and executed.exists() and stamp(notebook) == entry["stamp"]:
                record[name] = {"stamp": entry["stamp"], "executed": file_hash(executed), "ledger": ledger}
        write_json(RECORD, record)

    def on_outdated(app, env, added, changed, removed) -> list[str]:
        return to_reread(env.path2doc, added, changed, removed)

    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    app.connect("env-get-outdated", on_outdated)
    app.connect("source-read", on_read)
    app.connect("doctree-read", on_parsed)
    app.connect("build-finished", on_finished)
    return {"parallel_read_safe": False, "parallel_write_safe": True}


def to_reread(path2doc, added, changed, removed) -> list[str]:
    """What Sphinx should read again beyond the notebooks whose own source changed (``added``, ``changed``,
    ``removed``: docnames): the chapters whose recorded execution is not current (a change in the package, say),
    and then the appendix pages, which read what the chapters write. ``path2doc`` maps a file to its docname
    (``None`` outside the book)."""
    record, chapters, pages = load(), [], []
    for path in sorted(NOTEBOOKS.glob("*.md")):
        docname = path2doc(str(path))
        if docname is None or docname in added or docname in changed:
            continue
        if not is_chapter(path):
            pages.append(docname)
        elif stale(path, record):
            chapters.append(docname)
    rerun = chapters or any(str(d).startswith("notebooks/") for d in (*added, *changed, *removed))
    return chapters + (pages if rerun else [])


def _ledger(path: Path, since: float) -> dict | None:
    """The ledger at ``path`` if a run in this mode wrote it after ``since``, else ``None``."""
    if not path.exists() or path.stat().st_mtime < since:
        return None
    ledger = _read_json(path)
    return ledger if isinstance(ledger, dict) and ledger.get("mode") == config.mode() else None
