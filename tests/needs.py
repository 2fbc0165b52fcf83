"""One rule for tests that need something outside Python (a built book, Chromium, Jupyter Lab): skip without it,
except under CI=true, where everything must be present and a missing piece is a failure."""

from __future__ import annotations

import os

import pytest


def need(what: str, present: bool) -> None:
    if present:
        return
    message = f"this test needs {what}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
