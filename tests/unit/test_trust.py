"""Entries read from the journal count for the unit only with the trusted fields journald sets.

Forged entries are what a local user writes with `logger --journald`: `OBJECT_SYSTEMD_UNIT=` and
any other field not starting with `_`, with journald's own `_UID`, `_PID`, `_TRANSPORT=journal`.
The classifier is pure; the journal tests write the entries with systemd-journal-remote and read
them through the real reader (`JournalFollower`), `replay --unit`, `CurrentStartup` and `wait-ready`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from fakes import ScriptedJournal
from forged_entries import (
    BASE,
    INVOCATION,
    JOURNALD,
    PID1,
    UNIT,
    forged_ready,
    forged_started,
    forged_stopping,
    forged_suppressed,
    phantom_rank,
)
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import Config
from phasewatch.judge import Judge
from phasewatch.pipeline import Pipeline
from phasewatch.records import (
    MID_STARTED,
    MID_SUPPRESSED,
    JournalRecord,
    record_from_fields,
)
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.journal.trust import (
    LIFECYCLE_NOT_FROM_PID1,
    LINE_NOT_FROM_UNIT,
    SUPPRESSION_NOT_FROM_JOURNALD,
    rejection,
)
from phasewatch.stages.s5_act.respond import Memory
from phasewatch.systemd_unit import RecordingUnit, UnitFacts


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


def test_rejected_entries_are_a_metric() -> None:
    registry = CollectorRegistry()
    exporter = Exporter(Config(unit=UNIT), registry, FakeClock(wall=BASE))
    labels = {"unit": UNIT}
    assert registry.get_sample_value("phasewatch_entries_rejected_total", {**labels, "reason": LINE_NOT_FROM_UNIT}) == 0
    exporter.saw_rejected({LINE_NOT_FROM_UNIT: 3, SUPPRESSION_NOT_FROM_JOURNALD: 1})
    pipeline = Pipeline(Config(unit=UNIT))
    exporter.publish(Judge(pipeline.config, pipeline).judge(BASE), Memory())
    assert registry.get_sample_value("phasewatch_entries_rejected_total", {**labels, "reason": LINE_NOT_FROM_UNIT}) == 3
    assert registry.get_sample_value("phasewatch_entries_rejected_total",
                                     {**labels, "reason": SUPPRESSION_NOT_FROM_JOURNALD}) == 1


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
    app = compose(Config(unit=UNIT), World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    app.start()
    journal.empty_reads = 12  # more than one step reads (10): the next step must not wait for the journal
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", BASE,
                                 pid=100 + n, invocation_id=INVOCATION) for n in range(8)))
    app.step(max_wait=0)
    app.step(max_wait=0)
    current = app.pipeline.snapshot().current
    assert current is not None and {r.rank for r in current.ranks} >= {f"TP{n}" for n in range(8)}
