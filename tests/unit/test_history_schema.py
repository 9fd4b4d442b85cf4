"""The history's schema version (SQLite `PRAGMA user_version`): a file from before versioning is
migrated by the daemon and read back whole; one written by a newer phasewatch is refused with a clear
error, read-only, and never written, migrated back or moved aside."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from phasewatch.cli import main
from phasewatch.errors import HistoryUnreadable
from phasewatch.sinks.history import History, PhaseRecord, StartupRecord
from phasewatch.sinks.history_schema import SCHEMA_VERSION

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0

# The tables as phasewatch wrote them before the schema had a version (user_version 0), verbatim.
UNVERSIONED = """
CREATE TABLE startups (id INTEGER PRIMARY KEY, unit TEXT NOT NULL, invocation TEXT NOT NULL,
    fingerprint TEXT NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL, outcome TEXT NOT NULL,
    cause TEXT, spans TEXT NOT NULL, verdicts TEXT NOT NULL, UNIQUE (unit, invocation));
CREATE TABLE phases (startup INTEGER NOT NULL REFERENCES startups(id) ON DELETE CASCADE, phase TEXT NOT NULL,
    duration REAL NOT NULL, spread REAL NOT NULL, progress_total INTEGER, max_silence REAL NOT NULL,
    slowest_rank TEXT);
CREATE INDEX phases_by_startup ON phases(startup);
CREATE INDEX startups_by_unit ON startups(unit, fingerprint, started_at);
"""


def unversioned_file(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(UNVERSIONED)
    spans = {"TP0": [["weight_load", T0 + 10, T0 + 550]]}
    db.execute("INSERT INTO startups VALUES (1, ?, 'inv-old', 'fp', ?, ?, 'ready', NULL, ?, ?)",
               (UNIT, T0, T0 + 600, json.dumps(spans), json.dumps([["stalled", "TP3", "weight_load", T0 + 60]])))
    db.execute("INSERT INTO phases VALUES (1, 'weight_load', 540.0, 4.0, 64, 30.0, 'TP3')")
    db.commit()
    db.close()
    return path


def newer_file(path: Path, version: int = SCHEMA_VERSION + 1) -> Path:
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE startups (id INTEGER PRIMARY KEY, unit TEXT, shape_of_the_future BLOB);"
                     "INSERT INTO startups VALUES (1, 'sglang-kimi.service', x'00');")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return path


def version_of(path: Path) -> int:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        version: int = db.execute("PRAGMA user_version").fetchone()[0]
        return version
    finally:
        db.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(n: int) -> StartupRecord:
    return StartupRecord(UNIT, f"inv-{n}", "fp", T0 + n * 1000, T0 + n * 1000 + 600, "ready", None,
                         (PhaseRecord("weight_load", 500.0, 1.0, 64, 10.0, "TP1"),), {}, ())


def test_a_new_file_is_stamped_with_the_current_version(tmp_path: Path) -> None:
    History(tmp_path / "h.sqlite3").close()
    assert version_of(tmp_path / "h.sqlite3") == SCHEMA_VERSION >= 1


def test_a_file_from_before_versioning_is_migrated_and_read_back(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    path = unversioned_file(tmp_path / "h.sqlite3")
    assert version_of(path) == 0
    caplog.set_level(logging.INFO, logger="phasewatch.sinks")
    history = History(path)
    assert history.degraded is None
    assert version_of(path) == SCHEMA_VERSION
    assert f"schema migrated from version 0 to {SCHEMA_VERSION}" in caplog.text
    [old] = history.startups(UNIT)
    assert (old.invocation_id, old.outcome, old.duration) == ("inv-old", "ready", 600.0)
    assert old.phases == (PhaseRecord("weight_load", 540.0, 4.0, 64, 30.0, "TP3"),)
    assert old.spans == {"TP0": [("weight_load", T0 + 10, T0 + 550)]}
    assert old.verdicts == (("stalled", "TP3", "weight_load", T0 + 60),)
    assert history.add(record(1))
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-old", "inv-1"]
    history.close()
    assert not list(tmp_path.glob("*.corrupt-*"))
    # opened again: already current, nothing to migrate
    caplog.clear()
    History(path).close()
    assert "migrated" not in caplog.text


def test_report_reads_a_file_from_before_versioning_without_changing_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = unversioned_file(tmp_path / f"{UNIT}.history.sqlite3")
    before = digest(path)
    assert main(["report", UNIT, "--state-dir", str(tmp_path), "--json"]) == 0
    assert "inv-old" in capsys.readouterr().out
    assert digest(path) == before and version_of(path) == 0


def test_a_newer_file_is_refused_read_only_with_a_clear_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = newer_file(tmp_path / f"{UNIT}.history.sqlite3", SCHEMA_VERSION + 4)
    before = digest(path)
    with pytest.raises(HistoryUnreadable, match=rf"history schema version {SCHEMA_VERSION + 4}, newer than this "
                                                 rf"phasewatch's {SCHEMA_VERSION} \(written by a newer phasewatch\)"):
        History(path, read_only=True)
    assert main(["report", UNIT, "--state-dir", str(tmp_path)]) == 65
    assert "written by a newer phasewatch" in capsys.readouterr().err
    assert digest(path) == before


def test_the_daemon_never_clobbers_a_newer_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = newer_file(tmp_path / "h.sqlite3")
    before = digest(path)
    history = History(path)  # the daemon's open
    assert history.degraded is not None and "newer than this phasewatch's" in history.degraded
    assert history.startups(UNIT) == []  # nothing of the newer file is misread
    assert history.add(record(1))  # kept in memory for this run
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-1"]
    history.close()
    assert digest(path) == before and version_of(path) == SCHEMA_VERSION + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite3"]  # not moved aside, no -wal
    assert "left as it is" in caplog.text


def test_a_version_1_file_gains_ended_by_and_keeps_its_rows(tmp_path: Path) -> None:
    path = unversioned_file(tmp_path / f"{UNIT}.history.sqlite3")
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 1")  # a file phasewatch wrote before ended_by
    db.commit()
    db.close()
    history = History(path)
    [old] = history.startups(UNIT)
    assert old.invocation_id == "inv-old" and old.ended_by is None
    assert history.add(replace(old, invocation_id="inv-new", started_at=T0 + 700, ended_at=T0 + 800,
                               ended_by="restarted by the group: node 1 TP12 stalled in cuda_graph_capture"))
    history.close()
    assert version_of(path) == SCHEMA_VERSION == 4
    assert [r.ended_by for r in History(path, read_only=True).startups(UNIT)] == [
        None, "restarted by the group: node 1 TP12 stalled in cuda_graph_capture"]


def test_a_version_2_file_gains_the_remedy_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = unversioned_file(tmp_path / f"{UNIT}.history.sqlite3")
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE startups ADD COLUMN ended_by TEXT")
    db.execute("PRAGMA user_version = 2")  # a file phasewatch wrote before remedies were kept
    db.commit()
    db.close()
    assert [r.remedy for r in History(path, read_only=True).startups(UNIT)] == [None]  # read as it is
    assert version_of(path) == 2
    history = History(path)
    [old] = history.startups(UNIT)
    remedy = "lower --cuda-graph-max-bs (512 now) or --mem-fraction-static (0.85 now)"
    assert history.add(replace(old, invocation_id="inv-new", started_at=T0 + 700, ended_at=T0 + 800, remedy=remedy))
    history.close()
    assert version_of(path) == SCHEMA_VERSION == 4
    assert [r.remedy for r in History(path, read_only=True).startups(UNIT)] == [None, remedy]


def test_a_version_3_file_gains_the_failure_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = unversioned_file(tmp_path / f"{UNIT}.history.sqlite3")
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE startups ADD COLUMN ended_by TEXT")
    db.execute("ALTER TABLE startups ADD COLUMN remedy TEXT")
    db.execute("PRAGMA user_version = 3")  # a file phasewatch wrote before failures had fingerprints
    db.commit()
    db.close()
    assert [r.failure for r in History(path, read_only=True).startups(UNIT)] == [None]  # read as it is
    assert version_of(path) == 3
    history = History(path)
    [old] = history.startups(UNIT)
    failure = "stalled in draft_cuda_graph_capture (deadline) on TP3"
    assert history.add(replace(old, invocation_id="inv-new", started_at=T0 + 700, ended_at=T0 + 800,
                               outcome="stalled", failure=failure))
    history.close()
    assert version_of(path) == SCHEMA_VERSION == 4
    assert [r.failure for r in History(path, read_only=True).startups(UNIT)] == [None, failure]


def _stamped(path: Path, version: int) -> Path:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return path


def _view_named_startups(path: Path) -> Path:
    """The probe's: a current file whose `startups` is a view with every column (over a table of them)."""
    db = sqlite3.connect(path)
    db.executescript(UNVERSIONED.replace("TABLE startups", "TABLE kept").replace("ON startups", "ON kept")
                     + "CREATE VIEW startups AS SELECT *, NULL AS ended_by, NULL AS remedy, NULL AS failure FROM kept;")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("shape", ["negative version", "view named startups"])
def test_a_history_of_a_shape_not_phasewatchs_is_moved_aside_never_fatal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, shape: str) -> None:
    """PROBE-S4 M-1: `PRAGMA user_version = -5` made `migrate` raise KeyError: -4; a view named
    `startups` made `CREATE INDEX` raise "views may not be indexed", again in the in-memory fallback.
    Either way out of History(): every daemon start crashed. Now the file is moved aside (said) and a
    fresh one is used."""
    path = tmp_path / "history.sqlite3"
    if shape == "negative version":
        unversioned_file(path)
        _stamped(path, -5)
    else:
        _view_named_startups(path)
    with caplog.at_level(logging.WARNING):
        history = History(path)
    assert history.degraded is None
    assert "moved to history.sqlite3.corrupt-" in caplog.text
    assert [p.name for p in tmp_path.glob("history.sqlite3.corrupt-*")]
    assert version_of(path) == SCHEMA_VERSION
    record = StartupRecord(UNIT, "inv-new", "fp", T0, T0 + 60, "ready", None, (PhaseRecord("weight_load", 50.0, 1.0,
                                                                                           None, 2.0),))
    assert history.add(record)
    history.close()


@pytest.mark.parametrize("shape", ["negative version", "view named startups"])
def test_such_a_history_that_cannot_be_moved_aside_is_kept_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """The same files where the state directory refuses the move (the tests run as root: a refused
    rename is faked): the history goes on in memory, from nothing (what the file holds is not copied:
    the view made the in-memory schema script fail too), and History() returns."""
    path = tmp_path / "history.sqlite3"
    (_stamped(unversioned_file(path), -5) if shape == "negative version" else _view_named_startups(path))

    def refused(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr("phasewatch.sinks.history.os.replace", refused)
    history = History(path)
    assert history.degraded is not None and "cannot start a fresh" in history.degraded
    record = StartupRecord(UNIT, "inv-new", "fp", T0, T0 + 60, "ready", None, ())
    assert history.add(record)
    history.close()


def test_report_refuses_such_a_history_with_a_clear_error(tmp_path: Path) -> None:
    path = _view_named_startups(tmp_path / "history.sqlite3")
    with pytest.raises(HistoryUnreadable, match="not a readable history.*startups is a view"):
        History(path, read_only=True)


def test_an_unforeseen_error_opening_the_history_keeps_it_in_memory(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The net under the shapes above: whatever else `History()` meets, the daemon starts."""
    def broken(db: sqlite3.Connection, path: Path) -> None:
        raise KeyError(-4)

    monkeypatch.setattr("phasewatch.sinks.history.migrate", broken)
    history = History(tmp_path / "history.sqlite3")
    assert history.degraded is not None and "cannot use" in history.degraded
    assert history.add(StartupRecord(UNIT, "inv-new", "fp", T0, T0 + 60, "ready", None, ()))
