"""The rank-process source over real processes and real pidfds: a process titled like an SGLang
scheduler appears in the unit's cgroup (a fixture `cgroup.procs`, /proc is the real one) after the
start-up's first read of it; nothing reads the cgroup again until the journal shows that process's
`_PID`; then it is watched, and its death comes through its pidfd as RANK_DIED. Times are passed in
(`Instant`); the only waits are for the child's title and its exit, real events."""

from __future__ import annotations

import select
import subprocess
import time
from pathlib import Path

from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import EventKind, JournalRecord
from phasewatch.sources.base import Instant
from phasewatch.sources.host.procs import ProcessTable, RankProcess
from phasewatch.sources.host.unit_processes import DEATH_GRACE, SCAN_SPACING, RankProcessSource, UnitFactsReader
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "phasewatch-test.service"
GROUP = "/system.slice/phasewatch-test.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
TITLE = b"sglang::scheduler_TP3"


class CountingTable(ProcessTable):
    def __init__(self, cgroup_root: Path) -> None:
        super().__init__(cgroup_roots=(str(cgroup_root),))
        self.scans = 0

    def ranks(self, control_group: str, host_wide: bool = False, since: float | None = None) -> list[RankProcess]:
        self.scans += 1
        return super().ranks(control_group, host_wide, since)


def titled_child() -> subprocess.Popen[bytes]:
    child = subprocess.Popen(["bash", "-c", f"exec -a {TITLE.decode()} sleep 60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(TITLE):
                return child
        except OSError:
            pass
        time.sleep(0.01)  # the exec has not happened yet: a real event, waited for
    child.kill()
    raise AssertionError("the child never took its title")


def test_a_rank_is_looked_for_when_it_first_talks_and_its_death_comes_through_its_pidfd(tmp_path: Path) -> None:
    procs = tmp_path / GROUP.lstrip("/") / "cgroup.procs"
    procs.parent.mkdir(parents=True)
    procs.write_text("")
    table = CountingTable(tmp_path)
    pipeline = Pipeline(Config(unit=UNIT))
    pipeline.feed(JournalRecord("[2026-11-29 08:00:00 TP3] Load weight begin. avail mem=70.00 GB", T0, pid=1,
                                invocation_id=INV), T0)
    facts = UnitFactsReader(RecordingUnit(UnitFacts("activating", "start", INV, control_group=GROUP,
                                                    started_at=T0)), UNIT)
    ranks = RankProcessSource(facts, table, pipeline.current)
    ranks.collect(Instant(T0, 1000.0), [])  # the start-up's first read: nobody yet
    assert table.scans == 1 and ranks.fds() == []

    child = titled_child()
    try:
        procs.write_text(f"{child.pid}\n")
        ranks.collect(Instant(T0 + 30, 1030.0), [])
        assert table.scans == 1 and ranks.next_deadline(Instant(T0 + 30, 1030.0)) is None  # silent: no reads
        ranks.saw_pids({child.pid})  # its first line in the journal
        assert ranks.next_deadline(Instant(T0 + 30, 1030.0)) == 1000.0 + SCAN_SPACING
        ranks.collect(Instant(T0 + 30, 1030.0), [])
        assert table.scans == 2 and len(ranks.fds()) == 1
        ranks.saw_pids({child.pid})  # a watched rank talking: no read
        assert ranks.next_deadline(Instant(T0 + 31, 1031.0)) is None

        child.kill()
        child.wait(10)
        poller = select.poll()
        poller.register(ranks.fds()[0], select.POLLIN)
        readable = [fd for fd, _ in poller.poll(10_000)]
        assert readable == ranks.fds()
        assert ranks.collect(Instant(T0 + 32, 1032.0), readable) == []  # confirmed after DEATH_GRACE
        [event] = ranks.collect(Instant(T0 + 32 + DEATH_GRACE, 1032.0 + DEATH_GRACE), [])
        assert (event.kind, event.rank, event.pid) == (EventKind.RANK_DIED, "TP3", child.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        ranks.new_startup()
