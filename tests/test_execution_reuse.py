"""pytest reuses the build's execution of a notebook only while nothing it depends on has changed
(``book/_ext/execution_stamp.py``, used by the root ``conftest.py``); each change below makes it run again."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.append(str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
import execution_stamp as es


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository in miniature with one notebook executed by a build, recorded as current."""
    for path, text in {
        "icl_utils/a.py": "x = 1\n",
        "benchmarks/results/r.json": "{}",
        "notebooks/01_ch.md": "# a chapter\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.setattr(es, "ROOT", tmp_path)
    monkeypatch.setattr(es, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(es, "BUILD", tmp_path / "_build")
    monkeypatch.setattr(es, "RECORD", tmp_path / "_build" / "execution.json")
    monkeypatch.setattr(es, "versions", lambda: "python==3.11\ntorch==2.13.0")
    for name in ("ICL_MODE", "ICL_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(es.config, "get_device", lambda: torch.device("cpu"))
    notebook = tmp_path / "notebooks" / "01_ch.md"
    executed = es.executed_path(notebook)
    executed.parent.mkdir(parents=True)
    executed.write_text('{"cells": []}')
    es.RECORD.write_text(
        json.dumps({"01_ch": {"stamp": es.stamp(notebook), "executed": es.file_hash(executed), "ledger": None}})
    )
    return notebook


def test_a_current_execution_is_reused(repo):
    assert es.stale(repo) == ""


@pytest.mark.parametrize(
    "change, part",
    [
        (lambda nb, mp: nb.write_text("# a chapter, edited\n"), "notebook"),
        (lambda nb, mp: (es.ROOT / "icl_utils" / "a.py").write_text("x = 2\n"), "package"),
        (lambda nb, mp: (es.ROOT / "icl_utils" / "b.py").write_text(""), "package"),
        (lambda nb, mp: (es.ROOT / "benchmarks" / "results" / "r.json").write_text('{"new": 1}'), "results"),
        (lambda nb, mp: mp.setenv("ICL_MODE", "full"), "settings"),
        (lambda nb, mp: mp.setattr(es.config, "get_device", lambda: torch.device("cuda", 0)), "settings"),
        (lambda nb, mp: mp.setattr(es, "versions", lambda: "python==3.11\ntorch==2.14.0"), "versions"),
    ],
)
def test_each_change_executes_the_notebook_again(repo, monkeypatch, change, part):
    change(repo, monkeypatch)
    assert es.stale(repo) == f"changed since the build: {part}"


def test_settings_that_change_nothing_keep_it_current(repo, monkeypatch):
    monkeypatch.setenv("ICL_PROGRESS", "0")
    monkeypatch.setenv("ICL_MODE", "quick")  # the default, spelled out
    (es.ROOT / "icl_utils" / ".#a.py").symlink_to(es.ROOT / "nowhere")  # an editor's dangling lock file
    assert es.stale(repo) == ""


def test_only_chapters_are_reused(repo):
    page = es.NOTEBOOKS / "performance.md"
    page.write_text("# appendix\n")
    assert es.stale(page) == "not a chapter: it reads what the build writes"


def test_a_record_of_another_shape_is_no_record(repo):
    es.RECORD.write_text('["01_ch"]')
    assert es.load() == {}
    es.RECORD.write_text('{"01_ch": {"stamp": 1}}')
    assert es.stale(repo) == "the build did not record executing it"
    es.RECORD.write_text("{not json")
    assert es.stale(repo) == "the build did not record executing it"


def test_no_record_or_another_executed_file_executes_it_again(repo):
    assert es.stale(repo, record={}) == "the build did not record executing it"
    es.executed_path(repo).write_text('{"cells": [1]}')
    assert "is not the build's execution" in es.stale(repo)
    es.executed_path(repo).unlink()
    assert "is not the build's execution" in es.stale(repo)


def test_an_error_output_fails_the_reused_execution():
    ok = {
        "cells": [
            {
                "cell_type": "code",
                "source": "print(1)",
                "execution_count": 1,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "1"}],
            },
            {"cell_type": "markdown", "source": "text"},
        ]
    }
    failed = {
        "cells": [
            *ok["cells"],
            {
                "cell_type": "code",
                "source": "check()",
                "execution_count": 2,
                "outputs": [
                    {"output_type": "error", "ename": "AssertionError", "evalue": "risk 0.3 > 0.2", "traceback": []}
                ],
            },
        ]
    }
    assert es.error_outputs(ok) == []
    assert es.error_outputs(failed) == ["cell 2: AssertionError: risk 0.3 > 0.2"]
    cut_short = {"cells": [{"cell_type": "code", "source": "train()", "execution_count": None, "outputs": []}]}
    assert es.error_outputs(cut_short) == ["cell 0: not executed"]


def test_a_ledger_with_a_problem_fails_the_reused_execution():
    holds = {"claims": [{"id": "rate"}], "problems": []}
    assert es.ledger_problems(holds) == []
    assert es.ledger_problems({**holds, "problems": ["rate: 0.3 fails < 0.2"]}) == ["rate: 0.3 fails < 0.2"]
    assert es.ledger_problems({"claims": [], "problems": []}) == ["the ledger holds no claim"]
    assert es.ledger_problems(None) == ["the execution wrote no ledger"]


def test_an_incremental_build_rereads_stale_chapters_then_the_appendix_pages(repo):
    page = es.NOTEBOOKS / "performance.md"
    page.write_text("# appendix\n")
    (es.NOTEBOOKS / "02_next.md").write_text("# a chapter the build has not recorded\n")

    def path2doc(path):
        return "notebooks/" + Path(path).stem

    assert es.to_reread(path2doc, set(), set(), set()) == ["notebooks/02_next", "notebooks/performance"]
    (es.NOTEBOOKS / "02_next.md").unlink()
    assert es.to_reread(path2doc, set(), set(), set()) == []  # everything current: nothing more to read
    assert es.to_reread(path2doc, set(), {"notebooks/01_ch"}, set()) == ["notebooks/performance"]
    assert es.to_reread(path2doc, set(), set(), {"notebooks/03_gone"}) == ["notebooks/performance"]
    (es.ROOT / "icl_utils" / "a.py").write_text("x = 2\n")
    assert es.to_reread(path2doc, set(), set(), set()) == ["notebooks/01_ch", "notebooks/performance"]
