"""The claims ledger: a claim stands only as stated, and its JSON carries what the "What reproduces" page reads."""

import json
import math

import numpy as np
import pytest

from icl_utils import claims
from icl_utils.claims import Check, Claim, Control, Ledger, LedgerError, load, overview, table


def claim(**kw):
    base = dict(
        id="rate",
        statement="the slope is below -1/2",
        source="Thm 1",
        value=-0.7,
        check=Check("<", -0.5, "separator", "fixed before the run"),
        controls=(Control("untrained model", -0.1),),
    )
    return Claim(**{**base, **kw})


def test_a_demonstrated_claim_with_a_failing_control_stands():
    ledger = Ledger("00_x", [claim()])
    assert ledger.verify() is ledger
    assert ledger.counts() == {"demonstrated": 1, "weak": 0, "not reproduced": 0}


def test_refuses_a_demonstrated_claim_without_a_control():
    with pytest.raises(LedgerError, match="demonstrated without a control"):
        Ledger("00_x", [claim(controls=())]).verify()


def test_refuses_a_control_that_passes_the_check():
    with pytest.raises(LedgerError, match="control 'prompt mean' passes"):
        Ledger("00_x", [claim(controls=(Control("untrained", 0.0), Control("prompt mean", -0.6)))]).verify()


def test_refuses_a_failed_check():
    with pytest.raises(LedgerError, match="fails its check"):
        Ledger("00_x", [claim(value=-0.4)]).verify()


def test_weak_and_not_reproduced_claims_state_their_numbers():
    weak = claim(id="weak", status="weak", controls=(), reason="no control fails it")
    Ledger("00_x", [weak]).verify()
    with pytest.raises(LedgerError, match="not reproduced, not weak"):
        Ledger("00_x", [claim(id="w", value=0.0, status="weak", reason="thin")]).verify()
    with pytest.raises(LedgerError, match="without a reason"):
        Ledger("00_x", [claim(id="w", status="weak")]).verify()
    finding = claim(id="nr", value=-0.3, status="not reproduced", reason="the optimizer stalls at 2,000 steps")
    Ledger("00_x", [finding]).verify()
    with pytest.raises(LedgerError, match="it is reproduced"):
        Ledger("00_x", [claim(id="nr", status="not reproduced", reason="x")]).verify()


def test_every_problem_is_listed_at_once():
    bad = [claim(id="a", controls=()), claim(id="b", value=1.0)]
    with pytest.raises(LedgerError) as err:
        Ledger("00_x", bad).verify()
    assert "'a'" in str(err.value) and "'b'" in str(err.value)


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(value=float("nan")), ValueError, "NaN"),
        (dict(value="0.3"), TypeError, "value must be a real number"),
        (dict(value=True), TypeError, "value must be a real number"),
        (dict(id=" "), ValueError, "id must be a non-empty str"),
        (dict(check="< 0.5"), TypeError, "check must be a Check"),
        (dict(interval=(0.0,)), ValueError, "interval must be a pair"),
        (dict(interval=(float("nan"), 1.0)), ValueError, "interval must be a pair"),
        (dict(figure=None), TypeError, "figure must be a str"),
        (dict(status="holds"), ValueError, "status must be one of"),
        (dict(controls=Control("c", 1.0)), TypeError, "controls must be a tuple or a list"),
        (dict(controls=("c",)), ValueError, "controls must be a tuple or list of icl_utils.claims.Control"),
        (dict(interval=(1.0, 0.0)), ValueError, "must hold the value"),
        (dict(interval=(2.0, 3.0)), ValueError, "must hold the value"),
        (dict(value=np.array([0.1, 0.2])), TypeError, "value must be a real number"),
        (dict(controls=(Control("c", 0.0), Control("c", 1.0))), ValueError, "distinct names"),
        (dict(statement=""), ValueError, "statement must be a non-empty str"),
    ],
)
def test_bad_claims_are_named(kw, error, match):
    with pytest.raises(error, match=match):
        claim(**kw)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (("=<", 1.0, "separator"), ValueError, "relation must be one of"),
        (("<", 1.0, "chosen after the run"), ValueError, "origin must be one of"),
        (("<", float("nan"), "closed form"), ValueError, "bound must be a real number, not NaN"),
        (("<", None, "closed form"), TypeError, "bound must be a real number"),
        ((["<"], 1.0, "closed form"), TypeError, "relation must be a str"),
        (("<", 1.0, "separator", None), TypeError, "note must be a str"),
    ],
)
def test_bad_checks_are_named(args, error, match):
    with pytest.raises(error, match=match):
        Check(*args)


def test_a_ledger_refuses_duplicates_and_bad_names():
    ledger = Ledger("00_x", [claim()])
    with pytest.raises(ValueError, match="already holds"):
        ledger.add(claim())
    with pytest.raises(ValueError, match="chapter must be"):
        Ledger("notebooks/00_x.md")
    with pytest.raises(LedgerError, match="holds no claim"):
        Ledger("00_x").verify()
    with pytest.raises(ValueError, match="claims must have distinct ids, but holds 'rate' twice"):
        Ledger("00_x", [claim(), claim()])
    with pytest.raises(TypeError, match=r"claims\[0\] must be an icl_utils.claims.Claim"):
        Ledger("00_x", ["rate"])
    with pytest.raises(TypeError, match="claims must be a list or a tuple"):
        Ledger("00_x", None)
    with pytest.raises(ValueError, match="chapter must be"):
        Ledger("..")


def test_json_round_trip_and_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_CLAIMS_DIR", str(tmp_path))
    ledger = Ledger(
        "05_y",
        [
            claim(interval=(-0.8, -0.6), interval_note="3 seeds", figure="fig-y"),
            claim(id="weak", status="weak", controls=(), reason="no control"),
        ],
    )
    path = ledger.verify().write()
    assert path == tmp_path / "05_y.json" and not list(tmp_path.glob("*.tmp"))
    record = json.loads(path.read_text())
    assert {"mode", "device", "commit", "date"} <= set(record)
    c = record["claims"][0]
    assert {"id", "statement", "source", "status", "value", "check", "tolerance_origin", "controls"} <= set(c)
    assert c["controls"] == [{"name": "untrained model", "value": -0.1, "fails": True}]
    assert c["check"] == "< -0.5" and c["tolerance_origin"] == "separator: fixed before the run"
    md = table(ledger.claims)
    assert md.count("\n") == 3 and "{numref}`fig-y`" in md and "[-0.8, -0.6] (3 seeds)" in md
    assert ledger._repr_markdown_() == ledger.table() == md
    page = overview(["00_x", "05_y"], load())
    assert "not yet migrated" in page.splitlines()[2] and page.count("{doc}`05_y`") == 3  # 2 claims, 1 run
    assert "weak: no control" in page


def test_numpy_numbers_are_taken_and_recorded_as_floats():
    c = claim(
        value=np.float32(-0.75),
        check=Check("<", np.float64(-0.5), "separator"),
        controls=(Control("untrained", np.float32(0.25)),),
        interval=(np.float32(-1.0), np.int64(0)),
    )
    assert [type(v) for v in (c.value, c.check.bound, c.controls[0].value, *c.interval)] == [float] * 5
    assert c.check.holds(np.float32(-0.75)) and not c.check.holds(np.int64(0))
    with pytest.raises(ValueError, match="value must be a real number, not NaN"):
        c.check.holds(float("nan"))
    assert claim(controls=[Control("c", 1.0)]).controls == (Control("c", 1.0),)  # a list is kept as a tuple


def test_infinite_values_are_checked_and_shown():
    c = claim(value=-math.inf)
    assert c.holds and "-∞" in table([c])


def test_a_failing_ledger_is_written_as_failing_with_infinities_as_strings(tmp_path):
    ledger = Ledger("05_z", [claim(value=-math.inf), claim(id="bad", value=0.0)])
    record = json.loads(ledger.write(tmp_path).read_text())  # strict JSON: no Infinity
    assert record["claims"][0]["value"] == "-inf" and len(record["problems"]) == 1
    assert "fails its check" in record["problems"][0]
    assert "the ledger fails" in overview(["05_z"], load(tmp_path))
    with pytest.raises(TypeError, match="chapters must be a list or a tuple"):
        overview("05_z", {})


def test_changed_since_compares_the_working_tree_with_the_commit(tmp_path, monkeypatch):
    import subprocess

    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    for folder in ("notebooks", "icl_utils", "book"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.txt").write_text("1")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    commit = git("rev-parse", "--short", "HEAD")
    monkeypatch.setattr(claims, "ROOT", tmp_path)
    assert claims.changed_since(commit) is False
    assert claims.changed_since(commit + "+") is None  # measured with uncommitted changes: cannot tell
    (tmp_path / "book" / "a.txt").write_text("2")
    assert claims.changed_since(commit) is False  # a folder not asked about
    (tmp_path / "icl_utils" / "a.txt").write_text("2")  # uncommitted, as while a build runs
    assert claims.changed_since(commit) is True
    assert claims.changed_since(commit, ("notebooks",)) is False
    assert claims.changed_since(commit, ("notebooks/a.txt", "icl_utils/a.txt")) is True
    assert claims.changed_since("deadbee") is None
    with pytest.raises(ValueError, match="commit"):
        claims.changed_since("HEAD; rm -rf")
    with pytest.raises(TypeError, match="paths"):
        claims.changed_since(commit, "icl_utils")
