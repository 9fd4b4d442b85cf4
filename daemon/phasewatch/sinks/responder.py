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
from ..config.load import Config
from ..durations import format_duration
from ..engines import ServerInfo
from ..errors import UnitError
from ..output.render import iso
from ..pipeline import Judgement, Pipeline, StepJudgement
from ..records import FAILED_STARTUP, MAIN, NEWS_AFTER_THE_END, Phase, VerdictKind
from ..sources.host.listeners import port_holders
from ..sources.host.ras_client import ras_port_holder
from ..stages.s3_track.snapshot import ENDED_STATES, UP_STATES, InvocationView, UnitState
from ..stages.s4_judge import policy
from ..stages.s4_judge.learn import LimitInForce, adapted, eta_seconds, limits_in_force, typical_durations
from ..stages.s4_judge.remedies import UnitSettings
from ..stages.s4_judge.timerlint import TimerWarning, UnitTimers, lint
from ..stages.s4_judge.timerlint import summary as lint_summary
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
from .history import History, fingerprint, summarize
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


@dataclass(frozen=True)
class Learned:
    config: Config  # with the limits in force
    limits: dict[Phase, LimitInForce]
    typical: dict[Phase, float]


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
        self.learned: dict[str, Learned] = {}  # by fingerprint
        self._fingerprinted: tuple[ServerInfo, bool, str] | None = None  # asked every step: the last one kept
        self.eta: float | None = None
        self.degraded: dict[str, str] = {}  # "history"/"state" -> why it is kept in memory only
        self.degraded_alerted: set[str] = set()  # alerted once per run
        self.linted: set[str] = set()  # start-ups whose timers were checked (once each)
        self.timer_warnings: list[TimerWarning] = []
        self.ended_by: dict[str, str] = {}  # invocation -> what ended it from outside (the group's decision)
        self.refused: dict[str, str] = {}  # invocation -> why its restart is refused (restart_gate.py), for status

    @property
    def guarded(self) -> GuardedRestart | None:
        return self.runner.guarded  # type: ignore[return-value]

    def judge_and_act(self) -> StepJudgement:
        """The step's one judgement (`judge`), acted on; returned for the other sinks to read."""
        judged = self.judge()
        self.act(judged)
        return judged

    def judge(self) -> StepJudgement:
        """The current start-up and the two before it (the one that just ended, a crash then systemd's
        Restart=, may have news too), each judged once with the limits in force for it. The current
        one's limits, ETA and timer check come first: its verdicts' remedies read the unit's settings."""
        now = self.clock.wall()
        snapshot = self.pipeline.snapshot()
        judgements = {}
        for earlier in snapshot.invocations[-3:-1]:
            judgements[earlier.invocation_id] = self.pipeline.judge_one(earlier, now, self.learned_for(earlier).config)
        current = snapshot.current
        if current is not None:
            learned = self.learned_for(current)
            self.pipeline.use_limits(learned.config)  # judged with the limits in force for this start-up
            self.eta = eta_seconds(current, now, learned.typical)
            self._lint_timers(current, learned)
            judgements[current.invocation_id] = self.pipeline.judge_one(current, now, learned.config)
        return StepJudgement(now, snapshot, judgements)

    def act(self, judged: StepJudgement) -> None:
        self.retry_restarts()
        for judgement in judged.judgements.values():
            self._act(judgement, judgement.invocation is judged.snapshot.current, judged.at)

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

    def _lint_timers(self, inv: InvocationView, learned: Learned) -> None:
        """Once per start-up, when its server_args are known: warn about engine and systemd timers that
        end a phase before phasewatch's limit does, and limits below the learned healthy duration."""
        if inv.server is None or inv.invocation_id in self.linted or inv.state is not UnitState.STARTING:
            return
        self.linted.add(inv.invocation_id)
        try:
            timers = self.unit.timers()
        except UnitError as exc:
            logger.warning("[%s] timer check without the unit's settings: %s", self.config.unit, exc)
            timers = UnitTimers()
        port = inv.server.port or 0  # who holds the server's port now (a leftover server, another service)
        self.pipeline.unit_settings = UnitSettings(timers.exec_start, timers.environment, timers.devices,
                                                   port_holders([port]) if port else {})
        facts = self.read_facts()  # (the RAS port's holder is told from the unit's own ranks by its cgroup)
        holder = ras_port_holder(timers.environment, facts.control_group if facts is not None else None)
        self.timer_warnings = lint(learned.config, inv.server.timer_args, timers, learned.typical, holder)
        if self.exporter is not None:
            self.exporter.saw_timer_warnings(self.timer_warnings)
        if self.timer_warnings:
            message = (f"{self.config.unit}: {len(self.timer_warnings)} limit(s) will not fire as configured: "
                       f"{lint_summary(self.timer_warnings)}")
            logger.warning("[%s] %s", self.config.unit, message)
            self.alerter.alert(Action("alert", message[:4000], "timer_lint", PRIORITY["timer_lint"],
                                      inv.invocation_id, cause=",".join(w.code for w in self.timer_warnings)))

    # -- learning from past start-ups -------------------------------------------------------------
    def learned_for(self, inv: InvocationView) -> Learned:
        if self.history is None or inv.server is None:
            return Learned(self.config, {}, {})
        last = self._fingerprinted
        if last is not None and last[0] is inv.server and last[1] == inv.cold:
            key = last[2]
        else:
            key = fingerprint(inv.server, inv.cold)  # cold and warm start-ups learn apart
            self._fingerprinted = (inv.server, inv.cold, key)
        if key not in self.learned:
            durations = {p: self.history.durations(self.config.unit, key, p.value) for p in Phase}
            silences = {p: self.history.silences(self.config.unit, key, p.value) for p in Phase}
            limits = limits_in_force(self.config, self.config.adaptive, durations, silences)
            self.learned[key] = Learned(adapted(self.config, limits), limits, typical_durations(durations))
        return self.learned[key]

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
                self.learned.pop(record.fingerprint, None)
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

