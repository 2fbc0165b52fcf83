"""The rendered book in a real browser: every page of ``_build/html`` opened in headless Chromium.

For each page the test checks that every image loaded (non-zero natural size), that the math was typeset
(MathJax output present for every math element, and no raw TeX delimiters left in the text), that no script
error or failed resource load happened, and that every internal link points at a file and an anchor that exist.
It saves a screenshot of each page under ``_build/screenshots/``.

A page is checked through a copy of it, next to it, with a small probe script added: the probe records errors
from the start, waits for MathJax to finish, and writes what it found into the page, which Chromium's
``--dump-dom`` prints. Outside CI the tests skip when the book has not been built or Chromium is missing; in CI
(``CI=true``) they fail instead. The last tests break a page on purpose to show that the checks can fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

PROBE = """<script>
window.__icl = {errors: []};
window.addEventListener("error", (e) => {
  const t = e.target;
  window.__icl.errors.push(t && t !== window ? "failed to load " + (t.src || t.href) : "script error: " + e.message);
}, true);
window.addEventListener("unhandledrejection", (e) => window.__icl.errors.push("unhandled rejection: " + e.reason));
const _consoleError = console.error;
console.error = (...args) => { window.__icl.errors.push("console.error: " + args.join(" ")); _consoleError(...args); };
window.addEventListener("load", async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const math = [...document.querySelectorAll(".math")];
  const text = document.body.cloneNode(true);
  text.querySelectorAll("pre, code, script, style, .highlight, mjx-container").forEach((n) => n.remove());
  const report = {
    images: [...document.images].map((i) => ({src: i.getAttribute("src"), width: i.naturalWidth})),
    math: math.length,
    untypeset: math.filter((m) => !m.querySelector("mjx-container")).length,
    raw_tex: (text.textContent.match(/\\$\\$|\\\\\\(|\\\\\\[/g) || []).length,
    errors: window.__icl.errors,
  };
  const out = document.createElement("pre");
  out.id = "icl-probe";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>"""


def _need_browser_and_build() -> None:
    missing = []
    if not (HTML / "index.html").exists():
        missing.append("the built book (run: jupyter-book build .)")
    if CHROMIUM is None:
        missing.append("Chromium (Debian: apt-get install chromium)")
    if missing:
        message = "browser test needs " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _pages() -> list[Path]:
    if not HTML.exists():
        return []
    return sorted(p for p in HTML.rglob("*.html") if p.parent.name in ("notebooks", "book"))


def _chromium(*args: str, timeout: float = 120) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def probe(page: Path, html: str | None = None) -> dict:
    """Open ``page`` (or ``html`` served as if it were that page) with the probe and return its report."""
    source = page.read_text(encoding="utf-8") if html is None else html
    head = re.search(r"<head[^>]*>", source)
    if head is None:
        raise ValueError(f"{page} has no <head>")
    copy = page.with_name(f".probe-{page.name}")
    copy.write_text(source[: head.end()] + PROBE + source[head.end() :], encoding="utf-8")
    try:
        dom = _chromium("--virtual-time-budget=20000", "--dump-dom", copy.as_uri())
    finally:
        copy.unlink()
    found = re.search(r'<pre id="icl-probe"[^>]*>(.*?)</pre>', dom, re.S)
    if found is None:
        raise AssertionError(f"{page.name}: the probe never reported (the page did not finish loading)")
    return json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def problems(report: dict, name: str) -> list[str]:
    """Everything wrong in a probe report, as sentences; empty when the page is fine."""
    out = [f"{name}: image {i['src']} did not load" for i in report["images"] if i["width"] == 0]
    if report["untypeset"]:
        out.append(f"{name}: {report['untypeset']} of {report['math']} math elements not typeset by MathJax")
    if report["raw_tex"]:
        out.append(f"{name}: {report['raw_tex']} raw TeX delimiters left in the text")
    out += [f"{name}: {e}" for e in report["errors"]]
    return out


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


@pytest.mark.parametrize("page", _pages(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_page_renders_in_a_browser(page: Path) -> None:
    _need_browser_and_build()
    assert problems(probe(page), page.name) == []
    assert broken_links(page) == []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{page.parent.name}-{page.stem}.png"
    _chromium("--window-size=1280,5000", "--virtual-time-budget=20000", f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 10_000


def test_every_chapter_is_checked() -> None:
    _need_browser_and_build()
    chapters = {p.stem for p in (ROOT / "notebooks").glob("*.md")}
    assert chapters <= {p.stem for p in _pages()}


def _chapter_with_math_and_figures() -> Path:
    _need_browser_and_build()
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        if page.parent.name == "notebooks" and "<img" in text and 'class="math' in text:
            return page
    pytest.fail("no chapter page with both math and figures")


def test_a_missing_figure_is_caught() -> None:
    page = _chapter_with_math_and_figures()
    html = re.sub(r'(<img[^>]*src=")[^"]*(")', r"\1../_images/no-such-figure.png\2", page.read_text(), count=1)
    found = problems(probe(page, html), page.name)
    assert any("no-such-figure.png" in p for p in found), found


def test_math_without_mathjax_is_caught() -> None:
    page = _chapter_with_math_and_figures()
    html = re.sub(r'<script[^>]*src="[^"]*tex-chtml[^"]*"[^>]*></script>', "", page.read_text())
    assert html != page.read_text(encoding="utf-8"), "the page does not load MathJax from tex-chtml.js"
    found = problems(probe(page, html), page.name)
    assert any("not typeset" in p for p in found), found


def test_a_broken_internal_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    (tmp_path / "other.html").write_text('<html><body><h1 id="there">x</h1></body></html>')
    page.write_text('<a href="other.html#there">ok</a><a href="other.html#nowhere">a</a><a href="gone.html">b</a>')
    assert broken_links(page) == ["page.html: other.html#nowhere (no such anchor)", "page.html: gone.html (no such file)"]
