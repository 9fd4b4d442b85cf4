"""Stage 5: verdicts -> actions. Pure: what to do about a judgement, given the unit's state,
what was already done, and the restart budget. `app.py` executes the actions.

The restart budget (supervisor's shape): a list of failed start-ups (invocations with a failure
verdict, or any verdict phasewatch restarts for, `unhealthy` too) within `window`; a restart only
while there were at most `max` of them, and at least `backoff` after the previous restart; past that,
GAVE_UP (one critical alert) until a start-up stayed healthy for `stable` after ready, or the
operator restarts the unit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from ...config.load import Config
from ...durations import format_duration
from ...records import FAILED_STARTUP, STUCK, AlertKind, MessageId, VerdictKind
from ..s4_judge.verdict import MemoryKey, Verdict
from .restart_gate import Refusal, fingerprint, refusal, with_print

FAILURE_KINDS = FAILED_STARTUP
Done = tuple[str, str, str | None, str | None]  # a MemoryKey (a state file's: its tuple)
CRASH_SETTLE = 5.0  # seconds between a crash verdict and a restart decision about it


class Priority(enum.IntEnum):
    """syslog priorities of the alerts' journal entries."""

    CRITICAL = 2
    ERROR = 3
    WARNING = 4
    NOTICE = 5

    @classmethod
    def of(cls, verdict_kind: str) -> Priority:
        return PRIORITY[verdict_kind]


PRIORITY: dict[str, Priority] = {
    "stalled": Priority.WARNING, "straggler": Priority.WARNING, "lines_lost": Priority.WARNING,
    "unhealthy": Priority.WARNING, "rank_died": Priority.ERROR, "crashed": Priority.ERROR,
    "gave_up": Priority.CRITICAL, "restart_failed": Priority.ERROR, "state_degraded": Priority.ERROR,
    "timer_lint": Priority.WARNING, "restart_blocked": Priority.CRITICAL, "metrics_unbound": Priority.ERROR,
    "waiting_for_node": Priority.NOTICE, "group_restart": Priority.WARNING, "receiver_unbound": Priority.CRITICAL,
    "gpu_fault": Priority.ERROR, "restart_refused": Priority.CRITICAL}


class ActionKind(enum.StrEnum):
    """What an action does; run in this order (sinks/acting/runner.py): evidence first, the restart last."""

    EVIDENCE = "evidence"
    ALERT = "alert"
    HOOK = "hook"
    RESTART = "restart"


ACTION_ORDER = (ActionKind.EVIDENCE, ActionKind.ALERT, ActionKind.HOOK, ActionKind.RESTART)


# journal MESSAGE_IDs, one per kind of alert (records.MessageId; docs: units/phasewatch.catalog)
MESSAGE_IDS = {kind.value: MessageId[kind.name] for kind in (*VerdictKind, *AlertKind)}


class BudgetState(enum.Enum):
    ARMED = "armed"  # restarts allowed
    GAVE_UP = "gave_up"  # budget spent: no restarts until ready or an operator restart


@dataclass(frozen=True)
class Budget:
    state: BudgetState = BudgetState.ARMED
    failures: tuple[tuple[str, float], ...] = ()  # (invocation, when) of failed start-ups
    last_restart: float | None = None
    restarts: int = 0
    prints: tuple[tuple[str, str], ...] = ()  # (invocation, fingerprint) of failed start-ups (restart_gate.py)

    def within(self, now: float, window: float) -> tuple[tuple[str, float], ...]:
        return tuple(f for f in self.failures if now - f[1] <= window)

    def remaining(self, now: float, config: Config) -> int:
        if self.state is BudgetState.GAVE_UP:
            return 0
        return max(config.restart_budget.max - len(self.within(now, config.restart_budget.window)), 0)


@dataclass(frozen=True)
class UnitStatus:
    """The watched unit as systemd sees it now (D-Bus properties)."""

    active_state: str  # active, activating, deactivating, inactive, failed, reloading
    sub_state: str  # e.g. running, start, auto-restart
    invocation_id: str | None
    job_pending: bool = False  # a job (start/stop/restart) is queued or running for the unit

    @property
    def restartable(self) -> bool:
        return self.active_state in ("active", "activating") and not self.job_pending

    @property
    def systemd_restarting(self) -> bool:
        return self.sub_state == "auto-restart"


@dataclass(frozen=True, kw_only=True)
class Action:
    """One thing to do about a verdict, built by keyword; persisted while pending (sinks/state/store.py)."""

    kind: ActionKind
    message: str
    verdict_kind: str
    priority: int
    invocation_id: str | None = None
    phase: str | None = None
    rank: str | None = None
    cause: str | None = None
    dry_run: bool = False
    evidence: str | None = None  # the evidence file captured for this verdict (PHASEWATCH_EVIDENCE)
    hook: str | None = None  # kind "hook": the name of the hook to run
    remedy: str | None = None  # what to do about it (stages/s4_judge/remedies.py): PHASEWATCH_REMEDY
    quote: str | None = None  # kind "restart": the log line the message quotes (Verdict.quote)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ActionKind(self.kind))  # (a pending action read back: a string)

    @property
    def message_id(self) -> str:
        return MESSAGE_IDS[self.verdict_kind]


@dataclass(frozen=True)
class Memory:
    """What was already done; persisted, so a restarted daemon never acts twice."""

    alerted: frozenset[Done] = frozenset()
    restarted: frozenset[str] = frozenset()  # invocations phasewatch restarted
    budget: Budget = field(default_factory=Budget)


@dataclass(frozen=True)
class Hold:
    """`phasewatch hold`: until `until` (wall clock) verdicts are judged and alerted, but nothing is
    restarted (and no hook runs)."""

    until: float
    reason: str

    def active(self, now: float) -> bool:
        return now < self.until


@dataclass(frozen=True)
class Response:
    actions: tuple[Action, ...]
    memory: Memory
    retry_at: float | None  # a restart waits for the backoff: look again then


def reset_budget(memory: Memory) -> Memory:
    """A start-up reached ready, or the operator restarted the unit: GAVE_UP -> ARMED, failures cleared."""
    return replace(memory, budget=Budget(last_restart=memory.budget.last_restart))


def settled(memory: Memory, ready_at: float | None, verdicts: list[Verdict], now: float, config: Config) -> bool:
    """Should a start-up that reached ready at `ready_at` free the budget now? Only once it stayed
    healthy (no verdict phasewatch restarts for) for `restart_budget.stable`."""
    if ready_at is None or (not memory.budget.failures and memory.budget.state is BudgetState.ARMED):
        return False
    if any(v.kind in FAILURE_KINDS or "restart" in config.actions.get(v.kind, ()) for v in verdicts):
        return False
    return now - ready_at >= config.restart_budget.stable


def respond(verdicts: list[Verdict], memory: Memory, status: UnitStatus, now: float, config: Config,
            hold: Hold | None = None) -> Response:
    actions: list[Action] = []
    budget = memory.budget
    retry_at: float | None = None
    alerted = set(memory.alerted)
    restarted = set(memory.restarted)

    budget = _with_failures(budget, verdicts, now, config)
    refusals: dict[str, Refusal | None] = {}

    for verdict in verdicts:
        wanted = config.actions.get(verdict.kind, ("alert",))
        note = ""
        remedy = verdict.remedy.text if verdict.remedy is not None else None
        evidence_key = verdict.key.evidence()
        if "evidence" in wanted and evidence_key not in alerted:
            alerted.add(evidence_key)
            actions.append(_about(verdict, config, ActionKind.EVIDENCE,
                                  verdict.message + (f"; remedy: {remedy}" if remedy else ""), remedy=remedy))
        held = hold is not None and hold.active(now)
        for hook in (a.removeprefix("hook:") for a in wanted if a.startswith("hook:") and not held):
            hook_key = verdict.key.of_hook(hook)
            if hook_key not in alerted:
                alerted.add(hook_key)
                actions.append(_about(verdict, config, ActionKind.HOOK, verdict.message, hook=hook, remedy=remedy))
        if "restart" in wanted and held and hold is not None:
            note = f"not restarting: held by the operator for {format_duration(hold.until - now)} ({hold.reason})"
        elif "restart" in wanted and verdict.invocation_id not in restarted and (refused := refusals.setdefault(
                verdict.invocation_id, refusal(verdicts, budget.prints, verdict.invocation_id,
                                               config.restart_budget.same_failure))) is not None:
            note = refused.words
            refused_key = MemoryKey.refused_restart(verdict.invocation_id)
            if refused_key not in alerted:
                alerted.add(refused_key)
                words = f"{config.unit}: {refused.words} ({verdict.message})" + (
                    f"; remedy: {refused.remedy}" if refused.remedy else "")
                actions.append(_about(verdict, config, ActionKind.ALERT, words, verdict_kind="restart_refused",
                                      cause=refused.why, remedy=refused.remedy))
        elif "restart" in wanted and config.group is not None and config.group.receiver is not None:
            note = f"not restarting alone: a node of group {config.group.name}, whose restarts the group decides"
        elif "restart" in wanted and verdict.invocation_id not in restarted:
            decision = _restart_decision(verdict, budget, status, now, config)
            budget, note = decision.budget, decision.note
            if decision.restart:
                restarted.add(verdict.invocation_id)
                actions.append(_about(verdict, config, ActionKind.RESTART, verdict.message, quote=verdict.quote))
            if decision.wait_until is not None:
                retry_at = decision.wait_until if retry_at is None else min(retry_at, decision.wait_until)
            gave_up_now = budget.state is BudgetState.GAVE_UP and memory.budget.state is BudgetState.ARMED
            if gave_up_now and not any(a.verdict_kind == "gave_up" for a in actions):
                actions.append(_gave_up(verdict, budget, now, config))
        if "alert" in wanted and verdict.key not in alerted:
            alerted.add(verdict.key)
            message = verdict.message + (f"; {note}" if note else "") + (f"; remedy: {remedy}" if remedy else "")
            actions.append(_about(verdict, config, ActionKind.ALERT, message, remedy=remedy))
    # Evidence first (before anything changes), restart actions last: alerts first tell why.
    actions = _grouped(actions)
    actions.sort(key=lambda a: ACTION_ORDER.index(a.kind))
    return Response(tuple(actions), Memory(frozenset(alerted), frozenset(restarted), budget), retry_at)


def _with_failures(budget: Budget, verdicts: list[Verdict], now: float, config: Config) -> Budget:
    """The budget with the start-ups that fail (or that phasewatch restarts for) counted once each,
    and a failed start-up's fingerprint (restart_gate.py)."""
    failing = [v for v in verdicts if v.kind in FAILURE_KINDS or "restart" in config.actions.get(v.kind, ())]
    for invocation in dict.fromkeys(v.invocation_id for v in failing):
        if invocation not in {f[0] for f in budget.failures}:
            budget = replace(budget, failures=budget.failures + ((invocation, now),))
        first = next((v for v in failing if v.invocation_id == invocation and v.kind in FAILURE_KINDS), None)
        if first is not None:  # a failed start-up (not a server unhealthy after ready): its fingerprint
            within = {i for i, _ in budget.within(now, config.restart_budget.window)}
            prints = tuple(p for p in budget.prints if p[0] in within)
            budget = replace(budget, prints=with_print(prints, invocation, fingerprint(first)))
    return budget


def _gave_up(verdict: Verdict, budget: Budget, now: float, config: Config) -> Action:
    spent = len(budget.within(now, config.restart_budget.window))
    return _about(verdict, config, ActionKind.ALERT,
                  f"{config.unit}: restart budget spent ({spent} failed start-ups in "
                  f"{format_duration(config.restart_budget.window)}, at most {config.restart_budget.max}); "
                  "phasewatch gave up and will not restart it until a start-up reaches ready or an operator "
                  "restarts it", verdict_kind="gave_up")


def _grouped(actions: list[Action]) -> list[Action]:
    """Ranks that fail the same way at the same time (all eight stuck in one collective) make one
    alert naming them all, not eight."""
    out: list[Action] = []
    groups: dict[tuple[str, str | None, str | None, str | None], list[Action]] = {}
    for action in actions:
        if action.kind != "alert" or action.rank is None or action.verdict_kind not in STUCK:
            out.append(action)
            continue
        key = (action.verdict_kind, action.invocation_id, action.phase, action.cause)
        if key not in groups:
            groups[key] = []
            out.append(action)  # the group's first member; replaced by the merged alert below
        groups[key].append(action)
    for members in groups.values():
        if len(members) == 1:
            continue
        first = members[0]
        ranks = [m.rank for m in members if m.rank]
        merged = replace(first, rank=",".join(ranks),
                         message=f"{first.message} (and {len(ranks) - 1} more ranks alike: {', '.join(ranks[1:])})")
        out[out.index(first)] = merged
    return out


@dataclass(frozen=True)
class RestartDecision:
    restart: bool  # restart now
    budget: Budget  # the budget after
    note: str  # for the alert
    wait_until: float | None = None  # when to look again


def _about(verdict: Verdict, config: Config, kind: ActionKind, message: str, **extra: str | None) -> Action:
    """An action about `verdict` (its kind, start-up, phase, rank and cause unless `extra` says)."""
    about: dict[str, str | None] = {"verdict_kind": verdict.kind, "invocation_id": verdict.invocation_id,
                                    "phase": verdict.phase, "rank": verdict.rank, "cause": verdict.cause, **extra}
    return Action(kind=kind, message=message, priority=PRIORITY[about["verdict_kind"] or verdict.kind],
                  dry_run=config.dry_run, **about)  # type: ignore[arg-type]


def _restart_decision(verdict: Verdict, budget: Budget, status: UnitStatus, now: float, config: Config
                      ) -> RestartDecision:
    limits = config.restart_budget
    if verdict.kind == VerdictKind.CRASHED and now < verdict.at + CRASH_SETTLE:
        # Let the crash finish (the parent kills its children, then itself) and systemd react.
        return RestartDecision(False, budget, "", verdict.at + CRASH_SETTLE)
    if status.invocation_id is not None and status.invocation_id != verdict.invocation_id:
        return RestartDecision(False, budget, "not restarting: the unit was already started again")
    if status.systemd_restarting:
        return RestartDecision(False, budget, "not restarting: systemd has a restart scheduled (Restart=)")
    crashed_and_down = (verdict.kind == VerdictKind.CRASHED and status.active_state == "failed"
                        and not status.job_pending)
    if not status.restartable and not crashed_and_down:
        return RestartDecision(False, budget,
                               f"not restarting: the unit is {status.active_state} (stopped by the operator?)")
    if budget.state is BudgetState.GAVE_UP:
        return RestartDecision(False, budget, "not restarting: restart budget spent")
    failures = len(budget.within(now, limits.window))
    if failures > limits.max:
        return RestartDecision(False, replace(budget, state=BudgetState.GAVE_UP),
                               "not restarting: restart budget spent")
    if budget.last_restart is not None and now < budget.last_restart + limits.backoff:
        wait_until = budget.last_restart + limits.backoff
        return RestartDecision(False, budget, f"restarting in {format_duration(wait_until - now)} (backoff)",
                               wait_until)
    count = budget.restarts + 1
    after = replace(budget, last_restart=now, restarts=count)
    verb = "would restart (dry run)" if config.dry_run else "restarting"
    return RestartDecision(True, after, f"{verb} ({failures} of {limits.max} in {format_duration(limits.window)})")
