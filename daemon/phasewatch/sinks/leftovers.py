"""Edge: a restart that is safe. With `leftovers: {check: true}` phasewatch restarts a unit as a stop,
a check, and a start: after the stop, no process of the old start-up may survive. A survivor is a
process of the old start-up: one in the unit's cgroup, one that `before_stop` saw there (or watched as
a rank, `rank_processes: host`) and that is still the same process (its PID and its start time in
/proc/PID/stat: a reused PID is another process), or, where nvidia-smi exists, a process of one of the
unit's own users (not root) that holds GPU memory (sinks/gpu_memory.py). A rank title alone, from any
user in any scope, is nobody's survivor: any local user can name a process `sglang::scheduler_TP3`.
Survivors are alerted once (`restart_blocked`, critical, naming PIDs and what they hold) and the start
waits for them, at most `leftovers.wait`. Past that the unit stays stopped and phasewatch says so:
starting a server next to ranks that hold its GPU memory ends in OOM. A process of the old start-up
that still holds GPU memory is a survivor even when /proc no longer shows it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from ..durations import format_duration
from ..sources.host.procs import Identity, ProcessTable, rank_from_title
from ..stages.s5_act.respond import Action, ActionKind
from ..systemd_unit import UnitFacts
from .gpu_memory import GpuHolder, GpuMemory

logger = logging.getLogger(__name__)
POLL = 1.0  # seconds between checks while a start waits
CRITICAL = 2


@dataclass(frozen=True)
class Survivor:
    pid: int
    title: str
    rss_kb: int | None
    where: str  # its cgroup
    gpu: tuple[tuple[str, int], ...] = ()  # (GPU index, MiB) it holds

    def text(self) -> str:
        held = f", {self.rss_kb // 1024} MiB resident" if self.rss_kb is not None else ""
        held += "".join(f", holds {mib} MiB on GPU {gpu}" for gpu, mib in self.gpu)
        return f"pid {self.pid} ({self.title}{held}, cgroup {self.where})"


def with_gpu(found: Sequence[Survivor], holders: Sequence[GpuHolder], old: dict[int, str],
             owned: Callable[[int], Survivor | None] | None = None) -> list[Survivor]:
    """The survivors with the GPU memory each holds, the old start-up's processes (`old`: pid -> title
    before the stop) that hold GPU memory but were not found in /proc as themselves, and the holders
    `owned` says are the unit's (a process of the unit's user)."""
    held: dict[int, list[tuple[str, int]]] = {}
    for holder in holders:
        held.setdefault(holder.pid, []).append((holder.gpu, holder.mib))
    out = {s.pid: Survivor(s.pid, s.title, s.rss_kb, s.where, tuple(held.get(s.pid, ()))) for s in found}
    for pid, gpus in held.items():
        if pid in out:
            continue
        mine = owned(pid) if owned is not None else None
        if mine is not None:
            out[pid] = Survivor(mine.pid, mine.title, mine.rss_kb, mine.where, tuple(gpus))
        elif pid in old:
            out[pid] = Survivor(pid, old[pid], None, "unknown (not seen in /proc)", tuple(gpus))
    return sorted(out.values(), key=lambda s: s.pid)


def seen(table: ProcessTable, pid: int) -> Survivor | None:
    """What /proc says of `pid` now, as a survivor."""
    entry = table.proc / str(pid)
    try:
        cmdline = (entry / "cmdline").read_bytes()
        cgroup = _cgroup((entry / "cgroup").read_text())
    except OSError:
        return None
    return Survivor(pid, cmdline.split(b"\0", 1)[0].decode("utf-8", "replace")[:80], _rss_kb(entry), cgroup)


def survivors(table: ProcessTable, control_group: str | None,
              old: Mapping[int, Identity] | None = None) -> list[Survivor]:
    """Processes in the stopped unit's cgroup, and those of `old` (the start-up's before the stop)
    still the same process (same PID and start time), wherever they are now."""
    pids = set(table.pids(control_group)) if control_group else set()
    pids |= {pid for pid, before in (old or {}).items() if table.identity(pid) == before}
    return sorted((s for s in map(lambda pid: seen(table, pid), pids) if s is not None), key=lambda s: s.pid)


def _cgroup(text: str) -> str:
    """The unified (`0::`) path, or systemd's own hierarchy's under cgroup v1 / hybrid."""
    paths = dict(line.split(":", 2)[1:] for line in text.splitlines() if line.count(":") >= 2)
    unified = paths.get("", "/")
    return unified if unified != "/" else paths.get("name=systemd", unified)


def _rss_kb(entry: Path) -> int | None:
    try:
        for line in (entry / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class LeftoverScan:
    """What survives a stop: the old start-up's processes (cgroup, PIDs with their start times), then
    the GPUs' compute processes of the old start-up and of the unit's users."""

    def __init__(self, table: ProcessTable, gpu: GpuMemory | None = None) -> None:
        self.table = table
        self.gpu = gpu
        self.old: dict[int, str] = {}  # the start-up's processes before the stop: pid -> title
        self.gpu_checked = True  # the last scan's GPU query answered (False: nvidia-smi missing or failed)
        self.identities: dict[int, Identity] = {}  # ... and who each was (PID reuse)
        self.users: set[int] = set()  # the uids the start-up ran as (root left out)

    def before_stop(self, control_group: str | None, also: Iterable[int] = ()) -> None:
        """Remembers the start-up's processes: its cgroup's, and `also` (its ranks outside the cgroup)."""
        self.old, self.identities = {}, {}
        for pid in sorted(set(self.table.pids(control_group) if control_group else []) | set(also)):
            try:
                cmdline = (self.table.proc / str(pid) / "cmdline").read_bytes()
            except OSError:
                continue
            identity = self.table.identity(pid)
            self.old[pid] = cmdline.split(b"\0", 1)[0].decode("utf-8", "replace")[:80]
            if identity is not None:
                self.identities[pid] = identity
        self.users = {identity.uid for identity in self.identities.values()} - {0}

    def __call__(self, control_group: str | None) -> list[Survivor]:
        found = survivors(self.table, control_group, self.identities)
        old = {pid: title for pid, title in self.old.items() if self._not_reused(pid)}
        return with_gpu(found, self._holders(), old, self._owned)

    def _not_reused(self, pid: int) -> bool:
        now, before = self.table.identity(pid), self.identities.get(pid)
        return now is None or now == before

    def _owned(self, pid: int) -> Survivor | None:
        """A GPU holder of one of the unit's users (its User=, never root: root holds other GPUs too)."""
        identity = self.table.identity(pid)
        return seen(self.table, pid) if identity is not None and identity.uid in self.users else None

    def unguarded(self, old: dict[int, str], started: Mapping[int, int] | None = None) -> list[Survivor]:
        """After a stop phasewatch did not make (a new start-up may already run in the unit's cgroup):
        the old start-up's rank processes still alive as the same rank (`old`: pid -> rank) and, where
        `started` knows it, the same process (its start time)."""
        found = {}
        for pid, rank in old.items():
            entry = self.table.proc / str(pid)
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            identity = self.table.identity(pid)
            if started and pid in started and (identity is None or identity.started != started[pid]):
                continue  # the PID is another process's now
            survivor = seen(self.table, pid)
            if survivor is not None and rank_from_title(cmdline) == rank:
                found[pid] = survivor
        return with_gpu(list(found.values()), self._holders(), {pid: f"rank {rank}" for pid, rank in old.items()})

    def _holders(self) -> list[GpuHolder]:
        holders = self.gpu.holders() if self.gpu is not None else None
        self.gpu_checked = holders is not None
        return holders or []


class StopStart(Protocol):
    def facts(self) -> UnitFacts: ...

    def stop(self) -> str: ...

    def start(self) -> str: ...


@dataclass
class Pending:
    action: Action
    control_group: str | None
    until: float
    blocked_alerted: bool = False
    next_check: float = 0.0  # wall clock: the scan (/proc, nvidia-smi) runs at most every POLL


class GuardedRestart:
    def __init__(self, unit: StopStart, scan: Callable[[str | None], Sequence[Survivor]],
                 alert: Callable[[Action], None], wait: float,
                 before_stop: Callable[[str | None], None] | None = None) -> None:
        self.unit = unit
        self.scan = scan
        self.before_stop = before_stop  # remembers the start-up's processes (LeftoverScan.before_stop)
        self.alert = alert
        self.wait = wait
        self.pending: Pending | None = None
        self.stopped: set[str] = set()  # start-ups this stopped (their end is checked here, not as unguarded)
        self.survivors_seen_at: float | None = None  # the last time survivors blocked a start (wall)

    def begin(self, action: Action, control_group: str | None, now: float) -> str:
        self.pending = Pending(action, control_group, now + self.wait)
        if action.invocation_id is not None:
            self.stopped.add(action.invocation_id)
        if self.before_stop is not None:
            self.before_stop(control_group)
        return self.unit.stop()

    def record(self) -> dict[str, Any] | None:
        """The start that waits, for the state file: after a daemon restart it still waits (H-6)."""
        pending = self.pending
        if pending is None:
            return None
        old = getattr(self.scan, "old", {})  # LeftoverScan's processes before the stop
        return {"action": asdict(pending.action), "control_group": pending.control_group, "until": pending.until,
                "blocked_alerted": pending.blocked_alerted, "old": {str(k): v for k, v in old.items()}}

    def resume(self, record: dict[str, Any], action: Action) -> None:
        """A start that waited when the daemon stopped: it waits again, until the same time."""
        self.pending = Pending(action, record.get("control_group"), float(record["until"]),
                               bool(record.get("blocked_alerted")))
        if action.invocation_id is not None:
            self.stopped.add(action.invocation_id)
        old = record.get("old")
        if isinstance(old, dict) and hasattr(self.scan, "old"):
            self.scan.old = {int(k): str(v) for k, v in old.items() if str(k).isdigit()}
        logger.warning("[%s] the unit was stopped by phasewatch and its start is pending (until %s): waiting for "
                       "the old start-up's processes again", action.message.split(":", 1)[0],
                       time.strftime("%H:%M:%S", time.localtime(self.pending.until)))

    def next_deadline(self, now: float) -> float | None:
        return now + POLL if self.pending is not None else None

    def tick(self, now: float) -> None:
        """While a start waits: once the stop is done and nothing survives, start."""
        pending = self.pending
        if pending is None:
            return
        if now < pending.next_check:
            return
        pending.next_check = now + POLL
        facts = self.unit.facts()
        if facts.active_state not in ("inactive", "failed") or facts.job_pending:
            return  # still stopping (or someone else is acting on the unit)
        left = self.scan(pending.control_group)
        name = pending.action.message.split(":", 1)[0]
        if not left:
            unchecked = not getattr(self.scan, "gpu_checked", True)
            logger.info("[%s] nothing of the old start-up survived%s; starting", name,
                        " in /proc (GPU memory not checked: nvidia-smi missing or did not answer)" if unchecked else "")
            self.unit.start()  # a refusal (UnitError) keeps it pending: tried again at the next tick
            self.pending = None
            return
        listed = "; ".join(s.text() for s in left)
        self.survivors_seen_at = now
        if now >= pending.until:
            self.pending = None
            self.alert(_blocked(pending.action, f"{name}: gave up waiting for the old start-up's processes to "
                                f"end after {format_duration(self.wait)}; the unit stays stopped. Still there: "
                                f"{listed}"))
            return
        if not pending.blocked_alerted:
            pending.blocked_alerted = True
            self.alert(_blocked(pending.action, f"{name}: restart blocked: processes of the stopped start-up "
                                f"survived and may hold its GPU memory: {listed}; the start waits for them (at "
                                f"most {format_duration(self.wait)})"))


def _blocked(action: Action, message: str) -> Action:
    return Action(kind=ActionKind.ALERT, message=message, verdict_kind="restart_blocked", priority=CRITICAL,
                  invocation_id=action.invocation_id, phase=action.phase, rank=action.rank, cause="leftovers",
                  dry_run=action.dry_run)
