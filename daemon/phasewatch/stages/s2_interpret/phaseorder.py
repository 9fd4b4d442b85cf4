"""The order of a rank's start-up phases: a partial order, not a list.

Within one start-up a scheduler rank only moves forward:

    launch < dist_init < weight_load < kv_cache_alloc < cuda_graph_capture
    weight_load < draft_weight_load < draft_cuda_graph_capture
    kv_cache_alloc < cuda_graph_capture < draft_cuda_graph_capture

draft_weight_load and the target's KV pool and graphs are not ordered against each other: v0.5.9
loads the draft after the target's graphs, v0.5.23 loads target and draft weights before any memory
pool. A phase this module does not know (a sub-phase another stage adds) is ordered against nothing.

A line that would take a rank to a phase ordered before the one it is in is not a transition: the
tracker keeps the phase and records an `Anomaly`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...records import Phase

# (earlier, later): the order's generating pairs; `before` is their transitive closure.
_EDGES: tuple[tuple[Phase, Phase], ...] = (
    (Phase.LAUNCH, Phase.DIST_INIT),
    (Phase.DIST_INIT, Phase.WEIGHT_LOAD),
    (Phase.WEIGHT_LOAD, Phase.KV_CACHE_ALLOC),
    (Phase.KV_CACHE_ALLOC, Phase.CUDA_GRAPH_CAPTURE),
    (Phase.WEIGHT_LOAD, Phase.DRAFT_WEIGHT_LOAD),
    (Phase.DRAFT_WEIGHT_LOAD, Phase.DRAFT_CUDA_GRAPH_CAPTURE),
    (Phase.CUDA_GRAPH_CAPTURE, Phase.DRAFT_CUDA_GRAPH_CAPTURE),
)


def _closure(edges: tuple[tuple[Phase, Phase], ...]) -> frozenset[tuple[Phase, Phase]]:
    pairs = set(edges)
    grew = True
    while grew:
        grew = False
        for a, b in list(pairs):
            for c, d in list(pairs):
                if b is c and (a, d) not in pairs:
                    pairs.add((a, d))
                    grew = True
    return frozenset(pairs)


_BEFORE = _closure(_EDGES)
# Phases that only a rank past its (target) weights can be in: a weight-loading line there is the
# draft model's.
PAST_TARGET_WEIGHTS = frozenset(b for a, b in _BEFORE if a is Phase.WEIGHT_LOAD)


def before(earlier: Phase, later: Phase) -> bool:
    """True when a rank in `later` can never come back to `earlier` within a start-up."""
    return (earlier, later) in _BEFORE


def backwards(current: Phase, target: Phase) -> bool:
    """True when moving from `current` to `target` goes against the order."""
    return before(target, current)


def goes_back(visited: frozenset[Phase], target: Phase) -> bool:
    """True when `target` is ordered before a phase the rank has already been in."""
    return any(before(target, phase) for phase in visited)


def resolve(phase: Phase, begin: bool, hint: bool, current: Phase, ended: bool,
            visited: frozenset[Phase], draft_phases: bool = True) -> Phase | None:
    """The phase an engine line about `phase` means for a rank in `current` (`ended`: its end line
    was seen) that has been in `visited`; None when it changes nothing. `hint`: a guess (a frame, a
    bar) that only names a phase not visited yet. `draft_phases=False` (an engine without a draft
    model runner, e.g. vLLM): a repeated dist init or weight load line is never the draft's."""
    if hint:
        return phase if phase not in visited else None
    if draft_phases and phase in (Phase.DIST_INIT, Phase.WEIGHT_LOAD) and (
            Phase.WEIGHT_LOAD in visited or current in PAST_TARGET_WEIGHTS):
        # The draft model's runner repeats dist init and weight loading, also when the log's window
        # starts after the target's weights. (v0.5.23 loads the draft's right after the target's: an
        # ended weight_load is not reopened by a begin; a second end line is the same load's.)
        if phase is Phase.WEIGHT_LOAD and current is Phase.WEIGHT_LOAD and (not ended or not begin):
            return phase
        if phase is Phase.DIST_INIT and not begin:
            return None
        phase = Phase.DRAFT_WEIGHT_LOAD
    if phase is current or phase not in visited:
        return phase
    return None


@dataclass(frozen=True)
class Anomaly:
    """A line that would have moved a rank backwards; the rank kept its phase."""

    rank: str
    source: str  # the phase the rank was (and stays) in
    target: str  # the phase the line asked for
    rule: str | None
    ts: float | None
    confidence: str = "exact"
