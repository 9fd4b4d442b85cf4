"""Stage 4: snapshot + now -> verdicts. Pure; `next_deadline()` tells a loop when to look again.

Verdict kinds: stalled, straggler, crashed, lines_lost. An invocation's outcome is one of
starting, ready, serving, stalled, crashed, stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...config.load import Config, PhaseLimits
from ...durations import format_duration
from ...profile.load import Profile
from ...records import MAIN, STUCK, UNIT_PHASES, WRONG_WHEN_STOPPED, Outcome, Phase, VerdictKind
from ..s2_interpret.crashfacts import (
    describe,
)
from ..s3_track.snapshot import LIVE_STATES, UP_STATES, FatalView, GpuSeen, InvocationView, RankView, UnitState
from .crash_culprit import GENERIC_CAUSES, crash_phase, failing_fatal, find_culprit, rank_facts, telling_line
from .gpu_policy import gpu_words as _gpu_words
from .gpu_policy import stall_window as _stall_window
from .group_wait import node_done, with_node_waiting
from .redact import redact
from .verdict import Verdict

OUTCOMES = tuple(Outcome)
START_UP_STATES = (UnitState.STARTING,)
# How long a parent's "Received sigquit" waits for the failing child's own lines (or the unit's
# failure) before it is reported as the crash by itself.
ECHO_GRACE = 3.0
QUOTE_CHARS = 200  # of the telling line, in a crash verdict's message


def _quiet_since(inv: InvocationView, rank: RankView, gpu: GpuSeen | None = None) -> float | None:
    # A sign of life outside the log (data intake, a compiler, a GPU that computes: vitals.py) also
    # ends a silence; it counts for its own rank only (the main process: its schedulers' GPUs), and
    # never moves the phase's deadline.
    busy = gpu.seen if gpu is not None and rank.rank == MAIN and gpu.state not in ("waiting", "idle", "unknown") \
        else None
    times = [t for t in (rank.last_activity, rank.phase_start, inv.phase_activity(rank.phase), rank.last_vital, busy)
             if t is not None]
    return max(times) if times else None


def _judged(rank: RankView) -> RankView:
    """A rank compiling (the jit_compile sub-phase) is judged by jit_compile's limits, from the start
    of its compile session; otherwise by its phase's."""
    jit = rank.jit
    if jit is None or jit.end is not None:
        return rank
    return replace(rank, phase=Phase.JIT_COMPILE, phase_start=jit.start, phase_ended=False)


def _evaluated_ranks(inv: InvocationView) -> list[RankView]:
    """Schedulers during their own phases; the main process for launch (before any rank) and HTTP phases."""
    seen_schedulers = [r for r in inv.scheduler_ranks if r.seen]
    out: list[RankView] = []
    for rank in inv.ranks:
        if rank.rank == MAIN:
            if rank.phase in UNIT_PHASES or not seen_schedulers:
                out.append(rank)
        elif rank.phase not in UNIT_PHASES and (rank.seen or seen_schedulers):
            # Ranks expected but silent are judged once another rank spoke; before, the main is.
            out.append(_judged(rank))
    return out


def _straggler_base(inv: InvocationView, rank: RankView) -> float | None:
    if rank.rank == MAIN or rank.phase_ended:
        return None
    return inv.first_exit(rank.phase)


# The cause of lines lost that the journal itself forgot: vacuumed (or unreadable) before they were read.
LOST_UNREAD = "journal_vacuumed"


def evaluate(inv: InvocationView, now: float, config: Config, profile: Profile | None = None) -> list[Verdict]:
    unit = config.unit
    verdicts: list[Verdict] = []
    if inv.lines_lost and inv.lost_cause == LOST_UNREAD:
        verdicts.append(Verdict(VerdictKind.LINES_LOST, inv.invocation_id, None, None, LOST_UNREAD,
                                f"{unit}: the journal dropped lines of this start-up before phasewatch read them "
                                "(rotated out and vacuumed, or a file it cannot read); phases and progress may be "
                                "missing (raise SystemMaxUse= in journald.conf)", now))
    elif inv.lines_lost:
        verdicts.append(Verdict(VerdictKind.LINES_LOST, inv.invocation_id, None, None, "journald_rate_limit",
                                f"{unit}: journald dropped {inv.lines_lost} line(s) of this start-up; phases and "
                                "progress may be missing (raise LogRateLimitBurst= in the unit)", now))
    crash = crashed_verdict(inv, now, config, profile)
    if crash is not None:
        return [*verdicts, crash]
    if inv.state in UP_STATES:
        health = config.health
        if health.enabled and inv.health_failures >= health.failures:
            phase = inv.state.value
            verdicts.append(Verdict(VerdictKind.UNHEALTHY, inv.invocation_id, phase, None, "health_probe",
                                    f"{unit}: {inv.health_failures} health probes failed in a row "
                                    f"(last: {inv.health_error}); the server is not answering", now,
                                    inv.health_episode))
    if inv.state not in START_UP_STATES or node_done(inv):
        return verdicts
    for rank in inv.scheduler_ranks:
        if rank.died_at is not None:
            verdicts.append(Verdict(VerdictKind.RANK_DIED, inv.invocation_id, rank.phase.value, rank.rank,
                                    "process_exited",
                                    f"{unit}: {rank.rank}'s process (pid {rank.died_pid}) exited in "
                                    f"{rank.phase.value} while the unit is starting", rank.died_at))
    dead = {v.rank for v in verdicts if v.kind == VerdictKind.RANK_DIED}
    paces: PaceCache = {}
    for rank in _evaluated_ranks(inv):
        if rank.rank in dead:
            continue
        limits = config.limits(rank.phase)
        stall, gpu = _stall_window(inv, rank, now, limits, config)
        verdict = _stalled(inv, rank, now, _deadline(inv, rank, now, limits, paces), stall, unit, gpu)
        if verdict is None:
            verdict = _straggler(inv, rank, now, config.rank_skew, unit)
        if verdict is not None:
            verdicts.append(verdict)
    # (gpu_waiting: the ranks whose GPU shows the waiting signature, once the GPU sampler gives it)
    return with_node_waiting(inv, verdicts, now, config, gpu_waiting=None)


def _others(inv: InvocationView, rank: RankView, now: float) -> str:
    first_exit = _straggler_base(inv, rank)
    if first_exit is not None:
        return f"; other ranks finished it {format_duration(now - first_exit)} ago"
    peers = max(inv.schedulers_in(rank.phase) - (rank.rank != MAIN), 0)  # a scheduler does not count itself
    return f"; {peers} other rank(s) in the same phase" if peers else ""


@dataclass(frozen=True)
class _Pace:
    """How the ranks that drew a bar in one phase progress: the latest end among those that
    finished it, and the least and greatest fraction done among those still moving."""

    last_end: float | None
    least_done: float | None
    most_done: float | None


PaceCache = dict[tuple[Phase, float, float], _Pace]


def _pace(inv: InvocationView, phase: Phase, now: float, stall: float) -> _Pace:
    last_end: float | None = None
    done: list[float] = []
    for peer in inv.scheduler_ranks:
        if peer.phase is not phase or phase not in peer.progress_totals:
            continue  # only ranks that drew a bar in this phase say how it progresses
        if peer.phase_ended:
            end = peer.spans[-1].end if peer.spans else None
            if end is not None and (last_end is None or end > last_end):
                last_end = end
        elif (peer.progress is not None and peer.progress_phase is phase and peer.progress.total
              and peer.progress.n > 0 and peer.last_activity is not None and now - peer.last_activity <= stall):
            done.append(peer.progress.n / peer.progress.total)
    return _Pace(last_end, min(done) if done else None, max(done) if done else None)


def _deadline(inv: InvocationView, rank: RankView, now: float, limits: PhaseLimits,
              paces: PaceCache | None = None) -> float | None:
    """The deadline in force for this rank now: a learned one stretches to the phase's own pace
    while its bar keeps moving (a slow disk is not a hang), never past the cap. `paces` keeps each
    phase's pace for the other ranks judged at the same `now` (judging stays linear in ranks)."""
    deadline = limits.deadline
    if deadline is None or limits.cap is None or rank.phase_start is None:
        return deadline
    stall = limits.stall if limits.stall is not None else deadline
    key = (rank.phase, now, stall)
    pace = paces.get(key) if paces is not None else None
    if pace is None:
        pace = _pace(inv, rank.phase, now, stall)
        if paces is not None:
            paces[key] = pace
    projections = []
    elapsed = now - rank.phase_start
    if pace.last_end is not None:
        projections.append((pace.last_end - rank.phase_start) * 1.1)  # it finished: about as long here
    # its own pace: elapsed / done * 1.1, greatest at the least done (or, before the start, the most)
    done = pace.least_done if elapsed >= 0 else pace.most_done
    if done is not None:
        projections.append(elapsed / done * 1.1)
    if not projections:
        return deadline
    projected = max(projections)
    return min(max(deadline, projected), max(limits.cap, deadline))


def _stalled(inv: InvocationView, rank: RankView, now: float, deadline: float | None, stall: float | None,
             unit: str, gpu: GpuSeen | None = None) -> Verdict | None:
    phase = rank.phase.value
    if rank.phase_ended and inv.unfinished_in(rank.phase):
        return None  # finished, and waiting for a rank still in the phase: that rank is the one to name
    if deadline is not None and not rank.phase_ended and rank.phase_start is not None:
        spent = now - rank.phase_start
        if spent > deadline:
            return Verdict(VerdictKind.STALLED, inv.invocation_id, phase, rank.rank, "deadline",
                           f"{unit}: {rank.rank} stalled in {phase} for {format_duration(spent)} "
                           f"(limit {format_duration(deadline)}){_others(inv, rank, now)}", now)
    quiet_since = _quiet_since(inv, rank, gpu)
    if stall is not None and quiet_since is not None and now - quiet_since > stall:
        silent = now - quiet_since
        where = f"after {phase} ended" if rank.phase_ended else f"in {phase}"
        return Verdict(VerdictKind.STALLED, inv.invocation_id, phase, rank.rank, "no_progress",
                       f"{unit}: {rank.rank} stalled {where}: no output or progress for {format_duration(silent)} "
                       f"(stall window {format_duration(stall)}){_others(inv, rank, now)}{_gpu_words(gpu, now)}",
                       now)
    return None


def _straggler(inv: InvocationView, rank: RankView, now: float, skew: float, unit: str) -> Verdict | None:
    first_exit = _straggler_base(inv, rank)
    if first_exit is None or now - first_exit <= skew:
        return None
    behind = now - first_exit
    what = "has not printed anything" if not rank.seen else f"is still in {rank.phase.value}"
    return Verdict(VerdictKind.STRAGGLER, inv.invocation_id, rank.phase.value, rank.rank, "rank_skew",
                   f"{unit}: {rank.rank} {what}; other ranks left {rank.phase.value} "
                   f"{format_duration(behind)} ago (rank skew limit {format_duration(skew)})", now)


def _stalled_before_it_stopped(inv: InvocationView, config: Config, profile: Profile | None) -> bool:
    before, at = inv.before_stop, inv.stopped_at
    if before is None or at is None:
        return False
    return any(v.kind in WRONG_WHEN_STOPPED for v in evaluate(before, at, config, profile))


def crashed_verdict(inv: InvocationView, now: float, config: Config, profile: Profile | None = None) -> Verdict | None:
    failed = inv.state is UnitState.FAILED
    if not inv.fatals and not failed:
        return None
    profile = profile or config.engine_profile()
    if inv.state in UP_STATES and not failed and not any(
            not f.echo and f.rank not in (None, MAIN) and f.rule not in profile.per_request_rules for f in inv.fatals):
        # After ready only a scheduler's death or the unit's failure is a crash: a bare traceback is
        # usually one request's error (uvicorn's "Exception in ASGI application"), not the server's.
        return None
    if failed and not inv.fatals and _stalled_before_it_stopped(inv, config, profile):
        return None  # it failed because the stall was acted on (wait-ready in ExecStartPost=, a restart)
    if not failed and all(f.echo for f in inv.fatals):
        first_echo = min((f.ts for f in inv.fatals if f.ts is not None), default=now)
        if now < first_echo + ECHO_GRACE:
            return None  # the parent's SIGQUIT line comes first: wait for the child's own lines
    facts = rank_facts(inv)
    culprit, rank = find_culprit(inv, facts)
    cause: str | None = None
    if culprit is not None:
        own_texts = [t for f in inv.fatals if f.rank == culprit.rank for t in f.texts]
        all_texts = [t for f in inv.fatals for t in f.texts]
        # A specific class in the culprit's own lines, else in any rank's (torch's C++ lines about a
        # timeout often come from the peers), else the generic class of the culprit's lines.
        cause = (profile.classify_cause(own_texts, skip=GENERIC_CAUSES)
                 or profile.classify_cause(all_texts, skip=GENERIC_CAUSES)
                 or (culprit.cause if culprit.cause not in GENERIC_CAUSES else None)
                 or profile.classify_cause(own_texts) or culprit.cause)
    if cause is None and failed:
        cause = "killed" if inv.unit_result in ("signal", "core-dump") else "exit_code"
    if (cause is None or cause in GENERIC_CAUSES) and now < _cause_wait_until(inv, culprit, config):
        return None  # "WorkerProc failed to start." comes before its traceback's OutOfMemoryError
    phase = crash_phase(inv, culprit, rank, facts)
    at = culprit.ts if culprit is not None and culprit.ts is not None else now
    where = f" in {phase}" if phase else ""
    quote = redact(telling_line(culprit, cause, profile))[:QUOTE_CHARS] if culprit is not None and culprit.texts \
        else None
    detail = f": {quote}" if quote is not None else ""
    status = f" (unit result {inv.unit_result}" + (f", exit {inv.exit_status})" if inv.exit_status else ")") \
        if inv.unit_result else ""
    who = rank if rank is not None else "a process (rank unknown)"
    cause_text = cause or "cause unknown"
    named = f" [{describe(facts)}]" if facts.known else ""
    return Verdict(VerdictKind.CRASHED, inv.invocation_id, phase, rank, cause,
                   f"{config.unit}: {who} crashed{where} ({cause_text}){named}{detail}{status}", at,
                   facts=facts if facts.known else None, quote=quote or None)


def _cause_wait_until(inv: InvocationView, culprit: FatalView | None, config: Config) -> float:
    """Until when a crash whose cause is only generic waits for a line naming a specific one:
    `crash_cause_wait` after the culprit's first line, while the unit's invocation still runs."""
    if culprit is None or culprit.ts is None or inv.state not in LIVE_STATES:
        return -math.inf
    return culprit.ts + config.crash_cause_wait


def _cause_waits_ending(inv: InvocationView, now: float, config: Config) -> float:
    """The earliest end after `now` of such a wait, whichever fatal record turns out the culprit."""
    if inv.state not in LIVE_STATES or config.crash_cause_wait <= 0:
        return math.inf
    ends = [f.ts + config.crash_cause_wait for f in inv.fatals if f.ts is not None]
    return min((t for t in ends if t > now), default=math.inf)


def outcome(inv: InvocationView, verdicts: list[Verdict]) -> Outcome:
    if any(v.kind == VerdictKind.CRASHED for v in verdicts) or inv.state is UnitState.FAILED:
        return Outcome.CRASHED
    if inv.state in (UnitState.STOPPING, UnitState.STOPPED):
        return Outcome.STOPPED
    if inv.state is UnitState.SERVING:
        return Outcome.SERVING
    if inv.state is UnitState.READY:
        return Outcome.READY
    if any(v.kind in STUCK for v in verdicts):
        return Outcome.STALLED
    return Outcome.READY if node_done(inv) else Outcome.STARTING


def next_deadline(inv: InvocationView, now: float, config: Config) -> float:
    """The earliest time after `now` at which a new stalled or straggler verdict could appear."""
    if inv.fatals and inv.state is not UnitState.FAILED and all(f.echo for f in inv.fatals):
        first_echo = min((f.ts for f in inv.fatals if f.ts is not None), default=now)
        if first_echo + ECHO_GRACE > now:
            return first_echo + ECHO_GRACE
    if inv.fatals:
        return _cause_waits_ending(inv, now, config)
    if inv.state not in START_UP_STATES or node_done(inv):
        return math.inf
    candidates: list[float] = []
    paces: PaceCache = {}
    for rank in _evaluated_ranks(inv):
        limits = config.limits(rank.phase)
        deadline = _deadline(inv, rank, now, limits, paces)
        if deadline is not None and rank.phase_start is not None and not rank.phase_ended:
            candidates.append(rank.phase_start + deadline)
        stall, gpu = _stall_window(inv, rank, now, limits, config)
        quiet_since = _quiet_since(inv, rank, gpu)
        if stall is not None and quiet_since is not None:
            candidates.append(quiet_since + stall)
        base = _straggler_base(inv, rank)
        if base is not None:
            candidates.append(base + config.rank_skew)
    future = [t for t in candidates if t > now]
    return min(future) if future else math.inf


__all__ = ["OUTCOMES", "Verdict", "crashed_verdict", "evaluate", "failing_fatal", "next_deadline", "outcome",
           "Phase"]
