"""A daemon (re)started while its unit has served for long rebuilds the start-up from the journal:
with the C reader it reads from the start-up's beginning to the journal's end as `replay --unit` does
(runs, read-ahead; `JournalFeedSource.catch_up`), and then follows from the last entry it read. Over real
journal files: the state, the counts and the ranks' PIDs are those the follower alone reaches, and
entries written after the catch-up are read once."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fastpath_journal import UNIT, decode_line, journal

from fastpath_compare import fields_by_name_only
from journal_dirs import write_journal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import Config
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.journal import journal_source
from phasewatch.sources.journal.follow import JournalFollower
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

STARTED = 1796025600.0 + 3600  # the second start-up's (test_fastpath_journal.journal)
INVOCATION = f"{2:032x}"


def started_daemon(directory: Path, tmp_path: Path, pure: bool, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    if pure:
        monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
    state = tmp_path / ("pure" if pure else "c")
    unit = RecordingUnit(UnitFacts("active", "running", INVOCATION, control_group=None, started_at=STARTED))
    app = compose(Config(unit=UNIT), World(follower=JournalFollower(UNIT, str(directory)), unit=unit,
                        alerter=RecordingAlerter(UNIT), notifier=RecordingNotifier(), store=StateStore(state, UNIT),
                        clock=FakeClock(wall=STARTED + 7200),
                        processes=ProcessTable(proc=str(state / "proc"), cgroup_roots=(str(state / "cg"),))))
    app.start()
    return app


def seen(app: Daemon) -> tuple[object, ...]:
    return (app.pipeline.snapshot(), dict(app.journal.entries_by_invocation), dict(app.follower.rejected),
            app.journal.pids, app.pipeline.entries)


@pytest.mark.skipif(journal_source.c_lines is None, reason="the package was built without its C reader")
def test_a_daemon_started_after_long_serving_catches_up_in_c_and_follows_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = write_journal(tmp_path / "journal", journal(crashy=True, starts=2, lines=6000))
    caught_up: list[bool] = []
    real = journal_source.unit_entries

    def counted(*args: object, **kwargs: object) -> object:
        caught_up.append(True)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(journal_source, "unit_entries", counted)
    fields_by_name_only(monkeypatch)  # (the catch-up reads its lines' and runs' fields by name)
    in_c = started_daemon(directory, tmp_path, False, monkeypatch)
    assert caught_up == [True]
    by_follower = started_daemon(directory, tmp_path, True, monkeypatch)
    assert caught_up == [True]  # (the pure build: the follower read them)
    assert seen(in_c) == seen(by_follower)
    current = in_c.pipeline.current()
    assert current is not None and current.invocation_id == INVOCATION
    assert in_c.journal.entries_by_invocation[INVOCATION] > 6000
    assert in_c.follower.cursor is not None

    later = [{"__REALTIME_TIMESTAMP": str(int((STARTED + 7000 + k) * 1e6)), "_PID": "4821", "_SYSTEMD_UNIT": UNIT,
              "_SYSTEMD_INVOCATION_ID": INVOCATION, "MESSAGE": decode_line(k)} for k in range(25)]
    write_journal(directory, later)
    for app in (in_c, by_follower):
        before = app.journal.entries_by_invocation[INVOCATION]
        app.follower.reopen()  # (the same file grew: a fresh reader at the cursor sees it)
        while app.journal.read():
            pass
        assert app.journal.entries_by_invocation[INVOCATION] == before + 25
    assert seen(in_c) == seen(by_follower)

