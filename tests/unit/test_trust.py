"""Entries read from the journal count for the unit only with the trusted fields journald sets.

Forged entries are what a local user writes with `logger --journald`: `OBJECT_SYSTEMD_UNIT=` and
any other field not starting with `_`, with journald's own `_UID`, `_PID`, `_TRANSPORT=journal`.
The classifier is pure; the journal tests write the entries with systemd-journal-remote and read
them through the real reader (`JournalFollower`), `replay --unit`, `CurrentStartup` and `wait-ready`.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sglang_sim import Faults, build, journal_json

from fakes import ScriptedJournal
from journal_dirs import write_journal
from phasewatch.app import Daemon
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.commands.waitready import ReadyWaiter
from phasewatch.config import Config, parse_config
from phasewatch.pipeline import Pipeline
from phasewatch.records import (
    MID_STARTED,
    MID_STOPPING,
    MID_SUPPRESSED,
    JournalRecord,
    record_from_fields,
)
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier, RecordingUnit, UnitFacts
from phasewatch.sinks.metrics import Exporter
from phasewatch.sinks.state import StateStore
from phasewatch.sources.current import CurrentStartup, find_start
from phasewatch.sources.follow import JournalFollower
from phasewatch.sources.procs import ProcessTable
from phasewatch.stages.respond import Memory
from phasewatch.trust import (
    LIFECYCLE_NOT_FROM_PID1,
    LINE_NOT_FROM_UNIT,
    SUPPRESSION_NOT_FROM_JOURNALD,
    rejection,
)

UNIT = "sglang-kimi.service"
INVOCATION = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
FORGED_INVOCATION = "ffffffffffffffffffffffffffffffff"
BASE = 1796025600.0
# What journald adds to an entry `logger --journald` sent as uid 65534 from outside any service.
NOBODY = {"_UID": "65534", "_GID": "65534", "_PID": "4242", "_TRANSPORT": "journal", "_COMM": "logger"}
# What journald puts on its own "Suppressed N messages" notice (seen in the e2e sandbox, systemd 252).
JOURNALD = {"_UID": "0", "_GID": "0", "_PID": "76", "_TRANSPORT": "driver", "_COMM": "systemd-journal",
            "_SYSTEMD_UNIT": "systemd-journald.service"}
PID1 = {"_UID": "0", "_PID": "1", "_TRANSPORT": "journal", "UNIT": UNIT}


def forged_started(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT, "UNIT": UNIT,
            "MESSAGE_ID": MID_STARTED, "INVOCATION_ID": FORGED_INVOCATION, "MESSAGE": f"Started {UNIT}."}


def forged_stopping(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT, "UNIT": UNIT,
            "MESSAGE_ID": MID_STOPPING, "INVOCATION_ID": INVOCATION, "MESSAGE": f"Stopping {UNIT}..."}


def forged_line(text: str, ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT,
            "_SYSTEMD_INVOCATION_ID": INVOCATION, "MESSAGE": text}


def forged_suppressed(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT,
            "MESSAGE_ID": MID_SUPPRESSED, "N_DROPPED": "123456", "MESSAGE": f"Suppressed 123456 messages from {UNIT}"}


def stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def phantom_rank(ts: float = BASE) -> dict[str, Any]:
    return forged_line(f"[{stamp(ts)} TP9] Load weight begin. avail mem=137.95 GB", ts)


def forged_ready(ts: float = BASE) -> dict[str, Any]:
    return forged_line(f"[{stamp(ts)}] The server is fired up and ready to roll!", ts)


def record(fields: dict[str, Any]) -> JournalRecord:
    return record_from_fields(fields)


# -- the classifier ------------------------------------------------------------------------------

def test_forged_started_with_a_new_invocation_is_rejected() -> None:
    assert rejection(record(forged_started()), UNIT) == LIFECYCLE_NOT_FROM_PID1


def test_forged_stopping_is_rejected() -> None:
    assert rejection(record(forged_stopping()), UNIT) == LIFECYCLE_NOT_FROM_PID1


def test_forged_lifecycle_from_root_but_not_pid1_is_rejected() -> None:
    assert rejection(record({**forged_started(), "_UID": "0"}), UNIT) == LIFECYCLE_NOT_FROM_PID1


def test_forged_ready_line_is_rejected() -> None:
    assert rejection(record(forged_ready()), UNIT) == LINE_NOT_FROM_UNIT


def test_forged_phantom_rank_line_is_rejected() -> None:
    assert rejection(record(phantom_rank()), UNIT) == LINE_NOT_FROM_UNIT


def test_forged_suppressed_notice_is_rejected() -> None:
    assert rejection(record(forged_suppressed()), UNIT) == SUPPRESSION_NOT_FROM_JOURNALD


def test_suppressed_notice_from_root_but_not_journald_is_rejected() -> None:
    assert rejection(record({**forged_suppressed(), "_UID": "0"}), UNIT) == SUPPRESSION_NOT_FROM_JOURNALD


def test_the_servers_own_entries_are_not_screened_by_what_they_claim() -> None:
    # A line of the unit's own processes is a line, whatever fields it adds (the pipeline sees its text).
    own = {**forged_started(), "_UID": "1000", "_SYSTEMD_UNIT": UNIT, "_PID": "300"}
    assert rejection(record(own), UNIT) is None


def test_genuine_pid1_started_is_accepted() -> None:
    genuine = {**PID1, "MESSAGE_ID": MID_STARTED, "INVOCATION_ID": INVOCATION, "MESSAGE": f"Started {UNIT}."}
    assert rejection(record(genuine), UNIT) is None


def test_genuine_journald_suppression_notice_is_accepted() -> None:
    genuine = {**JOURNALD, "OBJECT_SYSTEMD_UNIT": UNIT, "OBJECT_PID": "81", "MESSAGE_ID": MID_SUPPRESSED,
               "N_DROPPED": "178", "MESSAGE": f"Suppressed 178 messages from {UNIT}"}
    assert rejection(record(genuine), UNIT) is None


def test_a_line_of_another_unit_is_rejected() -> None:
    other = {**forged_ready(), "_SYSTEMD_UNIT": "other.service", "_UID": "0"}
    assert rejection(record(other), UNIT) == LINE_NOT_FROM_UNIT


# -- through the real journal reader -------------------------------------------------------------

def healthy_with_forgeries() -> list[dict[str, Any]]:
    """A healthy start-up's first minute, then the four forgeries amid it, all timed inside it."""
    entries = list(journal_json(build(faults=Faults(hang={3: "weight_load"})), base=BASE, unit=UNIT))
    t = BASE + 30
    forged = [forged_started(t), phantom_rank(t + 0.1), forged_suppressed(t + 0.2), forged_ready(t + 0.3),
              forged_stopping(t + 0.4)]
    return sorted(entries + forged, key=lambda e: int(e["__REALTIME_TIMESTAMP"]))


def test_follower_reads_past_forged_entries_and_counts_them(tmp_path: Path) -> None:
    entries = healthy_with_forgeries()
    directory = write_journal(tmp_path / "j", entries)
    follower = JournalFollower(UNIT, str(directory))
    try:
        follower.seek_head()
        records = follower.read(100_000)
    finally:
        follower.close()
    assert len(records) == len(entries) - 5
    assert FORGED_INVOCATION not in {r.extra.get("INVOCATION_ID") for r in records}
    assert not any("TP9]" in str(r.message) or "fired up" in str(r.message) for r in records)
    assert follower.rejected == {LIFECYCLE_NOT_FROM_PID1: 2, LINE_NOT_FROM_UNIT: 2, SUPPRESSION_NOT_FROM_JOURNALD: 1}


def test_an_all_forged_batch_does_not_end_the_read_early(tmp_path: Path) -> None:
    forged = [phantom_rank(BASE + i / 1000) for i in range(50)]
    genuine = list(journal_json(build(), base=BASE + 1, unit=UNIT))[:5]
    directory = write_journal(tmp_path / "j", forged + genuine)
    follower = JournalFollower(UNIT, str(directory))
    try:
        follower.seek_head()
        assert len(follower.read(10)) == 5  # 50 rejected entries read past within one call
    finally:
        follower.close()
    assert follower.rejected == {LINE_NOT_FROM_UNIT: 50}


def test_a_flood_of_forged_entries_is_read_past_in_bounded_reads_that_say_so(tmp_path: Path) -> None:
    forged = [phantom_rank(BASE + i / 1000) for i in range(50)]
    genuine = list(journal_json(build(), base=BASE + 1, unit=UNIT))[:5]
    directory = write_journal(tmp_path / "j", forged + genuine)
    follower = JournalFollower(UNIT, str(directory))
    try:
        follower.seek_head()
        assert follower.read(2) == [] and follower.behind  # 32 entries looked at, all forged: not the end
        records = []
        while (batch := follower.read(2)) or follower.behind:
            records += batch
    finally:
        follower.close()
    assert len(records) == 5 and not follower.behind
    assert follower.rejected == {LINE_NOT_FROM_UNIT: 50}


def test_replay_unit_takes_no_forged_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = write_journal(tmp_path / "j", healthy_with_forgeries())
    assert main(["replay", "--json", "--unit", UNIT, "--directory", str(directory), "--now", "+20m"]) == 0
    out, err = capsys.readouterr()
    [inv] = json.loads(out)["invocations"]
    assert f"ignored entries that claim {UNIT} without journald's trusted fields (2 lifecycle_not_from_pid1, " \
           "2 line_not_from_unit, 1 suppression_not_from_journald)" in err
    assert inv["invocation_id"] == INVOCATION
    assert "TP9" not in inv["ranks"]
    assert inv["lines_lost"] == 0
    assert [(v["kind"], v["rank"]) for v in inv["verdicts"]] == [("stalled", "TP3")]


def test_current_startup_and_wait_ready_take_no_forged_entry(tmp_path: Path) -> None:
    """wait-ready in ExecStartPost=: a phantom rank or a forged stop must not fail a start, a forged
    ready must not pass a hung one."""
    entries = healthy_with_forgeries()
    directory = write_journal(tmp_path / "j", entries)
    assert find_start(UNIT, str(directory)).invocation_id == INVOCATION
    config = parse_config(f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 10m}}\nrank_skew: 1h\n")
    clock = FakeClock(wall=BASE + 31)
    follower = JournalFollower(UNIT, str(directory))
    try:
        startup = CurrentStartup(config, follower, find_start(UNIT, str(directory)))
        out = io.StringIO()
        code = ReadyWaiter(config, startup, clock, out, None, wait=clock.jump).run()
    finally:
        follower.close()
    assert code == 2  # will not become ready
    assert out.getvalue().splitlines()[-1].startswith(f"phasewatch: stalled: {UNIT}: TP3 stalled in weight_load")
    assert "TP9" not in out.getvalue()


def test_rejected_entries_are_a_metric() -> None:
    registry = CollectorRegistry()
    exporter = Exporter(Config(unit=UNIT), registry, FakeClock(wall=BASE))
    labels = {"unit": UNIT}
    assert registry.get_sample_value("phasewatch_entries_rejected_total", {**labels, "reason": LINE_NOT_FROM_UNIT}) == 0
    exporter.saw_rejected({LINE_NOT_FROM_UNIT: 3, SUPPRESSION_NOT_FROM_JOURNALD: 1})
    exporter.publish(Pipeline(Config(unit=UNIT)), Memory(), BASE)
    assert registry.get_sample_value("phasewatch_entries_rejected_total", {**labels, "reason": LINE_NOT_FROM_UNIT}) == 3
    assert registry.get_sample_value("phasewatch_entries_rejected_total",
                                     {**labels, "reason": SUPPRESSION_NOT_FROM_JOURNALD}) == 1


def test_status_from_the_journal_takes_no_forged_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = write_journal(tmp_path / "j", healthy_with_forgeries())
    main(["status", UNIT, "--directory", str(directory), "--json"])
    inv = json.loads(capsys.readouterr().out)["invocation"]
    assert inv["invocation_id"] == INVOCATION
    assert set(inv["ranks"]) == {"main", *(f"TP{n}" for n in range(8))}
    assert (inv["lines_lost"], inv["unit_state"]) == (0, "starting")


def test_logs_show_no_forged_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = write_journal(tmp_path / "j", healthy_with_forgeries())
    assert main(["logs", UNIT, "--directory", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "Load weight begin" in out
    assert sum(f"Started {UNIT}" in line for line in out.splitlines()) == 1  # PID 1's, not the forged one
    assert not any(forged in out for forged in ("TP9", "fired up", "Suppressed", "Stopping"))


class FloodedJournal(ScriptedJournal):
    """Its next `empty_reads` reads look only at forged entries: empty, with `behind` set."""

    def __init__(self) -> None:
        super().__init__()
        self.empty_reads = 0

    def read(self, limit: int = 1000) -> list[JournalRecord]:
        if self.empty_reads:
            self.empty_reads -= 1
            self.behind = True
            self.rejected = {LINE_NOT_FROM_UNIT: self.rejected.get(LINE_NOT_FROM_UNIT, 0) + limit * 16}
            return []
        self.behind = False
        return super().read(limit)


def test_daemon_reads_on_past_a_flood_of_forged_entries(tmp_path: Path) -> None:
    clock = FakeClock(wall=BASE)
    journal = FloodedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INVOCATION, control_group=None, started_at=BASE))
    app = Daemon(Config(unit=UNIT), follower=journal, unit=unit,  # type: ignore[arg-type]
                 alerter=RecordingAlerter(UNIT), notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT),
                 clock=clock, processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),)))
    app.start()
    journal.empty_reads = 12  # more than one step reads (10): the next step must not wait for the journal
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", BASE,
                                 pid=100 + n, invocation_id=INVOCATION) for n in range(8)))
    app.step(max_wait=0)
    app.step(max_wait=0)
    current = app.pipeline.snapshot().current
    assert current is not None and {r.rank for r in current.ranks} >= {f"TP{n}" for n in range(8)}


def test_the_servers_own_forged_started_is_only_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server's processes are trusted for lines, not for lifecycle: its own entry claiming a
    new start-up stays a line of the current one."""
    entries = healthy_with_forgeries()
    own = {**forged_started(BASE + 31), "_UID": "1000", "_PID": "300", "_SYSTEMD_UNIT": UNIT,
           "_SYSTEMD_INVOCATION_ID": INVOCATION}
    directory = write_journal(tmp_path / "j", sorted([*entries, own], key=lambda e: int(e["__REALTIME_TIMESTAMP"])))
    assert main(["replay", "--json", "--unit", UNIT, "--directory", str(directory), "--now", "+20m"]) == 0
    [inv] = json.loads(capsys.readouterr().out)["invocations"]
    assert inv["invocation_id"] == INVOCATION
