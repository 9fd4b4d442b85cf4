"""A rank process that dies while the unit is restarted is not a rank death of the start-up: when
the unit already runs another invocation (the journal not caught up yet), the death was the stop's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from sglang_sim import Faults

from learn_startups import run
from phasewatch.sources.base import Instant
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.host.unit_processes import DEATH_GRACE, RankProcessSource, UnitFactsReader
from phasewatch.stages.s2_interpret.events import EventKind
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

GROUP = "/system.slice/sglang-kimi.service"


def deaths_seen(tmp_path: Path, next_invocation: str | None) -> list[EventKind]:
    starting = run(1, Faults(hang={3: "cuda_graph_capture"})).snapshot().current
    assert starting is not None
    rank = subprocess.Popen(["sglang::scheduler_TP3", "60"], executable="sleep")
    try:
        (tmp_path / "cg" / GROUP.lstrip("/")).mkdir(parents=True)
        (tmp_path / "cg" / GROUP.lstrip("/") / "cgroup.procs").write_text(f"{rank.pid}\n")
        unit = RecordingUnit(UnitFacts("activating", "start", starting.invocation_id, control_group=GROUP))
        ranks = RankProcessSource(UnitFactsReader(unit, "sglang-kimi.service"),
                              ProcessTable(cgroup_roots=(str(tmp_path / "cg"),)), lambda: starting)
        time.sleep(0.2)  # its title is in /proc
        assert ranks.collect(Instant(time.time(), time.monotonic()), []) == []
        assert ranks.fds()
        rank.kill()
        rank.wait()
        if next_invocation is not None:  # restarted: the unit runs a new invocation already
            unit.status = UnitFacts("activating", "start", next_invocation, control_group=GROUP)
        events = ranks.collect(Instant(time.time(), time.monotonic()), ranks.fds())
        time.sleep(DEATH_GRACE + 0.1)
        events += ranks.collect(Instant(time.time(), time.monotonic()), [])
        return [e.kind for e in events]
    finally:
        rank.kill()
        rank.wait()


def test_a_rank_death_during_the_startup_is_one(tmp_path: Path) -> None:
    assert deaths_seen(tmp_path, None) == [EventKind.RANK_DIED]


def test_a_rank_death_when_the_unit_already_runs_another_invocation_is_the_stops(tmp_path: Path) -> None:
    assert deaths_seen(tmp_path, "f" * 32) == []


def test_a_rank_of_the_previous_startup_left_in_the_cgroup_is_not_adopted(tmp_path: Path) -> None:
    first = run(1, Faults(hang={3: "cuda_graph_capture"})).snapshot().current
    second = run(2, Faults(hang={3: "cuda_graph_capture"})).snapshot().current
    assert first is not None and second is not None
    current = [first]
    rank = subprocess.Popen(["sglang::scheduler_TP5", "60"], executable="sleep")
    try:
        (tmp_path / "cg" / GROUP.lstrip("/")).mkdir(parents=True)
        (tmp_path / "cg" / GROUP.lstrip("/") / "cgroup.procs").write_text(f"{rank.pid}\n")
        unit = RecordingUnit(UnitFacts("activating", "start", first.invocation_id, control_group=GROUP))
        ranks = RankProcessSource(UnitFactsReader(unit, "sglang-kimi.service"),
                              ProcessTable(cgroup_roots=(str(tmp_path / "cg"),)), lambda: current[0])
        time.sleep(0.2)
        ranks.collect(Instant(time.time(), time.monotonic()), [])
        assert ranks.fds()
        # Restarted, but the old TP5 is still in the cgroup when the new start-up is scanned.
        current[0] = second
        unit.status = UnitFacts("activating", "start", second.invocation_id, control_group=GROUP)
        ranks.new_startup()
        ranks.collect(Instant(time.time(), time.monotonic()), [])
        assert ranks.fds() == [] and ranks.previous_pids == {rank.pid: "TP5"}
    finally:
        rank.kill()
        rank.wait()
