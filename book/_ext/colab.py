"""Colab copies of the chapters, and a Colab button on each chapter's page.

Colab opens only ``.ipynb`` files from a repository, and the chapters are MyST-markdown notebooks. So
``colab/<chapter>.ipynb`` holds each chapter as a notebook with no outputs and one cell in front that installs
``icl_utils`` from the repository when it runs on Colab (whose PyTorch, NumPy, Matplotlib and tqdm it keeps).

Colab renders CommonMark with ``$`` maths, not MyST, so every markdown cell is converted to read as the page does:
glued values filled in from the book's executed build, in the format the page shows them; citations as "Garg et
al. (2022)"; references numbered as on the page ("Fig. 1.3", "Theorem 2.1", "(1.2)", "Chapter 5"), with each
labelled equation tagged with its number and each figure's caption after the cell that draws it; theorems,
exercises and admonitions as blockquotes or bold headings; the book's maths macros expanded. The converter knows
the roles and directives the chapters use (``ROLES``, ``DIRECTIVES``); any other raises, so that none reaches a copy
as raw markup.

They are generated, never edited:

    python book/_ext/colab.py            # rewrite colab/ from notebooks/ and the latest build's glued values
    python book/_ext/colab.py --check    # exit 1 when colab/ is out of date (tests/test_project.py runs it)

A copy keeps, in its metadata, the glued values it shows and the hash of the executed notebook they came from.
The check regenerates each copy from its chapter with those values and compares the text exactly; where the build's
execution of the chapter is current and is the one the copy was made from, the values must also be the build's.
So a copy made from another machine's build (whose last digits may differ: CI's build is another machine's) is
checked for everything but its digits, and a new glued value, a changed sentence or a changed reference still fails.

As a Sphinx extension, it adds a Colab link to the launch menu of every page whose copy exists, built from
``repository`` in ``_config.yml`` like the Binder link.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "notebooks"
OUT = ROOT / "colab"
#: The chapters copied: every numbered chapter (the appendix's notebook reads the repository's results files).
CHAPTERS = "0[0-9]_*.md"
COLAB = "https://colab.research.google.com/github"
#: The key of a copy's metadata that holds its glued values (``glue``) and their execution (``executed``).
META = "icl_book"

INSTALL = """# On Colab: install the book's package from its repository, and myst-nb for the chapter's glue (without its
# dependencies, Sphinx among them: glue needs only IPython, which Colab has, as it has PyTorch, NumPy and tqdm).
import sys

if "google.colab" in sys.modules:
    %pip install --quiet --no-deps "icl_utils @ git+{repository}@{branch}"
    %pip install --quiet --no-deps myst-nb==1.4.0"""

NOTE = """*The Colab copy of chapter {number} of the book, generated from `notebooks/{name}`. The numbers in its text
are those of the book's quick build; running the notebook recomputes them in its outputs.*"""


def _repository() -> tuple[str, str]:
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return config["url"].rstrip("/"), config.get("branch", "main")


def _sibling(name: str):
    """Another module of book/_ext, loaded by its path: this file also runs as a script and from the tests."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# --- MyST's block structure: fenced code, directives and text ----------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[^}\s]+)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_LABEL_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
_COMMENT_LINE = re.compile(r"^%")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.*?)\s*$")
_EQ_LABEL = re.compile(r"\$\$\s*\((?P<label>[^()\s]+)\)\s*$")


class Directive(NamedTuple):
    name: str
    arg: str
    options: dict[str, str]
    body: str


def parse(text: str) -> list[str | Directive | tuple[str, ...]]:
    """``text`` as a list of blocks in order: a line of text (``str``), a fenced code block (a tuple of its lines,
    fences included) or a ``Directive``. A fence with no closing fence runs to the end, as in CommonMark."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            blocks.append(lines[i])
            i += 1
            continue
        mark = fence["fence"]
        end = next(
            (
                j
                for j in range(i + 1, len(lines))
                if re.fullmatch(rf" {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}\s*", lines[j])
            ),
            len(lines),
        )
        directive = _DIRECTIVE.match(fence["info"].strip())
        if directive is None:
            blocks.append(tuple(lines[i : end + 1]))
        else:
            body = lines[i + 1 : end]
            options: dict[str, str] = {}
            if body and body[0].strip() == "---":  # options as YAML
                import yaml

                close = body.index("---", 1)
                options = {k: str(v) for k, v in (yaml.safe_load("\n".join(body[1:close])) or {}).items()}
                body = body[close + 1 :]
            while body and _OPTION.match(body[0]):
                option = _OPTION.match(body[0])
                options[option["key"]] = option["value"].strip()
                body = body[1:]
            blocks.append(Directive(directive["name"], directive["arg"].strip(), options, "\n".join(body).strip("\n")))
        i = end + 1
    return blocks


# --- What the pages number and name ------------------------------------------------------------------------------


class Target(NamedTuple):
    kind: str  # "section", "figure", "equation", "exercise" or a sphinx-proof kind ("theorem", "lemma", ...)
    number: str  # as the page writes it ("2.3"); "" when unnumbered
    title: str = ""  # a section's heading, a theorem's title (MyST)

    def text(self) -> str:
        """What ``{numref}`` and ``{prf:ref}`` write for it when given no text."""
        if self.kind == "equation":
            return f"({self.number})"
        name = {"figure": "Fig.", "section": "Section"}.get(self.kind, self.kind.capitalize())
        return f"{name} {self.number}".strip()


_PRF = ("theorem", "lemma", "proposition", "definition", "corollary", "conjecture", "example", "remark",
        "assumption", "axiom", "criterion", "observation", "property", "algorithm")  # fmt: skip


@cache
def _chapter_numbers() -> dict[str, int]:
    """The docname of each numbered chapter ("notebooks/00_icl_setting") and its number, from _toc.yml."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    numbers: dict[str, int] = {}
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []) if part.get("numbered") else []:
            numbers[chapter["file"]] = len(numbers) + 1
    return numbers


def _cells(path: Path) -> list[tuple[str, str, dict]]:
    """A page's cells as (type, source, metadata): a notebook's through jupytext, another page as one cell."""
    if path.parent == SOURCES:
        import jupytext

        return [(c.cell_type, c.source, dict(c.metadata)) for c in jupytext.read(path).cells]
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text[text.index("\n---", 3) + 4 :]
    return [("markdown", text, {})]


def _figure_of(metadata: dict) -> dict | None:
    figure = (metadata.get("mystnb") or {}).get("figure")
    return figure if isinstance(figure, dict) else None


def scan(docname: str, cells: list[tuple[str, str, dict]]) -> tuple[dict[str, Target], str]:
    """The targets one page defines, numbered as Sphinx numbers them (each kind counted per chapter, in order),
    and the page's title."""
    chapter = _chapter_numbers().get(docname)
    counts: dict[str, int] = {}
    sections: list[int] = []
    targets: dict[str, Target] = {}
    title = ""

    def number(kind: str, options: dict | None = None) -> str:
        if options is not None and "nonumber" in options:
            return ""
        counts[kind] = counts.get(kind, 0) + 1
        return f"{chapter}.{counts[kind]}" if chapter else str(counts[kind])

    def blocks(text: str) -> None:
        nonlocal sections, title
        label = None
        for block in parse(text):
            if isinstance(block, Directive):
                kind, opts = block.name.removeprefix("prf:"), block.options
                if block.name.startswith("prf:") and kind in _PRF:
                    n = number(kind, opts)
                    if "label" in opts:
                        targets[opts["label"]] = Target(kind, n, block.arg)
                elif kind in ("exercise", "exercise-start"):
                    n = number("exercise", opts)
                    if "label" in opts:
                        targets[opts["label"]] = Target("exercise", n, block.arg)
                elif kind in ("figure", "glue:figure"):
                    n = number("figure")
                    if "name" in opts:
                        targets[opts["name"]] = Target("figure", n)
                elif kind == "math" and "label" in opts:
                    targets[opts["label"]] = Target("equation", number("equation"))
                blocks(block.body)
                continue
            if not isinstance(block, str):
                continue
            if match := _LABEL_LINE.match(block):
                label = match["label"]
                continue
            if match := _EQ_LABEL.search(block):
                targets[match["label"]] = Target("equation", number("equation"))
            if match := _HEADING.match(block):
                depth = len(match["hashes"])
                sections = (sections + [0] * depth)[:depth]
                sections[-1] += 1
                title = title or match["title"]
                if label:
                    n = ".".join(map(str, [chapter, *sections[1:]])) if chapter else ""
                    targets[label] = Target("section", n, match["title"])
            if block.strip():
                label = None

    for kind, source, metadata in cells:
        if kind == "markdown":
            blocks(source)
        elif kind == "code" and (figure := _figure_of(metadata)) is not None:
            n = number("figure")
            if "name" in figure:
                targets[figure["name"]] = Target("figure", n)
    return targets, title


def _pages() -> list[Path]:
    return sorted(SOURCES.glob("*.md")) + sorted((ROOT / "book").glob("*.md"))


@cache
def _book(stamps: tuple) -> tuple[dict[str, Target], dict[str, str]]:
    targets: dict[str, Target] = {}
    titles: dict[str, str] = {}
    for path, _ in stamps:
        docname = str(Path(path).relative_to(ROOT).with_suffix(""))
        found, titles[docname] = scan(docname, _cells(Path(path)))
        for label in found.keys() & targets.keys():
            raise ValueError(f"the label {label!r} is defined twice (again in {docname})")
        targets.update(found)
    return targets, titles


def book() -> tuple[dict[str, Target], dict[str, str]]:
    """Every target of the book's pages, by label, and every page's title, by docname."""
    return _book(tuple((str(p), p.stat().st_mtime_ns) for p in _pages()))


@cache
def citations() -> dict[str, tuple[str, str]]:
    """Each bibliography key's author and year as the pages write them ("Zhang et al.", "2024a")."""
    import pybtex.database
    import pybtex.plugin

    labels = _sibling("book_labels")  # the pages' labels: the same author-year, the same letters
    entries = pybtex.database.parse_file(str(ROOT / "book" / "references.bib")).entries
    ordered = pybtex.plugin.find_plugin("pybtex.style.sorting", "author_year_title")().sort(list(entries.values()))
    pairs = [labels.author_year(entry) for entry in ordered]
    return {
        entry.key: (authors, year + letter)
        for entry, (authors, year), letter in zip(ordered, pairs, labels.suffixes(pairs), strict=True)
    }


@cache
def macros() -> dict[str, str]:
    """The book's MathJax macros (_config.yml), which Colab does not know: expanded in the copies."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    found = config["sphinx"]["config"].get("mathjax3_config", {}).get("tex", {}).get("macros", {})
    for name, value in found.items():
        if not isinstance(value, str):
            raise ValueError(f"_config.yml: the macro {name!r} takes arguments, which the Colab copies cannot expand")
    return found


# --- The converter ---------------------------------------------------------------------------------------------


class MissingGlue(ValueError):
    """A glued value the copy needs and its source of values lacks."""


class Context:
    """What converting one chapter's markdown needs: its glued values (``{key: {mime: value}}``), where it lives
    (for relative paths), and the glued values it used."""

    def __init__(self, values: dict[str, dict[str, str]], source: Path = SOURCES / "00_icl_setting.md") -> None:
        if not isinstance(values, dict):
            raise TypeError(f"values: expected a dict, got {type(values).__name__}")
        self.values, self.source = values, source
        self.used: dict[str, dict[str, str]] = {}

    def glued(self, key: str, mime: str) -> str:
        data = self.values.get(key)
        if data is None or mime not in data:
            raise MissingGlue(f"no glued {mime} for {key!r} in {self.source.name}'s values")
        self.used.setdefault(key, {})[mime] = data[mime]
        return data[mime]

    def target(self, label: str) -> Target:
        targets, _ = book()
        if label not in targets:
            raise ValueError(f"{self.source.name}: no page defines the label {label!r}")
        return targets[label]


_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def _explicit(content: str) -> tuple[str | None, str]:
    match = _EXPLICIT.match(content)
    return (match["text"], match["target"].strip()) if match and match["text"] else (None, content.strip())


def _glue_text(ctx: Context, content: str) -> str:
    from myst_nb.core.variables import format_plain_text

    key, fmt = content.rsplit(":", 1) if ":" in content else (content, "s")  # as myst-nb splits it
    return format_plain_text(ctx.glued(key.strip(), "text/plain"), fmt)


def _glue_md(ctx: Context, content: str) -> str:
    key = content.rsplit(":", 1)[0] if ":" in content else content
    return convert(ctx.glued(key.strip(), "text/markdown"), ctx).strip()


def _glue_any(ctx: Context, content: str) -> str:
    key = content.strip()
    if "text/markdown" in ctx.values.get(key, {}):
        return _glue_md(ctx, key)
    return _glue_text(ctx, key)


def _cite(textual: bool):
    def role(ctx: Context, content: str) -> str:
        known, out = citations(), []
        for key in (k.strip() for k in content.split(",")):
            if key not in known:
                raise ValueError(f"{ctx.source.name}: {key!r} is not in book/references.bib")
            authors, year = known[key]
            out.append(f"{authors} ({year})" if textual else f"{authors}, {year}")
        return ", ".join(out) if textual else f"({'; '.join(out)})"

    return role


def _eq(ctx: Context, content: str) -> str:
    text, label = _explicit(content)
    return inline(text, ctx) if text else ctx.target(label).text()


def _numref(ctx: Context, content: str) -> str:
    text, label = _explicit(content)
    target = ctx.target(label)
    if text is None:
        return target.text()
    return inline(text.replace("%s", target.number).replace("{number}", target.number), ctx)


def _ref(ctx: Context, content: str) -> str:
    text, label = _explicit(content)
    if text is not None:
        return inline(text, ctx)
    target = ctx.target(label)
    return inline(target.title, ctx) if target.kind == "section" else target.text()


def _prf_ref(ctx: Context, content: str) -> str:
    text, label = _explicit(content)
    return inline(text, ctx) if text is not None else ctx.target(label).text()


def _doc(ctx: Context, content: str) -> str:
    text, path = _explicit(content)
    if text is not None:
        return inline(text, ctx)
    docname = str((ctx.source.parent / path).resolve().relative_to(ROOT))
    _, titles = book()
    if docname not in titles:
        raise ValueError(f"{ctx.source.name}: {{doc}} names {path!r}, which is not a page of the book")
    return inline(titles[docname], ctx)


def _python(parentheses: bool):
    def role(ctx: Context, content: str) -> str:
        text, target = _explicit(content)
        if text is None:
            text = target.lstrip("~").rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip("!")
            text += "()" if parentheses else ""
        return f"`{text}`"

    return role


#: Each MyST role the chapters use, and what it becomes: ``role(context, content) -> markdown``.
ROLES = {
    "glue": _glue_any,
    "glue:": _glue_any,
    "glue:any": _glue_any,
    "glue:text": _glue_text,
    "glue:md": _glue_md,
    "cite:t": _cite(textual=True),
    "cite:p": _cite(textual=False),
    "eq": _eq,
    "numref": _numref,
    "ref": _ref,
    "prf:ref": _prf_ref,
    "doc": _doc,
    "py:func": _python(parentheses=True),
    "py:meth": _python(parentheses=True),
    "py:class": _python(parentheses=False),
    "py:mod": _python(parentheses=False),
    "py:obj": _python(parentheses=False),
    "math": lambda ctx, content: f"${_expand_macros(content)}$",
}

_INLINE = re.compile(
    r"\{(?P<role>[A-Za-z][\w:.+-]*)\}`(?P<content>[^`]*)`"  # a role
    r"|(?P<code>(?P<ticks>`+)[\s\S]*?(?<!`)(?P=ticks)(?!`))"  # a code span, left as it is
)


def _expand_macros(text: str) -> str:
    table = macros()
    if not table:
        return text
    names = "|".join(sorted(map(re.escape, table), key=len, reverse=True))
    return re.sub(rf"\\({names})(?![A-Za-z])", lambda m: table[m[1]], text)


def inline(text: str, ctx: Context) -> str:
    """``text`` with each role replaced (``ROLES``) and the maths macros expanded outside code spans."""
    out, at = [], 0
    for match in _INLINE.finditer(text):
        out.append(_expand_macros(text[at : match.start()]))
        if match["code"]:
            out.append(match["code"])
        elif match["role"] in ROLES:
            out.append(ROLES[match["role"]](ctx, match["content"]))
        else:
            raise ValueError(f"{ctx.source.name}: the MyST role {{{match['role']}}} has no conversion (colab.ROLES)")
        at = match.end()
    out.append(_expand_macros(text[at:]))
    return "".join(out)


def _quote(head: str, body: str) -> str:
    lines = [head, "", *body.splitlines()] if body.strip() else [head]
    return "\n".join(f"> {line}".rstrip() for line in lines)


def _titled(head: str, title: str, ctx: Context) -> str:
    return f"**{head}** ({inline(title, ctx)})" if title else f"**{head}**"


def _admonition(ctx: Context, d: Directive) -> str:
    if not d.arg:
        raise ValueError(f"{ctx.source.name}: an admonition needs a title")
    return _quote(f"**{inline(d.arg, ctx)}**", convert(d.body, ctx))


def _named_admonition(name: str):
    def directive(ctx: Context, d: Directive) -> str:
        body = "\n".join(filter(None, [d.arg, d.body]))
        return _quote(f"**{name}**", convert(body, ctx))

    return directive


def _prf(ctx: Context, d: Directive) -> str:
    kind = d.name.removeprefix("prf:")
    target = ctx.target(d.options["label"]) if "label" in d.options else Target(kind, "")
    return _quote(_titled(target.text(), d.arg, ctx), convert(d.body, ctx))


def _proof(ctx: Context, d: Directive) -> str:
    return _quote("**Proof.**", convert(d.body, ctx))


def _exercise_head(ctx: Context, d: Directive) -> str:
    target = ctx.target(d.options["label"]) if "label" in d.options else Target("exercise", "")
    return _titled(target.text(), d.arg, ctx)


def _solution_head(ctx: Context, d: Directive) -> str:
    return f"**Solution to {ctx.target(d.arg).text()}**"


def _gate(head):
    """The opening or closing directive of a gated exercise or solution: its heading, or nothing."""

    def directive(ctx: Context, d: Directive) -> str:
        if d.body.strip():
            raise ValueError(f"{ctx.source.name}: {{{d.name}}} takes no content")
        return head(ctx, d) if head else ""

    return directive


def _glue_block(ctx: Context, d: Directive) -> str:
    return _glue_any(ctx, d.arg) if d.name != "glue:md" else _glue_md(ctx, d.arg)


def _glue_figure(ctx: Context, d: Directive) -> str:
    head = ctx.target(d.options["name"]).text() if "name" in d.options else "Figure"
    ctx.glued(d.arg, "text/plain")  # the figure itself is drawn when the notebook runs
    caption = convert(d.body, ctx).strip()
    return f"*{head}, drawn by the code above when it runs{': ' + caption if caption else ''}*"


def _figure(ctx: Context, d: Directive) -> str:
    head = ctx.target(d.options["name"]).text() if "name" in d.options else "Figure"
    return f"**{head}** (the figure `{d.arg}` of the book) {convert(d.body, ctx).strip()}".rstrip()


def _math(ctx: Context, d: Directive) -> str:
    tag = f"\n\\tag{{{ctx.target(d.options['label']).number}}}" if "label" in d.options else ""
    return f"$$\n{_expand_macros(d.body)}{tag}\n$$"


def _literalinclude(ctx: Context, d: Directive) -> str:
    path = (ctx.source.parent / d.arg).resolve()
    text = path.read_text(encoding="utf-8")
    if "pyobject" in d.options:
        nodes = ast.parse(text).body
        node = None
        for name in d.options["pyobject"].split("."):
            node = next((n for n in nodes if getattr(n, "name", None) == name), None)
            if node is None:
                raise ValueError(f"{ctx.source.name}: {d.arg} defines no {d.options['pyobject']}")
            nodes = getattr(node, "body", [])
        text = "\n".join(text.splitlines()[node.lineno - 1 : node.end_lineno])
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{d.options.get('language', '')}\n{text.rstrip()}\n{ticks}"


_ADMONITIONS = ("note", "tip", "warning", "important", "hint", "caution", "attention", "danger", "error", "seealso")

#: Each MyST directive the chapters use: what it becomes (``directive(context, d) -> markdown``) and the options it
#: may take (any other raises, as an unknown directive does).
DIRECTIVES = {
    "admonition": (_admonition, {"class", "name"}),
    **{
        name: (_named_admonition("See also" if name == "seealso" else name.capitalize()), {"class", "name"})
        for name in _ADMONITIONS
    },
    "dropdown": (_admonition, {"class", "name", "open"}),
    **{f"prf:{kind}": (_prf, {"label", "class", "nonumber"}) for kind in _PRF},
    "prf:proof": (_proof, {"class"}),
    "exercise": (lambda ctx, d: _quote(_exercise_head(ctx, d), convert(d.body, ctx)), {"label", "class", "nonumber"}),
    "solution": (lambda ctx, d: _quote(_solution_head(ctx, d), convert(d.body, ctx)), {"label", "class"}),
    "exercise-start": (_gate(_exercise_head), {"label", "class", "nonumber"}),
    "exercise-end": (_gate(None), set()),
    "solution-start": (_gate(_solution_head), {"label", "class"}),
    "solution-end": (_gate(None), set()),
    "glue": (_glue_block, set()),
    "glue:": (_glue_block, set()),
    "glue:any": (_glue_block, set()),
    "glue:md": (_glue_block, {"format"}),
    "glue:figure": (_glue_figure, {"name", "alt", "figwidth", "figclass", "align"}),
    "figure": (_figure, {"name", "alt", "width", "height", "align", "class"}),
    "math": (_math, {"label"}),
    "literalinclude": (_literalinclude, {"pyobject", "language"}),
}


def convert(text: str, ctx: Context) -> str:
    """One markdown cell's MyST as CommonMark with ``$`` maths (the module's docstring says how)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(inline("\n".join(paragraph), ctx))
            paragraph.clear()

    for block in parse(text):
        if isinstance(block, Directive):
            flush()
            if block.name not in DIRECTIVES:
                raise ValueError(
                    f"{ctx.source.name}: the MyST directive {{{block.name}}} has no conversion (colab.DIRECTIVES)"
                )
            render, allowed = DIRECTIVES[block.name]
            if unknown := set(block.options) - allowed:
                raise ValueError(
                    f"{ctx.source.name}: {{{block.name}}} has options {sorted(unknown)} with no conversion"
                )
            out.append(f"\n{render(ctx, block)}\n")  # a block of its own, apart from what is around it
        elif isinstance(block, tuple):
            flush()
            out.append("\n".join(block))
        elif _LABEL_LINE.match(block) or _COMMENT_LINE.match(block):
            continue
        elif match := _EQ_LABEL.search(block):
            tag = "\\tag{" + ctx.target(match["label"]).number + "}"
            head = block[: match.start()].rstrip()
            paragraph.extend([f"{head} {tag}", "$$"] if head else [tag, "$$"])
        else:
            paragraph.append(block)
    flush()
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


# --- The copies --------------------------------------------------------------------------------------------------


def build_values(source: Path) -> tuple[dict[str, dict[str, str]], str]:
    """The glued values of the latest build's execution of ``source``, and that executed notebook's hash."""
    executed = _sibling("execution_stamp").executed_path(source)  # myst-nb writes the .glue.json beside it
    glue = executed.with_suffix(".glue.json")
    if not executed.exists() or not glue.exists():
        raise MissingGlue(f"no executed build of {source.name} ({glue.relative_to(ROOT)}): build the book first")
    data = json.loads(glue.read_text(encoding="utf-8"))
    values = {
        key: {mime: v for mime, v in output.get("data", {}).items() if isinstance(v, str)}
        for key, output in data.items()
    }
    return values, hashlib.sha256(executed.read_bytes()).hexdigest()


def notebook_text(source: Path, values: dict[str, dict[str, str]] | None = None, executed: str = "") -> str:
    """The Colab copy of the chapter ``source``, as the text of an ``.ipynb`` file, with the glued ``values``
    (``{key: {mime: text}}``; the latest build's when None) that came from the executed notebook whose hash is
    ``executed``."""
    import jupytext
    import nbformat

    if not isinstance(source, Path):
        raise TypeError(f"source: expected a Path, got {type(source).__name__}")
    if values is None:
        values, executed = build_values(source)
    repository, branch = _repository()
    ctx = Context(values, source)
    nb = jupytext.read(source)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = convert(cell.source, ctx)
            if not cell.source.strip():
                continue
        cells.append(cell)
        figure = _figure_of(cell.metadata) if cell.cell_type == "code" else None
        if figure is not None:
            head = ctx.target(figure["name"]).text() if "name" in figure else "Figure"
            cells.append(nbformat.v4.new_markdown_cell(f"**{head}** {inline(figure.get('caption', ''), ctx)}".rstrip()))
    install = nbformat.v4.new_code_cell(INSTALL.format(repository=repository, branch=branch))
    install.metadata = {"tags": ["remove-cell"]}
    docname = str(source.relative_to(ROOT).with_suffix(""))
    note = nbformat.v4.new_markdown_cell(NOTE.format(number=_chapter_numbers().get(docname, "?"), name=source.name))
    nb.cells = [install, note, *cells]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"  # stable ids: the copy changes only when the chapter does
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
        META: {"executed": executed, "glue": {k: ctx.used[k] for k in sorted(ctx.used)}},
    }
    return nbformat.writes(nb) + "\n"


def stored_values(copy: Path) -> tuple[dict[str, dict[str, str]], str]:
    """The glued values a copy shows and the hash of the execution they came from."""
    meta = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {}).get(META, {})
    return meta.get("glue", {}), meta.get("executed", "")


def _current_execution(source: Path) -> str:
    """The hash of the build's execution of ``source`` if that execution is current (execution_stamp), else ""."""
    stamp = _sibling("execution_stamp")
    if stamp.stale(source):
        return ""
    return stamp.load()[source.stem]["executed"]


def stale() -> list[str]:
    """The copies in ``colab/`` that are missing, out of date, or left from a chapter that is gone, each with why
    where it exists."""
    sources = {p.stem: p for p in sorted(SOURCES.glob(CHAPTERS))}
    wrong = []
    for stem, source in sources.items():
        copy = OUT / f"{stem}.ipynb"
        if not copy.exists():
            wrong.append(f"colab/{copy.name}")
            continue
        values, executed = stored_values(copy)
        try:
            expected = notebook_text(source, values, executed)
        except MissingGlue as exc:
            wrong.append(f"colab/{copy.name} ({exc})")
            continue
        if copy.read_text(encoding="utf-8") != expected:
            wrong.append(f"colab/{copy.name}")
        elif executed and executed == _current_execution(source):
            built, _ = build_values(source)
            differ = sorted(k for k, v in values.items() if any(built.get(k, {}).get(m) != t for m, t in v.items()))
            if differ:
                wrong.append(f"colab/{copy.name} (values differ from its build's: {', '.join(differ)})")
    wrong += [f"colab/{p.name} (no chapter)" for p in sorted(OUT.glob("*.ipynb")) if p.stem not in sources]
    return wrong


def write() -> None:
    """Rewrite ``colab/`` from the chapters and the latest build's glued values."""
    texts = {source.stem: notebook_text(source) for source in sorted(SOURCES.glob(CHAPTERS))}  # all, or none
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.ipynb"):
        old.unlink()
    for stem, text in texts.items():
        (OUT / f"{stem}.ipynb").write_text(text, encoding="utf-8")


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
