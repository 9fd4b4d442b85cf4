"""When the daemon's loop wakes: the pure plan (stages/s4_judge/wakeups.py), the cgroup scan triggered by the
journal instead of a timer (sources/unit_processes.py), a silent start-up on a fake clock that wakes
only for the watchdog, the signs-of-life sampling and the policy's deadlines; and when the memory a
burst took is given back (sources/journal/journal_feed.py)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import JournalRecord
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.base import Instant, JournalBatch
from phasewatch.sources.host.procs import ProcessTable, RankProcess
from phasewatch.sources.host.unit_processes import SCAN_SPACING, RankProcessSource, UnitFactsReader
from phasewatch.sources.journal.journal_feed import (
    QUIET_RELEASE_AFTER,
    READ_BATCH,
    READS_PER_STEP,
    RELEASE_AFTER,
    RELEASE_QUIET,
    JournalFeedSource,
)
from phasewatch.stages.s4_judge.wakeups import LOOK, TALKING, Wait, plan
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
GROUP = "/system.slice/sglang-kimi.service"
T0 = 1_800_000_000.0


# -- the plan -------------------------------------------------------------------------------------

def test_quiet_unit_sleeps_until_the_earliest_deadline() -> None:
    assert plan(100.0, 112.5, last_entries_at=90.0, entries_left=False) == Wait(12.5, False)
    assert plan(100.0, math.inf, last_entries_at=-math.inf, entries_left=False) == Wait(math.inf, False)


def test_talking_unit_is_looked_at_every_look_period_whatever_its_state() -> None:
    assert plan(100.0, 112.5, last_entries_at=100.0 - TALKING / 2, entries_left=False) == Wait(LOOK, True)


def test_a_deadline_sooner_than_a_look_is_a_full_step() -> None:
    wait = plan(100.0, 100.0 + LOOK / 2, last_entries_at=100.0, entries_left=False)
    assert not wait.look and wait.seconds == pytest.approx(LOOK / 2)


def test_entries_left_over_from_a_bounded_read_are_read_at_once() -> None:
    assert plan(100.0, 112.5, last_entries_at=100.0, entries_left=True) == Wait(0.0, False)


def test_a_deadline_already_past_is_due_now() -> None:
    assert plan(100.0, 99.0, last_entries_at=-math.inf, entries_left=False) == Wait(0.0, False)


# -- the scan, triggered ------------------------------------------------------------------------

class CountingTable(ProcessTable):
    """The fixture cgroup tree, counting how often the daemon reads it for ranks."""

    def __init__(self, root: Path) -> None:
        super().__init__(proc=str(root / "proc"), cgroup_roots=(str(root / "cg"),))
        self.scans = 0

    def ranks(self, control_group: str, host_wide: bool = False, since: float | None = None) -> list[RankProcess]:
        self.scans += 1
        return super().ranks(control_group, host_wide, since)


def fixture_unit(root: Path, titles: dict[int, bytes]) -> None:
    group = root / "cg" / GROUP.lstrip("/")
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in titles))
    for pid, title in titles.items():
        (root / "proc" / str(pid)).mkdir(parents=True)
        (root / "proc" / str(pid) / "cmdline").write_bytes(title + b"\0")


def starting_pipeline() -> Pipeline:
    pipeline = Pipeline(Config(unit=UNIT))
    pipeline.feed(JournalRecord("[2026-11-29 08:00:00 TP0] Load weight begin. avail mem=70.00 GB", T0, pid=101,
                                invocation_id=INV), T0)
    return pipeline


def rank_processes(tmp_path: Path) -> tuple[RankProcessSource, CountingTable]:
    # Our own process plays TP0: a real pid, so that its pidfd opens.
    fixture_unit(tmp_path, {os.getpid(): b"sglang::scheduler_TP0", 4242: b"python3 -m sglang.launch_server"})
    table = CountingTable(tmp_path)
    facts = UnitFactsReader(RecordingUnit(UnitFacts("activating", "start", INV, control_group=GROUP,
                                                    started_at=T0)), UNIT)
    pipeline = starting_pipeline()
    return RankProcessSource(facts, table, pipeline.current), table


def test_a_new_start_up_is_scanned_at_once_then_only_when_the_journal_shows_a_new_pid(tmp_path: Path) -> None:
    ranks, table = rank_processes(tmp_path)
    now = Instant(T0, 1000.0)
    assert ranks.next_deadline(now) == -math.inf + SCAN_SPACING  # due now
    ranks.collect(now, [])
    assert table.scans == 1 and len(ranks.fds()) == 1  # TP0's pidfd
    later = Instant(T0 + 60, 1060.0)
    assert ranks.next_deadline(later) is None  # silent: nothing to wake for
    ranks.collect(later, [])
    assert table.scans == 1
    ranks.saw_pids({os.getpid()})  # a line of the watched rank: nothing new
    assert ranks.next_deadline(later) is None
    ranks.saw_pids({4242})  # a process that is not a watched rank talked
    assert ranks.next_deadline(later) == 1000.0 + SCAN_SPACING
    ranks.collect(later, [])
    assert table.scans == 2
    ranks.new_startup()
    for fd in ranks.fds():
        os.close(fd)


def test_new_pids_in_a_flood_are_read_for_at_most_once_per_spacing(tmp_path: Path) -> None:
    ranks, table = rank_processes(tmp_path)
    ranks.collect(Instant(T0, 1000.0), [])
    ranks.saw_pids({4242})
    ranks.collect(Instant(T0 + SCAN_SPACING / 2, 1000.0 + SCAN_SPACING / 2), [])
    assert table.scans == 1  # too soon: it waits for its deadline
    assert ranks.next_deadline(Instant(T0 + SCAN_SPACING / 2, 1000.0 + SCAN_SPACING / 2)) == 1000.0 + SCAN_SPACING
    ranks.collect(Instant(T0 + SCAN_SPACING, 1000.0 + SCAN_SPACING), [])
    assert table.scans == 2
    ranks.new_startup()


# -- a silent start-up on a fake clock ---------------------------------------------------------

def silent_daemon(tmp_path: Path) -> tuple[Daemon, FakeClock, ScriptedJournal, CountingTable]:
    fixture_unit(tmp_path, {4301: b"sglang::scheduler_TP0", 4242: b"python3 -m sglang.launch_server"})
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    table = CountingTable(tmp_path)
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=GROUP, started_at=T0))
    app = compose(Config(unit=UNIT), World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path / "state", UNIT), clock=clock,
                        processes=table),
                  Extras(watchdog_interval=30.0))
    journal.push(JournalRecord("[2026-11-29 08:00:00 TP0] Load weight begin. avail mem=70.00 GB", T0, pid=4301,
                               invocation_id=INV))
    return app, clock, journal, table


def wake_times(app: Daemon, clock: FakeClock, seconds: float) -> list[float]:
    """Runs the loop for `seconds` of fake time: each step sleeps what the daemon asks, then runs."""
    end, times = clock.monotonic() + seconds, []
    for _ in range(10_000):
        wait = app.next_wait(app.now())
        if clock.monotonic() + wait.seconds > end:
            break
        clock.jump(wait.seconds)
        app.step(max_wait=0)
        times.append(clock.monotonic())
    return times


def test_a_silent_start_up_wakes_only_for_watchdog_sampling_and_deadlines(tmp_path: Path) -> None:
    app, clock, _, table = silent_daemon(tmp_path)
    notifier = app.notifier
    assert isinstance(notifier, RecordingNotifier)
    app.start()
    wake_times(app, clock, TALKING + 1)  # the looks that follow the last entry
    scans, sent = table.scans, len(notifier.sent)
    times = wake_times(app, clock, 60)
    pings = 60 // 15  # WatchdogSec=30s: WATCHDOG=1 every 15 s at least
    samples = 60 // app.config.vitals.period
    # Each wake-up is a ping, a sample, or both (no policy deadline: the phase's limits are 10 min).
    assert samples <= len(times) <= pings + samples
    assert sum("WATCHDOG=1" in message for message in notifier.sent[sent:]) >= pings
    assert table.scans == scans  # no cgroup read without a new process in the journal


def test_a_line_from_a_new_process_wakes_a_scan_in_the_next_step(tmp_path: Path) -> None:
    app, clock, journal, table = silent_daemon(tmp_path)
    app.start()
    wake_times(app, clock, 30)
    scans = table.scans
    journal.push(JournalRecord("[2026-11-29 08:00:31] Started server process [4242]", clock.wall(), pid=4242,
                               invocation_id=INV))
    app.step(max_wait=0)
    clock.jump(SCAN_SPACING)
    app.step(max_wait=0)
    assert table.scans == scans + 1


# -- memory after a burst -----------------------------------------------------------------------

def test_memory_is_released_once_caught_up_after_a_burst_not_during_it() -> None:
    journal = ScriptedJournal()
    clock = FakeClock(wall=T0)
    feed = JournalFeedSource(journal, Pipeline(Config(unit=UNIT)), UNIT, clock, lambda: None)  # type: ignore[arg-type]
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP0] Decode batch, #running-req: {n}", T0, pid=101,
                                 invocation_id=INV) for n in range(RELEASE_AFTER + READ_BATCH * READS_PER_STEP)))
    list(feed.collect(Instant(T0, 1000.0), []))
    assert feed.entries_left and not feed.release_memory()  # still reading the burst
    while feed.entries_left:
        list(feed.collect(Instant(T0, 1000.0), []))
    assert feed.release_memory() and journal.dropped == 1
    assert not feed.release_memory()  # not again until RELEASE_AFTER more entries
    journal.push(JournalRecord("[2026-11-29 08:00:01 TP0] Decode batch, #running-req: 1", T0 + 1, pid=101,
                               invocation_id=INV))
    list(feed.collect(Instant(T0 + 1, 1001.0), []))
    assert not feed.release_memory() and journal.dropped == 1


def now(clock: FakeClock) -> Instant:
    return Instant(clock.wall(), clock.monotonic())


def test_the_end_of_a_burst_releases_its_memory_once_the_journal_is_quiet() -> None:
    """A burst smaller than RELEASE_AFTER: one deadline RELEASE_QUIET after its last entries, then the
    pages go; no deadline before QUIET_RELEASE_AFTER entries or after the release (no periodic wake-up)."""
    journal = ScriptedJournal()
    clock = FakeClock(wall=T0)
    feed = JournalFeedSource(journal, Pipeline(Config(unit=UNIT)), UNIT, clock, lambda: None)  # type: ignore[arg-type]
    line = "[2026-11-29 08:00:00 TP0] Decode batch, #running-req: {}"
    journal.push(*(JournalRecord(line.format(n), T0, pid=101, invocation_id=INV)
                   for n in range(QUIET_RELEASE_AFTER - 1)))
    list(feed.collect(now(clock), []))
    clock.jump(60)
    assert feed.next_deadline(now(clock)) is None and not feed.release_memory()  # a start-up's few lines
    journal.push(JournalRecord(line.format(1), T0, pid=101, invocation_id=INV))
    list(feed.collect(now(clock), []))
    read_at = clock.monotonic()
    assert feed.next_deadline(now(clock)) == read_at + RELEASE_QUIET
    clock.jump(RELEASE_QUIET / 2)
    assert not feed.release_memory()  # the burst may go on
    clock.jump(RELEASE_QUIET / 2)
    assert feed.release_memory() and journal.dropped == 1
    assert feed.next_deadline(now(clock)) is None and not feed.release_memory()


def test_collect_returns_the_batches_it_read_and_feeds_nothing_itself() -> None:
    """The journal is a source like the others: what it read comes back from `collect` (a batch at a
    time, counted), and the loop feeds it; the pipeline sees none of it before."""
    journal = ScriptedJournal()
    clock = FakeClock(wall=T0)
    pipeline = Pipeline(Config(unit=UNIT))
    feed = JournalFeedSource(journal, pipeline, UNIT, clock, lambda: None)  # type: ignore[arg-type]
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP0] Decode batch, #running-req: {n}", T0, pid=101,
                                 invocation_id=INV) for n in range(READ_BATCH + 1)))
    seen = list(feed.collect(Instant(T0, 1000.0), []))
    assert [len(batch.records) for batch in seen if isinstance(batch, JournalBatch)] == [READ_BATCH, 1]
    assert pipeline.entries == 0 and feed.entries_by_invocation == {INV: READ_BATCH + 1} and feed.read_any
    assert feed.take_pids() == {101}
