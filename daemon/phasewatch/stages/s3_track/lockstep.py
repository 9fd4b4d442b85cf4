"""Engines whose ranks move in lockstep (vLLM: every start-up step is one call on all workers of an
engine that returns when all are done, and recent versions log many steps on the first worker only).
A rank beginning a phase shows that the ranks of its engine still in an earlier phase are through
it: they follow it. A rank stuck in a step holds the others there (none begins the next one)."""

from __future__ import annotations

from typing import Iterable, Protocol, TypeVar

from ...records import MAIN, UNIT_PHASES, Phase

PHASE_ORDER = {phase: index for index, phase in enumerate(Phase)}


class _RankLike(Protocol):
    rank: str
    phase: Phase
    phase_ended: bool

    def entered(self, phase: Phase) -> bool: ...


R = TypeVar("R", bound=_RankLike)


def engine_group(label: str) -> str:
    """The ranks of one engine share their DP tag (`DP1 TP3` -> `DP1`; no tag: the one engine)."""
    return next((part for part in label.split() if part.startswith("DP")), "")


def followers(ranks: Iterable[R], leader: R, phase: Phase) -> list[R]:
    """The ranks of `leader`'s engine that are still in a phase before `phase` and never entered it."""
    order, group = PHASE_ORDER[phase], engine_group(leader.rank)
    return [r for r in ranks
            if r is not leader and r.rank != MAIN and r.phase not in UNIT_PHASES
            and PHASE_ORDER[r.phase] < order and not r.entered(phase) and engine_group(r.rank) == group]
