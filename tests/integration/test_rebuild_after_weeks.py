"""The daemon's rebuild at start over real journal files (PROBE-S3 H-3, H-4): after long serving it reads
the start-up up to ready and the last entries, not the serving bulk between, and what matters (state,
ready time, ranks and their phases, the start-up's start, the restart memory) is what a full read
gives; a start-up whose beginning the journal no longer holds, or a cursor vacuumed while entries
were unread, is lines lost (cause journal_vacuumed)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import build, journal_json

from forged_entries import forged_line
from journal_dirs import write_journal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import Config
from phasewatch.records import VerdictKind
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.journal import journal_source, rebuild
from phasewatch.sources.journal.follow import JournalFollower
from phasewatch.sources.journal.journal_feed import JournalFeedSource
from phasewatch.stages.s4_judge import policy
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INVOCATION = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
STARTED = 1796025600.0
SERVING = 30_000


def access_lines(start: float, count: int, every: float = 0.01) -> list[dict[str, Any]]:
    """uvicorn access lines with a request id each (no two alike but for digits: they form no runs)."""
    out = []
    for k in range(count):
        rid = uuid.UUID(int=k * 0x9E3779B97F4A7C15 % (1 << 128)).hex
        out.append({"__REALTIME_TIMESTAMP": str(int((start + k * every) * 1e6)), "_PID": "4711", "_SYSTEMD_UNIT": UNIT,
                    "_SYSTEMD_INVOCATION_ID": INVOCATION, "SYSLOG_IDENTIFIER": "python3",
                    "MESSAGE": f'[2026-11-30 08:10:00] INFO:     10.0.{k % 250}.{k % 7}:{40000 + k % 20000} - '
                               f'"POST /v1/chat/completions HTTP/1.1" 200 OK request_id={rid}'})
    return out


def served_journal(tmp_path: Path) -> Path:
    entries = list(journal_json(build(scale=0.01), base=STARTED, unit=UNIT, invocation=INVOCATION))
    last = max(int(e["__REALTIME_TIMESTAMP"]) for e in entries) / 1e6  # type: ignore[call-overload]
    return write_journal(tmp_path / "journal", [*entries, *access_lines(last + 60, SERVING)])


def started(directory: Path, tmp_path: Path, name: str, wall: float) -> tuple[Daemon, RecordingNotifier]:
    state = tmp_path / name
    unit = RecordingUnit(UnitFacts("active", "running", INVOCATION, control_group=None, started_at=STARTED))
    notifier = RecordingNotifier()
    app = compose(Config(unit=UNIT), World(follower=JournalFollower(UNIT, str(directory)), unit=unit,
                        alerter=RecordingAlerter(UNIT), notifier=notifier, store=StateStore(state, UNIT),
                        clock=FakeClock(wall=wall),
                        processes=ProcessTable(proc=str(state / "proc"), cgroup_roots=(str(state / "cg"),))))
    app.start()
    return app, notifier


def what_matters(app: Daemon) -> tuple[object, ...]:
    inv = app.pipeline.current()
    assert inv is not None
    return (inv.invocation_id, inv.state, inv.started_at, policy.outcome(inv, []), inv.lines_lost,
            tuple((r.rank, r.phase, r.phase_start, r.seen) for r in inv.ranks if r.rank != "main"),
            tuple(span for r in inv.ranks for span in r.spans if r.rank != "main"), app.actor.memory)


@pytest.mark.parametrize("pure", [False, True], ids=["C", "python"])
def test_a_rebuild_after_long_serving_reads_to_ready_and_the_recent_entries_and_equals_a_full_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: bool) -> None:
    if pure:
        monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
    directory = served_journal(tmp_path)
    wall = STARTED + 86_400
    monkeypatch.setattr(rebuild, "RECENT_ENTRIES", 10 ** 9)  # (nothing is ever skipped)
    full, _ = started(directory, tmp_path, "full", wall)
    monkeypatch.setattr(rebuild, "RECENT_ENTRIES", 2000)
    windowed, _ = started(directory, tmp_path, "windowed", wall)
    # (the start-up, at most a batch past ready, and the last 2000)
    start_up = full.pipeline.entries - SERVING
    assert start_up > 0 and windowed.pipeline.entries <= start_up + journal_source.BATCH + 2000
    assert what_matters(windowed) == what_matters(full)
    inv = windowed.pipeline.current()
    assert inv is not None and inv.state.value in ("ready", "serving")
    assert {r.rank for r in inv.ranks} >= {f"TP{n}" for n in range(8)}
    # and it follows on after the journal's last entry
    later = access_lines(STARTED + 86_000, 5)
    write_journal(directory, later)
    for app in (full, windowed):
        before = app.pipeline.entries
        app.follower.reopen()
        while app.journal.read():
            pass
        assert app.pipeline.entries == before + 5


def test_entries_forged_in_the_units_name_cost_the_rebuild_a_bounded_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # PROBE-S3 L-4: a local user's OBJECT_SYSTEMD_UNIT= entries, 30,000 after ready and 30,000 during
    # the start-up; the rebuild reads the last RECENT_ENTRIES of them, and before ready at most
    # START_SECONDS of them.
    entries = list(journal_json(build(scale=0.01), base=STARTED, unit=UNIT, invocation=INVOCATION))
    first = int(entries[1]["__REALTIME_TIMESTAMP"]) / 1e6  # type: ignore[call-overload]
    last = max(int(e["__REALTIME_TIMESTAMP"]) for e in entries) / 1e6  # type: ignore[call-overload]
    during = [forged_line(f"forged {k}", first + 0.001 + k * 1e-7) for k in range(30_000)]
    after = [forged_line(f"forged {k}", last + 60 + k * 0.01) for k in range(30_000)]
    directory = write_journal(tmp_path / "journal", sorted([*entries, *during, *after],
                                                           key=lambda e: int(e["__REALTIME_TIMESTAMP"])))
    monkeypatch.setattr(rebuild, "RECENT_ENTRIES", 2000)
    app, _ = started(directory, tmp_path, "forged", STARTED + 86_400)
    inv = app.pipeline.current()
    assert inv is not None and inv.state.value in ("ready", "serving")
    assert 30_000 <= app.follower.rejected["line_not_from_unit"] <= 30_000 + journal_source.BATCH + 2000
    monkeypatch.setattr(rebuild, "START_SECONDS", 0.0)  # (the bound reached at the first batch)
    bounded, _ = started(directory, tmp_path, "bounded", STARTED + 86_400)
    assert bounded.follower.rejected["line_not_from_unit"] <= 2 * journal_source.BATCH + 2000


def test_a_start_up_whose_beginning_was_vacuumed_is_lines_lost(tmp_path: Path) -> None:
    # The journal's oldest entry is a minute after the start-up began: its start is gone.
    directory = write_journal(tmp_path / "journal", access_lines(STARTED + 60, 100))
    app, notifier = started(directory, tmp_path, "vacuumed", STARTED + 120)
    inv = app.pipeline.current()
    assert inv is not None and inv.invocation_id == INVOCATION and inv.started_at == STARTED
    assert inv.lines_lost >= 1 and inv.lost_cause == "journal_vacuumed"
    verdicts = policy.evaluate(inv, STARTED + 120, app.config)
    assert [v.cause for v in verdicts if v.kind == VerdictKind.LINES_LOST] == ["journal_vacuumed"]
    assert "READY=1" in notifier.sent


def test_a_start_up_the_journal_still_holds_is_not_lines_lost(tmp_path: Path) -> None:
    directory = served_journal(tmp_path)
    app, _ = started(directory, tmp_path, "whole", STARTED + 3600)
    inv = app.pipeline.current()
    assert inv is not None and inv.lines_lost == 0


def test_a_cursor_in_a_file_vacuumed_before_the_rest_was_read_is_lines_lost(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    write_journal(directory, access_lines(STARTED, 1000), name="old")
    write_journal(directory, access_lines(STARTED + 100, 1000), name="new")
    follower = JournalFollower(UNIT, str(directory))
    follower.seek_head()
    feed = JournalFeedSource(follower, app_pipeline(), UNIT, FakeClock(wall=STARTED + 200), lambda: None)
    assert feed.read() and not follower.at_end  # 250 of the old file's 1000 read: behind
    (directory / "old.journal").unlink()  # vacuumed
    assert feed.reopen("changed")
    assert feed.lost_unread == 1
    while feed.read():
        pass
    assert feed.pipeline.entries == 250 + 1000  # the new file's entries, once each


def test_a_vacuum_of_files_already_read_loses_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    write_journal(directory, access_lines(STARTED, 100), name="old")
    write_journal(directory, access_lines(STARTED + 100, 100), name="new")
    follower = JournalFollower(UNIT, str(directory))
    follower.seek_head()
    feed = JournalFeedSource(follower, app_pipeline(), UNIT, FakeClock(wall=STARTED + 200), lambda: None)
    while feed.read():
        pass
    (directory / "old.journal").unlink()
    assert feed.reopen("changed") and feed.lost_unread == 0
    assert not feed.read() and feed.pipeline.entries == 200


def app_pipeline() -> Any:
    from phasewatch.pipeline import Pipeline
    return Pipeline(Config(unit=UNIT))
