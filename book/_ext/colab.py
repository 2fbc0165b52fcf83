"""Colab copies of the chapters, and a Colab button on each chapter's page.

Colab opens only ``.ipynb`` files from a repository, and the chapters are MyST-markdown notebooks. So
``colab/<chapter>.ipynb`` holds each chapter as a notebook with no outputs and one cell in front that installs
``icl_utils`` from the repository when it runs on Colab (whose PyTorch, NumPy, Matplotlib and tqdm it keeps).
They are generated, never edited:

    python book/_ext/colab.py            # rewrite colab/ from notebooks/
    python book/_ext/colab.py --check    # exit 1 when colab/ is out of date (tests/test_project.py runs it)

As a Sphinx extension, it adds a Colab link to the launch menu of every page whose copy exists, built from
``repository`` in ``_config.yml`` like the Binder link.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "notebooks"
OUT = ROOT / "colab"
#: The chapters copied: every numbered chapter (the appendix's notebook reads the repository's results files).
CHAPTERS = "0[0-9]_*.md"
COLAB = "https://colab.research.google.com/github"

INSTALL = """# On Colab: install the book's package from its repository, and myst-nb for the chapter's glue (without its
# dependencies, Sphinx among them: glue needs only IPython, which Colab has, as it has PyTorch, NumPy and tqdm).
import sys

if "google.colab" in sys.modules:
    %pip install --quiet --no-deps "icl_utils @ git+{repository}@{branch}"
    %pip install --quiet --no-deps myst-nb==1.4.0"""


def _repository() -> tuple[str, str]:
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return config["url"].rstrip("/"), config.get("branch", "main")


def notebook_text(source: Path) -> str:
    """The Colab copy of the chapter ``source``, as the text of an ``.ipynb`` file."""
    import jupytext
    import nbformat

    repository, branch = _repository()
    nb = jupytext.read(source)
    install = nbformat.v4.new_code_cell(INSTALL.format(repository=repository, branch=branch))
    install.metadata = {"tags": ["remove-cell"]}
    nb.cells.insert(0, install)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"  # stable ids: the copy changes only when the chapter does
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    return nbformat.writes(nb) + "\n"


def stale() -> list[str]:
    """The copies in ``colab/`` that are missing, out of date, or left from a chapter that is gone."""
    sources = {p.stem: p for p in sorted(SOURCES.glob(CHAPTERS))}
    wrong = [
        f"colab/{s}.ipynb"
        for s, p in sources.items()
        if not (OUT / f"{s}.ipynb").exists() or (OUT / f"{s}.ipynb").read_text(encoding="utf-8") != notebook_text(p)
    ]
    wrong += [f"colab/{p.name} (no chapter)" for p in sorted(OUT.glob("*.ipynb")) if p.stem not in sources]
    return wrong


def write() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.ipynb"):
        old.unlink()
    for source in sorted(SOURCES.glob(CHAPTERS)):
        (OUT / f"{source.stem}.ipynb").write_text(notebook_text(source), encoding="utf-8")


def _add_button(app, pagename, templatename, context, doctree) -> None:
    copy = OUT / f"{Path(pagename).name}.ipynb"
    if not pagename.startswith("notebooks/") or not copy.exists():
        return
    menu = next((b for b in context.get("header_buttons", []) if b.get("label") == "launch-buttons"), None)
    if menu is None:
        return
    repository, branch = _repository()
    path = repository.removeprefix("https://github.com/")
    menu["buttons"].append(
        {
            "type": "link",
            "text": "Colab",
            "tooltip": "Launch on Colab",
            "icon": "_static/images/logo_colab.png",
            "url": f"{COLAB}/{path}/blob/{branch}/colab/{copy.name}",
        }
    )


def setup(app):
    # after sphinx-book-theme has built its launch menu (priority 501)
    app.connect("html-page-context", _add_button, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report copies that are out of date")
    if parser.parse_args().check:
        problems = stale()
        print("\n".join(problems) or "colab/ is up to date")
        sys.exit(1 if problems else 0)
    write()
