"""Entries read from the journal count for the unit only with the trusted fields journald sets.

Forged entries are what a local user writes with `logger --journald`: `OBJECT_SYSTEMD_UNIT=` and
any other field not starting with `_`, with journald's own `_UID`, `_PID`, `_TRANSPORT=journal`.
The classifier is pure; the journal tests write the entries with systemd-journal-remote and read
them through the real reader (`JournalFollower`), `replay --unit`, `CurrentStartup` and `wait-ready`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import Faults, build, journal_json

from forged_entries import (
    BASE,
    FORGED_INVOCATION,
    INVOCATION,
    UNIT,
    forged_ready,
    forged_started,
    forged_stopping,
    forged_suppressed,
    phantom_rank,
)
from journal_dirs import write_journal
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.commands.waitready import ReadyWaiter
from phasewatch.config.load import parse_config
from phasewatch.sources.journal.current import CurrentStartup, find_start
from phasewatch.sources.journal.follow import JournalFollower
from phasewatch.sources.journal.trust import (
    LIFECYCLE_NOT_FROM_PID1,
    LINE_NOT_FROM_UNIT,
    SUPPRESSION_NOT_FROM_JOURNALD,
)


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
           "2 line_not_from_unit, 1 suppression_not_from_journald)" in " ".join(err.split())
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
