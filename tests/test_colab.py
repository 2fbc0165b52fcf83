"""The Colab copies (colab/*.ipynb, written by book/_ext/colab.py) read like the pages: no MyST role or directive
left in any markdown cell, every glued value filled in, references numbered as the built pages number them."""

from __future__ import annotations

import html
import importlib.util
import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from needs import need

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("0[0-9]_*.md"))
COPIES = sorted((ROOT / "colab").glob("*.ipynb"))
HTML = ROOT / "_build" / "html"

#: MyST markup that Colab would show as raw text: a role, a directive's fence, a label line, any glue.
MYST = re.compile(
    r"\{[A-Za-z][\w:.+-]*\}`"
    r"|^[ >]*(?:`{3,}|~{3,}|:{3,})\s*\{"
    r"|^[ >]*\([^()\s]+\)=\s*$"
    r"|\{glue",
    re.M,
)
#: A glue placeholder of a chapter: a role or a directive, with its key.
PLACEHOLDER = re.compile(
    r"\{glue(?::\w*)?\}`(?P<role>[^`:]+)[^`]*`|^(?:`{3,}|:{3,})\{glue(?::\w*)?\}\s+(?P<block>\S+)", re.M
)


def _colab():
    spec = importlib.util.spec_from_file_location("colab", ROOT / "book" / "_ext" / "colab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def myst_left(nb) -> list[str]:
    """Each piece of MyST markup in a notebook's markdown cells, as ``cell i: markup``."""
    return [
        f"cell {i}: {m.group(0).strip()}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for m in MYST.finditer(cell.source)
    ]


@pytest.mark.parametrize("copy", COPIES, ids=lambda p: p.stem)
def test_no_copy_contains_myst(copy):
    assert myst_left(nbformat.read(copy, as_version=4)) == []


def test_the_unconverted_chapter_fails_it():
    found = " ".join(myst_left(jupytext.read(CHAPTERS[0])))
    for markup in ("{glue:text}`", "{cite:t}`", ":::{", "```{", ")=", "{glue"):
        assert markup in found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_glue_placeholder_got_a_value(chapter):
    colab = _colab()
    copy = ROOT / "colab" / f"{chapter.stem}.ipynb"
    keys = {m["role"] or m["block"] for m in PLACEHOLDER.finditer(chapter.read_text(encoding="utf-8"))}
    values, _ = colab.stored_values(copy)
    assert keys and keys <= values.keys()
    shown = json.dumps(values)
    assert "<IPython.core.display" not in shown and "object at 0x" not in shown  # a repr is no value


def test_a_placeholder_without_a_value_is_refused():
    colab = _colab()
    ctx = colab.Context({"x": {"text/plain": "1.2345"}})
    assert colab.convert("{glue:text}`x:.2f`", ctx) == "1.23"
    with pytest.raises(colab.MissingGlue, match="no_such_value"):
        colab.convert("{glue:text}`no_such_value`", ctx)


def _fixed_book(monkeypatch, colab):
    T = colab.Target
    targets = {
        "ch-a": T("section", "1", "A chapter on $\\E x$"),
        "eq-a": T("equation", "1.2"),
        "fig-a": T("figure", "1.3"),
        "thm-a": T("theorem", "1.1", "Title"),
        "ex-a": T("exercise", "1.1"),
    }
    monkeypatch.setattr(colab, "book", lambda: (targets, {"book/execution": "Execution statistics"}))
    monkeypatch.setattr(colab, "citations", lambda: {"garg2022what": ("Garg et al.", "2022")})
    monkeypatch.setattr(colab, "macros", lambda: {"E": "\\mathbb{E}"})


def test_the_converter_on_a_small_myst_text(monkeypatch):
    colab = _colab()
    _fixed_book(monkeypatch, colab)
    myst = "\n".join(
        [
            "(sec-x)=",
            "% a comment",
            "As {cite:t}`garg2022what` show ({cite:p}`garg2022what`), $\\E y$ is {glue:text}`v:.1f` "
            "({numref}`fig-a`, {eq}`eq-a`, {prf:ref}`thm-a`, {ref}`ch-a`, {numref}`Chapter %s <ch-a>`, "
            "{math}`\\E z`, `{eq}` in code).",
            "",
            "$$",
            "x = \\E y",
            "$$ (eq-a)",
            "",
            ":::{prf:theorem} Title",
            ":label: thm-a",
            "Body {glue:md}`m`.",
            ":::",
            "```{exercise-start}",
            ":label: ex-a",
            "```",
            "Do it.",
            "```{exercise-end}",
            "```",
            "```{solution-start} ex-a",
            ":class: dropdown",
            "```",
            "Done.",
            "```{solution-end}",
            "```",
            "```python",
            "{not_a_role}`x` (code)",
            "```",
        ]
    )
    ctx = colab.Context({"v": {"text/plain": "0.25"}, "m": {"text/markdown": "*k* = {numref}`fig-a`"}})
    assert colab.convert(myst, ctx) == "\n".join(
        [
            "As Garg et al. (2022) show ((Garg et al., 2022)), $\\mathbb{E} y$ is 0.2 "
            "(Fig. 1.3, (1.2), Theorem 1.1, A chapter on $\\mathbb{E} x$, Chapter 1, "
            "$\\mathbb{E} z$, `{eq}` in code).",
            "",
            "$$",
            "x = \\mathbb{E} y",
            "\\tag{1.2}",
            "$$",
            "",
            "> **Theorem 1.1** (Title)",
            ">",
            "> Body *k* = Fig. 1.3.",
            "",
            "**Exercise 1.1**",
            "",
            "Do it.",
            "",
            "**Solution to Exercise 1.1**",
            "",
            "Done.",
            "",
            "```python",
            "{not_a_role}`x` (code)",
            "```",
        ]
    )
    assert ctx.used == {"v": {"text/plain": "0.25"}, "m": {"text/markdown": "*k* = {numref}`fig-a`"}}


@pytest.mark.parametrize(
    "myst", ["{unknown}`x`", "```{unknown}\n```", ":::{admonition} T\n:unknown: 1\n:::", "{numref}`fig-nowhere`"]
)
def test_what_the_converter_does_not_know_raises(monkeypatch, myst):
    colab = _colab()
    _fixed_book(monkeypatch, colab)
    with pytest.raises(ValueError):
        colab.convert(myst, colab.Context({}))


def _copies(colab, tmp_path, monkeypatch):
    """colab/ rewritten under tmp_path from the committed copies' own values."""
    monkeypatch.setattr(colab, "OUT", tmp_path)
    for chapter in CHAPTERS:
        copy = ROOT / "colab" / f"{chapter.stem}.ipynb"
        (tmp_path / copy.name).write_text(colab.notebook_text(chapter, *colab.stored_values(copy)), encoding="utf-8")


def test_the_check_takes_another_builds_digits_but_not_a_changed_text(tmp_path, monkeypatch):
    colab = _colab()
    _copies(colab, tmp_path, monkeypatch)
    assert colab.stale() == []
    chapter = CHAPTERS[0]
    copy = tmp_path / f"{chapter.stem}.ipynb"
    values, _ = colab.stored_values(copy)
    key = next(k for k, v in values.items() if "text/plain" in v)
    values[key]["text/plain"] += "1"  # another machine's last digit, throughout the copy
    copy.write_text(colab.notebook_text(chapter, values, "another build"), encoding="utf-8")
    assert colab.stale() == []
    # ... unless the copy says it came from the build's current execution, whose value differs
    monkeypatch.setattr(colab, "_current_execution", lambda source: "another build")
    monkeypatch.setattr(colab, "build_values", lambda source: (colab.stored_values(ROOT / "colab" / copy.name)[0], ""))
    assert colab.stale() == [f"colab/{copy.name} (values differ from its build's: {key})"]
    # a changed sentence, a value missing from the copy
    monkeypatch.undo()
    monkeypatch.setattr(colab, "OUT", tmp_path)
    copy.write_text(copy.read_text().replace("Bayes", "Bayes'", 1), encoding="utf-8")
    nb = json.loads((tmp_path / f"{CHAPTERS[1].stem}.ipynb").read_text())
    nb["metadata"]["icl_book"]["glue"].popitem()
    (tmp_path / f"{CHAPTERS[1].stem}.ipynb").write_text(json.dumps(nb))
    found = colab.stale()
    assert found[0] == f"colab/{copy.name}" and found[1].startswith(f"colab/{CHAPTERS[1].stem}.ipynb (no glued")


LINK = re.compile(r'<a class="reference internal" href="[^"#]*#([^"]+)"[^>]*>(.*?)</a>', re.S)


def links(pages: list[Path]) -> list[tuple[str, str]]:
    """Each internal link of the built pages that points at an anchor: (label, the text the page shows)."""
    found = []
    for page in pages:
        for m in re.finditer(
            r'<a class="reference internal" href="[^"#]*#([^"]+)"[^>]*>(.*?)</a>', page.read_text(), re.S
        ):
            found.append((m[1].removeprefix("equation-"), html.unescape(re.sub(r"<[^>]+>", "", m[2])).strip()))
    return found


def misnumbered(targets, shown: list[tuple[str, str]]) -> list[str]:
    """The links whose number differs from the converter's: for a figure, equation, theorem or exercise its text;
    for a chapter, the texts that name it by number ("Chapter 5")."""
    wrong = []
    for label, text in shown:
        t = targets.get(label)
        if t is None or (t.kind == "section" and not re.match(r"(?i)(chapter|section) ", text)):
            continue
        if text not in {t.text(), f"Chapter {t.number}", f"chapter {t.number}"}:
            wrong.append(f"{label}: the page shows {text!r}, the copy {t.text()!r}")
    return wrong


def test_references_are_numbered_as_the_built_pages_number_them():
    colab = _colab()
    pages = sorted((HTML / "notebooks").glob("*.html"))
    need("a built book (jupyter-book build .)", bool(pages))
    targets, _ = colab.book()
    built = min(p.stat().st_mtime for p in pages)
    # a chapter edited since the build may number differently: its own labels are compared only if it was not
    current = {}
    for chapter in CHAPTERS:
        if chapter.stat().st_mtime < built:
            docname = str(chapter.relative_to(ROOT).with_suffix(""))
            current.update(colab.scan(docname, colab._cells(chapter))[0])
    shown = [(label, text) for label, text in links(pages) if label in current]
    need("a build newer than some chapter", bool(shown))
    assert misnumbered(targets, shown) == []
    # the control: numbers one off
    shifted = {k: t._replace(number=t.number + "0") for k, t in targets.items()}
    assert len(misnumbered(shifted, shown)) > len(shown) / 2
