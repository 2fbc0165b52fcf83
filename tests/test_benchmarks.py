"""The benchmark scripts run on the CPU and write complete, atomic results files."""

import __future__

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import cells, dry_run, run_book, train_speed  # noqa: E402
from benchmarks.common import write_json  # noqa: E402


def test_train_speed_runs_every_path_on_cpu(tmp_path):
    """The script's every row and ensemble, at the smoke configuration's few steps (the small one takes 100 s)."""
    result = train_speed.main(["--config", "smoke", "--device", "cpu", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "train_speed-cpu.json").read_text())
    assert saved == json.loads(json.dumps(result)) and saved["complete"]
    assert not (tmp_path / "train_speed-cpu.partial").exists()  # a finished run leaves only the complete file
    assert saved["device"].startswith("CPU") and saved["torch"] and saved["date"]
    names = [row["name"] for row in saved["rows"]]
    assert "package, plain" in names and all(row["steps_per_s"] > 0 for row in saved["rows"])
    if saved["transformers"] is not None:
        assert names[0] == "reference (HF GPT2)" and saved["rows"][0]["ratio_to_reference"] == 1.0
    assert [e["models"] for e in saved["ensembles"]] == [2] * 6
    assert all(e["steps_per_s_one"] > 0 and e["time_ratio"] > 0 for e in saved["ensembles"])
    # on the CPU each case also times separate runs, and the GPTs take that path
    assert all(e["time_ratio_separate"] > 0 for e in saved["ensembles"])
    # and a floor from its matrix products (near 1 or above: S models' products take no less time than one's,
    # up to the timer's noise at these sizes)
    assert all(e["products"] > 0 and e["products_one_s"] > 0 for e in saved["ensembles"])
    assert all(e["time_ratio_floor"] > 0.5 for e in saved["ensembles"])
    paths = {e["name"].split(" (")[0]: e["path"] for e in saved["ensembles"]}
    assert paths["LTB"] == paths["LSA"] == "batched" and paths["GPT 3x32"] == "separate"


def test_write_json_is_atomic(tmp_path, monkeypatch):
    """A write interrupted after its data hit the temporary file leaves the old file intact and no temporary file
    behind; a value JSON cannot hold fails before the disk is touched."""
    path = write_json(tmp_path / "r.json", {"old": 1})

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"new": 2})
    monkeypatch.undo()
    with pytest.raises(TypeError):
        write_json(path, {"new": object()})
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_json_syncs_cleans_up_and_sets_the_usual_mode(tmp_path, monkeypatch):
    """The data are fsynced before the rename, a temporary file left by a killed run (SIGKILL runs no cleanup) is
    removed, a live writer's is kept, and the file is 0666 less the umask, not mkstemp's 0600."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    stale = tmp_path / f".r.json.{done.stdout.strip()}.abc123.tmp"  # a process that has ended
    stale.write_text('{"half": ')
    (tmp_path / ".r.json.abc123.tmp").write_text("{")  # named without a process, as before: a dead writer's
    live = tmp_path / f".r.json.{os.getppid()}.abc123.tmp"  # a running process's: kept
    live.write_text('{"live": ')
    other = tmp_path / ".q.json.abc123.tmp"  # another file's: kept
    other.write_text("{}")
    longer = tmp_path / ".r.json.x.abc123.tmp"  # r.json.x's, named as r.json's would be by a non-process: kept
    longer.write_text("{}")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    old = os.umask(0o022)
    try:
        path = write_json(tmp_path / "r.json", {"new": 2})
    finally:
        os.umask(old)
    assert synced and json.loads(path.read_text()) == {"new": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".q.json.abc123.tmp", longer.name, live.name, "r.json"]
    )
    assert path.stat().st_mode & 0o777 == 0o644


def test_concurrent_writers_lose_nothing(tmp_path):
    """Two processes writing the same results file 150 times each: every write completes (a writer once deleted
    the other's live temporary file, and 66 of 300 writes failed), a reader always finds one whole write, and no
    temporary file is left."""
    path, go = tmp_path / "r.json", tmp_path / "go"
    code = (
        "import os, sys, time; from icl_utils.claims import write_json\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists(sys.argv[3]): time.sleep(0.001)\n"  # both start together, torch imported
        "for i in range(150): write_json(sys.argv[1], {'writer': sys.argv[2], 'i': i, 'pad': 'x' * 4096})"
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), w, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for w in "ab"
    ]
    assert [w.stdout.readline() for w in writers] == [b"ready\n"] * 2
    go.touch()
    seen = set()
    while any(w.poll() is None for w in writers):
        if path.exists():
            seen.add(json.loads(path.read_text())["writer"])  # never half a write
    errors = [w.stderr.read().decode() for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    assert json.loads(path.read_text())["i"] == 149
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "r.json"]


def test_an_interrupted_speed_run_keeps_the_complete_file(tmp_path, monkeypatch):
    """Rows go to the partial file; a run stopped after its first row leaves the complete file as it was."""
    complete = write_json(tmp_path / "train_speed-cpu.json", {"complete": True, "rows": ["old"]})
    calls = []

    def stop_after_one(run, steps):
        calls.append(1)
        if len(calls) > 2:  # the reference (when installed) or the package row is written, then the run stops
            raise KeyboardInterrupt
        return 1.0

    monkeypatch.setattr(train_speed, "rate", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        train_speed.main(["--config", "small", "--device", "cpu", "--out", str(tmp_path)])
    assert json.loads(complete.read_text()) == {"complete": True, "rows": ["old"]}
    partial = json.loads((tmp_path / "train_speed-cpu.partial").read_text())
    assert not partial["complete"] and partial["rows"]


def write_notebooks(folder: Path, **code: str) -> None:
    """One MyST notebook per keyword, named for it, with one code cell holding its value."""
    header = (ROOT / "notebooks" / "05_softmax_stagewise.md").read_text().split("\n---\n")[0] + "\n---\n"
    folder.mkdir()
    for name, source in code.items():
        (folder / f"{name}.md").write_text(f"{header}# {name}\n\n```{{code-cell}} ipython3\n{source}\n```\n")


def test_run_book_times_each_notebook_and_fails_on_a_failed_claim(tmp_path):
    write_notebooks(
        tmp_path / "nb", a_ok="import os\nprint(os.environ['ICL_MODE'])", b_bad="assert 1 + 1 == 3, 'claim fails'"
    )
    args = ["--mode", "quick", "--notebooks", str(tmp_path / "nb"), "--out", str(tmp_path)]
    with pytest.raises(SystemExit):
        run_book.main([*args, "--reference-repeats", "1"])
    saved = json.loads(next(tmp_path.glob("book-quick-*.json")).read_text())
    ok, bad = saved["chapters"]
    assert ok["notebook"] == "a_ok" and ok["returncode"] == 0 and "quick" in ok["log_tail"]
    assert bad["returncode"] != 0 and "claim fails" in bad["log_tail"]
    assert saved["total_seconds"] == pytest.approx(ok["seconds"] + bad["seconds"])
    # each cell timed, the failing one too, and named; the CPU's reference pace before and after
    assert [c["code"] for c in ok["cells"]] == ["import os"]
    assert [c["code"] for c in bad["cells"]] == ["assert 1 + 1 == 3, 'claim fails'"]
    assert ok["slowest_cell"] in ok["cells"] and bad["slowest_cell"]["cell"] == 0
    assert len(saved["reference_seconds"]) == 2 and all(0 < t < 60 for t in saved["reference_seconds"])
    with pytest.raises(SystemExit, match="--reference-repeats"):
        run_book.main([*args, "--reference-repeats", "-1"])
    assert run_book.main([*args, "--reference-repeats", "0", "a"])["reference_seconds"] is None
    (tmp_path / "nb" / "c_text.md").write_text("# a page without code cells\n")
    with pytest.raises(SystemExit, match="no code cell"):
        run_book.main([*args, "--reference-repeats", "0", "c"])


def test_cells_times_each_cell_keeps_line_numbers_and_records_a_failed_run(tmp_path):
    script = tmp_path / "chapter.py"
    script.write_text(
        "# %% [markdown]\n# text only\n\n# %%\nimport sys, time\nx = sys.argv[0]\n\n"
        "# %%\n# a comment first\ntime.sleep(0.2)\n\n# %%\nassert x.endswith('chapter.py')\nassert 1 + 1 == 3\n\n"
        "# %%\nprint('never reached')\n"
    )
    assert [line for line, _ in cells.cells(script.read_text())] == [5, 10, 13, 17]
    out = tmp_path / "times.json"
    main = sys.modules["__main__"]
    with pytest.raises(AssertionError) as failed:
        cells.main([str(script), str(out)])
    assert failed.traceback[-1].lineno + 1 == 14  # the failing line, counted in the script (lineno is 0-based)
    times = json.loads(out.read_text())["cells"]
    assert [c["line"] for c in times] == [5, 10, 13]  # up to the failed cell, not past it
    assert [c["cell"] for c in times] == [0, 1, 2] and times[1]["code"] == "time.sleep(0.2)"
    assert 0.2 <= times[1]["seconds"] < 5 and times[0]["seconds"] < 5
    assert sys.modules["__main__"] is main and "chapter.py" not in sys.argv[0]  # restored for this process


def test_cells_run_as_the_script_itself_would(tmp_path):
    """In its own __main__ module, with its own future imports only (not this runner's), and a syntax error in
    any cell stops the script before the first cell runs."""
    plain, future = tmp_path / "plain.py", tmp_path / "future.py"
    plain.write_text(
        "# %%\nimport sys\ndef f(x: int): pass\nassert f.__annotations__['x'] is int\n"
        "assert sys.modules['__main__'].__dict__ is globals()\n"
    )
    future.write_text(
        "# %%\nfrom __future__ import annotations\n\n# %%\ndef g(x: int): pass\n"
        "assert g.__annotations__['x'] == 'int'\n"
    )
    for script in (plain, future):  # their checks pass, as in Python's own run
        cells.main([str(script), str(tmp_path / "times.json")])
        subprocess.run([sys.executable, str(script)], check=True)
    # a cell compiled on its own has no future import: the runner carries the script's along, as Python does
    flag = __future__.annotations.compiler_flag
    sources = [code for _, code in cells.cells(future.read_text())]
    assert [bool(c.co_flags & flag) for c in cells.compiled(sources, ["s", "s"])] == [True, True]
    assert not compile(sources[1], "s", "exec", dont_inherit=True).co_flags & flag
    broken = tmp_path / "broken.py"
    broken.write_text(f"# %%\nopen({str(tmp_path / 'ran')!r}, 'w').write('ran')\n\n# %%\ndef (\n")
    with pytest.raises(SyntaxError):
        cells.main([str(broken), str(tmp_path / "times2.json")])
    assert not (tmp_path / "ran").exists()


def test_run_book_runs_chapters_in_parallel_and_stops_one_at_its_timeout(tmp_path):
    # the short chapter takes 3 s, so that side by side beats one after the other by more than the load probes
    # (config.chapter_env's, outside each chapter's clock) add to the wall time
    write_notebooks(
        tmp_path / "nb",
        a_ok="import os, time\nprint(os.environ['OMP_NUM_THREADS'])\ntime.sleep(3)",
        b_slow="print('started', flush=True)\nimport time\ntime.sleep(60)",
    )
    args = [
        "--mode",
        "quick",
        "--notebooks",
        str(tmp_path / "nb"),
        "--out",
        str(tmp_path),
        "--jobs",
        "2",
        "--timeout",
        "10",
        "--reference-repeats",
        "0",
    ]
    with pytest.raises(SystemExit):
        run_book.main(args)
    saved = json.loads(next(tmp_path.glob("book-quick-*.json")).read_text())
    ok, slow = saved["chapters"]
    assert ok["returncode"] == 0 and slow["returncode"] == 124 and "--timeout 10" in slow["log_tail"]
    assert 10 <= slow["seconds"] < 30 and saved["jobs"] == 2
    # the stopped chapter names the cell it was in, with the time it had run
    assert slow["slowest_cell"] == slow["cells"][-1] and slow["cells"][-1]["unfinished"] == "stopped by --timeout"
    assert slow["cells"][-1]["code"] == "print('started', flush=True)" and slow["cells"][-1]["seconds"] >= 9
    assert saved["total_seconds"] < ok["seconds"] + slow["seconds"]  # wall time, the two ran side by side
    with pytest.raises(SystemExit, match="--jobs"):
        run_book.main([*args[:-6], "--jobs", "0"])


def test_dry_run_caps_training_reports_each_cell_and_restores_what_it_changed(tmp_path, capsys):
    """Every training loop is capped (train's TrainConfig, gradient_descent's and run_gradient_descent's steps),
    each cell is reported, and after the run the loops are the originals again."""
    import icl_utils.dynamics.softmax_attention as sa
    import icl_utils.gd as gd
    import icl_utils.train as tr

    originals = (tr.train, tr.train_ensemble, gd.gradient_descent, sa.run_gradient_descent)
    header = (ROOT / "notebooks" / "05_softmax_stagewise.md").read_text().split("\n---\n")[0] + "\n---\n"
    cells = [
        "import os\nimport torch\nfrom icl_utils.gd import gradient_descent\n"
        "from icl_utils.dynamics.softmax_attention import run_gradient_descent\n"
        "from icl_utils.models import LTB\nfrom icl_utils.tasks import LinearRegression\n"
        "from icl_utils.train import TrainConfig, train, train_ensemble\n"
        "mode = os.environ.get('ICL_MODE', 'quick')\n"
        "_, history = gradient_descent(lambda t: t.square().sum(), torch.ones(2), steps=1000, lr=0.1, "
        "progress=False)\n"
        "config = TrainConfig(steps=200, batch_size=2, n_context=3)\n"
        "losses = train(LTB(2), LinearRegression(dim=2), config, generator=torch.Generator(),\n"
        "               progress=False).losses\n"
        "ensemble = train_ensemble([LTB(2), LTB(2)], LinearRegression(dim=2), config=config, "
        "generator=torch.Generator(), progress=False).losses\n"
        "_, sa_history = run_gradient_descent(torch.tensor([0.5, 0.5]), 4, steps=200, lr=0.1, n_samples=8, "
        "generator=torch.Generator(), record_every=10, progress=False)",
        "assert history.steps[-1] == 1000 and len(losses) == len(ensemble) == sa_history.steps[-1] == 200, "
        "'the claim needs the full budget'",
        "raise KeyError('a full-mode bug')",
        "print(mode, history.steps[-1], len(losses), len(ensemble), sa_history.steps[-1], config.steps)",
    ]
    notebook = tmp_path / "nb.md"
    notebook.write_text(header + "".join(f"\n```{{code-cell}} ipython3\n{c}\n```\n" for c in cells))
    mode_before = os.environ.get("ICL_MODE")
    with pytest.raises(SystemExit):  # a cell failed other than by an assertion
        dry_run.main(["--steps", "30", "--mode", "full", str(notebook)])
    out = capsys.readouterr().out
    assert "assertion: the claim needs the full budget" in out and "ERROR KeyError" in out
    assert "full 30 30 30 30 200" in out  # every loop capped; the caller's config itself is left as it was
    assert os.environ.get("ICL_MODE") == mode_before
    assert (tr.train, tr.train_ensemble, gd.gradient_descent, sa.run_gradient_descent) == originals
    records = dry_run.run_cells(notebook)  # the loops are restored: full budgets again
    assert [r["status"][:9] for r in records] == ["ok", "ok", "ERROR Key", "ok"]


def test_dry_run_caps_the_iterations_of_exact_pretraining(monkeypatch):
    """fit_features_exact (chapter 1) takes max_iter, not steps or a config: the dry run caps that too."""
    import icl_utils.train as tr

    seen = []
    monkeypatch.setattr(tr, "fit_features_exact", lambda *args, **kwargs: seen.append(kwargs["max_iter"]))
    with dry_run.capped_training(7):
        tr.fit_features_exact(None, None, 4, max_iter=120)
    tr.fit_features_exact(None, None, 4, max_iter=120)
    assert seen == [7, 120]


def test_the_device_kits_stand_in_for_jupytext_reads_the_cells_jupytext_reads(tmp_path):
    """The device machine has no jupytext: ``benchmarks/device`` writes the chapters' code cells to JSON here and
    its stand-in reads them there; both must give dry_run the same cells, in order."""
    import importlib.util

    import jupytext

    from benchmarks.device import make_cells

    counts = make_cells.write_cells(tmp_path)
    spec = importlib.util.spec_from_file_location("jupytext_stand_in", ROOT / "benchmarks/device/shims/jupytext.py")
    stand_in = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stand_in)
    stand_in.CELLS = tmp_path
    notebook = ROOT / "notebooks" / "02_mean_field.md"
    want = [c.source for c in jupytext.read(notebook).cells if c.cell_type == "code"]
    got = stand_in.read(notebook).cells
    assert counts["02_mean_field"] == len(want) == len(got) > 10
    assert [c.source for c in got] == want and {c.cell_type for c in got} == {"code"}
