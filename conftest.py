"""Collect the jupytext notebooks in notebooks/ as tests: the build's execution of a notebook when it is current,
else nbval.

nbval only collects ``.ipynb`` files. The book's notebooks are MyST-markdown text files that store no outputs, so
this hook reads them with jupytext and runs every code cell in a kernel of the current environment: a cell that
raises (a failed assertion included) fails its test. No ``.ipynb`` copy is written.

The book's build executes every notebook already. When ``book/_ext/execution_stamp.py`` recorded that execution
and nothing it depends on has changed since (the notebook, the package, the results files it reads, the mode and
device settings, the installed versions), plain ``pytest`` checks that execution as nbval would, without running
the notebook again: no cell has an error output, and the chapter's ledger, as its run wrote it, holds. ``pytest
--nbval``, or a notebook without a current record, runs under nbval.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import jupytext
import nbformat
import nbval.plugin
import pytest
from nbval.plugin import IPyNbFile

from icl_utils.config import chapter_env

NOTEBOOK_DIR = Path(__file__).parent / "notebooks"
sys.path.append(str(Path(__file__).parent / "book" / "_ext"))
import execution_stamp  # noqa: E402


class JupytextNotebook(IPyNbFile):
    """An nbval notebook read from a jupytext text file. There are no stored outputs, so none are compared."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compare_outputs = False

    def collect(self):
        nb = jupytext.read(str(self.path))
        # nbval's collect() reads the file with nbformat.read; hand it the notebook jupytext parsed instead.
        reader = SimpleNamespace(read=lambda *args, **kwargs: nb)
        with mock.patch.object(nbval.plugin, "nbformat", reader):
            yield from super().collect()

    def setup(self):
        # Run in the interpreter pytest runs in, whatever kernel the notebook's metadata names, with the
        # environment the build gives its kernels (pytest's own process keeps its own).
        with mock.patch.dict(os.environ, chapter_env(os.environ), clear=True):
            self._setup_kernel()

    def _setup_kernel(self):
        option = self.parent.config.option
        saved = option.nbval_current_env
        option.nbval_current_env = True
        try:
            super().setup()
        finally:
            option.nbval_current_env = saved


class BuiltNotebook(pytest.File):
    """The build's execution of a chapter, current by its stamp: checked, not run again."""

    def collect(self):
        entry = execution_stamp.load()[self.path.stem]
        nb = nbformat.read(execution_stamp.executed_path(self.path), as_version=4)
        yield BuiltCheck.from_parent(
            self, name="executed by the build: no error output", problems=execution_stamp.error_outputs(nb)
        )
        yield BuiltCheck.from_parent(
            self,
            name="executed by the build: its ledger holds",
            problems=execution_stamp.ledger_problems(entry["ledger"]),
        )


class BuiltCheck(pytest.Item):
    """One check of the build's execution; it fails on the problems found."""

    def __init__(self, *, problems: list[str], **kwargs):
        super().__init__(**kwargs)
        self.problems = problems

    def runtest(self):
        assert not self.problems, "the build's execution fails this check: " + "; ".join(self.problems)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".md" and file_path.parent == NOTEBOOK_DIR:
        option = parent.config.option
        if not (option.nbval or option.nbval_lax) and not execution_stamp.stale(file_path):
            return BuiltNotebook.from_parent(parent, path=file_path)
        return JupytextNotebook.from_parent(parent, path=file_path)
    return None
