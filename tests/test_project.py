"""The project files a reader and a packager expect, and the book's rules for prose that a text check can hold:
one version, a link for every reference, Colab copies in step with the chapters, numbered chapters, chapter
numbers never typed, every glued number defined."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import icl_utils

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
PAGES = sorted((ROOT / "book").rglob("*.md"))


def _colab():
    spec = importlib.util.spec_from_file_location("colab", ROOT / "book" / "_ext" / "colab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text: str) -> str:
    """The markdown of a MyST notebook or page without its code cells and code blocks."""
    return re.sub(r"^(```+|~~~+)[^\n]*\n.*?^\1[ \t]*$", "", text, flags=re.S | re.M)


def typed_chapter_numbers(text: str) -> list[str]:
    """Places where prose names a chapter by a typed number ("chapter 3", "Chapters 2 and 4")."""
    return [m.strip(" ,") for m in re.findall(r"\b[Cc]hapters? \d[\d, and]*", prose(text))]


def undefined_glue(text: str) -> list[str]:
    """Keys that the prose pastes ({glue:text}`key:.2f`, {glue}`key`, {glue:md}`key`) but no code cell names.

    A fast check before the build, which fails on a missing key too: a key counts as glued when it is a string in a
    code cell (``glue("key", ...)``, or a loop over ``(value, "key")`` pairs)."""
    pasted = {m.split(":")[0] for m in re.findall(r"\{glue(?::\w+)?\}`([^`]+)`", text)}
    code = "\n".join(re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, flags=re.S | re.M))
    glued = set(re.findall(r"""["']([\w.-]+)["']""", code))
    # keys made by f-strings (glue(f"ch5_cfg_{name}", ...) in a loop): each {...} stands for a word
    patterns = [
        re.sub(r"\\\{[^}]*\\\}", r"[\\w.-]+", re.escape(f))
        for f in re.findall(r"""\bf["']([\w.{}-]*\{[^"']*)["']""", code)
    ]
    return sorted(k for k in pasted - glued if not any(re.fullmatch(p, k) for p in patterns))


def test_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == icl_utils.__version__
    assert f"## [{icl_utils.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_project_files_and_metadata():
    for name in ("LICENSE", "CITATION.cff", "CONTRIBUTING.md", "CHANGELOG.md", "README.md"):
        assert (ROOT / name).stat().st_size > 200, name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["authors"] and project["classifiers"] and project["urls"]
    assert {"book", "test", "lab"} <= set(project["optional-dependencies"])


def test_every_reference_has_an_identifier():
    entries = re.split(r"\n(?=@)", (ROOT / "book" / "references.bib").read_text().strip())
    missing = [e.split(",")[0] for e in entries if not re.search(r"^\s*(eprint|doi|url)\s*=", e, re.M)]
    assert len(entries) > 10 and missing == []


def test_chapters_are_numbered_and_the_appendix_is_not():
    parts = yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]
    assert [p.get("numbered", False) for p in parts] == [True] * (len(parts) - 1) + [False]


@pytest.mark.parametrize("path", CHAPTERS + PAGES, ids=lambda p: p.name)
def test_prose_names_chapters_by_reference_and_glues_what_it_pastes(path: Path):
    text = path.read_text(encoding="utf-8")
    assert typed_chapter_numbers(text) == []
    assert undefined_glue(text) == []


def test_the_prose_checks_can_fail():
    text = 'As chapter 3 shows, {glue:text}`ch9_x:.2f` and {glue}`ch9_y`.\n```{code-cell}\nglue("ch9_y", 1)\n```\n'
    assert "ch9_x" in text  # named in the prose only, which does not count
    assert typed_chapter_numbers(text) == ["chapter 3"]
    assert undefined_glue(text) == ["ch9_x"]
    looped = '{glue:text}`ch9_cfg_n` {glue:text}`ch9_n`\n```{code-cell}\nglue(f"ch9_cfg_{k}", v)\n```\n'
    assert undefined_glue(looped) == ["ch9_n"]  # an f-string's key stands for its own pattern only
    assert typed_chapter_numbers("{numref}`chapter %s <ch-x>`") == []


def test_colab_copies_match_the_chapters():
    colab = _colab()
    assert colab.stale() == [], "run: python book/_ext/colab.py"
    copies = sorted((ROOT / "colab").glob("*.ipynb"))
    assert [p.stem for p in copies] == [p.stem for p in CHAPTERS if p.stem[:2].isdigit()]


def test_a_colab_copy_installs_the_package_then_runs_the_chapter(tmp_path, monkeypatch):
    import jupytext
    import nbformat

    colab, chapter = _colab(), CHAPTERS[0]
    stored = {p.stem: colab.stored_values(ROOT / "colab" / f"{p.stem}.ipynb") for p in CHAPTERS if p.stem[:2].isdigit()}
    copy = nbformat.reads(colab.notebook_text(chapter, *stored[chapter.stem]), as_version=4)
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert "google.colab" in copy.cells[0].source and f"git+{repository}" in copy.cells[0].source
    code = [c.source for c in copy.cells[1:] if c.cell_type == "code"]
    assert code == [c.source for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    # the check can fail: an edited copy, a missing one and one without a chapter are each reported
    monkeypatch.setattr(colab, "OUT", tmp_path)
    for source in CHAPTERS:
        if source.stem in stored:  # the committed copies' values: no build needed
            (tmp_path / f"{source.stem}.ipynb").write_text(colab.notebook_text(source, *stored[source.stem]))
    assert colab.stale() == []
    first = sorted(tmp_path.glob("*.ipynb"))
    first[0].write_text(first[0].read_text() + " ")
    first[1].unlink()
    (tmp_path / "99_gone.ipynb").write_text("{}")
    assert colab.stale() == [f"colab/{first[0].name}", f"colab/{first[1].name}", "colab/99_gone.ipynb (no chapter)"]


def test_ci_runs_exactly_the_readmes_commands():
    block = re.search(r"```bash\n(python3\.11 -m venv.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = block.strip().splitlines()
    run = (ROOT / ".ci" / "run").read_text()
    assert len(commands) == 2 and all(f"\n{c}\n" in run for c in commands)
    assert "jupytext-config set-default-viewer" in commands[0] and "lab]" in commands[0]
    # the workflow's test job installs what the README's first command installs, before running pytest
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    install = re.search(r'pip install -e "(\.\[[^\]]+\])"( && jupytext-config[^\n]*)?\n\s*pytest', workflow)
    assert install and install.group(1) in commands[0] and install.group(2).strip(" &") in commands[0]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_lines_fit_the_page(path: Path):
    # 88 characters fit the text column at the code cells' 12 px (book/_static/book.css); the browser test measures it
    import jupytext

    long = [
        line
        for cell in jupytext.read(path).cells
        if cell.cell_type == "code"
        for line in cell.source.split("\n")
        if len(line) > 88
    ]
    assert long == []


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_the_code_is_linted_and_formatted():
    """ruff's lint rules and formatter, as pyproject.toml configures them, on every Python file of the project."""
    lint, form = _ruff("check", "."), _ruff("format", "--check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert form.returncode == 0, f"run `ruff format .`:\n{form.stdout}{form.stderr}"


def test_the_ruff_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = {'a':1}\n")
    config = ("--config", str(ROOT / "pyproject.toml"))
    lint, form = _ruff("check", *config, str(bad)), _ruff("format", "--check", *config, str(bad))
    assert lint.returncode == 1 and "F401" in lint.stdout
    assert form.returncode == 1 and "would be reformatted" in form.stdout


def test_api_pages_list_only_members_that_exist():
    """A name in an API page's ``:members:`` list that the module no longer has is a warning that fails the build
    only after every chapter has executed; this finds it in a second."""
    import importlib

    missing = []
    for page in sorted((ROOT / "book" / "api").glob("*.md")):
        for module, names in re.findall(
            r"automodule:: ([\w.]+)\n\s+:members: ([^\n]+(?:\n\s{6,}[^\n]+)*)", page.read_text()
        ):
            mod = importlib.import_module(module)
            missing += [
                f"{page.name}: {module}.{n}" for n in re.split(r"[,\s]+", names.strip()) if n and not hasattr(mod, n)
            ]
    assert not missing, missing
