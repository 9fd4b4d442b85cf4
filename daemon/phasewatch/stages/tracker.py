"""Stage 3: events -> per-invocation, per-rank phase state. Pure: `apply(event, now)`, `snapshot()`.

Two explicit state machines:
- a rank's phase (records.Phase); the order is not fixed (v0.5.23 loads target and draft weights
  before any memory pool), but a rank never goes back to a phase it has left;
- the unit's lifecycle (UnitState), driven by the main process's lines and by PID 1's entries.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ..ranks import rank_sort_key, tp_index
from ..records import FINAL_PHASES, MAIN, UNIT_PHASES, Event, EventKind, Phase, Progress
from .lockstep import followers, resolve_phase
from .snapshot import (
    CAPTURE_PHASES,
    LOADING_PHASES,
    UNIT_PHASE_ORDER,
    UP_STATES,
    FatalView,
    InvocationView,
    PhaseSpan,
    RankView,
    ServerInfo,
    Snapshot,
    Transition,
    UnitState,
)

MAX_INVOCATIONS = 16
_UNIT_PHASES = tuple(UNIT_PHASES)  # a tuple: membership by identity, not Enum's Python-level __hash__
MAX_FATAL_TEXTS = 200
# Per invocation: fatal records kept, and the text of their lines kept in all (a flood of tracebacks
# costs no more); scheduler ranks tracked (past it a new rank's lines are counted, not tracked).
MAX_FATALS = 1024
MAX_FATAL_CHARS = 16 * 1024 * 1024
MAX_RANKS = 16384


@dataclass
class _Rank:
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

    def entered(self, phase: Phase) -> bool:
        return any(s.phase is phase for s in self.spans)

    def move_to(self, phase: Phase, ts: float | None) -> None:
        if self.spans and self.spans[-1].end is None:
            last = self.spans[-1]
            self.spans[-1] = PhaseSpan(last.phase, last.start, ts)
        self.spans.append(PhaseSpan(phase, ts, None))
        self.phase, self.phase_start, self.phase_ended = phase, ts, False
        self.progress, self.progress_phase = None, None

    def end_phase(self, ts: float | None) -> None:
        last = self.spans[-1]
        self.spans[-1] = PhaseSpan(last.phase, last.start, ts)
        self.phase_ended = True

    def reopen(self) -> None:
        last = self.spans[-1]
        self.spans[-1] = PhaseSpan(last.phase, last.start, None)
        self.phase_ended = False

    def view(self) -> RankView:
        return RankView(self.rank, self.phase, self.phase_start, self.phase_ended, self.progress,
                        self.progress_phase, self.last_activity, tuple(self.spans), True, self.died_at,
                        self.died_pid, dict(self.progress_totals))


@dataclass
class _Invocation:
    invocation_id: str
    started_at: float | None
    state: UnitState = UnitState.STARTING
    ranks: dict[str, _Rank] = field(default_factory=dict)
    fatals: dict[int, FatalView] = field(default_factory=dict)
    lines_lost: int = 0
    server: ServerInfo | None = None
    server_args_ts: float | None = None
    server_args: dict[str, str] = field(default_factory=dict)
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
    fatal_chars: int = 0
    layout: int = 0  # bumped when a rank appears or changes phase
    owners: dict[frozenset[Phase] | None, _Rank | None] = field(default_factory=dict)  # bar owner per family
    owners_layout: int = -1  # the layout `owners` was found in
    ranks_ignored: int = 0  # events of ranks past MAX_RANKS

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
        if self.vitals:
            ranks = [replace(r, last_vital=self.vitals.get(r.rank)) for r in ranks]
        return InvocationView(self.invocation_id, self.started_at, self.last_ts, self.state, tuple(ranks),
                              tuple(self.fatals.values()), self.lines_lost, self.server, self.unit_result,
                              self.exit_status, self.restart_scheduled, self.stop_job, self.stopped_at,
                              self.before_stop, self.health_failures, self.health_episode, self.health_error,
                              self.proof_of_life, dict(self.phase_silence), self.ranks_ignored)


def _family(phase: Phase | None) -> frozenset[Phase] | None:
    if phase in LOADING_PHASES:
        return LOADING_PHASES
    if phase in CAPTURE_PHASES:
        return CAPTURE_PHASES
    return None


class Tracker:
    """Applies events in journal order. Holds the last MAX_INVOCATIONS invocations."""

    def __init__(self, proof_of_life_rules: frozenset[str] = frozenset(), lockstep: bool = False,
                 draft_phases: bool = True) -> None:
        self.proof_of_life_rules = proof_of_life_rules  # the profile's rules that prove the server serves
        self.lockstep, self.draft_phases = lockstep, draft_phases  # the profile's (stages/lockstep.py)
        self._invocations: dict[str, _Invocation] = {}
        self._current: _Invocation | None = None
        self._anonymous = itertools.count(1)
        self._adopted: list[Transition] = []  # moves made when a new rank took over an unowned bar

    def snapshot(self) -> Snapshot:
        return Snapshot(tuple(inv.view() for inv in self._invocations.values()))

    # -- invocations ------------------------------------------------------------------------
    def _start(self, invocation_id: str | None, ts: float | None) -> tuple[_Invocation, list[Transition]]:
        ident = invocation_id or f"log-{next(self._anonymous)}"
        inv = _Invocation(ident, ts)
        self._invocations[ident] = inv
        while len(self._invocations) > MAX_INVOCATIONS:
            del self._invocations[next(iter(self._invocations))]
        previous = self._current.invocation_id if self._current else None
        self._current = inv
        return inv, [Transition(ident, "unit", previous, UnitState.STARTING.value, ts, "invocation")]

    def _target(self, event: Event, ts: float | None) -> tuple[_Invocation, list[Transition]]:
        ident = event.invocation_id
        if ident is not None and ident in self._invocations:
            return self._invocations[ident], []
        if ident is None and self._current is not None:
            return self._current, []
        # None -> INVOCATION_START/first line of a log; a new id -> the unit was started again.
        return self._start(ident, ts)

    def apply(self, event: Event, now: float | None) -> list[Transition]:
        """`now` dates events that carry no time; None (a replay) leaves them undated."""
        ts = event.ts if event.ts is not None else now
        if event.kind is EventKind.RANK_PROGRESS:
            return self._rank_progress(event, ts)
        if event.kind is EventKind.INVOCATION_START:
            if event.invocation_id is not None and event.invocation_id in self._invocations:
                return []
            return self._start(event.invocation_id, ts)[1]
        if event.kind is EventKind.LINES_LOST:
            # journald's notice names the unit, not the invocation: the lines were the current one's.
            inv, out = (self._current, []) if self._current is not None else self._start(None, ts)
            inv.lines_lost += max(event.count, 1)
            return out
        inv, out = self._target(event, ts)
        if ts is not None:
            inv.last_ts = ts if inv.last_ts is None else max(inv.last_ts, ts)
            if inv.started_at is None:
                inv.started_at = ts
        moves = self._apply(inv, event, ts)
        out.extend(self._adopted)  # the adopted bar's move happened before the event's own
        self._adopted.clear()
        out.extend(moves)
        return out

    def _rank_progress(self, event: Event, ts: float | None) -> list[Transition]:
        """A sign of life from /proc: it dates the rank's last one, and nothing else (no line, no
        phase, not the invocation's last line; a rank not yet seen in the log is not made seen)."""
        inv = self._invocations.get(event.invocation_id or "")
        if inv is not None and event.rank is not None and ts is not None and inv.state is UnitState.STARTING:
            inv.vitals[event.rank] = max(ts, inv.vitals.get(event.rank, ts))
        return []

    def _apply(self, inv: _Invocation, event: Event, ts: float | None) -> list[Transition]:
        kind = event.kind
        if kind in (EventKind.UNIT_STOPPING, EventKind.UNIT_STOPPED, EventKind.UNIT_FAILED,
                    EventKind.UNIT_EXITED, EventKind.RESTART_SCHEDULED):
            return self._lifecycle(inv, event, ts)
        if kind is EventKind.HEARTBEAT:
            return []  # the API server's "Waiting for core engine": it says nothing about the ranks
        if kind is EventKind.SERVER_ARGS:
            _server_args(inv, event, ts)
            self._rank(inv, MAIN, ts)
            return []
        if kind in (EventKind.PROBE_OK, EventKind.PROBE_FAILED):
            if inv.state in UP_STATES:
                if kind is EventKind.PROBE_OK:
                    inv.health_failures, inv.health_error = 0, None
                else:
                    if inv.health_failures == 0:
                        inv.health_episode += 1
                    inv.health_failures += 1
                    inv.health_error = event.text
            return []
        if event.rank is None and kind is not EventKind.PROGRESS:
            if kind is EventKind.FATAL:
                if not inv.ranks:
                    # Nothing but the main process exists yet (an import error, a bad argument).
                    self._rank(inv, MAIN, ts)
                    event = replace(event, rank=MAIN)
                self._fatal(inv, event, ts)
            return []
        if event.rank is not None and event.rank not in inv.ranks and len(inv.ranks) >= MAX_RANKS:
            inv.ranks_ignored += 1  # more ranks than any journal holds: an anomaly, not an allocation
            return []
        if kind is EventKind.PROGRESS:
            return self._progress(inv, event, ts)
        if kind is EventKind.RANK_DIED:
            rank = self._rank(inv, event.rank or MAIN, ts)
            if rank.died_at is None:
                rank.died_at, rank.died_pid = ts, event.pid
            return []
        rank = self._rank(inv, event.rank or MAIN, ts)
        _alive(inv, rank, ts)
        if event.rule in self.proof_of_life_rules and inv.state in UP_STATES:
            inv.proof_of_life, inv.health_failures, inv.health_error = ts, 0, None
        if kind is EventKind.FATAL:
            self._fatal(inv, event, ts)
            return []
        if kind is EventKind.ACTIVITY:
            note = inv.fatals.get(event.record_id)
            if note is not None and len(note.texts) < MAX_FATAL_TEXTS and _keeps(inv, event.text):
                inv.fatals[event.record_id] = replace(note, texts=note.texts + (event.text,))
            return []
        if event.phase is None:
            return []
        if event.phase in _UNIT_PHASES:
            return self._unit_phase(inv, event.phase, ts, event.rule)
        return self._rank_phase(inv, rank, event.phase, kind is not EventKind.PHASE_END, ts, event.rule,
                                hint=kind is EventKind.PHASE_HINT)

    def _rank(self, inv: _Invocation, label: str, ts: float | None) -> _Rank:
        rank = inv.ranks.get(label)
        if rank is None:
            bar = inv.unowned_bar if label != MAIN and tp_index(label) in (0, None) else None
            # A rank that adopts an earlier bar was alive when the bar was drawn.
            since = bar.ts if bar is not None and bar.ts is not None and (ts is None or bar.ts < ts) else ts
            phase = inv.unit_phase if inv.unit_phase is not None and label == MAIN else Phase.LAUNCH
            rank = inv.ranks[label] = _Rank(label, phase, since, [PhaseSpan(phase, since, None)],
                                            last_activity=since)
            inv.layout += 1
            if bar is not None:
                inv.unowned_bar = None
                self._adopted.extend(self._progress(inv, replace(bar, rank=label),
                                                    bar.ts if bar.ts is not None else ts))
        return rank

    # -- rank phases --------------------------------------------------------------------------

    def _rank_phase(self, inv: _Invocation, rank: _Rank, phase: Phase, begin: bool, ts: float | None,
                    rule: str | None, hint: bool = False) -> list[Transition]:
        if rank.phase in _UNIT_PHASES:
            return []
        resolved = resolve_phase(rank, phase, begin, hint, self.draft_phases)
        if resolved is None or (hint and resolved is rank.phase):
            return []
        if resolved is rank.phase:
            if begin and rank.phase_ended:
                rank.reopen()  # a second graph of the same phase (e.g. piecewise after decode)
            elif not begin and not rank.phase_ended:
                rank.end_phase(ts)
            return []
        source = rank.phase
        rank.move_to(resolved, ts)
        inv.layout += 1
        if not begin:
            rank.end_phase(ts)  # an end line without its begin (2024 logs, windows of a log)
        moved = [rank, *(followers(inv.ranks.values(), rank, resolved) if self.lockstep and begin and not hint else ())]
        return [_move(inv, r, resolved, ts, rule, source if r is rank else None) for r in moved]

    def _progress(self, inv: _Invocation, event: Event, ts: float | None) -> list[Transition]:
        owner = self._rank(inv, event.rank, ts) if event.rank else _bar_owner(inv, event.phase)
        if owner is None:
            inv.unowned_bar = replace(event, ts=ts)
            return []
        out: list[Transition] = []
        family = _family(event.phase)
        if event.phase is not None and family is not None and owner.phase not in family:
            # The bar shows the phase its rank is in, even when the begin line was not seen.
            out = self._rank_phase(inv, owner, event.phase, True, ts, "progress", hint=True)
        owner.progress, owner.progress_phase = event.progress, owner.phase
        if event.progress is not None and event.progress.total:
            total = max(owner.progress_totals.get(owner.phase, 0), event.progress.total)
            owner.progress_totals[owner.phase] = total
        _alive(inv, owner, ts)
        return out

    # -- unit (main process and PID 1) ---------------------------------------------------------
    def _unit_phase(self, inv: _Invocation, phase: Phase, ts: float | None, rule: str | None) -> list[Transition]:
        order = UNIT_PHASE_ORDER.index(phase)
        current = UNIT_PHASE_ORDER.index(inv.unit_phase) if inv.unit_phase is not None else -1
        if order <= current or (phase is Phase.SERVING and current < UNIT_PHASE_ORDER.index(Phase.READY)):
            return []
        if inv.state not in (UnitState.STARTING, UnitState.READY):
            return []
        inv.unit_phase = phase
        self._rank(inv, MAIN, ts)
        out: list[Transition] = []
        inv.layout += 1
        for rank in inv.ranks.values():
            source = rank.phase
            rank.move_to(phase, ts)
            out.append(Transition(inv.invocation_id, rank.rank, source.value, phase.value, ts, rule))
        if phase in FINAL_PHASES:
            target = UnitState.READY if phase is Phase.READY else UnitState.SERVING
            # STARTING -> READY (fired up), READY -> SERVING (first real traffic)
            out.append(Transition(inv.invocation_id, "unit", inv.state.value, target.value, ts, rule))
            inv.state = target
        return out

    def _lifecycle(self, inv: _Invocation, event: Event, ts: float | None) -> list[Transition]:
        source = inv.state
        if event.kind is EventKind.RESTART_SCHEDULED:
            inv.restart_scheduled = True
            return []
        if event.kind is EventKind.UNIT_EXITED:
            inv.exit_status = "/".join(v for v in (event.args.get("EXIT_CODE"), event.args.get("EXIT_STATUS")) if v)
            return []
        if event.kind in (EventKind.UNIT_STOPPING, EventKind.UNIT_STOPPED, EventKind.UNIT_FAILED) \
                and source is UnitState.STARTING and inv.before_stop is None:
            inv.before_stop, inv.stopped_at = inv.view(), ts
        if event.kind is EventKind.UNIT_STOPPING:
            if source in (UnitState.FAILED, UnitState.STOPPED):
                return []
            inv.stop_job = event.args.get("JOB_TYPE") or "stop"
            inv.state = UnitState.STOPPING  # STARTING/READY/SERVING -> STOPPING
        elif event.kind is EventKind.UNIT_FAILED:
            inv.unit_result = event.args.get("UNIT_RESULT") or "failed"
            inv.state = UnitState.FAILED  # any -> FAILED
        elif event.kind is EventKind.UNIT_STOPPED:
            if source is UnitState.FAILED:
                return []
            # systemd 252 names the job on "Stopped" (JOB_TYPE=restart), "Stopping" says stop.
            inv.stop_job = event.args.get("JOB_TYPE") or inv.stop_job
            inv.state = UnitState.STOPPED  # STOPPING (or any live state) -> STOPPED
        return [] if inv.state is source else [
            Transition(inv.invocation_id, "unit", source.value, inv.state.value, ts, event.kind.value)]

    def _fatal(self, inv: _Invocation, event: Event, ts: float | None) -> None:
        existing = inv.fatals.get(event.record_id)
        if existing is not None and event.record_id:
            cause = existing.cause or event.cause
            echo = existing.echo and event.echo
            texts = existing.texts
            if len(texts) < MAX_FATAL_TEXTS and _keeps(inv, event.text):
                texts += (event.text,)
            inv.fatals[event.record_id] = FatalView(existing.rank or event.rank, existing.rule, cause, existing.ts,
                                                    echo, texts, existing.prefixed)
            return
        if len(inv.fatals) >= MAX_FATALS:
            return  # the first ones name the culprit; a flood of later ones only costs memory
        inv.fatal_chars += len(event.text)
        key = event.record_id or -len(inv.fatals) - 1
        inv.fatals[key] = FatalView(event.rank, event.rule, event.cause, ts, event.echo, (event.text,),
                                    event.prefixed)


def _move(inv: _Invocation, rank: _Rank, phase: Phase, ts: float | None, rule: str | None,
          moved_from: Phase | None) -> Transition:
    """The transition of `rank` into `phase`; `moved_from` when it is already there, else it moves now."""
    if moved_from is None:
        moved_from = rank.phase
        rank.move_to(phase, ts)
    return Transition(inv.invocation_id, rank.rank, moved_from.value, phase.value, ts, rule)


def _server_args(inv: _Invocation, event: Event, ts: float | None) -> None:
    """vLLM spreads its arguments over several lines (non-default args, then the engine's config)."""
    inv.server_args = {**inv.server_args, **event.args}
    inv.server = ServerInfo.from_args(inv.server_args)
    if inv.server_args_ts is None:
        inv.server_args_ts = ts


def _alive(inv: _Invocation, rank: _Rank, ts: float | None) -> None:
    """A sign of life; also the longest silence seen in each phase (any rank in it), for history."""
    rank.last_activity = ts
    if ts is None or rank.rank == MAIN:
        return
    seen = inv.phase_seen.get(rank.phase)
    if seen is not None and ts - seen > inv.phase_silence.get(rank.phase, 0.0):
        inv.phase_silence[rank.phase] = ts - seen
    inv.phase_seen[rank.phase] = ts


def _bar_owner(inv: _Invocation, hint: Phase | None) -> _Rank | None:
    """An unprefixed bar: SGLang draws it on TP-group rank 0 of the ranks in that phase.
    The answer holds until a rank appears or changes phase: a bar's every frame costs O(1)."""
    family = _family(hint)
    if inv.owners_layout != inv.layout:
        inv.owners.clear()
        inv.owners_layout = inv.layout
    if family in inv.owners:
        return inv.owners[family]
    schedulers = [r for r in inv.ranks.values() if r.rank != MAIN and r.phase not in UNIT_PHASES]
    candidates = [r for r in schedulers if family is None or r.phase in family]
    candidates = candidates or [r for r in schedulers if tp_index(r.rank) in (0, None)]
    owner = min(candidates, key=lambda r: (tp_index(r.rank) not in (0, None), rank_sort_key(r.rank)),
                default=None)
    inv.owners[family] = owner
    return owner


def _keeps(inv: _Invocation, text: str) -> bool:
    """Whether a fatal record's next line is kept: within the invocation's budget of fatal text."""
    if inv.fatal_chars + len(text) > MAX_FATAL_CHARS:
        return False
    inv.fatal_chars += len(text)
    return True
