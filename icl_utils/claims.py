"""The papers' claims as data: each chapter's ledger, checked, shown as a table and written as JSON.

A :class:`Claim` holds its statement, its source, the measured value with an interval, the :class:`Check` it must
pass (a relation to a bound, and where the bound comes from), the controls (models or predictors that lack the
claimed property, measured the same way) and a status. :meth:`Ledger.verify` raises when

* a *demonstrated* claim fails its check, has no control, or has a control that passes the check;
* a *weak* claim fails its check or gives no reason;
* a *not reproduced* claim passes its check (then it is reproduced) or gives no measured cause.

A chapter builds its ledger at its end, verifies it, shows it (:meth:`Ledger.table`, a markdown table) and
:meth:`Ledger.write`\\ s it as ``<chapter>.json`` into ``ICL_CLAIMS_DIR`` (default ``_build/claims`` at the
repository's root), which the "What reproduces" page reads.
"""

from __future__ import annotations

import glob
import json
import math
import numbers
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import numpy as np
from beartype.door import is_bearable
from beartype.vale import Is

from icl_utils import config
from icl_utils.checks import checked, declare, describe, sequence_of

STATUSES = ("demonstrated", "weak", "not reproduced")
RELATIONS = {"<": lambda v, b: v < b, "<=": lambda v, b: v <= b, ">": lambda v, b: v > b, ">=": lambda v, b: v >= b}
#: Where a check's bound may come from (the book's rule: never raised after seeing a run).
ORIGINS = ("seed spread", "closed form", "separator")
ROOT = Path(__file__).resolve().parents[1]


class LedgerError(AssertionError):
    """A ledger whose claims do not stand as stated (an AssertionError, so a notebook's run fails on it)."""


def _number(value: object) -> bool:
    """Whether ``value`` is a real number (NumPy's too; infinities included) other than NaN, and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


# A NaN passes no check and fails none; an infinity is a measured value like any other.
Number = describe(Annotated[float, Is[_number]], "a real number", "a real number, not NaN (a NaN passes no check)")
Text = describe(Annotated[str, Is[lambda v: bool(v.strip())]], "a str", "a non-empty str")
Relation = describe(Annotated[str, Is[lambda v: v in RELATIONS]], "a str", f"one of {sorted(RELATIONS)}")
Origin = describe(Annotated[str, Is[lambda v: v in ORIGINS]], "a str", f"one of {ORIGINS}")
Status = describe(Annotated[str, Is[lambda v: v in STATUSES]], "a str", f"one of {STATUSES}")


@checked
@dataclass(frozen=True)
class Check:
    """``value <relation> bound``; ``origin`` says where the bound comes from (one of :data:`ORIGINS`) and
    ``note`` how (e.g. "1 + the largest relative spread over 3 seeds")."""

    relation: Relation
    bound: Number
    origin: Origin
    note: str = ""

    def __post_init__(self):
        object.__setattr__(self, "bound", float(self.bound))  # the JSON record holds a float

    @checked
    def holds(self, value: Number) -> bool:
        return bool(RELATIONS[self.relation](value, self.bound))

    def __str__(self) -> str:
        return f"{self.relation} {_fmt(self.bound)}"


@checked
@dataclass(frozen=True)
class Control:
    """A model or predictor that lacks the claimed property, and its value under the claim's check."""

    name: Text
    value: Number

    def __post_init__(self):
        object.__setattr__(self, "value", float(self.value))


Controls = sequence_of(Control, "icl_utils.claims.Control", base=tuple | list, empty=True)
Interval = declare(
    tuple | list | np.ndarray,
    lambda v: len(v) == 2 and all(map(_number, v)),
    "a pair (low, high) of real numbers, not NaN (a tuple, a list or an array of two)",
)


@checked
@dataclass(frozen=True)
class Claim:
    """One claim of a paper, as measured. ``interval`` (low, high) brackets ``value`` (say what it is in
    ``interval_note``: a range over seeds, a bootstrap interval); ``figure`` is the label of the figure that shows
    it; ``reason`` is required unless the claim is demonstrated."""

    id: Text
    statement: Text
    source: Text
    value: Number
    check: Check
    controls: Controls = ()
    status: Status = "demonstrated"
    interval: Interval | None = None
    interval_note: str = ""
    figure: str = ""
    reason: str = ""

    def __post_init__(self):
        object.__setattr__(self, "value", float(self.value))  # the JSON record holds floats
        object.__setattr__(self, "controls", tuple(self.controls))
        if self.interval is not None:
            lo, hi = (float(v) for v in self.interval)
            if not lo <= self.value <= hi:
                raise ValueError(f"interval must hold the value {self.value} (low <= value <= high), got ({lo}, {hi})")
            object.__setattr__(self, "interval", (lo, hi))
        names = [c.name for c in self.controls]
        if len(set(names)) < len(names):
            raise ValueError(f"controls must have distinct names, got {names}")

    @property
    def holds(self) -> bool:
        return self.check.holds(self.value)

    def control_fails(self, control: Control) -> bool:
        if not isinstance(control, Control):
            raise TypeError(f"control must be an icl_utils.claims.Control, got {type(control).__name__}")
        return not self.check.holds(control.value)

    def problems(self) -> list[str]:
        """Why this claim does not stand as stated (empty when it does)."""
        out = []
        if self.status == "demonstrated":
            if not self.holds:
                out.append(f"fails its check: {_fmt(self.value)} is not {self.check}")
            if not self.controls:
                out.append("is called demonstrated without a control")
            out += [
                f"control {c.name!r} passes the check ({_fmt(c.value)} {self.check})"
                for c in self.controls
                if not self.control_fails(c)
            ]
        elif self.status == "weak":
            if not self.holds:
                out.append(f"fails its check ({_fmt(self.value)} is not {self.check}): not reproduced, not weak")
            if not self.reason.strip():
                out.append("is weak without a reason")
        else:
            if self.holds:
                out.append(f"passes its check ({_fmt(self.value)} {self.check}): it is reproduced")
            if not self.reason.strip():
                out.append("is not reproduced without its measured cause")
        return [f"claim {self.id!r} {p}" for p in out]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["check"] = str(self.check)
        d["tolerance_origin"] = self.check.origin + (f": {self.check.note}" if self.check.note else "")
        d["bound"] = self.check.bound
        d["holds"] = self.holds
        d["controls"] = [{"name": c.name, "value": c.value, "fails": self.control_fails(c)} for c in self.controls]
        return d


Chapter = declare(
    str,
    lambda v: v and len(v.encode()) <= 128 and all(ch.isalnum() or ch in "_-" for ch in v),
    "the notebook's name without folder or suffix, at most 128 bytes (it names the ledger's file)",
)


@checked
@dataclass
class Ledger:
    """The claims of one chapter, named after its notebook (``"05_softmax_stagewise"``)."""

    chapter: Chapter
    claims: list | tuple = field(default_factory=list)  # of Claim, each checked as it is added; then a list

    def __post_init__(self):
        given, self.claims = list(self.claims), []
        for i, claim in enumerate(given):
            if not isinstance(claim, Claim):  # a JSON record is not a claim: its check is text
                raise TypeError(f"claims[{i}] must be an icl_utils.claims.Claim, got {type(claim).__name__}")
            if any(c.id == claim.id for c in self.claims):
                raise ValueError(f"claims must have distinct ids, but holds {claim.id!r} twice")
            self.add(claim)

    @checked
    def add(self, claim: Claim) -> Claim:
        if any(c.id == claim.id for c in self.claims):
            raise ValueError(f"the ledger already holds a claim {claim.id!r}")
        self.claims.append(claim)
        return claim

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r} in the ledger of {self.chapter}")

    def verify(self) -> Ledger:
        """Raise :class:`LedgerError` listing every claim that does not stand as stated; return the ledger."""
        claims = self._checked_claims()
        if not claims:
            raise LedgerError(f"the ledger of {self.chapter} holds no claim")
        problems = [p for c in claims for p in c.problems()]
        if problems:
            raise LedgerError("; ".join(problems))
        return self

    def _checked_claims(self) -> list[Claim]:
        """The claims, refused by name if one was appended by hand that is not a Claim."""
        if not isinstance(self.claims, (list, tuple)):  # set after construction
            raise TypeError(f"claims must be a list of Claims, got {type(self.claims).__name__}")
        if bad := [type(c).__name__ for c in self.claims if not isinstance(c, Claim)]:
            raise TypeError(f"claims must hold Claims only (add them with add()), got {', '.join(bad)}")
        return self.claims

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self._checked_claims()) for s in STATUSES}

    def headline(self) -> str:
        """One line for under a chapter's title: how many claims stand, and which do not fully."""
        n = self.counts()
        parts = [
            f"**{n['demonstrated']} of {len(self.claims)} claims demonstrated**, each against a control that fails it"
        ]
        for status in ("weak", "not reproduced"):
            ids = [c.id for c in self.claims if c.status == status]
            if ids:
                parts.append(f"{status}: {', '.join(ids)}")
        return "; ".join(parts) + "."

    def record(self) -> dict:
        """What :meth:`write` saves: the run's facts, the counts, the problems :meth:`verify` would raise on, and
        every claim (infinities as the strings ``"inf"`` and ``"-inf"``, so that any JSON reader reads it)."""
        return _finite_json(
            {
                "chapter": self.chapter,
                **run_facts(),
                "counts": self.counts(),
                "problems": [p for c in self._checked_claims() for p in c.problems()],
                "claims": [c.as_dict() for c in self.claims],
            }
        )

    @checked
    def write(self, folder: str | os.PathLike | None = None) -> Path:
        """Write the ledger as ``<chapter>.json`` into ``folder`` (default :func:`claims_dir`), atomically. Write
        before :meth:`verify`: a ledger that fails is then on record as failing, not left as an older run."""
        folder = _folder(folder)
        if not is_bearable(self.chapter, Chapter):  # set after construction: it names the file written
            raise ValueError(f"chapter must be a notebook's name such as '00_icl_setting', got {self.chapter!r}")
        file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if file is not None:  # the folder, or one it would be made in, is a file
            raise ValueError(f"folder must be a folder, but {file} is a file")
        return write_json(folder / f"{self.chapter}.json", self.record(), allow_nan=False)

    def table(self) -> str:
        """The ledger as a markdown table (MyST: the figure column holds ``{numref}`` roles)."""
        return table(self._checked_claims())

    _repr_markdown_ = table


def _folder(folder: str | os.PathLike | None) -> Path:
    """A ledgers' folder: ``folder``, or :func:`claims_dir` by default; a null character refused (pathlib would
    call such a folder missing)."""
    folder = claims_dir() if folder is None else Path(folder)
    if "\0" in str(folder):
        raise ValueError(f"folder must not hold a null character, got {str(folder)!r:.80}")
    return folder


def _plain_json(value: object) -> object:
    """NumPy's numbers and arrays as the JSON values they hold (json calls this for a value it has no type for)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


@checked
def write_json(path: str | os.PathLike, data: dict, *, allow_nan: bool = True) -> Path:
    """Write ``data`` as JSON to ``path`` atomically: serialized first (a value JSON cannot hold fails before the
    disk is touched), written to a temporary file in the same folder, flushed to the disk, then renamed over
    ``path``, so that an interrupted run or a power cut never leaves a half-written results file. The file gets the
    usual permissions (0666 less the umask, as ``open`` gives).

    Writers may run at once: each temporary file carries its writer's process id, and only those of processes that
    no longer run (a killed run's: SIGKILL skips any cleanup) are removed, never a live writer's. Of concurrent
    writes the last rename wins, whole."""
    path = Path(path)
    if "\0" in str(path):  # the file system would refuse it deep inside tempfile
        raise ValueError(f"path must not hold a null character, got {str(path)!r:.80}")
    if len(path.name.encode()) > 200:  # with the temporary file's prefix and suffix, past most file systems' 255
        raise ValueError(f"path must name a file of at most 200 bytes, got {len(path.name.encode())}")
    if path.is_dir():
        raise ValueError(f"path must name a file, got the folder {path}")
    try:
        text = json.dumps(data, indent=2, allow_nan=allow_nan, default=_plain_json) + "\n"
    except (ValueError, TypeError) as err:  # a NaN with allow_nan=False, a value JSON has no type for
        raise type(err)(f"data must hold only what JSON holds: {err}") from None
    except RecursionError:  # nested past Python's recursion limit
        raise ValueError("data must be nested less deeply than Python's recursion limit") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder of the path would be
        raise ValueError(f"path must be in a folder, but a file stands in its way: {path}") from None
    # ".name.<pid>.<random>.tmp" (or ".name.<random>.tmp", from before pids): a file named "name.x" has its own
    mine = re.compile(rf"\.{re.escape(path.name)}\.(?:(\d+)\.)?\w+\.tmp")
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        found = mine.fullmatch(stale.name)
        if found and not _running(found.group(1) or ""):
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _running(pid: str) -> bool:
    """Whether the process ``pid`` (a temporary file's writer) still runs; a name without one is a dead writer's."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _finite_json(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def claims_dir() -> Path:
    """``ICL_CLAIMS_DIR`` if set (a relative path is taken from the repository's root, wherever a notebook's kernel
    runs), else ``_build/claims`` there."""
    value = os.environ.get("ICL_CLAIMS_DIR", "").strip()
    return ROOT / value if value else ROOT / "_build" / "claims"


def run_facts() -> dict:
    """Mode, device, commit and date of this run."""
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                check=False,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {
        "mode": config.mode(),
        "device": str(config.get_device()),
        "commit": commit,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


Commit = declare(
    str,
    lambda v: v.removesuffix("+").isalnum(),
    "a commit hash (letters and digits; a '+' at its end: measured with uncommitted changes)",
)
Paths = sequence_of(
    lambda p: isinstance(p, (str, os.PathLike)) and str(p) and "\0" not in str(p),
    "file or folder names (str or Path, without a null character)",
    base=tuple | list,
    empty=True,
)


@checked
def changed_since(commit: Commit, paths: Paths = ("notebooks", "icl_utils")) -> bool | None:
    """Whether ``paths`` (files or folders of the repository) differ now, in the working tree, from ``commit`` (as
    a results file records it): ``True`` when a result measured there may no longer hold, ``None`` when git cannot
    say (no repository, an unknown commit, or a commit marked ``"+"``: measured with uncommitted changes)."""
    if commit.endswith("+"):
        return None
    proc = _git("diff", "--quiet", commit, "--", *map(str, paths))
    return None if proc is None or proc.returncode not in (0, 1) else proc.returncode == 1


def _fmt(x: float | str) -> str:
    x = float(x)  # JSON holds infinities as "inf"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if abs(x) >= 1e3:
        return f"{x:.0f}"
    return f"{x:.3g}".replace("e-0", "e-").replace("e+0", "e+")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fields(name: str, record: dict, fields: tuple[str, ...]) -> None:
    """A ValueError naming ``name`` when the record lacks one of ``fields`` (a hand-made or older record)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"{name} must be a claim's (or ledger's) JSON record, a dict; got {type(record).__name__}")
    if missing := [f for f in fields if f not in record]:
        raise ValueError(f"{name} must be a claim's (or ledger's) JSON record; it lacks {missing}")


def _number_field(name: str, value: object) -> None:
    """A ValueError naming ``name`` unless ``value`` reads as a number, not NaN (JSON holds infinities as "inf"; a
    claim's and a control's values are never NaN, which passes no check) and not a bool."""
    try:
        if isinstance(value, bool) or math.isnan(float(value)):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, not NaN or a bool, got {value!r:.40}") from None
    except OverflowError:  # an int past float64's range: no table can show it
        raise ValueError(
            f"{name} must be a number within float64's range, got an int of about "
            f"10^{math.floor(math.log10(abs(value)))}"
        ) from None


def _claim_fields(name: str, record: object, fields: tuple[str, ...]) -> None:
    """A claim's record checked as the tables read it: its ``fields`` (and ``status``) present, its value a number,
    its controls records of a name, a value and whether it fails."""
    _fields(name, record, (*fields, "status"))
    _number_field(f"{name}['value']", record["value"])
    if not isinstance(record["status"], str):
        raise TypeError(f"{name}['status'] must be a str (demonstrated, weak, ...), got {record['status']!r:.40}")
    if "controls" in record and not isinstance(record["controls"], (list, tuple)):
        raise TypeError(f"{name}['controls'] must be a list of controls, got {type(record['controls']).__name__}")
    for j, control in enumerate(record.get("controls") or []):
        _fields(f"{name}['controls'][{j}]", control, ("name", "value", "fails"))
        _number_field(f"{name}['controls'][{j}]['value']", control["value"])
        if not isinstance(control["fails"], bool):
            raise TypeError(f"{name}['controls'][{j}]['fails'] must be a bool, got {control['fails']!r:.40}")


@checked
def table(claims: Sequence[Claim | dict]) -> str:
    """A markdown table of claims (or their JSON records): claim, figure, measured, check and its origin, controls
    with their values, status."""
    rows = [
        "| claim | measured | check (origin of the bound) | controls (value; fails?) | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, c in enumerate(claims):
        d = c.as_dict() if isinstance(c, Claim) else c
        _claim_fields(
            f"claims[{i}]", d, ("id", "statement", "source", "value", "check", "tolerance_origin", "controls")
        )
        measured = _fmt(d["value"])
        if d.get("interval") is not None:
            interval = d["interval"]
            if not isinstance(interval, (list, tuple)) or len(interval) != 2:
                raise ValueError(f"claims[{i}]['interval'] must be a pair (low, high), got {interval!r:.40}")
            for k, end in enumerate(interval):
                _number_field(f"claims[{i}]['interval'][{k}]", end)
            measured += f" [{_fmt(d['interval'][0])}, {_fmt(d['interval'][1])}]"
            if d.get("interval_note"):
                measured += f" ({d['interval_note']})"
        claim = f"**{d['id']}**: {d['statement']} ({d['source']}"
        claim += f"; {{numref}}`{d['figure']}`)" if d.get("figure") else ")"
        controls = (
            "; ".join(f"{x['name']}: {_fmt(x['value'])} ({'fails' if x['fails'] else 'PASSES'})" for x in d["controls"])
            or "none"
        )
        status = d["status"] + (f": {d['reason']}" if d.get("reason") else "")
        rows.append(
            "| "
            + " | ".join(
                _cell(s) for s in (claim, measured, f"{d['check']} ({d['tolerance_origin']})", controls, status)
            )
            + " |"
        )
    return "\n".join(rows)


@checked
def load(folder: str | os.PathLike | None = None) -> dict[str, dict]:
    """Every ledger written into ``folder`` (default :func:`claims_dir`), by chapter."""
    folder = _folder(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"folder must be a folder of ledgers, got the file {folder}")
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not path.is_file():  # a folder named x.json is no ledger
            raise ValueError(f"folder holds {path.name}, which is not a file")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"folder holds {path.name}, which is not JSON text: {err}") from None
        if not isinstance(record, dict) or not isinstance(record.get("chapter", ""), str):
            raise ValueError(f"folder holds {path.name}, a JSON {type(record).__name__} that is not a ledger's record")
        out[record.get("chapter", path.stem)] = record
    return out


@checked
def overview(chapters: list[str] | tuple[str, ...], ledgers: Mapping[str, dict]) -> str:
    """Two markdown tables: one row per claim of every chapter in ``chapters`` (notebook names, in order), a chapter
    without a ledger as one row "not yet migrated"; then the run each ledger comes from (mode, device, commit,
    date)."""
    if bad := [k for k in ledgers if not isinstance(k, str)]:  # a Path key would never match a chapter's name
        raise TypeError(f"ledgers must be keyed by chapter names (str), got {bad[:3]}")
    if bad := [c for c in chapters if not isinstance(c, str)]:
        raise TypeError(f"chapters must be notebook names (str), got {bad[:3]}")
    rows = ["| chapter | claim | measured | check | status |", "| --- | --- | --- | --- | --- |"]
    runs = ["| chapter | mode | device | commit | date |", "| --- | --- | --- | --- | --- |"]
    for chapter in chapters:
        record = ledgers.get(chapter)
        link = f"{{doc}}`{chapter}`"  # Sphinx shows the chapter's title
        if record is None:
            rows.append(f"| {link} | not yet migrated to a ledger | | | |")
            continue
        _fields(f"ledgers[{chapter!r}]", record, ("mode", "device", "commit", "date", "claims"))
        if not isinstance(record["claims"], (list, tuple)):
            raise TypeError(
                f"ledgers[{chapter!r}]['claims'] must be a list of claims, got {type(record['claims']).__name__}"
            )
        for j, d in enumerate(record["claims"]):
            _claim_fields(f"ledgers[{chapter!r}]['claims'][{j}]", d, ("id", "statement", "value", "check"))
        problems = record.get("problems") or []
        if not isinstance(problems, (list, tuple)) or not all(isinstance(p, str) for p in problems):
            raise TypeError(f"ledgers[{chapter!r}]['problems'] must be a list of str, got {problems!r:.60}")
        runs.append(f"| {link} | {record['mode']} | {record['device']} | {record['commit']} | {record['date']} |")
        if record.get("problems"):
            rows.append(f"| {link} | **the ledger fails**: {_cell('; '.join(record['problems']))} | | | |")
        for d in record["claims"]:
            status = d["status"] + (f": {d['reason']}" if d.get("reason") else "")
            rows.append(
                "| "
                + " | ".join(
                    _cell(s) for s in (link, f"**{d['id']}**: {d['statement']}", _fmt(d["value"]), d["check"], status)
                )
                + " |"
            )
    return "\n".join(rows) + "\n\nThe runs these ledgers come from:\n\n" + "\n".join(runs)
