"""Sink: judging each start-up with the limits in force for it, and acting on what is new (alerts,
restarts within the budget), remembering first; start-ups that ended go into the history once; a
state directory that cannot be written is said once and alerted once per run.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ..clock import Clock
from ..config import Config
from ..durations import format_duration
from ..errors import UnitError
from ..pipeline import Pipeline
from ..records import MAIN, NEWS_AFTER_THE_END, Phase, VerdictKind
from ..stages import policy
from ..stages.learn import LimitInForce, adapted, eta_seconds, limits_in_force, typical_durations
from ..stages.respond import PRIORITY, Action, BudgetState, Memory, Response, reset_budget, respond
from ..stages.snapshot import ENDED_STATES, UP_STATES, InvocationView, Snapshot
from .actions import UnitFacts
from .history import History, fingerprint, summarize
from .metrics import Exporter
from .state import Saved, StateStore

logger = logging.getLogger(__name__)


class Unit(Protocol):
    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...


class Alerter(Protocol):
    def alert(self, action: Action) -> None: ...


@dataclass(frozen=True)
class Learned:
    config: Config  # with the limits in force
    limits: dict[Phase, LimitInForce]
    typical: dict[Phase, float]


class Responder:
    def __init__(self, config: Config, pipeline: Pipeline, *, unit: Unit, read_facts: Callable[[], UnitFacts | None],
                 alerter: Alerter, store: StateStore, clock: Clock, history: History | None,
                 exporter: Exporter | None, cursor: Callable[[], str | None]) -> None:
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
        self.memory = Memory()
        self.retry_at: float | None = None  # wall clock, like the memory it comes with
        self.watched_invocation: str | None = None
        self.recorded: set[str] = set()
        self.learned: dict[str, Learned] = {}  # by fingerprint
        self.eta: float | None = None
        self.degraded: dict[str, str] = {}  # "history"/"state" -> why it is kept in memory only
        self.degraded_alerted: set[str] = set()  # alerted once per run

    def judge_and_act(self) -> None:
        snapshot = self.pipeline.snapshot()
        # The start-up that just ended (a crash, then systemd's Restart=) may have news too.
        for earlier in snapshot.invocations[-3:-1]:
            self._judge(earlier, current=False)
        if snapshot.current is not None:
            self._judge(snapshot.current, current=True)

    def _judge(self, inv: InvocationView, current: bool) -> None:
        now = self.clock.wall()
        if current and inv.state in UP_STATES and (
                self.memory.budget.failures or self.memory.budget.state is not BudgetState.ARMED):
            self.memory = reset_budget(self.memory)  # GAVE_UP -> ARMED: a start-up reached ready
            self.save()
        learned = self.learned_for(inv)
        if current:
            self.pipeline.use_limits(learned.config)  # judged with the limits in force for this start-up
            self.eta = eta_seconds(inv, now, learned.typical)
        verdicts = policy.evaluate(inv, now, learned.config, self.pipeline.profile)
        self._record(inv, current, now)
        if not current:
            verdicts = [v for v in verdicts if v.kind in NEWS_AFTER_THE_END]
        if self.exporter is not None:
            self.exporter.saw_verdicts(verdicts)
        if not any(self._unhandled(v) for v in verdicts):
            return
        if self.retry_at is not None and now < self.retry_at and all(v.key in self.memory.alerted for v in verdicts):
            return  # only a restart is left to do, after the backoff
        status = self.read_facts() or UnitFacts("unknown", "unknown", None)
        response = respond(verdicts, self.memory, status, now, self.config)
        self._execute(response)

    # -- learning from past start-ups -------------------------------------------------------------
    def learned_for(self, inv: InvocationView) -> Learned:
        if self.history is None or inv.server is None:
            return Learned(self.config, {}, {})
        key = fingerprint(inv.server)
        if key not in self.learned:
            durations = {p: self.history.durations(self.config.unit, key, p.value) for p in Phase}
            silences = {p: self.history.silences(self.config.unit, key, p.value) for p in Phase}
            limits = limits_in_force(self.config, self.config.adaptive, durations, silences)
            self.learned[key] = Learned(adapted(self.config, limits), limits, typical_durations(durations))
        return self.learned[key]

    def _record(self, inv: InvocationView, current: bool, now: float) -> None:
        """A start-up that reached ready, or ended without, goes into the history once."""
        if self.history is None or inv.invocation_id in self.recorded:
            return
        ready = inv.state in UP_STATES
        ended = not current and inv.state in ENDED_STATES
        if not (ready or ended):
            return
        self.recorded.add(inv.invocation_id)
        judgement = self.pipeline.judge(now, Snapshot((inv,)))[0]
        marks = tuple((v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts)
        cause = next((v.cause for v in judgement.verdicts if v.kind != VerdictKind.LINES_LOST), None)
        ended_at = _ready_time(inv) if ready else (inv.stopped_at or inv.last_ts or now)
        record = summarize(self.config.unit, inv, "ready" if ready else judgement.outcome, cause,
                           ended_at or now, marks)
        if record is None:
            return
        try:
            if self.history.add(record):
                logger.info("[%s] start-up %s recorded: %s in %s", self.config.unit, inv.invocation_id,
                            record.outcome, format_duration(record.duration))
                self.learned.pop(record.fingerprint, None)
        except sqlite3.Error as exc:
            logger.error("[%s] cannot write history: %s", self.config.unit, exc)
        self.check_host()

    # -- acting ------------------------------------------------------------------------------------
    def _unhandled(self, verdict: policy.Verdict) -> bool:
        wanted = self.config.actions.get(verdict.kind, ("alert",))
        return ("alert" in wanted and verdict.key not in self.memory.alerted) or (
            "restart" in wanted and verdict.invocation_id not in self.memory.restarted
            and self.memory.budget.state is BudgetState.ARMED)

    def _execute(self, response: Response) -> None:
        self.memory = response.memory
        self.retry_at = response.retry_at
        self.save()  # remember before acting: a crash here must not act twice
        for action in response.actions:
            if action.kind == "alert":
                logger.info("[%s rank=%s phase=%s] alert %s: %s", self.config.unit, action.rank, action.phase,
                            action.verdict_kind, action.message)
                self.alerter.alert(action)
            elif action.dry_run:
                logger.info("[%s] dry run: would restart (%s)", self.config.unit, action.verdict_kind)
            else:
                try:
                    job = self.unit.restart()
                    if self.exporter is not None:
                        self.exporter.restarted(action.verdict_kind)
                    logger.info("[%s] restart requested (%s), job %s", self.config.unit, action.verdict_kind, job)
                except UnitError as exc:
                    logger.error("[%s] %s", self.config.unit, exc)
                    self.alerter.alert(replace(action, kind="alert", verdict_kind="restart_failed", priority=3,
                                               message=f"{self.config.unit}: restart failed: {exc}"))

    def save(self) -> None:
        try:
            self.store.save(Saved(self.memory, self.cursor(), self.watched_invocation))
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


def _ready_time(inv: InvocationView) -> float | None:
    main = inv.rank(MAIN)
    return next((s.start for s in main.spans if s.phase is Phase.READY), None) if main is not None else None

