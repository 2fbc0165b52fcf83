"""Collect the jupytext notebooks in notebooks/ as nbval tests, with or without ``--nbval``.

nbval only collects ``.ipynb`` files. The book's notebooks are MyST-markdown text files that store no outputs, so
this hook reads them with jupytext and runs every code cell in a kernel of the current environment: a cell that
raises (a failed assertion included) fails its test. No ``.ipynb`` copy is written.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import jupytext
import nbval.plugin
import pytest
from nbval.plugin import IPyNbFile

NOTEBOOK_DIR = Path(__file__).parent / "notebooks"


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
        # Run in the interpreter pytest runs in, whatever kernel the notebook's metadata names.
        option = self.parent.config.option
        saved = option.nbval_current_env
        option.nbval_current_env = True
        try:
            super().setup()
        finally:
            option.nbval_current_env = saved


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".md" and file_path.parent == NOTEBOOK_DIR:
        return JupytextNotebook.from_parent(parent, path=file_path)
    return None
