"""The jit_compile sub-phase: DeepGEMM, FlashInfer or torch.compile compiling inside a rank's phase.
Pure: the tracker hands each JIT event's ranks to `compile_step`.

A JIT line or bar frame opens (or continues) the rank's compile session; a finished bar or an end
line closes it, and so does the rank's next phase line or another bar (the tracker's `_Rank`). An
untagged line (FlashInfer's own logger has no rank) is about every rank still in a rank phase.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol, TypeVar

from ...records import MAIN, UNIT_PHASES, Event, EventKind, Phase, Progress
from .snapshot import JitSpan, Transition


class CompilingRank(Protocol):
    rank: str
    phase: Phase
    jit: JitSpan | None
    progress: Progress | None
    progress_phase: Phase | None


R = TypeVar("R", bound=CompilingRank)
__all__ = ["CompilingRank", "JitSpan", "compile_event", "compile_step", "jit_targets"]


def compile_event(ranks: Mapping[str, R], event: Event, ts: float | None,
                  alive: Callable[[R], None]) -> list[Transition]:
    """One JIT line or bar frame, for every rank it is about; it moves no rank to another phase."""
    for rank in jit_targets(ranks, event.rank):
        compile_step(rank, event, ts)
        alive(rank)
    return []


def jit_targets(ranks: Mapping[str, R], label: str | None) -> list[R]:
    """The ranks a JIT event is about: its own rank when known, else every rank in a rank phase."""
    if label not in (None, MAIN):
        found = ranks.get(label) if label is not None else None
        candidates = [found] if found is not None else []
    else:
        candidates = list(ranks.values())
    return [r for r in candidates if r.rank != MAIN and r.phase not in UNIT_PHASES]


def compile_step(rank: CompilingRank, event: Event, ts: float | None) -> None:
    rank.jit = rank.jit.went_on(rank.phase, ts) if rank.jit else JitSpan(ts, ts, None, rank.phase)
    bar = event.progress
    if bar is not None:
        rank.progress, rank.progress_phase = bar, rank.phase
    if event.kind is EventKind.PHASE_END or (bar is not None and bar.total is not None and bar.n >= bar.total):
        rank.jit = rank.jit.ended(ts)
