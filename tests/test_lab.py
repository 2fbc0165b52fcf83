"""A chapter opens as a notebook in Jupyter Lab after the README's commands, and its MyST directives render.

The README's first command installs the ``lab`` extra and runs ``jupytext-config set-default-viewer markdown
myst``, which makes jupytext's notebook view Lab's default for ``.md`` files. The test starts Jupyter Lab on
localhost, opens a chapter the way a reader does (its file path in Lab) in the system's Chromium through
pytest-playwright, and checks that a notebook, not a text editor, appears. The control starts Lab with an empty
configuration directory, where the same chapter opens in the text editor.

The ``lab`` extra also installs jupyterlab-myst, which renders the chapters' markdown cells as MyST: the chapter's
first directive, its "In this chapter" admonition, shows as an admonition box. The control disables that
extension in a copy of the same settings, where the cell shows the directive's raw text.

Skipped without Jupyter Lab or Chromium, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from needs import need

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "notebooks/00_icl_setting.md"
MYST = "jupyterlab-myst"
#: The chapter's first directive, ``:::{admonition} In this chapter``: jupyterlab-myst renders it as an ``aside``.
RENDERED = ".jp-MarkdownCell aside.myst-admonition"
RAW = ":::{admonition} In this chapter"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab(config_dir: Path | None):
    """Jupyter Lab serving the repository on localhost, with no token; yields its address."""
    port = _free_port()
    env = dict(os.environ)
    if config_dir is not None:
        env["JUPYTER_CONFIG_DIR"] = str(config_dir)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={ROOT}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("Jupyter Lab did not start in 60 s")
        yield url
    finally:
        server.terminate()  # Lab waits for its terminals, kernels and open pages to end, so it may need the kill
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# Module-scoped, so that each server stops after the tests' pages have closed: with a page still open, Lab's
# shutdown waited the whole 10 s for it.
@pytest.fixture(scope="module")
def lab_with_readme_settings():
    need("Jupyter Lab (pip install -e '.[lab]')", _has("jupyterlab"))
    yield from _lab(None)


@pytest.fixture(scope="module")
def lab_without_settings(tmp_path_factory):
    need("Jupyter Lab (pip install -e '.[lab]')", _has("jupyterlab"))
    yield from _lab(tmp_path_factory.mktemp("empty-config"))


@pytest.fixture(scope="module")
def lab_without_myst(tmp_path_factory):
    """Lab with the README's settings, but with jupyterlab-myst disabled."""
    from jupyter_core.paths import jupyter_config_dir

    tmp_path = tmp_path_factory.mktemp("no-myst")
    need("Jupyter Lab (pip install -e '.[lab]')", _has("jupyterlab"))
    labconfig = Path(jupyter_config_dir()) / "labconfig"
    if labconfig.is_dir():
        shutil.copytree(labconfig, tmp_path / "labconfig")
    (tmp_path / "labconfig").mkdir(exist_ok=True)
    (tmp_path / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": {MYST: True}}))
    yield from _lab(tmp_path)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def opened_as(page, url: str) -> str:
    """What Lab shows for the chapter: ``notebook`` or ``editor``."""
    page.goto(f"{url}/lab/tree/{CHAPTER}")
    shown = page.wait_for_selector(".jp-NotebookPanel, .jp-FileEditor", timeout=60_000)
    return "notebook" if "jp-NotebookPanel" in (shown.get_attribute("class") or "") else "editor"


def test_a_chapter_opens_as_a_notebook(page, lab_with_readme_settings):
    assert opened_as(page, lab_with_readme_settings) == "notebook"


def test_without_the_setting_it_opens_as_text(page, lab_without_settings):
    assert opened_as(page, lab_without_settings) == "editor"


def directive_shown(page, url: str) -> str:
    """How Lab shows the chapter's first directive: ``rendered`` (an admonition box) or ``raw`` (its MyST text)."""
    assert opened_as(page, url) == "notebook"
    shown = page.wait_for_function(
        """([rendered, raw]) => {
            if ([...document.querySelectorAll(rendered)].some(e => e.innerText.includes("In this chapter")))
                return "rendered";
            const cells = [...document.querySelectorAll(".jp-MarkdownCell .jp-RenderedMarkdown")];
            return cells.some(e => e.innerText.includes(raw)) ? "raw" : null;
        }""",
        arg=[RENDERED, RAW],
        timeout=60_000,
    )
    return shown.json_value()


def test_a_chapters_directives_render(page, lab_with_readme_settings):
    need("jupyterlab-myst (pip install -e '.[lab]')", _has("jupyterlab_myst"))
    assert directive_shown(page, lab_with_readme_settings) == "rendered"


def test_without_jupyterlab_myst_a_directive_is_raw_text(page, lab_without_myst):
    assert directive_shown(page, lab_without_myst) == "raw"
