"""The rendered book in a real browser: every page of ``_build/html``, served on localhost, in headless Chromium.

pytest-playwright drives the system's Chromium (or Chrome); no browser is downloaded. For each page the test
checks what a reader would meet:

* every image loaded, and no figure is shrunk below its drawn size (figures are retina PNGs drawn at the size they
  are shown, so a shrunk one has smaller text than the house style's 9 points);
* the math was typeset by MathJax (served from ``book/_static/mathjax``, so no network), no raw TeX is left (nor
  a ``$...$`` pair, which glued Markdown pasted as CommonMark keeps), and every display equation fits its column;
* no console error, uncaught exception, failed request or HTTP error;
* no cell output on stderr (a warning, a progress bar), none longer than :data:`MAX_OUTPUT_LINES` lines, no code
  cell, output or code block that scrolls sideways, and a page no taller than :data:`MAX_PAGE_HEIGHT` pixels;
* every numbered figure is referenced by its number from the page's text;
* every internal link points at a file and an anchor that exist.

For every chapter page (``notebooks/NN_*.html``) it measures the page's composition, the shares of its article's
height taken by the code shown (hidden inputs excluded), printed outputs, figures and the rest (prose and maths),
and the median length of the code cells that draw no figure; a chapter of :data:`MIGRATED` must read like the paper.

It saves a full-page screenshot of each page to ``_build/screenshots/``, every page's height to
``_build/screenshots/heights.json`` and every chapter's composition to ``_build/screenshots/composition.json``
(``ICL_BUILD_DIR`` names another build folder than ``_build``, for a build made with ``--path-output``). Outside
CI the tests skip when the book has not been built or no Chromium is installed; in CI (``CI=true``) they fail
instead. The last tests break a page on purpose to show that each check can fail.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import statistics
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from needs import need

ROOT = Path(__file__).resolve().parents[1]
#: The build folder: ``_build``, or the one ``ICL_BUILD_DIR`` names (``jupyter-book build --path-output X`` builds
#: into ``X/_build``).
BUILD = Path(os.environ.get("ICL_BUILD_DIR") or ROOT / "_build")
HTML = BUILD / "html"
SCREENSHOTS = BUILD / "screenshots"
#: The chapters migrated to a claims ledger (the rule the "What reproduces" page uses): they read like the paper,
#: prose and figures with little code shown.
MIGRATED = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.md") if "Ledger(" in p.read_text()}
#: The most of a migrated chapter's height its shown code may take (the claims ledger: the paper, not a notebook).
MAX_CODE_SHARE = 0.20
#: The most lines the median shown code cell that draws no figure may have in a migrated chapter (the claims ledger:
#: a short call into the package, not an algorithm on the page).
MAX_MEDIAN_CODE_LINES = 10
#: The longest cell output a page may show, in lines: a longer one is a log, not a result.
MAX_OUTPUT_LINES = 50
#: The tallest a page may be at the test's 1280-pixel-wide window: room for a long chapter's prose, figures and
#: short outputs, not for a log.
MAX_PAGE_HEIGHT = 30_000

REPORT = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const math = [...document.querySelectorAll(".math")];
  const text = document.body.cloneNode(true);
  // code and signatures show TeX as written; typeset maths is gone from the text, so a dollar pair left is raw
  text.querySelectorAll("pre, code, script, style, .highlight, .sig, mjx-container").forEach((n) => n.remove());
  const outputs = [...document.querySelectorAll(".cell_output")];
  const scrolls = (e) => e.scrollWidth > e.clientWidth + 1;
  const tex = new Map((window.MathJax && MathJax.startup && MathJax.startup.document
    ? MathJax.startup.document.getMathItemsWithin(document.body) : []).map((i) => [i.typesetRoot, i.math.trim()]));
  const links = [...document.querySelectorAll("a[href]")];
  return {
    images: [...document.images].map((i) => ({src: i.getAttribute("src"), natural: i.naturalWidth,
                                             drawn: parseFloat(i.style.width) || +i.getAttribute("width") ||
                                             i.naturalWidth,
                                             shown: i.getBoundingClientRect().width,
                                             figure: !!i.closest(".cell_output")})),
    math: math.length,
    untypeset: math.filter((m) => !m.querySelector("mjx-container")).length,
    raw_tex: text.textContent.match(/\\$\\$|\\\\\\(|\\\\\\[|\\$\\\\[A-Za-z]|\\$[^\\s$][^$\\n]{0,80}?\\$/g) || [],
    stderr: outputs.filter((o) => o.querySelector(".stderr")).length,
    outputs: outputs.length,
    output_lines: outputs.map((o) => o.innerText.split("\\n").length),
    // code cells, outputs and code blocks alike; a folded (hide-input) cell has no width until opened: its lines
    // are held to 88 characters in the source
    wide: [...document.querySelectorAll("pre")].filter((p) => !p.closest("details:not([open])")).filter(scrolls)
      .map((p) => p.innerText.split("\\n").reduce((a, b) => (b.length > a.length ? b : a))),
    // a display equation that scrolls shows a reader part of a formula: its box is the column less the equation's
    // number, and MathJax's container scrolls (or the .math block clips) what is wider
    wide_math: [...document.querySelectorAll('mjx-container[display="true"]')].map((c) => {
      const block = c.closest(".math") || c;
      const drawn = c.querySelector("mjx-math");
      return {tex: tex.get(c) || block.textContent, column: Math.min(c.clientWidth, block.clientWidth),
              width: Math.max(c.scrollWidth, drawn ? drawn.getBoundingClientRect().width : 0)};
    }).filter((m) => m.width > m.column + 1),
    // a numbered figure is referenced by its number from the page's text: a link to it outside the figure (its own
    // caption's permalink does not count) that shows the number
    unreferenced: [...document.querySelectorAll("figure[id]")].map((f) => {
      const number = ((f.querySelector(".caption-number") || {}).textContent || "").match(/\\d+(\\.\\d+)*/);
      const cited = !!number && links.some((a) => a.hash === `#${f.id}` && a.pathname === location.pathname &&
                                                  !f.contains(a) && a.innerText.includes(number[0]));
      return {id: f.id, number: number && number[0], cited,
              caption: (f.querySelector("figcaption") || f).innerText.trim()};
    }).filter((f) => f.number && !f.cited),
    height: document.documentElement.scrollHeight,
  };
}"""


COMPOSITION = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  // shown expanded by default: not in a closed <details> (a hide-input toggle) nor hidden by CSS
  const shown = (e) => !e.closest("details:not([open])") && e.checkVisibility({visibilityProperty: true});
  const tall = (e) => (shown(e) ? e.getBoundingClientRect().height : 0);
  const figures = (e) => [...(e.tagName === "IMG" ? [e] : e.querySelectorAll("img"))].filter(shown);
  const inCell = new Set();
  const cells = [...article.querySelectorAll(".cell")].map((cell) => {
    const input = cell.querySelector(".cell_input");
    let printed = 0, figure = 0;
    for (const output of cell.querySelectorAll(".cell_output")) {
      for (const part of output.children) {
        const imgs = figures(part);
        imgs.forEach((i) => inCell.add(i));
        if (imgs.length) { figure += tall(part); } else { printed += tall(part); }
      }
    }
    const code = input && shown(input) ? input.querySelector("pre") : null;
    return {input: !!input, shown: !!code, code: code ? tall(input) : 0,
            lines: code ? code.innerText.replace(/\\n+$/, "").split("\\n").length : 0, printed, figure};
  });
  return {article: article.getBoundingClientRect().height, page: document.documentElement.scrollHeight, cells,
          figures: figures(article).filter((i) => !inCell.has(i)).reduce((a, i) => a + tall(i), 0)};
}"""


def composition(measured: dict) -> dict:
    """A chapter's composition from what :data:`COMPOSITION` measured: the shares of the article's height taken by
    the code shown, printed outputs, figures and the rest (prose and maths), and the median number of lines of the
    shown code cells that draw no figure (``None`` when there is none)."""
    cells, height = measured["cells"], measured["article"]
    px = {
        "code": sum(c["code"] for c in cells),
        "printed": sum(c["printed"] for c in cells),
        "figures": sum(c["figure"] for c in cells) + measured["figures"],
    }
    px["rest"] = max(height - sum(px.values()), 0.0)
    lines = [c["lines"] for c in cells if c["shown"] and not c["figure"]]
    return {
        **{k: round(v / height, 4) if height else 0.0 for k, v in px.items()},
        "median_code_lines": statistics.median(lines) if lines else None,
        "article_px": round(height),
        "page_px": measured["page"],
        **{f"{k}_px": round(v) for k, v in px.items()},
        "code_cells_shown": sum(c["shown"] for c in cells),
        "code_cells_hidden": sum(c["input"] and not c["shown"] for c in cells),
        "code_cells_without_figure": len(lines),
        "cells_with_figure": sum(bool(c["figure"]) for c in cells),
    }


def composition_line(name: str, c: dict) -> str:
    """One line of a chapter's composition, as ``pytest -s`` prints it."""
    median = "-" if c["median_code_lines"] is None else f"{c['median_code_lines']:g}"
    return (
        f"{name}: code {c['code']:.1%}, printed {c['printed']:.1%}, figures {c['figures']:.1%}, "
        f"rest {c['rest']:.1%} of {c['article_px']} px; median {median} code lines over "
        f"{c['code_cells_without_figure']} shown cells without a figure ({c['code_cells_shown']} shown, "
        f"{c['code_cells_hidden']} hidden)"
    )


def reads_like_the_paper(c: dict, name: str) -> list[str]:
    """What keeps a migrated chapter from reading like the paper, as sentences; empty when it does."""
    out = []
    if c["code"] > MAX_CODE_SHARE:
        out.append(f"{name}: shown code takes {c['code']:.1%} of the page (at most {MAX_CODE_SHARE:.0%})")
    if c["median_code_lines"] is not None and c["median_code_lines"] > MAX_MEDIAN_CODE_LINES:
        out.append(
            f"{name}: the median shown code cell without a figure has {c['median_code_lines']:g} lines "
            f"(at most {MAX_MEDIAN_CODE_LINES})"
        )
    return out


def _need_build() -> None:
    need("the built book (run: jupyter-book build .)", (HTML / "index.html").exists())


def _pages() -> list[Path]:
    """The book's pages: the chapters and appendices in ``notebooks/``, the pages in ``book/`` and its folders
    (the API reference, one page per module)."""
    if not HTML.exists():
        return []
    return sorted(
        p
        for p in HTML.rglob("*.html")
        if p.relative_to(HTML).parts[0] in ("notebooks", "book") and not p.name.startswith(".")
    )


def _rel(page: Path) -> str:
    """A page's path in the built site: ``notebooks/00_icl_setting.html``, ``book/api/claims.html``."""
    return page.relative_to(HTML).as_posix()


def _chapters() -> list[Path]:
    """The chapter pages: the notebooks whose names start with two digits."""
    return [p for p in _pages() if p.parent.name == "notebooks" and re.match(r"\d\d_", p.name)]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def site() -> str:
    """The built book served on localhost: the address its pages are read from."""
    _need_build()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def visit(page, url: str) -> dict:
    """Open ``url`` in the playwright ``page`` and return what :data:`REPORT` finds, with every error seen."""
    errors: list[str] = []
    # the browser asks every site for /favicon.ico, which the book does not have: not a page's error
    page.on(
        "console",
        lambda m: (
            errors.append(f"console {m.type}: {m.text} ({m.location.get('url')})")
            if m.type == "error" and not m.location.get("url", "").endswith("/favicon.ico")
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"failed to load {r.url}: {r.failure}"))
    page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load")
    report = page.evaluate(REPORT)
    report["errors"] = errors
    return report


def problems(report: dict, name: str) -> list[str]:
    """Everything wrong in a page's report, as sentences; empty when the page is fine."""
    out = [f"{name}: image {i['src']} did not load" for i in report["images"] if i["natural"] == 0]
    # myst-nb writes a retina PNG's drawn size (half its pixels) into its style; without one, the pixels are
    out += [
        f"{name}: figure {i['src']} shown at {i['shown']:.0f} px, less than its drawn {i['drawn']:.0f} px "
        "(its text is smaller than drawn)"
        for i in report["images"]
        if i["figure"] and i["natural"] and i["shown"] < 0.95 * i["drawn"]
    ]
    if report["untypeset"]:
        out.append(f"{name}: {report['untypeset']} of {report['math']} math elements not typeset by MathJax")
    if report["raw_tex"]:
        out.append(f"{name}: raw TeX left in the text: {', '.join(report['raw_tex'][:5])}")
    if report["stderr"]:
        out.append(f"{name}: {report['stderr']} cell outputs on stderr (a warning or a progress bar)")
    out += [
        f"{name}: a cell output of {n} lines (at most {MAX_OUTPUT_LINES})"
        for n in report["output_lines"]
        if n > MAX_OUTPUT_LINES
    ]
    out += [f"{name}: scrolls sideways: {line[:80]!r}" for line in report["wide"]]
    out += [
        f"{name}: a display equation {m['width']:.0f} px wide in a {m['column']:.0f} px column: {m['tex'][:120]!r}"
        for m in report["wide_math"]
    ]
    out += [
        f"{name}: Fig. {f['number']} (#{f['id']}) is never referenced by its number in the text: {f['caption'][:60]!r}"
        for f in report["unreferenced"]
    ]
    if report["height"] > MAX_PAGE_HEIGHT and report["outputs"]:  # a page of cells; the API reference is long by design
        out.append(f"{name}: {report['height']} px tall (at most {MAX_PAGE_HEIGHT})")
    return out + [f"{name}: {e}" for e in report["errors"]]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "script", "link"):
                self.links.append(a[key])


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def broken_links(page: Path) -> list[str]:
    """Internal links of ``page`` whose file, or whose anchor in that file, does not exist."""
    bad, anchors = [], {}
    for link in _parse(page).links:
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//") or not (parts.path or parts.fragment):
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists():
            bad.append(f"{page.name}: {link} (no such file)")
        elif parts.fragment and target.suffix == ".html":
            if target not in anchors:
                anchors[target] = _parse(target).ids
            if unquote(parts.fragment) not in anchors[target]:
                bad.append(f"{page.name}: {link} (no such anchor)")
    return bad


def _url(site: str, page: Path) -> str:
    return f"{site}/{_rel(page)}"


#: What COMPOSITION measured on each chapter page that test_page_renders_in_a_browser visited, so that
#: test_chapter_composition does not load the page again (a chapter page takes 3-8 s in the browser)
_MEASURED: dict[Path, dict] = {}


@pytest.mark.parametrize("path", _pages(), ids=_rel)
def test_page_renders_in_a_browser(page, site: str, path: Path) -> None:
    report = visit(page, _url(site, path))
    if path in _chapters():
        _MEASURED[path] = page.evaluate(COMPOSITION)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{_rel(path).removesuffix('.html').replace('/', '-')}.png", full_page=True)
    heights = SCREENSHOTS / "heights.json"
    known = json.loads(heights.read_text()) if heights.exists() else {}
    heights.write_text(json.dumps({**known, _rel(path): report["height"]}, indent=1))
    assert problems(report, path.name) == []
    assert broken_links(path) == []


@pytest.mark.parametrize("path", _chapters(), ids=lambda p: p.stem)
def test_chapter_composition(page, site: str, path: Path) -> None:
    """Measure a chapter's composition, save it to ``composition.json`` and print it; a chapter of
    :data:`MIGRATED` must read like the paper."""
    if path not in _MEASURED:
        visit(page, _url(site, path))  # waits for MathJax, whose typeset maths changes the heights
    found = composition(_MEASURED.pop(path, None) or page.evaluate(COMPOSITION))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    saved = SCREENSHOTS / "composition.json"
    known = json.loads(saved.read_text()) if saved.exists() else {}
    saved.write_text(json.dumps({**known, path.stem: found}, indent=1))
    print(f"\n{composition_line(path.stem, found)}")
    if path.stem in MIGRATED:
        unlike = reads_like_the_paper(found, path.stem)
        assert unlike == [], "\n".join(unlike)


def test_every_chapter_is_checked() -> None:
    _need_build()
    chapters = {p.stem for p in (ROOT / "notebooks").glob("*.md")}
    assert chapters <= {p.stem for p in _pages()}


def _broken_copy(tmp_name: str, edit) -> Path:
    """A copy of a chapter page with math, figures and outputs, changed by ``edit``, next to the original."""
    _need_build()
    for original in _pages():
        text = original.read_text(encoding="utf-8")
        if original.parent.name == "notebooks" and 'src="../_images/' in text and 'class="math' in text:
            copy = original.with_name(tmp_name)
            copy.write_text(edit(text), encoding="utf-8")
            return copy
    pytest.fail("no chapter page with math, figures and outputs")


@pytest.fixture
def broken(request):
    made: list[Path] = []

    def make(edit) -> Path:
        made.append(_broken_copy(f".broken-{request.node.name}.html", edit))
        return made[-1]

    yield make
    for p in made:
        p.unlink(missing_ok=True)


def test_a_missing_figure_is_caught(page, site: str, broken) -> None:
    copy = broken(
        lambda t: re.sub(r'(<img[^>]*src=")\.\./_images/[^"]*(")', r"\1../_images/no-such-figure.png\2", t, count=1)
    )
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("no-such-figure.png" in p and "did not load" in p for p in found), found
    assert any("HTTP 404" in p for p in found), found


def test_math_without_mathjax_is_caught(page, site: str, broken) -> None:
    copy = broken(lambda t: re.sub(r'<script[^>]*src="[^"]*tex-chtml[^"]*"[^>]*></script>', "", t))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("not typeset" in p for p in found), found


def test_maths_left_raw_is_caught(page, site: str, broken) -> None:
    # glued Markdown pasted as CommonMark (an inline {glue:md} without :myst) keeps its dollars
    copy = broken(lambda t: t.replace("</main>", "<p>After 2d examples its error divided by $d$ is 0.1.</p></main>", 1))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("raw TeX left in the text: $d$" in p for p in found), found
    # an inline formula broken across lines where one starts with "+" (a list item to Markdown): its "$" is left
    # unclosed, inside a folded solution
    # (over 80 characters from its "$" to the next, which a pair of dollars around a formula does not reach)
    broken_formula = (
        "<details><p>The loss $\\E|f - A h|^2 = \\E|f|^2 - 2\\operatorname{tr}(A \\Sigma_{\\mu,\\circ})</p>"
        "<ul><li><p>\\operatorname{tr}(A \\Sigma_{\\mu,\\mu} A^\\top)$ is minimized</p></li></ul></details>"
    )
    copy = broken(lambda t: t.replace("</main>", broken_formula + "</main>", 1))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("raw TeX left in the text: $\\E" in p for p in found), found


def test_stderr_a_long_log_and_a_tall_page_are_caught(page, site: str, broken) -> None:
    log = "\n".join(f"step {i}" for i in range(MAX_OUTPUT_LINES + 10))
    bad = (
        f'<div class="cell_output docutils container"><div class="output stderr highlight-myst-ansi notranslate">'
        f'<div class="highlight"><pre>RuntimeWarning: x</pre></div></div></div>'
        f'<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi notranslate">'
        f'<div class="highlight"><pre>{log}</pre></div></div></div>'
        f'<div style="height: {MAX_PAGE_HEIGHT}px"></div>'
    )
    copy = broken(lambda t: t.replace("</main>", bad + "</main>", 1))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("on stderr" in p for p in found), found
    assert any(f"output of {MAX_OUTPUT_LINES + 10} lines" in p for p in found), found
    assert any("px tall" in p for p in found), found


def test_a_shrunk_figure_and_a_wide_line_are_caught(page, site: str, broken) -> None:
    wide = '<div class="cell"><div class="highlight"><pre>' + "x = 1  # " + "y" * 300 + "</pre></div></div>"
    shrink = "<style>div.cell_output img { max-width: 40px !important; }</style>"
    copy = broken(lambda t: t.replace("</head>", shrink + "</head>", 1).replace("</main>", wide + "</main>", 1))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("less than its drawn" in p for p in found), found
    assert any("scrolls sideways" in p for p in found), found


#: An equation wider than any column: a sum of 60 terms.
WIDE_TEX = " + ".join(f"x_{{{i}}}" for i in range(60))


def test_a_wide_equation_and_a_wide_code_block_are_caught(page, site: str, broken) -> None:
    equation = f'<div class="math notranslate nohighlight">\\[{WIDE_TEX}\\]</div>'
    block = f'<div class="highlight-bash"><div class="highlight"><pre>pip install {"y" * 300}</pre></div></div>'
    copy = broken(lambda t: t.replace("</main>", equation + block + "</main>", 1))
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any("a display equation" in p and WIDE_TEX[:40] in p for p in found), found
    assert any("scrolls sideways: 'pip install yyy" in p for p in found), found


def test_a_figure_the_text_does_not_reference_by_number_is_caught(page, site: str, broken) -> None:
    def unreference(text: str) -> str:
        """The page with its first numbered figure referenced by number only from its own caption, once from the
        text by a link without its number, and otherwise not at all (its caption's permalink stays)."""
        start = re.search(r'<figure[^>]* id="([^"]+)"', text)
        figure, caption = start.group(1), text.index("</figcaption>", start.end())
        number = re.compile(r'<span class="caption-number">([^<]*)</span>').search(text, start.end()).group(1)
        link = f'<a class="reference internal" href="#{figure}">'
        numref = re.compile(rf'{re.escape(link)}<span class="std std-numref">([^<]*)</span></a>')
        assert numref.search(text), f"the page does not reference #{figure}: no control"
        text = f"{text[:caption]}{link}{number}</a>{text[caption:]}"
        return numref.sub(r"\1", numref.sub(f"{link}the figure</a>", text, 1))

    copy = broken(unreference)
    figure = re.search(r'<figure[^>]* id="([^"]+)"', copy.read_text(encoding="utf-8")).group(1)
    found = problems(visit(page, _url(site, copy)), copy.name)
    assert any(f"(#{figure}) is never referenced" in p for p in found), found


def test_a_broken_internal_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    (tmp_path / "other.html").write_text('<html><body><h1 id="there">x</h1></body></html>')
    page.write_text('<a href="other.html#there">ok</a><a href="other.html#nowhere">a</a><a href="gone.html">b</a>')
    assert broken_links(page) == [
        "page.html: other.html#nowhere (no such anchor)",
        "page.html: gone.html (no such file)",
    ]


def _cell(lines: int, output: str = "", hidden: bool = False) -> dict:
    return {
        "input": True,
        "shown": not hidden,
        "code": 0 if hidden else 20.0 * lines,
        "lines": 0 if hidden else lines,
        "printed": 60.0 if output == "printed" else 0.0,
        "figure": 200.0 if output == "figure" else 0.0,
    }


def test_composition_arithmetic() -> None:
    cells = [_cell(3, "printed"), _cell(5), _cell(9), _cell(30, hidden=True), _cell(1, "figure")]
    found = composition({"article": 1000.0, "page": 1200, "cells": cells, "figures": 100.0})
    assert (found["code"], found["printed"], found["figures"], found["rest"]) == (0.36, 0.06, 0.3, 0.28)
    # the hidden cell's 30 lines and the figure's 1 line are not counted
    assert found["median_code_lines"] == 5
    assert (found["code_cells_shown"], found["code_cells_hidden"], found["cells_with_figure"]) == (4, 1, 1)
    assert composition({"article": 500.0, "page": 600, "cells": [], "figures": 0.0})["median_code_lines"] is None


def test_a_chapter_that_reads_like_a_notebook_is_caught() -> None:
    code_heavy = composition(
        {"article": 1000.0, "page": 1000, "figures": 0.0, "cells": [_cell(12), _cell(12), _cell(4, "figure")]}
    )
    found = reads_like_the_paper(code_heavy, "ch.html")
    assert any("shown code takes 56.0% of the page (at most 20%)" in p for p in found), found
    assert any("has 12 lines (at most 10)" in p for p in found), found
    paper = composition({"article": 1000.0, "page": 1000, "figures": 300.0, "cells": [_cell(4), _cell(2, "figure")]})
    assert reads_like_the_paper(paper, "ch.html") == []


#: A one-pixel transparent PNG.
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def test_composition_is_measured_in_the_browser(page) -> None:
    """:data:`COMPOSITION` on a page of known layout: a hide-input cell and a figure's code are not counted as shown
    code without a figure, and a figure is not a printed output."""

    def cell(lines: int, output: str = "", hidden: bool = False) -> str:
        code = '<div class="cell_input"><pre>' + "\n".join(f"x = {i}" for i in range(lines)) + "</pre></div>"
        if hidden:
            code = f"<details class='hide above-input'><summary>Show code cell source</summary>{code}</details>"
        out = {
            "printed": '<div class="cell_output"><div class="output stream"><pre>a\nb\nc</pre></div></div>',
            "figure": f'<div class="cell_output"><img src="{PIXEL}" style="display:block;height:200px"></div>',
        }
        return f'<div class="cell">{code}{out.get(output, "")}</div>'

    body = (
        cell(3, "printed")
        + cell(5)
        + cell(9)
        + cell(30, hidden=True)
        + cell(1, "figure")
        + f'<figure><img src="{PIXEL}" style="display:block;height:100px"></figure>'
        + '<p style="height:260px">prose</p>'
    )
    page.set_content(
        "<style>* {margin: 0; padding: 0; border: 0} pre, summary {font: 16px/20px monospace}</style>"
        f'<main><article class="bd-article">{body}</article></main>'
    )
    found = composition(page.evaluate(COMPOSITION))
    assert found["article_px"] == 1000, found
    assert (found["code"], found["printed"], found["figures"], found["rest"]) == (0.36, 0.06, 0.3, 0.28), found
    assert found["median_code_lines"] == 5, found
    assert (found["code_cells_shown"], found["code_cells_hidden"], found["cells_with_figure"]) == (4, 1, 1), found
