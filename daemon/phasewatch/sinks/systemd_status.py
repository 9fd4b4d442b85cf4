"""Sink: telling systemd how things stand after each step (sd_notify STATUS=, WATCHDOG=1) and writing
the small JSON status file beside the state file (read by tests and tools)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from ..config.load import Config
from ..durations import format_duration
from ..output.render import current_phase
from ..records import Phase
from ..stages.s3_track.snapshot import InvocationView
from ..stages.s4_judge.vitals import Vitals
from ..stages.s5_act.respond import Memory
from .state import StateStore

logger = logging.getLogger(__name__)
BEHIND_SHOWN = 2  # seconds behind the journal from which the STATUS= line says so


class Notify(Protocol):
    def send(self, state: str) -> None: ...


@dataclass(frozen=True)
class StepResult:
    """What one step of the loop found, read by every sink after it."""

    now: float  # wall clock
    current: InvocationView | None
    limits: Config  # with the limits in force for the current start-up
    eta: float | None
    memory: Memory
    degraded: Mapping[str, str]
    vitals: Vitals | None
    entries: int  # journal entries of the current start-up
    rejected: Mapping[str, int]  # entries that only claimed to be the unit's, by reason
    timer_warnings: tuple[str, ...] = ()  # engine or systemd timers that pre-empt a limit (timerlint)
    why: Mapping[str, object] = field(default_factory=dict)  # hold, previous start-up, evidence (responder.why)


class SystemdStatus:
    def __init__(self, config: Config, notifier: Notify, store: StateStore, watchdog_interval: float | None) -> None:
        self.config = config
        self.notifier = notifier
        self.store = store
        self.watchdog_interval = watchdog_interval
        self.last_watchdog = -math.inf  # monotonic
        self.last_status: dict[str, object] = {}
        self.last_sent = ""  # the last STATUS= line: sent again only when it changed or with a ping
        self.status_unwritable = False
        self.refused_reload: str | None = None  # the error of the last reload refused, until one succeeds

    def next_deadline(self) -> float | None:
        return None if self.watchdog_interval is None else self.last_watchdog + self.watchdog_interval / 2

    def tell(self, result: StepResult, monotonic: float) -> None:
        parts = [f"STATUS={status_line(result.current, result.now, result.limits, result.eta)}"]
        if result.degraded:
            parts[0] += f" ({' and '.join(sorted(result.degraded))} in memory only: state directory not writable)"
        journal = result.why.get("journal")
        behind = journal.get("behind_seconds") if isinstance(journal, Mapping) else None
        if isinstance(behind, (int, float)) and behind > BEHIND_SHOWN:
            parts[0] += f" (reading {format_duration(behind)} behind the journal)"
        if self.refused_reload is not None:
            parts[0] += f" (reload refused, the old config stays in force: {self.refused_reload})"
        self._write_status(result)
        deadline = self.next_deadline()
        ping = deadline is not None and monotonic >= deadline
        if parts[0] == self.last_sent and not ping:
            return  # nothing new for systemd: no message (a step at 100 lines/s is not a D-Bus-free ping)
        self.last_sent = parts[0]
        if self.watchdog_interval is not None:
            parts.append("WATCHDOG=1")
            self.last_watchdog = monotonic
        self.notifier.send("\n".join(parts))

    def _write_status(self, result: StepResult) -> None:
        inv = result.current
        status: dict[str, object] = {"unit": self.config.unit}
        if inv is not None:
            status.update({"invocation_id": inv.invocation_id, "state": inv.state.value, "eta_seconds": result.eta,
                           "phase": current_phase(inv), "ranks": {r.rank: r.phase.value for r in inv.ranks},
                           "entries": result.entries, "lines_lost": inv.lines_lost})
            if result.vitals is not None:
                status["vitals"] = {r.rank: r.text() for r in result.vitals.ranks}
            if result.timer_warnings:
                status["timer_warnings"] = list(result.timer_warnings)
        status["budget"] = result.memory.budget.state.value
        status["restarted"] = sorted(result.memory.restarted)
        status["entries_rejected"] = dict(result.rejected)
        status.update(result.why)
        if status != self.last_status:
            self.last_status = status
            try:
                self.store.write_status(status)
                self.status_unwritable = False
            except OSError as exc:
                if not self.status_unwritable:
                    logger.error("[%s] cannot write status: %s", self.config.unit, exc)
                self.status_unwritable = True


def status_line(inv: InvocationView | None, now: float, config: Config, eta: float | None = None) -> str:
    """One line for `systemctl status`: "sglang-kimi: draft_cuda_graph_capture 8/8 ranks, 3m12s of 20m"."""
    name = config.unit.removesuffix(".service")
    if inv is None:
        return f"{name}: no start-up seen yet"
    state = inv.state.value
    if state != "starting":
        return f"{name}: {state}"
    phase = current_phase(inv) or "launch"
    ranks = inv.scheduler_ranks
    if not ranks:
        limit = config.limits(Phase.LAUNCH).deadline
        since = inv.started_at
        spent = format_duration(now - since) if since is not None else "?"
        return f"{name}: launch, {spent}" + (f" of {format_duration(limit)}" if limit is not None else "")
    in_phase = [r for r in ranks if r.phase.value == phase]
    starts = [r.phase_start for r in in_phase if r.phase_start is not None]
    spent = format_duration(now - min(starts)) if starts else "?"
    limit = next((config.limits(r.phase).deadline for r in in_phase), None)
    text = f"{name}: {phase} {len(in_phase)}/{len(ranks)} ranks, {spent}"
    text += f" of {format_duration(limit)}" if limit is not None else ""
    return text + (f"; ready in about {format_duration(eta)}" if eta is not None else "")
