"""Sink: the responder's acting (sinks/responder.py): a response remembered, handed to the action
worker (sinks/acting.py), and what the worker did recorded; the alerts and the restart stay
*pending* in the state file until done, and a daemon that starts does what is pending; a restart
systemd refused is tried again on the loop's clock."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Callable, Protocol

from ..clock import Clock
from ..config.load import Config
from ..durations import format_duration
from ..stages.s3_track.snapshot import InvocationView
from ..stages.s5_act.respond import Action, Hold, Memory, Response
from ..systemd_unit import UnitFacts
from .acting import RESTART_BACKOFF, RESTART_TRIES, Done, Inline, Job, Worker
from .metrics import Exporter

logger = logging.getLogger(__name__)


class _Alerter(Protocol):
    def alert(self, action: Action) -> None: ...


class ActingOnResponses:
    config: Config
    alerter: _Alerter
    clock: Clock
    memory: Memory
    retry_at: float | None
    exporter: Exporter | None
    actor: Inline | Worker
    pending: tuple[Action, ...]
    restart_tries: dict[str | None, tuple[Action, int, float]]
    evidence_paths: dict[str, str]
    last_restart: dict[str, str | None] | None
    read_facts: Callable[[], UnitFacts | None]
    hold: Callable[[float], Hold | None]

    def save(self) -> None:
        raise NotImplementedError

    def _execute(self, response: Response, inv: InvocationView, facts: UnitFacts) -> None:
        """Remembered before acting (never twice), run off the loop (sinks/acting.py); the alerts and
        the restart stay *pending* in the state file until done, and are done after a daemon restart."""
        self.memory = response.memory
        self.retry_at = response.retry_at
        restart = next((a for a in response.actions if a.kind == "restart" and not a.dry_run), None)
        if restart is not None:  # status says why after phasewatch itself restarts too
            self.last_restart = {"invocation_id": restart.invocation_id, "verdict": restart.verdict_kind,
                                 "message": restart.message, "evidence": None, "quote": restart.quote}
        self.pending += tuple(a for a in response.actions if a.kind == "alert" or a is restart)
        self.save()
        self.actor.submit(Job(response.actions, inv, facts))
        self.finish()

    def finish(self) -> None:
        """What the worker did: recorded (the loop's thread only)."""
        for done in self.actor.take_done():
            self._record_done(done)

    def _record_done(self, done: Done) -> None:
        invocation = done.job.inv.invocation_id if done.job.inv is not None else None
        if done.evidence is not None and invocation is not None:
            self.evidence_paths[invocation] = done.evidence
            if self.last_restart is not None and self.last_restart["invocation_id"] == invocation:
                self.last_restart = dict(self.last_restart, evidence=done.evidence)
        finished = {a for a in done.job.actions if a.kind == "alert"} | ({done.restart} if done.restart else set())
        self.pending = tuple(a for a in self.pending if a not in finished)
        restart = done.restart
        if restart is not None and done.job_path is not None:
            self.restart_tries.pop(restart.invocation_id, None)
            if self.exporter is not None:
                self.exporter.restarted(restart.verdict_kind)
        elif restart is not None and done.restart_skipped is not None:
            self._restart_skipped(restart)
        elif restart is not None and done.restart_error is not None:
            self._restart_refused(restart, done.restart_error)
        self.save()

    def _restart_skipped(self, restart: Action) -> None:
        """The start-up it was decided for ended before the worker got to it (sinks/acting.py): not
        made, not tried again; status no longer says phasewatch restarted it."""
        self.restart_tries.pop(restart.invocation_id, None)
        if self.last_restart is not None and self.last_restart["invocation_id"] == restart.invocation_id:
            self.last_restart = None
        if self.exporter is not None:
            self.exporter.restart_not_made("started_again")

    def _restart_refused(self, restart: Action, error: str) -> None:
        """Alerted at the first refusal; tried again after RESTART_BACKOFF; after RESTART_TRIES it is
        "not restarted": forgotten as restarted, so that it is decided again after the budget's backoff."""
        tries = self.restart_tries.get(restart.invocation_id, (restart, 0, 0.0))[1] + 1
        if tries == 1:
            self.alerter.alert(replace(restart, kind="alert", verdict_kind="restart_failed", priority=3,
                                       message=f"{self.config.unit}: restart failed: {error}"))
        if tries < RESTART_TRIES:
            wait = RESTART_BACKOFF[min(tries, len(RESTART_BACKOFF)) - 1]
            self.restart_tries[restart.invocation_id] = (restart, tries, self.clock.wall() + wait)
            self.pending += (restart,)  # (still to do)
            logger.warning("[%s] restart refused (try %d of %d), trying again in %gs", self.config.unit, tries,
                           RESTART_TRIES, wait)
            return
        self.restart_tries.pop(restart.invocation_id, None)
        self.memory = replace(self.memory, restarted=self.memory.restarted - {restart.invocation_id or ""})
        self.retry_at = self.clock.wall() + self.config.restart_budget.backoff
        logger.error("[%s] not restarted after %d tries; decided again after the restart backoff (%s)",
                     self.config.unit, tries, format_duration(self.config.restart_budget.backoff))

    def retry_restarts(self) -> None:
        now = self.clock.wall()
        for restart, tries, at in list(self.restart_tries.values()):
            if now >= at and not self.actor.busy:
                self.restart_tries[restart.invocation_id] = (restart, tries, math.inf)  # (until it is done)
                facts = self.read_facts() or UnitFacts("unknown", "unknown", None)
                self.actor.submit(Job((restart,), None, facts))
        self.finish()

    def next_retry(self) -> float | None:
        """Wall clock: the next try of a refused restart."""
        return min((at for _, _, at in self.restart_tries.values()), default=None)

    def resume(self, pending: tuple[Action, ...], facts: UnitFacts | None) -> None:
        """At the daemon's start: what a killed daemon recorded and did not do. Alerts are sent (at
        least once); a restart only while its start-up still runs (else systemd had the job) and no
        hold is in force."""
        now = self.clock.wall()
        keep = []
        for action in pending:
            if action.kind == "restart":
                why = self._stale(action, facts, now)
                if why:
                    logger.info("[%s] the restart recorded as pending for %s is not made: %s", self.config.unit,
                                action.invocation_id, why)
                    continue
                logger.warning("[%s] making the restart recorded as pending for %s (%s): the daemon stopped "
                               "before systemd had it", self.config.unit, action.invocation_id, action.verdict_kind)
            keep.append(action)
        self.pending = tuple(keep)
        self.save()
        if keep:
            self.actor.submit(Job(self.pending, None, facts or UnitFacts("unknown", "unknown", None)))
            self.finish()

    def _stale(self, action: Action, facts: UnitFacts | None, now: float) -> str | None:
        hold = self.hold(now)
        if hold is not None and hold.active(now):
            return f"held by the operator ({hold.reason})"
        if facts is None:
            return "the unit's state cannot be read"
        if facts.invocation_id != action.invocation_id:
            return "the unit was started again since"
        if facts.job_pending or facts.active_state not in ("active", "activating", "failed"):
            return f"the unit is {facts.active_state}" + (" with a job queued" if facts.job_pending else "")
        return None

