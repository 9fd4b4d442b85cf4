"""Sink: telling systemd how things stand after each step (sd_notify STATUS=, WATCHDOG=1) and writing
the small JSON status file beside the state file (read by tests and tools)."""

from __future__ import annotations

import logging
import math
from typing import Protocol

from ...clock import Clock
from ...config.load import Config
from ...durations import format_duration
from ...judge import Step
from ...output.render import current_phase
from ...records import Phase
from ...stages.s3_track.snapshot import InvocationView
from .store import StateStore

logger = logging.getLogger(__name__)
BEHIND_SHOWN = 2  # seconds behind the journal from which the STATUS= line says so


class Notify(Protocol):
    def send(self, state: str) -> None: ...


class SystemdStatusSink:
    def __init__(self, config: Config, notifier: Notify, store: StateStore, watchdog_interval: float | None,
                 clock: Clock) -> None:
        self.config = config
        self.clock = clock  # STATUS= and the status file say how things stand now (not the judging clock)
        self.notifier = notifier
        self.store = store
        self.watchdog_interval = watchdog_interval
        self.last_watchdog = -math.inf  # monotonic
        self.last_status: dict[str, object] = {}
        self.last_sent = ""  # the last STATUS= line: sent again only when it changed or with a ping
        self.status_unwritable = False
        self.refused_reload: str | None = None  # the error of the last reload refused, until one succeeds

    def carrying(self, old: SystemdStatusSink | None) -> SystemdStatusSink:
        """This sink (a reloaded config's) with what `old` last told systemd and wrote."""
        if old is not None:
            self.last_watchdog, self.last_status, self.last_sent = old.last_watchdog, old.last_status, old.last_sent
            self.status_unwritable, self.refused_reload = old.status_unwritable, old.refused_reload
        return self

    def next_deadline(self) -> float | None:
        return None if self.watchdog_interval is None else self.last_watchdog + self.watchdog_interval / 2

    def tell(self, step: Step) -> None:
        monotonic, now, inv = self.clock.monotonic(), self.clock.wall(), step.snapshot.current
        parts = [f"STATUS={status_line(inv, now, step.limits, step.eta)}"]
        if step.acted.degraded:
            parts[0] += f" ({' and '.join(sorted(step.acted.degraded))} in memory only: state directory not writable)"
        behind = step.journal.document.get("behind_seconds")
        if isinstance(behind, (int, float)) and behind > BEHIND_SHOWN:
            parts[0] += f" (reading {format_duration(behind)} behind the journal)"
        if self.refused_reload is not None:
            parts[0] += f" (reload refused, the old config stays in force: {self.refused_reload})"
        self._write_status(step)
        deadline = self.next_deadline()
        ping = deadline is not None and monotonic >= deadline
        if parts[0] == self.last_sent and not ping:
            return  # nothing new for systemd: no message (a step at 100 lines/s is not a D-Bus-free ping)
        self.last_sent = parts[0]
        if self.watchdog_interval is not None:
            parts.append("WATCHDOG=1")
            self.last_watchdog = monotonic
        self.notifier.send("\n".join(parts))

    def _write_status(self, step: Step) -> None:
        inv = step.snapshot.current
        status: dict[str, object] = {"unit": self.config.unit}
        if inv is not None:
            status.update({"invocation_id": inv.invocation_id, "state": inv.state.value, "eta_seconds": step.eta,
                           "phase": current_phase(inv), "ranks": {r.rank: r.phase.value for r in inv.ranks},
                           "entries": step.journal.entries, "lines_lost": inv.lines_lost})
            if step.vitals is not None:
                status["vitals"] = {r.rank: r.text() for r in step.vitals.ranks}
            if step.timer_warnings:
                status["timer_warnings"] = [w.message for w in step.timer_warnings]
        memory = step.acted.memory
        status["budget"] = memory.budget.state.value
        status["restarted"] = sorted(memory.restarted)
        status["entries_rejected"] = dict(step.journal.rejected)
        status.update(step.why)
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
