"""One node of a group (config `group:`): are all its ranks waiting for another node? Pure.

A multi-node server's ranks meet in collectives: when node 1's TP12 hangs, node 0's ranks all stop
together, as NCCL makes them. Node 0 then has no culprit of its own; its stall verdicts are replaced
by one `waiting_for_node` verdict (alerted, never restarted: the group decides, rules in
config/prometheus/phasewatch-rules.yml). A node waits when every rank it has is stalled in the
same phase and
- all of them finished that phase and wait for the next collective, or
- they fell silent together (within LOCKSTEP_SPREAD of each other: a collective, not one rank
  that hung while its peers went on), or
- the GPU's waiting signature is observed on every one of them (`gpu_waiting`, the ranks whose
  GPU shows it: the seam for the GPU sampler; None where it is not observed).
A rank that died, crashed, straggles, or hangs while its peers finished is the node's own culprit:
then nothing is replaced.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from ...config.load import Config
from ...durations import format_duration
from ...records import Phase, VerdictKind
from ..s3_track.snapshot import InvocationView, RankView

if TYPE_CHECKING:
    from .verdict import Verdict

LOCKSTEP_SPREAD = 30.0  # seconds between the first and the last rank falling silent in one collective


def node_rank(config: Config, inv: InvocationView | None) -> int | None:
    """This node's rank in its group: the config's, else the server's own arguments' (None: unknown)."""
    group = config.group
    if group is None:
        return None
    if group.node_rank is not None:
        return group.node_rank
    server = inv.server if inv is not None else None
    if server is not None and server.nnodes > 1:
        return server.node_rank
    return None


def _silent_since(inv: InvocationView, rank: RankView) -> float | None:
    times = [t for t in (rank.last_activity, rank.phase_start, rank.last_vital) if t is not None]
    return max(times) if times else None


def waiting_ranks(inv: InvocationView, stalled: Collection[str], gpu_waiting: Collection[str] | None) -> bool:
    """Do the `stalled` ranks wait together for someone outside the node?"""
    ranks = [r for r in inv.scheduler_ranks if r.seen]
    if not ranks or {r.rank for r in ranks} != set(stalled) or len({r.phase for r in ranks}) != 1:
        return False
    if all(r.phase_ended for r in ranks):
        return True
    if gpu_waiting is not None and set(stalled) <= set(gpu_waiting):
        return True
    silences = [_silent_since(inv, r) for r in ranks]
    if any(s is None for s in silences):
        return False
    known = [s for s in silences if s is not None]
    return max(known) - min(known) <= LOCKSTEP_SPREAD


def with_node_waiting(inv: InvocationView, verdicts: list[Verdict], now: float, config: Config,
                      gpu_waiting: Collection[str] | None = None) -> list[Verdict]:
    """`verdicts` (policy's), with the stalls of a node that waits for another replaced by one
    `waiting_for_node` verdict. Unchanged without a group, or when the node has a culprit."""
    group = config.group
    if group is None or not verdicts:
        return verdicts
    others = [v for v in verdicts if v.kind not in (VerdictKind.STALLED, VerdictKind.LINES_LOST)]
    stalls = [v for v in verdicts if v.kind == VerdictKind.STALLED]
    if others or not stalls or not waiting_ranks(inv, [v.rank or "" for v in stalls], gpu_waiting):
        return verdicts
    phase = stalls[0].phase
    silences = [s for r in inv.scheduler_ranks if r.seen and (s := _silent_since(inv, r)) is not None]
    since = min(silences) if silences else now
    node = node_rank(config, inv)
    who = f"node {node} of {group.nodes}" if node is not None else f"a node of {group.nodes}"
    message = (f"{config.unit}: waiting for another node: all {len(stalls)} ranks of {who} (group {group.name}) "
               f"wait in {phase} for {format_duration(max(now - since, 0.0))}, none of them the culprit; "
               "not restarting alone (the group decides)")
    waiting = replace(stalls[0], kind=VerdictKind.WAITING_FOR_NODE, rank=None, cause="other_node", message=message,
                      at=now)
    return [*[v for v in verdicts if v.kind == VerdictKind.LINES_LOST], waiting]


def node_done(inv: InvocationView) -> bool:
    """A node with node_rank >= 1 of a multi-node server has no HTTP server and prints no "fired up":
    its start-up is done when every local rank has finished its last CUDA graph capture."""
    server = inv.server
    if server is None or server.nnodes <= 1 or server.node_rank == 0:
        return False
    ranks = inv.scheduler_ranks
    last = Phase.DRAFT_CUDA_GRAPH_CAPTURE if server.speculative else Phase.CUDA_GRAPH_CAPTURE
    return bool(ranks) and all(r.seen and r.phase is last and r.phase_ended for r in ranks)
