"""Sink: judging each start-up with the limits in force for it, and acting on what is new (alerts,
restarts within the budget), remembering first; start-ups that ended go into the history once; a
state directory that cannot be written is said once and alerted once per run.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from typing import Callable, Protocol

from ..clock import Clock
from ..config import Config
from ..durations import format_duration
from ..judge import Step
from ..pipeline import Judgement, Pipeline
from ..records import FAILED_STARTUP, MAIN, NEWS_AFTER_THE_END, Phase, VerdictKind
from ..render import iso
from ..stages.s3_track.snapshot import ENDED_STATES, UP_STATES, InvocationView
from ..stages.s4_judge import policy
from ..stages.s4_judge.timerlint import UnitTimers
from ..stages.s5_act.respond import (
    PRIORITY,
    Action,
    BudgetState,
    Hold,
    Memory,
    Response,
    reset_budget,
    respond,
    settled,
)
from ..stages.s5_act.restart_gate import fingerprint as failure_print
from ..systemd_unit import UnitFacts
from .acting import ActionRunner, Evidence, Inline, Worker
from .acting import Unit as ActingUnit
from .history import History, summarize
from .leftovers import GuardedRestart
from .metrics import Exporter
from .responding import ActingOnResponses
from .state import Saved, StateStore

logger = logging.getLogger(__name__)


class Unit(Protocol):
    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...

    def timers(self) -> UnitTimers: ...


class Alerter(Protocol):
    def alert(self, action: Action) -> None: ...


class Responder(ActingOnResponses):
    def __init__(self, config: Config, pipeline: Pipeline, *, unit: Unit, read_facts: Callable[[], UnitFacts | None],
                 alerter: Alerter, store: StateStore, clock: Clock, history: History | None,
                 exporter: Exporter | None, cursor: Callable[[], str | None], evidence: Evidence | None = None,
                 hold: Callable[[float], Hold | None] = lambda now: None,
                 run_hook: Callable[[Action], object] | None = None, guarded: GuardedRestart | None = None,
                 action_unit: ActingUnit | None = None) -> None:
        self.config = config
        self.pipeline = pipeline
        self.unit = unit
        self.read_facts = read_facts
        self.alerter = alerter
        self.store = store
        self.clock = clock
        self.history = history  # past start-ups: learned limits, ETA (None: none)
        self.exporter = exporter
        self.cursor = cursor
        self.hold = hold  # the operator's hold in force at a time (sinks/hold.py)
        # evidence, hooks (sinks/hooks.py; None: not run), the guarded restart (None: RestartUnit)
        self.runner = ActionRunner(config.unit, action_unit or unit, alerter.alert, wall=clock.wall, evidence=evidence,
                                   run_hook=run_hook, guarded=guarded)
        self.actor: Inline | Worker = Inline(self.runner)  # the daemon's: a Worker (off the loop)
        self.pending: tuple[Action, ...] = ()  # alerts and the restart decided and not yet done
        self.restart_tries: dict[str | None, tuple[Action, int, float]] = {}  # refused: (restart, tries, next)
        self.evidence_paths: dict[str, str] = {}  # invocation -> its last evidence file
        self.last_restart: dict[str, str | None] | None = None  # the start-up phasewatch last restarted, and why
        self.leftovers_seen: Callable[[], float | None] = lambda: None  # when survivors of a stop were last found
        self.memory = Memory()
        self.retry_at: float | None = None  # wall clock, like the memory it comes with
        self.watched_invocation: str | None = None
        self.recorded: set[str] = set()
        self.forget: Callable[[str], None] = lambda key: None  # a fingerprint's start-up recorded
        self.degraded: dict[str, str] = {}  # "history"/"state" -> why it is kept in memory only
        self.degraded_alerted: set[str] = set()  # alerted once per run
        self.ended_by: dict[str, str] = {}  # invocation -> what ended it from outside (the group's decision)
        self.refused: dict[str, str] = {}  # invocation -> why its restart is refused (restart_gate.py), for status

    @property
    def guarded(self) -> GuardedRestart | None:
        return self.runner.guarded  # type: ignore[return-value]

    def act(self, step: Step) -> None:
        """Acts on the step's judgement: the timer check's alert, restarts to try again, then what is
        new in each start-up judged (alerts, restarts within the budget), remembered first."""
        if step.timer_lint is not None:
            lint = step.timer_lint
            self.alerter.alert(Action("alert", lint.message[:4000], "timer_lint", PRIORITY["timer_lint"],
                                      lint.invocation_id, cause=lint.codes))
        self.retry_restarts()
        for judgement in step.judgements.values():
            self._act(judgement, judgement.invocation is step.snapshot.current, step.at)

    def _act(self, judgement: Judgement, current: bool, now: float) -> None:
        inv, verdicts = judgement.invocation, list(judgement.live)
        ready_at = _ready_time(inv) if current and inv.state in UP_STATES else None
        if settled(self.memory, ready_at, verdicts, now, self.config):
            self.memory = reset_budget(self.memory)  # GAVE_UP -> ARMED: ready and healthy for `stable`
            self.save()
        self._record(judgement, current, now)
        if not current:
            verdicts = [v for v in verdicts if v.kind in NEWS_AFTER_THE_END]
        if self.exporter is not None:
            self.exporter.saw_verdicts(verdicts)
        hold = self.hold(now) if verdicts else None  # a file read: only when there is something to decide
        if not any(self._unhandled(v, hold is not None) for v in verdicts):
            return
        if self.retry_at is not None and now < self.retry_at and all(v.key in self.memory.alerted for v in verdicts):
            return  # only a restart is left to do, after the backoff
        status = self.read_facts() or UnitFacts("unknown", "unknown", None)
        response = respond(verdicts, self.memory, status, now, self.config, hold)
        for refused in (a for a in response.actions if a.verdict_kind == "restart_refused"):
            self.refused[inv.invocation_id] = refused.message
            if self.exporter is not None:
                self.exporter.restart_not_made(refused.cause or "refused")
        self._execute(response, inv, status)

    def _record(self, judgement: Judgement, current: bool, now: float) -> None:
        """A start-up that reached ready, or ended without, goes into the history once."""
        inv = judgement.invocation
        if self.history is None or inv.invocation_id in self.recorded:
            return
        ready = inv.state in UP_STATES
        ended = not current and inv.state in ENDED_STATES
        if not (ready or ended):
            return
        self.recorded.add(inv.invocation_id)
        marks = tuple((v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts)
        cause = next((v.cause for v in judgement.verdicts if v.kind != VerdictKind.LINES_LOST), None)
        if cause == "oom" and not ready and after_leftovers(inv, self.leftovers_seen(), now):
            cause = "oom after leftovers"  # the old start-up's memory, not the model's: said as such
        ended_at = _ready_time(inv) if ready else (inv.stopped_at or inv.last_ts or now)
        record = summarize(self.config.unit, inv, "ready" if ready else judgement.outcome, cause,
                           ended_at or now, marks)
        if record is None:
            return
        record = replace(record, ended_by=self.ended_by.get(inv.invocation_id),
                         remedy=next((v.remedy.text for v in judgement.verdicts if v.remedy is not None), None),
                         failure=None if ready else next((failure_print(v) for v in judgement.verdicts
                                                          if v.kind in FAILED_STARTUP), None))
        try:
            if self.history.add(record):
                logger.info("[%s] start-up %s recorded: %s in %s", self.config.unit, inv.invocation_id,
                            record.outcome, format_duration(record.duration))
                self.forget(record.fingerprint)
        except sqlite3.Error as exc:
            logger.error("[%s] cannot write history: %s", self.config.unit, exc)
        self.check_host()

    # -- acting ------------------------------------------------------------------------------------
    def _unhandled(self, verdict: policy.Verdict, held: bool = False) -> bool:
        wanted = self.config.actions.get(verdict.kind, ("alert",))
        group = self.config.group
        alone = group is None or group.receiver is None  # (a group's node restarts when its group decides)
        return ("alert" in wanted and verdict.key not in self.memory.alerted) or (
            "restart" in wanted and not held and alone and verdict.invocation_id not in self.memory.restarted
            and self.memory.budget.state is BudgetState.ARMED)

    def execute(self, response: Response, inv: InvocationView, facts: UnitFacts) -> None:
        """Remember, then act (evidence, alerts, hooks, restarts): for decisions made outside `respond`."""
        self._execute(response, inv, facts)

    def why(self, current: str | None, now: float) -> dict[str, object]:
        """For status: the hold in force, and why the current start-up exists when phasewatch started it."""
        hold = self.hold(now)
        document: dict[str, object] = {"hold": None if hold is None else {
            "until": iso(hold.until), "until_seconds": hold.until, "reason": hold.reason}}
        last = self.last_restart
        started_by_us = last is not None and current is not None and current != last["invocation_id"]
        document["previous_startup"] = dict(last, outcome="restarted by phasewatch") if started_by_us and last else None
        document["restart_refused"] = self.refused.get(current) if current is not None else None
        if current is not None and current in self.evidence_paths:
            document["evidence"] = self.evidence_paths[current]
        return document

    def save(self) -> None:
        try:
            self.store.save(Saved(self.memory, self.cursor(), self.watched_invocation, self.last_restart,
                                  self.pending, self.guarded.record() if self.guarded is not None else None))
        except OSError:
            pass  # the store says why in `degraded`: logged and alerted once, below
        self.check_host()

    # -- a failing host: the state directory full, read-only or unwritable --------------------------
    def check_host(self) -> None:
        """Keeps going with history and state in memory; says so once per change, alerts once per run."""
        degraded = {what: why for what, why in (("history", self.history.degraded if self.history else None),
                                                ("state", self.store.degraded)) if why is not None}
        if degraded == self.degraded:
            return
        for what in self.degraded.keys() - degraded.keys():
            logger.info("[%s] %s is written to the state directory again", self.config.unit, what)
        for what, why in degraded.items():
            if self.degraded.get(what) is not None:
                continue
            logger.error("[%s] %s kept in memory only: %s", self.config.unit, what, why)
            if what in self.degraded_alerted:
                continue
            self.degraded_alerted.add(what)
            self.alerter.alert(Action(
                "alert", f"{self.config.unit}: phasewatch cannot write its {what} ({why}); it keeps watching and "
                f"acting with it in memory only", "state_degraded", PRIORITY["state_degraded"], cause=what))
        self.degraded = degraded
        if self.exporter is not None:
            self.exporter.set_degraded(degraded)


def after_leftovers(inv: InvocationView, seen: float | None, now: float) -> bool:
    """Survivors of a stop were found within LEFTOVERS_BEFORE before this start-up began (a guarded
    start waits for them) or while it ran (a stop phasewatch did not make: found after the new start)."""
    began = inv.started_at
    return seen is not None and began is not None and began - LEFTOVERS_BEFORE <= seen <= (inv.stopped_at or now)


LEFTOVERS_BEFORE = 60.0


def _ready_time(inv: InvocationView) -> float | None:
    main = inv.rank(MAIN)
    return next((s.start for s in main.spans if s.phase is Phase.READY), None) if main is not None else None

