"""Sink: the actor. Told each `Step`, it acts on what is new (alerts, restarts within the budget),
remembering first: a response's memory is saved before its actions are handed to the action worker
(sinks/acting/runner.py); the alerts and the restart stay *pending* in the state file until done, and a
daemon that starts does what is pending; a restart systemd refused is tried again on the loop's clock
(RESTART_BACKOFF, RESTART_TRIES). What it did since its last report is `Acted`, which the sinks after
it read (systemd's status, the metrics).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ...clock import Clock
from ...config.load import Config
from ...durations import format_duration
from ...judge import Acted, Step
from ...output.render import iso
from ...pipeline import Judgement
from ...records import MAIN, NEWS_AFTER_THE_END, Phase
from ...sources.base import Instant
from ...stages.s3_track.snapshot import UP_STATES, InvocationView
from ...stages.s4_judge import policy
from ...stages.s4_judge.verdict import Verdict
from ...stages.s5_act.respond import (
    Action,
    ActionKind,
    BudgetState,
    Hold,
    Memory,
    Priority,
    Response,
    reset_budget,
    respond,
    settled,
)
from ...systemd_unit import UnitFacts
from ..leftovers import GuardedRestart
from ..state.host import DegradedHost
from ..state.store import Saved, StateStore
from .runner import RESTART_BACKOFF, RESTART_TRIES, ActionRunner, Done, Inline, Job, Worker

logger = logging.getLogger(__name__)
UNKNOWN = UnitFacts("unknown", "unknown", None)


class Alerter(Protocol):
    def alert(self, action: Action) -> None: ...


@dataclass(frozen=True)
class ActorParts:
    """What the actor reads and writes besides its runner."""

    read_facts: Callable[[], UnitFacts | None]
    alerter: Alerter
    store: StateStore
    clock: Clock  # the judging clock (sources/journal/rebuild.JudgedClock)
    cursor: Callable[[], str | None]  # the journal's, saved with the memory
    hold: Callable[[float], Hold | None]  # the operator's hold in force at a time (sinks/hold.py)
    host: DegradedHost


class ActorSink:
    def __init__(self, config: Config, parts: ActorParts, runner: ActionRunner,
                 worker: Inline | Worker | None = None) -> None:
        self.config = config
        self.parts = parts
        self.runner = runner  # evidence, hooks, the guarded restart (a reload gives it new ones)
        self.worker: Inline | Worker = worker or Inline()  # the daemon's: a Worker (off the loop)
        self.pending: tuple[Action, ...] = ()  # alerts and the restart decided and not yet done
        self.restart_tries: dict[str | None, tuple[Action, int, float]] = {}  # refused: (restart, tries, next)
        self.evidence_paths: dict[str, str] = {}  # invocation -> its last evidence file
        self.last_restart: dict[str, str | None] | None = None  # the start-up phasewatch last restarted, and why
        self.memory = Memory()
        self.retry_at: float | None = None  # wall clock, like the memory it comes with
        self.watched_invocation: str | None = None
        self.refused: dict[str, str] = {}  # invocation -> why its restart is refused (restart_gate.py), for status
        self._seen: tuple[Verdict, ...] = ()  # since the last report
        self._restarts: tuple[str, ...] = ()
        self._not_made: tuple[str, ...] = ()

    def carrying(self, old: ActorSink | None) -> ActorSink:
        """This actor (a reloaded config's) with what `old` remembered and was doing: its memory and
        restart budget, the actions pending and the refused restarts to try again, its worker (the
        thread and the jobs in it)."""
        if old is not None:
            self.worker, self.pending, self.restart_tries = old.worker, old.pending, old.restart_tries
            self.evidence_paths, self.last_restart, self.memory = old.evidence_paths, old.last_restart, old.memory
            self.retry_at, self.watched_invocation, self.refused = old.retry_at, old.watched_invocation, old.refused
            self._seen, self._restarts, self._not_made = old._seen, old._restarts, old._not_made
        return self

    @property
    def guarded(self) -> GuardedRestart | None:
        return self.runner.guarded  # type: ignore[return-value]

    def fds(self) -> list[int]:
        return self.worker.fds()

    def next_deadline(self, now: Instant) -> float | None:
        """Monotonic: a guarded restart's next look, the budget's backoff, a refused restart's next try."""
        deadlines = [self.guarded.next_deadline(now.monotonic)] if self.guarded is not None else []
        walls = (self.retry_at, self.next_retry())
        deadlines += [now.monotonic + wall - now.wall for wall in walls if wall is not None]
        return min((d for d in deadlines if d is not None), default=None)

    def tell(self, step: Step) -> None:
        """Acts on the step's judgement: the timer check's alert, restarts to try again, then what is
        new in each start-up judged (alerts, restarts within the budget), remembered first."""
        if step.timer_lint is not None:
            lint = step.timer_lint
            self.parts.alerter.alert(Action(kind=ActionKind.ALERT, message=lint.message[:4000],
                                            verdict_kind="timer_lint", priority=Priority.of("timer_lint"),
                                            invocation_id=lint.invocation_id, cause=lint.codes))
        self.retry_restarts()
        for judgement in step.judgements.values():
            self._act(judgement, judgement.invocation is step.snapshot.current, step.at)

    def report(self, current: str | None, now: float) -> Acted:
        """What was done since the last report, and how things stand, for the sinks after this one."""
        acted = Acted(self.memory, dict(self.parts.host.degraded), self.why(current, now), self._seen,
                      self._restarts, self._not_made)
        self._seen, self._restarts, self._not_made = (), (), ()
        return acted

    def _act(self, judgement: Judgement, current: bool, now: float) -> None:
        inv, verdicts = judgement.invocation, list(judgement.live)
        ready_at = ready_time(inv) if current and inv.state in UP_STATES else None
        if settled(self.memory, ready_at, verdicts, now, self.config):
            self.memory = reset_budget(self.memory)  # GAVE_UP -> ARMED: ready and healthy for `stable`
            self.save()
        if not current:
            verdicts = [v for v in verdicts if v.kind in NEWS_AFTER_THE_END]
        self._seen += tuple(verdicts)
        hold = self.parts.hold(now) if verdicts else None  # a file read: only when there is something to decide
        if not any(self._unhandled(v, hold is not None) for v in verdicts):
            return
        if self.retry_at is not None and now < self.retry_at and all(v.key in self.memory.alerted for v in verdicts):
            return  # only a restart is left to do, after the backoff
        status = self.parts.read_facts() or UNKNOWN
        response = respond(verdicts, self.memory, status, now, self.config, hold)
        for refused in (a for a in response.actions if a.verdict_kind == "restart_refused"):
            self.refused[inv.invocation_id] = refused.message
            self._not_made += (refused.cause or "refused",)
        self.execute(response, inv, status)

    def _unhandled(self, verdict: policy.Verdict, held: bool = False) -> bool:
        wanted = self.config.actions.get(verdict.kind, ("alert",))
        group = self.config.group
        alone = group is None or group.receiver is None  # (a group's node restarts when its group decides)
        return ("alert" in wanted and verdict.key not in self.memory.alerted) or (
            "restart" in wanted and not held and alone and verdict.invocation_id not in self.memory.restarted
            and self.memory.budget.state is BudgetState.ARMED)

    def new_startup(self, current: str, previous: InvocationView | None) -> None:
        """The journal shows a new start-up. One started by someone else than phasewatch or Restart=
        (the operator) resets the budget."""
        self.watched_invocation = current
        memory = self.memory
        if previous is not None and previous.invocation_id not in memory.restarted and not previous.restart_scheduled:
            self.memory = reset_budget(memory)

    def execute(self, response: Response, inv: InvocationView, facts: UnitFacts) -> None:
        """Remembered before acting (never twice), run off the loop (sinks/acting/runner.py); the alerts
        and the restart stay *pending* in the state file until done, and are done after a daemon restart."""
        self.memory = response.memory
        self.retry_at = response.retry_at
        restart = next((a for a in response.actions if a.kind == ActionKind.RESTART and not a.dry_run), None)
        if restart is not None:  # status says why after phasewatch itself restarts too
            self.last_restart = {"invocation_id": restart.invocation_id, "verdict": restart.verdict_kind,
                                 "message": restart.message, "evidence": None, "quote": restart.quote}
        self.pending += tuple(a for a in response.actions if a.kind == ActionKind.ALERT or a is restart)
        self.save()
        self.worker.submit(Job(response.actions, inv, facts), self.runner)
        self.finish()

    def why(self, current: str | None, now: float) -> dict[str, object]:
        """For status: the hold in force, and why the current start-up exists when phasewatch started it."""
        hold = self.parts.hold(now)
        document: dict[str, object] = {"hold": None if hold is None else {
            "until": iso(hold.until), "until_seconds": hold.until, "reason": hold.reason}}
        last = self.last_restart
        started_by_us = last is not None and current is not None and current != last["invocation_id"]
        document["previous_startup"] = dict(last, outcome="restarted by phasewatch") if started_by_us and last else None
        document["restart_refused"] = self.refused.get(current) if current is not None else None
        if current is not None and current in self.evidence_paths:
            document["evidence"] = self.evidence_paths[current]
        return document

    def restore(self, saved: Saved) -> None:
        self.memory, self.last_restart = saved.memory, saved.last_restart

    def save(self) -> None:
        guarded = self.guarded
        try:
            self.parts.store.save(Saved(self.memory, self.parts.cursor(), self.watched_invocation, self.last_restart,
                                        self.pending, guarded.record() if guarded is not None else None))
        except OSError:
            pass  # the store says why in `degraded`: logged and alerted once (sinks/state/host.py)
        self.parts.host.check()

    # -- what the worker did -----------------------------------------------------------------------
    def finish(self) -> None:
        """What the worker did: recorded (the loop's thread only)."""
        for done in self.worker.take_done():
            self._record_done(done)

    def _record_done(self, done: Done) -> None:
        invocation = done.job.inv.invocation_id if done.job.inv is not None else None
        if done.evidence is not None and invocation is not None:
            self.evidence_paths[invocation] = done.evidence
            if self.last_restart is not None and self.last_restart["invocation_id"] == invocation:
                self.last_restart = dict(self.last_restart, evidence=done.evidence)
        finished = {a for a in done.job.actions if a.kind == ActionKind.ALERT} | (
            {done.restart} if done.restart else set())
        self.pending = tuple(a for a in self.pending if a not in finished)
        restart = done.restart
        if restart is not None and done.job_path is not None:
            self.restart_tries.pop(restart.invocation_id, None)
            self._restarts += (restart.verdict_kind,)
        elif restart is not None and done.restart_skipped is not None:
            # The start-up it was decided for ended before the worker got to it: not made, not tried
            # again; status no longer says phasewatch restarted it.
            self.restart_tries.pop(restart.invocation_id, None)
            if self.last_restart is not None and self.last_restart["invocation_id"] == restart.invocation_id:
                self.last_restart = None
            self._not_made += ("started_again",)
        elif restart is not None and done.restart_error is not None:
            self._restart_refused(restart, done.restart_error)
        self.save()

    def _restart_refused(self, restart: Action, error: str) -> None:
        """Alerted at the first refusal; tried again after RESTART_BACKOFF; after RESTART_TRIES it is
        "not restarted": forgotten as restarted, so that it is decided again after the budget's backoff."""
        unit, wall = self.config.unit, self.parts.clock.wall
        tries = self.restart_tries.get(restart.invocation_id, (restart, 0, 0.0))[1] + 1
        if tries == 1:
            self.parts.alerter.alert(replace(restart, kind=ActionKind.ALERT, verdict_kind="restart_failed",
                                             priority=Priority.ERROR, message=f"{unit}: restart failed: {error}"))
        if tries < RESTART_TRIES:
            wait = RESTART_BACKOFF[min(tries, len(RESTART_BACKOFF)) - 1]
            self.restart_tries[restart.invocation_id] = (restart, tries, wall() + wait)
            self.pending += (restart,)  # (still to do)
            logger.warning("[%s] restart refused (try %d of %d), trying again in %gs", unit, tries, RESTART_TRIES,
                           wait)
            return
        self.restart_tries.pop(restart.invocation_id, None)
        self.memory = replace(self.memory, restarted=self.memory.restarted - {restart.invocation_id or ""})
        self.retry_at = wall() + self.config.restart_budget.backoff
        logger.error("[%s] not restarted after %d tries; decided again after the restart backoff (%s)", unit, tries,
                     format_duration(self.config.restart_budget.backoff))

    def retry_restarts(self) -> None:
        now = self.parts.clock.wall()
        for restart, tries, at in list(self.restart_tries.values()):
            if now >= at and not self.worker.busy:
                self.restart_tries[restart.invocation_id] = (restart, tries, math.inf)  # (until it is done)
                self.worker.submit(Job((restart,), None, self.parts.read_facts() or UNKNOWN), self.runner)
        self.finish()

    def next_retry(self) -> float | None:
        """Wall clock: the next try of a refused restart."""
        return min((at for _, _, at in self.restart_tries.values()), default=None)

    def resume(self, pending: tuple[Action, ...], facts: UnitFacts | None) -> None:
        """At the daemon's start: what a killed daemon recorded and did not do. Alerts are sent (at
        least once); a restart only while its start-up still runs (else systemd had the job) and no
        hold is in force."""
        now = self.parts.clock.wall()
        keep = []
        for action in pending:
            if action.kind == ActionKind.RESTART:
                why = stale(action, facts, self.parts.hold(now), now)
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
            self.worker.submit(Job(self.pending, None, facts or UNKNOWN), self.runner)
            self.finish()


def stale(action: Action, facts: UnitFacts | None, hold: Hold | None, now: float) -> str | None:
    """Why a restart recorded as pending must not be made now (None: it must)."""
    if hold is not None and hold.active(now):
        return f"held by the operator ({hold.reason})"
    if facts is None:
        return "the unit's state cannot be read"
    if facts.invocation_id != action.invocation_id:
        return "the unit was started again since"
    if facts.job_pending or facts.active_state not in ("active", "activating", "failed"):
        return f"the unit is {facts.active_state}" + (" with a job queued" if facts.job_pending else "")
    return None


def ready_time(inv: InvocationView) -> float | None:
    main = inv.rank(MAIN)
    return next((s.start for s in main.spans if s.phase is Phase.READY), None) if main is not None else None
