"""Each chapter's code cells as JSON in ``.gpu/cells/``, for the device machine, which has no jupytext (its
stand-in in ``shims/jupytext.py`` reads these files). Run here before a device call; see ``go.sh``."""

import json
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".gpu" / "cells"


def write_cells(out: Path = OUT) -> dict[str, int]:
    """Write each chapter's code cells to ``out``; the number of cells per chapter."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for notebook in sorted((ROOT / "notebooks").glob("*.md")):
        cells = [c.source for c in jupytext.read(notebook).cells if c.cell_type == "code"]
        (out / f"{notebook.stem}.json").write_text(json.dumps(cells))
        counts[notebook.stem] = len(cells)
    return counts


if __name__ == "__main__":
    for stem, count in write_cells().items():
        print(stem, count, "code cells")
