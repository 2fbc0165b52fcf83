import shutil

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from needs import need

from icl_utils.plotting import off_style, unreadable


@pytest.fixture
def gen():
    """A seeded CPU generator: unit tests run on the CPU wherever they are."""
    g = torch.Generator(device="cpu")
    g.manual_seed(1234)
    return g


def _open(which) -> list[Figure]:
    if isinstance(which, Figure):
        return [which]
    if which == "all":
        return [plt.figure(n) for n in plt.get_fignums()]
    if which is None:
        return [plt.gcf()] if plt.get_fignums() else []
    return [plt.figure(which)] if which in plt.get_fignums() else []


@pytest.fixture(autouse=True)
def figures_are_readable(monkeypatch):
    """Every figure a test draws, which covers every figure function, fits the book's text column, has no text
    under the house minimum (icl_utils.plotting.unreadable) and keeps the house style (off_style: legends off the
    data, methods in their colours, log axes labelled): checked when the test closes it, or at its end."""
    found: list[str] = []
    close = plt.close

    def checked_close(which=None) -> None:
        found.extend(p for fig in _open(which) for p in [*unreadable(fig), *off_style(fig)])
        close(which)

    monkeypatch.setattr(plt, "close", checked_close)
    yield
    checked_close("all")
    assert found == []


#: The system's Chromium or Chrome, which pytest-playwright drives in the browser tests (no browser is downloaded).
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
#: The browser window's width in the browser tests, a wide laptop screen.
WIDTH = 1280


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """pytest-playwright's launch options with the system's Chromium and the flags a closed network needs.
    Without Chromium the browser tests skip, or fail under CI=true."""
    need("Chromium or Chrome (Debian: apt-get install chromium)", CHROMIUM is not None)
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": WIDTH, "height": 900}}
