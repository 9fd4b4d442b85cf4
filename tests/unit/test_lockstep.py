"""stages/s3_track/lockstep.py on its own: which engine a rank belongs to, and which of its ranks follow
one that begins a phase (vLLM's start-up steps run on all workers of an engine at once). The same
through a vLLM pipeline: tests/unit/test_engine_vllm.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from phasewatch.records import MAIN, Phase
from phasewatch.stages.s3_track.lockstep import engine_group, followers


@dataclass
class Rank:
    rank: str
    phase: Phase
    phase_ended: bool = False
    visited: frozenset[Phase] = field(default_factory=frozenset)

    def entered(self, phase: Phase) -> bool:
        return phase is self.phase or phase in self.visited


@pytest.mark.parametrize(("label", "engine"), [
    ("DP1 TP3", "DP1"), ("DP0 TP3 EP3", "DP0"), ("TP3 DP2", "DP2"), ("PP1 TP0", ""), ("TP5", ""),
    ("pid13105", ""), ("pid25062@10.0.128.18", ""), (MAIN, ""), ("", ""),
])
def test_the_engine_of_a_rank_is_its_dp_tag(label: str, engine: str) -> None:
    assert engine_group(label) == engine


def test_the_quiet_ranks_of_the_leaders_engine_follow_it_into_a_later_phase() -> None:
    leader = Rank("DP0 TP0", Phase.KV_CACHE_ALLOC)
    loading, initialising = Rank("DP0 TP1", Phase.WEIGHT_LOAD), Rank("DP0 TP2", Phase.DIST_INIT, phase_ended=True)
    ranks = [leader, loading, Rank("DP1 TP0", Phase.WEIGHT_LOAD), initialising]
    assert followers(ranks, leader, Phase.KV_CACHE_ALLOC) == [loading, initialising]
    untagged = Rank("TP0", Phase.KV_CACHE_ALLOC)
    quiet = Rank("TP1", Phase.WEIGHT_LOAD)
    assert followers([untagged, quiet, Rank("DP0 TP1", Phase.WEIGHT_LOAD)], untagged, Phase.KV_CACHE_ALLOC) == [quiet]


def test_ranks_already_there_or_past_it_the_main_process_and_the_leader_do_not_follow() -> None:
    leader = Rank("TP0", Phase.CUDA_GRAPH_CAPTURE)
    ranks = [leader,
             Rank("TP1", Phase.CUDA_GRAPH_CAPTURE),  # there already
             Rank("TP2", Phase.DRAFT_WEIGHT_LOAD),  # past it
             Rank("TP3", Phase.KV_CACHE_ALLOC, visited=frozenset({Phase.CUDA_GRAPH_CAPTURE})),  # was in it once
             Rank(MAIN, Phase.LAUNCH)]  # the HTTP server's process is no worker
    assert followers(ranks, leader, Phase.CUDA_GRAPH_CAPTURE) == []
    # the phases the main process drives for the unit are no worker's step
    warming = Rank("TP1", Phase.WARMUP)
    assert followers([leader, warming], leader, Phase.READY) == []


def test_the_phase_begun_is_followed_and_the_leader_is_never_its_own_follower() -> None:
    leader = Rank("TP0", Phase.WEIGHT_LOAD)  # (the tracker moves it to the phase it begins first)
    behind = Rank("TP1", Phase.DIST_INIT)
    assert followers([leader, behind], leader, Phase.KV_CACHE_ALLOC) == [behind]
    assert followers([leader, behind], leader, Phase.DIST_INIT) == []
