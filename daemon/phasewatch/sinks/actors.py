"""Edge: the acting parts that a config shapes (hooks, evidence, the guarded restart, the check after
unguarded stops), built from one config; a reload builds them again from the new one and carries over
what is in progress (a start that waits for leftovers, the stops still to be checked)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..config.load import Config
from ..errors import UnitError
from ..profile.xid_table import XidLine
from ..sources.host.procs import ProcessTable
from ..stages.s4_judge.ras_culprit import RasFinding
from ..stages.s5_act.respond import Action
from ..systemd_unit import UnitFacts
from .evidence import EvidenceTaker, EvidenceWriter
from .gpu_memory import GpuMemory
from .hooks import HookRunner
from .leftovers import GuardedRestart, LeftoverScan, StopStart
from .state.store import Saved, action_from
from .unguarded_stops import UnguardedStops

logger = logging.getLogger(__name__)


@dataclass
class Actors:
    hooks: HookRunner
    evidence: EvidenceTaker
    guarded: GuardedRestart | None
    unguarded: UnguardedStops | None


@dataclass(frozen=True)
class ActorInputs:
    """What the actors read and act on, whatever the config. `rank_pids`: the start-up's rank
    processes as phasewatch knows them (also those outside the unit's cgroup); `rank_starts`: their
    start times (pid -> ticks), to tell a PID reused; `ras`, `xids` and `gpu_of`: NCCL RAS's finding,
    the kernel's XIDs of a start-up and a rank's GPU, for the evidence."""

    unit: StopStart
    alert: Callable[[Action], None]
    processes: ProcessTable
    state_dir: Path
    gpu: GpuMemory | None = None
    rank_pids: Callable[[], Iterable[int]] = tuple
    rank_starts: Callable[[], Mapping[int, int] | None] = lambda: None
    ras: Callable[[str], RasFinding | None] = lambda invocation: None
    xids: Callable[[float | None, float | None], Sequence[tuple[float, XidLine]]] = lambda b, e: ()
    gpu_of: Callable[[str], int | None] = lambda rank: None


def build_actors(config: Config, given: ActorInputs) -> Actors:
    unit, alert, processes, rank_pids = given.unit, given.alert, given.processes, given.rank_pids
    scan = LeftoverScan(processes, given.gpu or GpuMemory())
    guarded = GuardedRestart(unit, scan, alert, config.leftovers.wait,
                             lambda group: scan.before_stop(group, rank_pids())) if config.leftovers.check else None
    unguarded = UnguardedStops(config.unit, lambda old: scan.unguarded(old, given.rank_starts()), alert,
                               lambda: scan.gpu_checked) if config.leftovers.after_any_stop else None
    evidence = EvidenceTaker(EvidenceWriter(given.state_dir, config.unit, config.evidence),
                             lambda group: [(p.rank, p.pid) for p in processes.ranks(group)], given.ras, given.xids,
                             given.gpu_of)
    return Actors(HookRunner(config.unit, dict(config.hooks)), evidence, guarded, unguarded)


def carry_over(old: Actors, new: Actors) -> Actors:
    """What the old parts were doing goes on in the new ones. A start that waits for leftovers goes
    on even when the new config turned the check off (the unit is stopped: it must be started)."""
    if old.guarded is not None:
        if new.guarded is None and old.guarded.pending is not None:
            logger.warning("leftovers.check is off in the new config; the start that waits for leftovers goes on")
            new.guarded = old.guarded
        elif new.guarded is not None:
            new.guarded.pending = old.guarded.pending
            new.guarded.stopped = old.guarded.stopped
            new.guarded.survivors_seen_at = old.guarded.survivors_seen_at
            new_scan, old_scan = new.guarded.scan, old.guarded.scan
            if isinstance(new_scan, LeftoverScan) and isinstance(old_scan, LeftoverScan):
                new_scan.old, new_scan.identities, new_scan.users = old_scan.old, old_scan.identities, old_scan.users
    if old.unguarded is not None and new.unguarded is not None:
        new.unguarded.checked = old.unguarded.checked
        new.unguarded.due = old.unguarded.due
        new.unguarded.survivors_seen_at = old.unguarded.survivors_seen_at
    return new


def resume_guarded(guarded: GuardedRestart | None, saved: Saved, unit: StopStart, facts: UnitFacts | None,
                   name: str) -> tuple[Action, ...]:
    """At the daemon's start: a guarded restart's start that waited for leftovers waits again (its
    stop was made: its restart is not pending any more). Returns the actions still pending."""
    record = saved.guarded
    action = action_from(record.get("action"), lambda what: None) if record is not None else None
    if record is None or action is None:
        return saved.pending
    if guarded is not None:
        guarded.resume(record, action)
    else:
        logger.warning("[%s] a guarded restart's start was pending, but leftovers.check is off: starting the unit "
                       "if it is still stopped", name)
        if facts is not None and facts.active_state in ("inactive", "failed"):
            try:
                unit.start()
            except UnitError as exc:
                logger.error("[%s] %s", name, exc)
    return tuple(a for a in saved.pending if not (a.kind == "restart" and a.invocation_id == action.invocation_id))
