"""How an engine's ranks move through phases: what a phase line means for a rank that has already
been through some (resolve_phase: SGLang's draft model repeats dist init and weight load), and
engines whose ranks move in lockstep (vLLM: every start-up step is one call on all workers of an
engine that returns when all are done, and recent versions log many steps on the first worker only).
A rank beginning a phase shows that the ranks of its engine still in an earlier phase are through
it: they follow it. A rank stuck in a step holds the others there (none begins the next one)."""

from __future__ import annotations

from typing import Iterable, Protocol, TypeVar

from ..records import MAIN, UNIT_PHASES, Phase

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


def resolve_phase(rank: _RankLike, phase: Phase, begin: bool, hint: bool = False,
                  draft_phases: bool = True) -> Phase | None:
    """The phase an engine line means for this rank now; None when it changes nothing."""
    if hint:
        return phase if not rank.entered(phase) else None
    if draft_phases and phase in (Phase.DIST_INIT, Phase.WEIGHT_LOAD) and rank.entered(Phase.WEIGHT_LOAD):
        # The draft model's runner repeats dist init and weight loading.
        # (v0.5.23 loads the draft's right after the target's: an ended weight_load is not reopened.)
        if phase is Phase.WEIGHT_LOAD and rank.phase is Phase.WEIGHT_LOAD and not rank.phase_ended:
            return phase
        if phase is Phase.DIST_INIT and not begin:
            return None
        phase = Phase.DRAFT_WEIGHT_LOAD
    if phase is rank.phase or not rank.entered(phase):
        return phase
    return None
