"""The tracker's mutable state: one start-up (invocation) and its ranks, and the bookkeeping done on
them (signs of life, the owner of an unprefixed bar, the budget of fatal text). Only the tracker
(tracker.py) changes it; everything else reads the frozen views (snapshot.py) it makes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import sub
from types import MappingProxyType

from ...engines import ServerInfo
from ...ranks import rank_sort_key, tp_index
from ...records import MAIN, UNIT_PHASES, Event, EventKind, Phase, Progress
from ..s2_interpret.phaseorder import Anomaly
from .jit import JitSpan
from .snapshot import (
    CAPTURE_PHASES,
    LOADING_PHASES,
    UP_STATES,
    FatalView,
    GpuSeen,
    InvocationView,
    PhaseSpan,
    RankView,
    Transition,
    UnitState,
)

MAX_INVOCATIONS = 16
UNIT_PHASE_TUPLE = tuple(UNIT_PHASES)  # a tuple: membership by identity, not Enum's Python-level __hash__
MAX_FATAL_TEXTS = 200
# Per invocation: fatal records kept, and the text of their lines kept in all (a flood of tracebacks
# costs no more); scheduler ranks tracked (past it a new rank's lines are counted, not tracked).
MAX_FATALS = 1024
MAX_FATAL_CHARS = 16 * 1024 * 1024
MAX_RANKS = 16384
MAX_ANOMALIES = 256  # per invocation; past it they are counted only


@dataclass
class RankState:
    rank: str
    phase: Phase
    phase_start: float | None
    spans: list[PhaseSpan]
    phase_ended: bool = False
    progress: Progress | None = None
    progress_phase: Phase | None = None
    last_activity: float | None = None
    died_at: float | None = None
    died_pid: int | None = None
    progress_totals: dict[Phase, int] = field(default_factory=dict)
    jit: JitSpan | None = None

    def entered(self, phase: Phase) -> bool:
        return any(s.phase is phase for s in self.spans)

    def move_to(self, phase: Phase, ts: float | None, confidence: str = "exact") -> None:
        self.jit = self.jit and self.jit.ended(ts)  # a phase line: the compiler is done
        if self.spans and self.spans[-1].end is None:
            last = self.spans[-1]
            self.spans[-1] = replace(last, end=ts)
        self.spans.append(PhaseSpan(phase, ts, None, confidence))
        self.phase, self.phase_start, self.phase_ended = phase, ts, False
        self.progress, self.progress_phase = None, None

    def end_phase(self, ts: float | None) -> None:
        self.spans[-1] = replace(self.spans[-1], end=ts)
        self.phase_ended = True

    def reopen(self) -> None:
        self.spans[-1] = replace(self.spans[-1], end=None)
        self.phase_ended = False

    def again(self, begin: bool, ts: float | None, confidence: str) -> None:
        """A line about the phase the rank is in: an exact one confirms a phase a family rule
        guessed; a begin reopens an ended phase (a second graph: piecewise after decode), an end ends it."""
        if confidence == "exact" and self.spans[-1].confidence != "exact":
            self.spans[-1] = replace(self.spans[-1], confidence="exact")
        if begin and self.phase_ended:
            self.reopen()
        elif not begin and not self.phase_ended:
            self.end_phase(ts)

    def view(self) -> RankView:
        return RankView(self.rank, self.phase, self.phase_start, self.phase_ended, self.progress,
                        self.progress_phase, self.last_activity, tuple(self.spans), True, self.died_at,
                        self.died_pid, dict(self.progress_totals), jit=self.jit)


@dataclass
class InvocationState:
    invocation_id: str
    started_at: float | None
    state: UnitState = UnitState.STARTING
    ranks: dict[str, RankState] = field(default_factory=dict)
    fatals: dict[int, FatalView] = field(default_factory=dict)
    lines_lost: int = 0
    lost_cause: str | None = None  # of the last lines lost: journald's rate limit, the journal vacuumed...
    lines_hidden: int = 0  # entries journalctl did not print ("[N blob data]"): written, not lost
    server: ServerInfo | None = None
    server_args_ts: float | None = None
    server_args: dict[str, str] = field(default_factory=dict)  # all argument lines so far (vLLM: several)
    unit_phase: Phase | None = None
    unit_result: str | None = None
    exit_status: str | None = None
    restart_scheduled: bool = False
    stop_job: str | None = None
    last_ts: float | None = None
    unowned_bar: Event | None = None  # a bar seen before any rank that could own it
    stopped_at: float | None = None
    before_stop: InvocationView | None = None
    health_failures: int = 0
    health_episode: int = 0
    health_error: str | None = None
    proof_of_life: float | None = None
    phase_seen: dict[Phase, float] = field(default_factory=dict)
    phase_silence: dict[Phase, float] = field(default_factory=dict)
    vitals: dict[str, float] = field(default_factory=dict)  # rank -> last RANK_PROGRESS
    gpus: dict[str, GpuSeen] = field(default_factory=dict)  # rank -> its GPU as last observed (RANK_GPU)
    fatal_chars: int = 0
    layout: int = 0  # bumped when a rank appears or changes phase
    owners: dict[frozenset[Phase] | None, RankState | None] = field(default_factory=dict)  # bar owner per family
    owners_layout: int = -1  # the layout `owners` was found in
    ranks_ignored: int = 0  # events of ranks past MAX_RANKS
    anomalies: list[Anomaly] = field(default_factory=list)
    anomalies_dropped: int = 0
    heartbeat: str | None = None  # the rule of the last heartbeat line (a process waiting for others)

    def lose(self, count: int, cause: str | None) -> None:
        """Lines of this start-up lost (at least one), and why."""
        self.lines_lost += max(count, 1)
        self.lost_cause = cause or self.lost_cause

    def refuse(self, anomaly: Anomaly) -> None:
        """A line that would have moved a rank backwards: recorded (up to MAX_ANOMALIES), not applied."""
        if len(self.anomalies) < MAX_ANOMALIES:
            self.anomalies.append(anomaly)
        else:
            self.anomalies_dropped += 1
    cold: bool = False

    def view(self) -> InvocationView:
        ranks = [r.view() for r in self.ranks.values()]
        if self.server is not None:
            expected = self.server.expected_ranks()
            seen = {r.rank for r in ranks if r.rank != MAIN}
            if not seen or seen & set(expected):
                # Expected ranks that printed nothing yet; once the HTTP server is up they all passed.
                phase = self.unit_phase or Phase.LAUNCH
                start = self.server_args_ts
                ranks.extend(RankView(label, phase, start, False, None, None, None,
                                      (PhaseSpan(phase, start, None),), seen=False)
                             for label in expected if label not in seen)
        ranks.sort(key=lambda r: rank_sort_key(r.rank))
        if self.vitals or self.gpus:
            ranks = [replace(r, last_vital=self.vitals.get(r.rank), gpu=self.gpus.get(r.rank)) for r in ranks]
        return InvocationView(self.invocation_id, self.started_at, self.last_ts, self.state, tuple(ranks),
                              tuple(self.fatals.values()), self.lines_lost, self.server, self.unit_result,
                              self.exit_status, self.restart_scheduled, self.stop_job, self.stopped_at,
                              self.before_stop, self.health_failures, self.health_episode, self.health_error,
                              self.proof_of_life, dict(self.phase_silence), self.ranks_ignored,
                              anomalies=tuple(self.anomalies), anomalies_dropped=self.anomalies_dropped,
                              cold=self.cold, lost_cause=self.lost_cause, lines_hidden=self.lines_hidden,
                              server_args=MappingProxyType(self.server_args), heartbeat=self.heartbeat)

    def server_said(self, event: Event, ts: float | None) -> bool:
        """The server's words about itself (a heartbeat, its arguments, a health probe's answer);
        whether they make the main process a rank."""
        if event.kind is EventKind.HEARTBEAT:
            # The API server's "Waiting for core engine": it says nothing about the ranks, but a
            # start-up that only prints it has begun (judged by launch's limits from its first one).
            self.heartbeat = event.rule
            return event.rank in (None, MAIN) and MAIN not in self.ranks
        if event.kind is EventKind.SERVER_ARGS:
            # vLLM spreads its arguments over several lines (non-default args, then the engine's config).
            self.server_args = {**self.server_args, **event.args}
            self.server = ServerInfo.from_args(self.server_args)
            if self.server_args_ts is None:
                self.server_args_ts = ts
            return True
        if self.state in UP_STATES:
            if event.kind is EventKind.PROBE_OK:
                self.health_failures, self.health_error = 0, None
            else:
                if self.health_failures == 0:
                    self.health_episode += 1
                self.health_failures += 1
                self.health_error = event.text
        return False

    def rename(self, before: str, label: str) -> None:
        """Rank `before` (a process known by its PID) is rank `label`: one rank, its spans and phases
        kept; where `label` has a history of its own already, that one stays and takes the later sign of life."""
        state = self.ranks.pop(before, None)
        if state is None or before == label:
            return
        named = self.ranks.get(label)
        if named is None:
            state.rank = label
            self.ranks[label] = state
        elif state.last_activity is not None and (named.last_activity is None
                                                   or state.last_activity > named.last_activity):
            named.last_activity = state.last_activity
        self.fatals = {key: replace(note, rank=label) if note.rank == before else note
                       for key, note in self.fatals.items()}
        for by_rank in (self.vitals, self.gpus):
            if before in by_rank:
                by_rank.setdefault(label, by_rank.pop(before))  # type: ignore[arg-type]
        self.layout += 1

    def alive(self, rank: RankState, ts: float | None) -> None:
        """A sign of life; also the longest silence seen in each phase (any rank in it), for history."""
        rank.last_activity = ts
        if ts is None or rank.rank == MAIN:
            return
        seen = self.phase_seen.get(phase := Phase.JIT_COMPILE if rank.jit and rank.jit.end is None else rank.phase)
        if seen is not None and ts - seen > self.phase_silence.get(phase, 0.0):
            self.phase_silence[phase] = ts - seen
        self.phase_seen[phase] = ts

    # -- the fast path's changes (stages/s3_track/fastpath.py), as Tracker.apply makes them --
    def took_more(self, ranks: list[RankState], ts: float, stamps: list[float], proves: bool) -> None:
        """More lines like the one Tracker.took_line just took at `ts`, at `stamps`: `alive` line by line,
        each phase's silence its longest gap between consecutive lines."""
        if proves and self.state in UP_STATES:
            self.proof_of_life = stamps[-1]
        last = stamps[-1]
        top = max(stamps)
        if self.last_ts is None or top > self.last_ts:
            self.last_ts = top
        gap = max(map(sub, stamps, [ts, *stamps[:-1]]))
        silence, seen = self.phase_silence, self.phase_seen
        for state in ranks:
            state.last_activity = last
            if state.rank != MAIN:
                phase = Phase.JIT_COMPILE if state.jit and state.jit.end is None else state.phase
                if gap > silence.get(phase, 0.0):
                    silence[phase] = gap
                seen[phase] = last

    def bar_owner(self, hint: Phase | None) -> RankState | None:
        """An unprefixed bar: SGLang draws it on TP-group rank 0 of the ranks in that phase.
        The answer holds until a rank appears or changes phase: a bar's every frame costs O(1)."""
        family = bar_family(hint)
        if self.owners_layout != self.layout:
            self.owners.clear()
            self.owners_layout = self.layout
        if family in self.owners:
            return self.owners[family]
        schedulers = [r for r in self.ranks.values() if r.rank != MAIN and r.phase not in UNIT_PHASES]
        candidates = [r for r in schedulers if family is None or r.phase in family]
        candidates = candidates or [r for r in schedulers if tp_index(r.rank) in (0, None)]
        owner = min(candidates, key=lambda r: (tp_index(r.rank) not in (0, None), rank_sort_key(r.rank)),
                    default=None)
        self.owners[family] = owner
        return owner

    def single_scheduler(self, event: Event) -> bool:
        """A bar nobody can own, in a start-up with no scheduler rank: it is a one-GPU server's TP0's
        when the arguments say one GPU, or when a bar of another stage (weights, then capture) was
        already left unowned: the server moved on without ever naming a rank."""
        if any(label != MAIN for label in self.ranks):
            return False
        if self.server is not None and self.server.expected_ranks() == ("TP0",):
            return True
        earlier = self.unowned_bar
        return earlier is not None and bar_family(earlier.phase) is not bar_family(event.phase)

    def keeps_fatal_text(self, text: str) -> bool:
        """Whether a fatal record's next line is kept: within the invocation's budget of fatal text."""
        if self.fatal_chars + len(text) > MAX_FATAL_CHARS:
            return False
        self.fatal_chars += len(text)
        return True

    def note_fatal(self, event: Event, ts: float | None) -> None:
        """A fatal line: a new failure record, or one more line of the record it belongs to."""
        existing = self.fatals.get(event.record_id)
        if existing is not None and event.record_id:
            cause = existing.cause or event.cause
            echo = existing.echo and event.echo
            texts = existing.texts
            if len(texts) < MAX_FATAL_TEXTS and self.keeps_fatal_text(event.text):
                texts += (event.text,)
            self.fatals[event.record_id] = FatalView(existing.rank or event.rank, existing.rule, cause, existing.ts,
                                                    echo, texts, existing.prefixed)
            return
        if len(self.fatals) >= MAX_FATALS:
            return  # the first ones name the culprit; a flood of later ones only costs memory
        self.fatal_chars += len(event.text)
        key = event.record_id or -len(self.fatals) - 1
        self.fatals[key] = FatalView(event.rank, event.rule, event.cause, ts, event.echo, (event.text,),
                                    event.prefixed)

    def lifecycle(self, event: Event, ts: float | None) -> list[Transition]:
        """PID 1's entries about the unit: STARTING -> READY -> SERVING, any live state -> STOPPING ->
        STOPPED, any -> FAILED (which stays)."""
        source = self.state
        if event.kind is EventKind.RESTART_SCHEDULED:
            self.restart_scheduled = True
            return []
        if event.kind is EventKind.UNIT_EXITED:
            self.exit_status = "/".join(v for v in (event.args.get("EXIT_CODE"), event.args.get("EXIT_STATUS")) if v)
            return []
        if event.kind in (EventKind.UNIT_STOPPING, EventKind.UNIT_STOPPED, EventKind.UNIT_FAILED) \
                and source is UnitState.STARTING and self.before_stop is None:
            self.before_stop, self.stopped_at = self.view(), ts
        if event.kind is EventKind.UNIT_STOPPING:
            if source in (UnitState.FAILED, UnitState.STOPPED):
                return []
            self.stop_job = event.args.get("JOB_TYPE") or "stop"
            self.state = UnitState.STOPPING  # STARTING/READY/SERVING -> STOPPING
        elif event.kind is EventKind.UNIT_FAILED:
            self.unit_result = event.args.get("UNIT_RESULT") or "failed"
            self.state = UnitState.FAILED  # any -> FAILED
        elif event.kind is EventKind.UNIT_STOPPED:
            if source is UnitState.FAILED:
                return []
            # systemd 252 names the job on "Stopped" (JOB_TYPE=restart), "Stopping" says stop.
            self.stop_job = event.args.get("JOB_TYPE") or self.stop_job
            self.state = UnitState.STOPPED  # STOPPING (or any live state) -> STOPPED
        return [] if self.state is source else [
            Transition(self.invocation_id, "unit", source.value, self.state.value, ts, event.kind.value)]


def bar_family(phase: Phase | None) -> frozenset[Phase] | None:
    if phase in LOADING_PHASES:
        return LOADING_PHASES
    if phase in CAPTURE_PHASES:
        return CAPTURE_PHASES
    return None
