"""Stage 3: events -> per-invocation, per-rank phase state. Pure: `apply(event, now)`, `snapshot()`.

Two explicit state machines (the mutable state they run on is in tracker_state.py):
- a rank's phase (records.Phase); the order is not fixed (v0.5.23 loads target and draft weights
  before any memory pool), but a rank never goes back to a phase it has left;
- the unit's lifecycle (UnitState), driven by the main process's lines and by PID 1's entries.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ...ranks import tp_index
from ...records import FINAL_PHASES, MAIN, Event, EventKind, Phase
from ..s2_interpret.crashfacts import ranks_named
from ..s2_interpret.phaseorder import Anomaly, goes_back, resolve
from .jit import compile_event
from .lockstep import followers
from .snapshot import UNIT_PHASE_ORDER, UP_STATES, GpuSeen, PhaseSpan, Snapshot, Transition, UnitState
from .tracker_state import (
    MAX_FATAL_TEXTS,
    MAX_INVOCATIONS,
    MAX_RANKS,
    UNIT_PHASE_TUPLE,
    InvocationState,
    RankState,
    bar_family,
)


class Tracker:
    """Applies events in journal order. Holds the last MAX_INVOCATIONS invocations."""

    def __init__(self, proof_of_life_rules: frozenset[str] = frozenset(), lockstep: bool = False,
                 draft_phases: bool = True) -> None:
        self.proof_of_life_rules = proof_of_life_rules  # the profile's rules that prove the server serves
        self.lockstep, self.draft_phases = lockstep, draft_phases  # the profile's (stages/s3_track/lockstep.py)
        self._invocations: dict[str, InvocationState] = {}
        self._current: InvocationState | None = None
        self._anonymous = itertools.count(1)
        self._adopted: list[Transition] = []  # moves made when a new rank took over an unowned bar
        self._snapshot: Snapshot | None = None  # the views until the next apply() (a step asks a dozen times)

    def snapshot(self) -> Snapshot:
        self._snapshot = self._snapshot or Snapshot(tuple(inv.view() for inv in self._invocations.values()))
        return self._snapshot

    def current_id(self) -> str | None:  # snapshot().current's, without building the views
        return next(reversed(self._invocations), None)

    # -- what the fast path (stages/s3_track/fastpath.py) asks, and the changes it makes through them --
    def invocation(self, invocation_id: str | None) -> InvocationState | None:
        """The start-up an event of `invocation_id` goes to, if known (None: it would start one)."""
        return self._invocations.get(invocation_id) if invocation_id is not None else self._current

    def took_line(self, inv: InvocationState, ranks: list[RankState], ts: float, proves: bool,
                  more: list[float] | None = None) -> None:
        """A line whose events (one per rank of `ranks`: activity, or a unit phase already passed)
        change nothing but signs of life, as `apply` takes them, and `more` lines like it at those
        times; `proves`: one proves the server serves."""
        self._snapshot = None  # (the views change)
        last = inv.last_ts
        inv.last_ts = ts if last is None or ts > last else last
        if inv.started_at is None:
            inv.started_at = ts
        for state in ranks:
            inv.alive(state, ts)
        if proves and inv.state in UP_STATES:
            inv.proof_of_life, inv.health_failures, inv.health_error = ts, 0, None
        if more:
            inv.took_more(ranks, ts, more, proves)

    # -- invocations ------------------------------------------------------------------------
    def _start(self, invocation_id: str | None, ts: float | None) -> tuple[InvocationState, list[Transition]]:
        ident = invocation_id or f"log-{next(self._anonymous)}"
        inv = InvocationState(ident, ts)
        self._invocations[ident] = inv
        while len(self._invocations) > MAX_INVOCATIONS:
            del self._invocations[next(iter(self._invocations))]
        previous = self._current.invocation_id if self._current else None
        self._current = inv
        return inv, [Transition(ident, "unit", previous, UnitState.STARTING.value, ts, "invocation")]

    def _target(self, event: Event, ts: float | None) -> tuple[InvocationState, list[Transition]]:
        ident = event.invocation_id
        if ident is not None and ident in self._invocations:
            return self._invocations[ident], []
        if ident is None and self._current is not None:
            return self._current, []
        # None -> INVOCATION_START/first line of a log; a new id -> the unit was started again.
        return self._start(ident, ts)

    def apply(self, event: Event, now: float | None) -> list[Transition]:
        """`now` dates events that carry no time; None (a replay) leaves them undated."""
        self._snapshot, ts = None, event.ts if event.ts is not None else now  # (the views change)
        if event.kind in (EventKind.RANK_PROGRESS, EventKind.RANK_GPU):
            outside_the_log(self._invocations.get(event.invocation_id or ""), event, ts)
            return []
        if event.kind is EventKind.INVOCATION_START:
            return [] if event.invocation_id in self._invocations else self._start(event.invocation_id, ts)[1]
        if event.kind is EventKind.LINES_LOST:
            # journald's notice names the unit, not the invocation: the lines were the current one's.
            inv, out = (self._current, []) if self._current is not None else self._start(None, ts)
            inv.lose(event.count, event.cause)
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

    def _apply(self, inv: InvocationState, event: Event, ts: float | None) -> list[Transition]:
        kind = event.kind
        if kind in (EventKind.UNIT_STOPPING, EventKind.UNIT_STOPPED, EventKind.UNIT_FAILED,
                    EventKind.UNIT_EXITED, EventKind.RESTART_SCHEDULED):
            return inv.lifecycle(event, ts)
        if kind in (EventKind.HEARTBEAT, EventKind.SERVER_ARGS, EventKind.PROBE_OK, EventKind.PROBE_FAILED):
            if inv.server_said(event, ts):
                self._rank(inv, MAIN, ts)
            return []
        if event.phase is Phase.JIT_COMPILE:  # a compiler runs inside the rank's phase (stages/s3_track/jit.py)
            inv.cold = True
            if event.rank is not None and event.rank != MAIN:
                self._rank(inv, event.rank, ts)  # a rank whose first line in the log is a compiler's
            return compile_event(inv.ranks, event, ts, lambda rank: inv.alive(rank, ts))
        if kind is EventKind.RANK_NAMED:
            inv.rename(event.text, event.rank or MAIN)
            return []
        if kind is EventKind.HIDDEN_LINE:
            inv.lines_hidden += 1
            return self._progress(inv, event, ts)
        if event.rank is None and kind is not EventKind.PROGRESS:
            if kind is EventKind.FATAL:
                if not inv.ranks:
                    # Nothing but the main process exists yet (an import error, a bad argument).
                    self._rank(inv, MAIN, ts)
                    event = replace(event, rank=MAIN)
                inv.note_fatal(event, ts)
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
        inv.alive(rank, ts)
        if event.rule in self.proof_of_life_rules and inv.state in UP_STATES:
            inv.proof_of_life, inv.health_failures, inv.health_error = ts, 0, None
        if kind is EventKind.FATAL:
            inv.note_fatal(event, ts)
            return self._ranks_named_in(inv, rank, event, ts)
        if kind in (EventKind.ACTIVITY, EventKind.PHASE_HINT):  # a traceback keeps its frames (crashfacts.py)
            note = inv.fatals.get(event.record_id)
            if note is not None and len(note.texts) < MAX_FATAL_TEXTS and inv.keeps_fatal_text(event.text):
                inv.fatals[event.record_id] = replace(note, texts=note.texts + (event.text,))
        if kind is EventKind.ACTIVITY or event.phase is None:
            return []
        if event.phase in UNIT_PHASE_TUPLE:
            return self._unit_phase(inv, event.phase, ts, event.rule)
        return self._rank_phase(inv, rank, event.phase, kind is not EventKind.PHASE_END, ts, event.rule,
                                hint=kind is EventKind.PHASE_HINT, confidence=event.confidence)

    def _rank(self, inv: InvocationState, label: str, ts: float | None) -> RankState:
        rank = inv.ranks.get(label)
        if rank is None:
            bar = inv.unowned_bar if label != MAIN and tp_index(label) in (0, None) else None
            # A rank that adopts an earlier bar was alive when the bar was drawn.
            since = bar.ts if bar is not None and bar.ts is not None and (ts is None or bar.ts < ts) else ts
            phase = inv.unit_phase if inv.unit_phase is not None and label == MAIN else Phase.LAUNCH
            rank = inv.ranks[label] = RankState(label, phase, since, [PhaseSpan(phase, since, None)],
                                            last_activity=since)
            inv.layout += 1
            if bar is not None:
                inv.unowned_bar = None
                self._adopted.extend(self._progress(inv, replace(bar, rank=label),
                                                    bar.ts if bar.ts is not None else ts))
        return rank

    # -- rank phases --------------------------------------------------------------------------

    def _rank_phase(self, inv: InvocationState, rank: RankState, phase: Phase, begin: bool, ts: float | None,
                    rule: str | None, hint: bool = False, confidence: str = "exact") -> list[Transition]:
        if rank.phase in UNIT_PHASE_TUPLE:
            return []
        visited = frozenset(span.phase for span in rank.spans)
        resolved = resolve(phase, begin, hint, rank.phase, rank.phase_ended, visited, self.draft_phases)
        if resolved is None or (hint and resolved is rank.phase):
            return []
        if resolved is not rank.phase and goes_back(visited, resolved):
            if not hint:  # the rank keeps its phase; a hint (a frame, a bar) is a guess: no record
                inv.refuse(Anomaly(rank.rank, rank.phase.value, resolved.value, rule, ts, confidence))
            return []
        if resolved is rank.phase:
            rank.again(begin, ts, confidence)
            return []
        source = rank.phase
        rank.move_to(resolved, ts, confidence)
        inv.layout += 1
        if not begin:
            rank.end_phase(ts)  # an end line without its begin (2024 logs, windows of a log)
        moved = [Transition(inv.invocation_id, rank.rank, source.value, resolved.value, ts, rule, confidence)]
        if self.lockstep and begin and not hint:
            for follower in followers(inv.ranks.values(), rank, resolved):
                moved.append(Transition(inv.invocation_id, follower.rank, follower.phase.value, resolved.value, ts,
                                        rule, confidence))
                follower.move_to(resolved, ts, confidence)
        return moved

    def _progress(self, inv: InvocationState, event: Event, ts: float | None) -> list[Transition]:
        """A bar's frame (PROGRESS), or a line journalctl hid (HIDDEN_LINE): a sign of life of the
        rank drawing the bar, SGLang's and vLLM's TP-group rank 0 of the ranks in its phase."""
        owner = self._rank(inv, event.rank, ts) if event.rank else inv.bar_owner(event.phase)
        if owner is None and inv.single_scheduler(event):
            owner = self._rank(inv, "TP0", ts)  # adopts the earlier bar, then takes this one
        hidden = event.kind is EventKind.HIDDEN_LINE
        if owner is None:
            earlier = inv.unowned_bar
            inv.unowned_bar = replace(earlier if hidden and earlier is not None else event, ts=ts)
            return []
        if hidden:  # a frame whose text journalctl did not print: the bar moved, to where is unknown
            inv.alive(owner, ts)
            return []
        owner.jit = owner.jit and owner.jit.ended(ts)  # another bar moves: the compiler is done
        out: list[Transition] = []
        family = bar_family(event.phase)
        if event.phase is not None and family is not None and owner.phase not in family:
            # The bar shows the phase its rank is in, even when the begin line was not seen.
            out = self._rank_phase(inv, owner, event.phase, True, ts, "progress", hint=True)
        owner.progress, owner.progress_phase = event.progress, owner.phase
        if event.progress is not None and event.progress.total:
            total = max(owner.progress_totals.get(owner.phase, 0), event.progress.total)
            owner.progress_totals[owner.phase] = total
        inv.alive(owner, ts)
        return out

    def _ranks_named_in(self, inv: InvocationState, reporter: RankState, event: Event,
                        ts: float | None) -> list[Transition]:
        out: list[Transition] = []
        room = max(MAX_RANKS - len(inv.ranks), 0)
        for label in ranks_named(reporter.rank, event.text, inv.ranks)[:room]:
            named = self._rank(inv, label, ts)  # appears with its weights loaded, as the text says
            out += self._rank_phase(inv, named, Phase.WEIGHT_LOAD, True, ts, event.rule, hint=True)
            out += self._rank_phase(inv, named, Phase.WEIGHT_LOAD, False, ts, event.rule)
        return out

    # -- unit (main process and PID 1) ---------------------------------------------------------
    def _unit_phase(self, inv: InvocationState, phase: Phase, ts: float | None, rule: str | None) -> list[Transition]:
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


def outside_the_log(inv: InvocationState | None, event: Event, ts: float | None) -> None:
    """A sign of life from /proc (RANK_PROGRESS) dates the rank's last one; its GPU observed
    (RANK_GPU) says when, in which state since when, and what it showed. Nothing else (nor makes
    a rank seen)."""
    if inv is None or event.rank is None or ts is None or inv.state is not UnitState.STARTING:
        return
    if event.kind is EventKind.RANK_PROGRESS:
        inv.vitals[event.rank] = max(ts, inv.vitals.get(event.rank, ts))
        return
    state = event.cause or "unknown"
    before = inv.gpus.get(event.rank)
    since = before.since if before is not None and before.state == state and ts >= before.seen else ts
    inv.gpus[event.rank] = GpuSeen(ts, state, since, event.text)
