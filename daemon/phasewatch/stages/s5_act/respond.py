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
# syslog priorities
PRIORITY = {"stalled": 4, "straggler": 4, "lines_lost": 4, "unhealthy": 4, "rank_died": 3, "crashed": 3,
            "gave_up": 2, "restart_failed": 3, "state_degraded": 3, "timer_lint": 4,
            "restart_blocked": 2, "metrics_unbound": 3, "waiting_for_node": 5, "group_restart": 4,
            "receiver_unbound": 2, "gpu_fault": 3, "restart_refused": 2}
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


@dataclass(frozen=True)
class Action:
    kind: str  # "evidence", "alert", "hook" or "restart"
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
    alerted, restarted = set(memory.alerted), set(memory.restarted)

    failing = [v for v in verdicts if v.kind in FAILURE_KINDS or "restart" in config.actions.get(v.kind, ())]
    for invocation in dict.fromkeys(v.invocation_id for v in failing):
        if invocation not in {f[0] for f in budget.failures}:
            budget = replace(budget, failures=budget.failures + ((invocation, now),))
        first = next((v for v in failing if v.invocation_id == invocation and v.kind in FAILURE_KINDS), None)
        if first is not None:  # a failed start-up (not a server unhealthy after ready): its fingerprint
            within = {i for i, _ in budget.within(now, config.restart_budget.window)}
            prints = tuple(p for p in budget.prints if p[0] in within)
            budget = replace(budget, prints=with_print(prints, invocation, fingerprint(first)))
    refusals: dict[str, Refusal | None] = {}

    for verdict in verdicts:
        wanted = config.actions.get(verdict.kind, ("alert",))
        note = ""
        remedy = verdict.remedy.text if verdict.remedy is not None else None
        held = hold is not None and hold.active(now)
        actions.extend(_evidence_and_hooks(verdict, wanted, alerted, held, config))
        if "restart" in wanted and held and hold is not None:
            note = f"not restarting: held by the operator for {format_duration(hold.until - now)} ({hold.reason})"
        elif "restart" in wanted and verdict.invocation_id not in restarted and (refused := refusals.setdefault(
                verdict.invocation_id, refusal(verdicts, budget.prints, verdict.invocation_id,
                                               config.restart_budget.same_failure))) is not None:
            note = refused.words
            refused_key = MemoryKey.refused_restart(verdict.invocation_id)
            if refused_key not in alerted:
                alerted.add(refused_key)
                actions.append(Action("alert", f"{config.unit}: {refused.words} ({verdict.message})"
                                      + (f"; remedy: {refused.remedy}" if refused.remedy else ""), "restart_refused",
                                      PRIORITY["restart_refused"], verdict.invocation_id, verdict.phase, verdict.rank,
                                      refused.why, config.dry_run, remedy=refused.remedy))
        elif "restart" in wanted and config.group is not None and config.group.receiver is not None:
            note = f"not restarting alone: a node of group {config.group.name}, whose restarts the group decides"
        elif "restart" in wanted and verdict.invocation_id not in restarted:
            restart_now, budget, note, wait_until = _restart_decision(verdict, budget, status, now, config)
            if restart_now:
                restarted.add(verdict.invocation_id)
                actions.append(Action("restart", verdict.message, verdict.kind, PRIORITY[verdict.kind],
                                      verdict.invocation_id, verdict.phase, verdict.rank, verdict.cause,
                                      config.dry_run, quote=verdict.quote))
            if wait_until is not None:
                retry_at = wait_until if retry_at is None else min(retry_at, wait_until)
            gave_up_now = budget.state is BudgetState.GAVE_UP and memory.budget.state is BudgetState.ARMED
            if gave_up_now and not any(a.verdict_kind == "gave_up" for a in actions):
                actions.append(_gave_up(verdict, budget, now, config))
        if "alert" in wanted and verdict.key not in alerted:
            alerted.add(verdict.key)
            message = verdict.message + (f"; {note}" if note else "") + (f"; remedy: {remedy}" if remedy else "")
            actions.append(Action("alert", message, verdict.kind, PRIORITY[verdict.kind], verdict.invocation_id,
                                  verdict.phase, verdict.rank, verdict.cause, config.dry_run, remedy=remedy))
    # Evidence first (before anything changes), restart actions last: alerts first tell why.
    actions = _grouped(actions)
    actions.sort(key=lambda a: {"evidence": 0, "alert": 1, "hook": 2}.get(a.kind, 3))
    return Response(tuple(actions), Memory(frozenset(alerted), frozenset(restarted), budget), retry_at)


def _evidence_and_hooks(verdict: Verdict, wanted: tuple[str, ...], alerted: set[Done],
                        held: bool, config: Config) -> list[Action]:
    """The verdict's evidence and hooks that were not done yet (noted in `alerted`); no hook while held."""
    actions = []
    remedy = verdict.remedy.text if verdict.remedy is not None else None
    evidence_key = verdict.key.evidence()
    if "evidence" in wanted and evidence_key not in alerted:
        alerted.add(evidence_key)
        actions.append(Action("evidence", verdict.message + (f"; remedy: {remedy}" if remedy else ""),
                              verdict.kind, PRIORITY[verdict.kind], verdict.invocation_id, verdict.phase,
                              verdict.rank, verdict.cause, config.dry_run, remedy=remedy))
    for hook in (a.removeprefix("hook:") for a in wanted if a.startswith("hook:") and not held):
        hook_key = verdict.key.of_hook(hook)
        if hook_key not in alerted:
            alerted.add(hook_key)
            actions.append(Action("hook", verdict.message, verdict.kind, PRIORITY[verdict.kind],
                                  verdict.invocation_id, verdict.phase, verdict.rank, verdict.cause,
                                  config.dry_run, hook=hook, remedy=remedy))
    return actions


def _gave_up(verdict: Verdict, budget: Budget, now: float, config: Config) -> Action:
    """The one critical alert that the restart budget is spent."""
    spent = len(budget.within(now, config.restart_budget.window))
    return Action(
        "alert", f"{config.unit}: restart budget spent ({spent} failed start-ups in "
        f"{format_duration(config.restart_budget.window)}, at most {config.restart_budget.max}); "
        "phasewatch gave up and will not restart it until a start-up reaches ready or an operator "
        "restarts it", "gave_up", PRIORITY["gave_up"], verdict.invocation_id, verdict.phase,
        verdict.rank, verdict.cause, config.dry_run)


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


def _restart_decision(verdict: Verdict, budget: Budget, status: UnitStatus, now: float, config: Config
                      ) -> tuple[bool, Budget, str, float | None]:
    """(restart now?, budget after, a note for the alert, when to look again)."""
    limits = config.restart_budget
    if verdict.kind == VerdictKind.CRASHED and now < verdict.at + CRASH_SETTLE:
        # Let the crash finish (the parent kills its children, then itself) and systemd react.
        return False, budget, "", verdict.at + CRASH_SETTLE
    if status.invocation_id is not None and status.invocation_id != verdict.invocation_id:
        return False, budget, "not restarting: the unit was already started again", None
    if status.systemd_restarting:
        return False, budget, "not restarting: systemd has a restart scheduled (Restart=)", None
    crashed_and_down = (verdict.kind == VerdictKind.CRASHED and status.active_state == "failed"
                        and not status.job_pending)
    if not status.restartable and not crashed_and_down:
        return False, budget, f"not restarting: the unit is {status.active_state} (stopped by the operator?)", None
    if budget.state is BudgetState.GAVE_UP:
        return False, budget, "not restarting: restart budget spent", None
    failures = len(budget.within(now, limits.window))
    if failures > limits.max:
        return False, replace(budget, state=BudgetState.GAVE_UP), "not restarting: restart budget spent", None
    if budget.last_restart is not None and now < budget.last_restart + limits.backoff:
        wait_until = budget.last_restart + limits.backoff
        return False, budget, f"restarting in {format_duration(wait_until - now)} (backoff)", wait_until
    count = budget.restarts + 1
    after = replace(budget, last_restart=now, restarts=count)
    verb = "would restart (dry run)" if config.dry_run else "restarting"
    return True, after, (f"{verb} ({failures} of {limits.max} in {format_duration(limits.window)})"), None
