"""Source: the unit's rank processes. While the unit starts, its cgroup is read for rank processes,
each then watched through a pidfd; a pidfd turning readable is a death, confirmed after DEATH_GRACE
unless the unit is being torn down as a whole meanwhile (then no rank is to blame).

The cgroup is read when there is reason to (not on a timer): at a new start-up, and when the journal
shows a `_PID` that is not a watched rank (a new process talking, the unit's main process, or, with
`rank_processes: host`, the container client relaying its server's lines); at most once per
SCAN_SPACING. A silent start-up costs no reads. (`cgroup.events` is no trigger: it changes only when
the cgroup becomes populated or empty, or frozen, not when a process forks inside it.)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from ...config.load import Config
from ...errors import UnitError
from ...records import Event, EventKind
from ...stages.s3_track.snapshot import InvocationView, UnitState
from ...stages.s4_judge.timerlint import UnitTimers
from ...systemd_unit import UnitFacts
from ..base import Current, Instant
from .procs import ProcessTable, RankProcess, RankWatch

logger = logging.getLogger(__name__)

SCAN_SPACING = 1.0  # at most one read of the unit's cgroup per this while lines keep asking for one
DEATH_GRACE = 0.5  # a rank death is confirmed only if the unit is not being torn down meanwhile


class Unit(Protocol):
    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...

    def stop(self) -> str: ...

    def start(self) -> str: ...

    def timers(self) -> UnitTimers: ...


class UnitFactsReader:
    """The watched unit's facts over D-Bus; `known` holds the last ones kept (its cgroup, its start)."""

    def __init__(self, unit: Unit, name: str) -> None:
        self.unit = unit
        self.name = name
        self.known: UnitFacts | None = None

    def read(self) -> UnitFacts | None:
        try:
            return self.unit.facts()
        except UnitError as exc:
            logger.warning("[%s] %s", self.name, exc)
            return None

    def control_group_of(self, inv: InvocationView) -> str | None:
        """The cgroup of this start-up, once D-Bus said so (None while the journal lags behind)."""
        known = self.known
        if known is None or not known.control_group or known.invocation_id not in (None, inv.invocation_id):
            return None
        return known.control_group


@dataclass
class _PendingDeath:
    process: RankProcess
    seen_at: float  # wall clock: the event's time
    seen_mono: float


class RankProcessSource:
    def __init__(self, facts: UnitFactsReader, processes: ProcessTable, current: Current,
                 host_wide: bool = False) -> None:
        self.facts = facts
        self.host_wide = host_wide  # rank_processes: host
        self.processes = processes
        self.current = current
        self.watch = RankWatch()
        self.pending: list[_PendingDeath] = []
        self.last_scan = -math.inf
        self.scan_wanted = True  # something happened that a read of the cgroup could explain
        self.previous_pids: dict[int, str] = {}  # the previous start-up's rank processes: pid -> rank
        self.started: dict[int, int] = {}  # this and the previous start-up's ranks: pid -> start time (ticks)

    def reconfigure(self, config: Config) -> None:
        """A reloaded config (these are carried over a reload: the pidfds are in the loop's wait)."""
        self.host_wide = config.rank_processes == "host"

    def new_startup(self) -> None:
        self.previous_pids = self.watch.known_pids()
        self.started = {pid: ticks for pid, ticks in self.started.items() if pid in self.previous_pids}
        self.watch.forget()
        self.pending.clear()
        self.last_scan = -math.inf
        self.scan_wanted = True


    def ended_pids(self, invocation_id: str, current_id: str | None) -> dict[int, str]:
        """The rank processes of a start-up that ended (pid -> rank): the current one's as watched,
        else the previous one's."""
        return self.watch.known_pids() if invocation_id == current_id else self.previous_pids
    def saw_pids(self, pids: Iterable[int]) -> None:
        """The journal's `_PID`s since the last step: one that is not a watched rank asks for a read."""
        if not self.scan_wanted and not self.watch.watches_all(pids):
            self.scan_wanted = True

    def fds(self) -> Sequence[int]:
        return self.watch.fds()

    def scanning(self, inv: InvocationView | None) -> bool:
        """Rank processes are looked for while the unit starts, until every rank server_args promised
        has its pidfd (ranks do not respawn within a start-up)."""
        if inv is None or inv.state is not UnitState.STARTING:
            return False
        expected = inv.server.expected_ranks() if inv.server is not None else ()
        return not expected or not self.watch.watching(expected)

    def next_deadline(self, now: Instant) -> float | None:
        deadlines = [d.seen_mono + DEATH_GRACE for d in self.pending]
        if self.scan_wanted and self.scanning(self.current()):
            deadlines.append(self.last_scan + SCAN_SPACING)
        return min(deadlines, default=None)

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        for process in self.watch.dead(list(readable)):
            self.pending.append(_PendingDeath(process, now.wall, now.monotonic))
        self._scan(now)
        return self._confirm(now)

    def _scan(self, now: Instant) -> None:
        inv = self.current()
        if not self.scan_wanted or inv is None or not self.scanning(inv) \
                or now.monotonic - self.last_scan < SCAN_SPACING:
            return
        self.last_scan = now.monotonic
        self.scan_wanted = False
        known = self.facts.known
        if known is None or not known.control_group or known.invocation_id != inv.invocation_id:
            # D-Bus only until this start-up's cgroup is known (a dozen calls a time): then the file alone.
            self.facts.known = self.facts.read() or self.facts.known
        facts = self.facts.known
        if facts is None or not facts.control_group or \
                facts.invocation_id is not None and facts.invocation_id != inv.invocation_id:
            self.scan_wanted = True  # D-Bus does not know this start-up's cgroup yet: ask again
            return
        # A rank of the previous start-up still in the cgroup (a stop that did not end it) is a
        # leftover (sinks/unguarded_stops.py), not a rank of this one: its death must not count here.
        self.watch.update([p for p in self.processes.ranks(facts.control_group, self.host_wide, facts.started_at)
                           if p.pid not in self.previous_pids])
        for pid in self.watch.known_pids():
            identity = self.processes.identity(pid) if pid not in self.started else None
            if identity is not None:
                self.started[pid] = identity.started

    def _confirm(self, now: Instant) -> list[Event]:
        due = [d for d in self.pending if now.monotonic >= d.seen_mono + DEATH_GRACE]
        if not due:
            return []
        self.pending = [d for d in self.pending if d not in due]
        inv = self.current()
        facts = self.facts.read()
        # A restart can be done before the journal says the old start-up stopped: the unit then already
        # runs another invocation, and these deaths were its stop's.
        torn_down = (inv is None or inv.state is not UnitState.STARTING or bool(inv.fatals) or facts is None
                     or facts.active_state not in ("active", "activating")
                     or facts.invocation_id not in (None, inv.invocation_id) or len(due) > 1
                     and len(due) >= len(inv.scheduler_ranks) // 2)
        if torn_down:
            return []  # the unit is stopping or crashing as a whole: not one rank's death
        events = []
        for death in due:
            logger.info("[%s rank=%s] process %d vanished", self.facts.name, death.process.rank, death.process.pid)
            events.append(Event(EventKind.RANK_DIED, death.seen_at, rank=death.process.rank, pid=death.process.pid,
                                invocation_id=inv.invocation_id if inv else None))
        return events
