"""stages/s4_judge/group_wait.py on its own: which node of a group this is, whether its ranks wait
together for another node, the one `waiting_for_node` verdict in place of their stalls, and when a
second node's start-up is done. The invocations come from SGLang's own lines (tests/fakes.py) on
node 1 of two (`nnodes=2, node_rank=1`, tp_size 8: its ranks are TP4..TP7). The same verdicts judged
by the whole policy: tests/unit/test_group.py."""

from __future__ import annotations

from dataclasses import replace

from fakes import INV, SERVER_ARGS, TP8, UNIT, Journal, up_to_capture
from phasewatch.config.load import Config, Group
from phasewatch.records import MAIN, MID_STARTED, VerdictKind
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s4_judge.group_wait import (
    LOCKSTEP_SPREAD,
    node_done,
    node_rank,
    waiting_ranks,
    with_node_waiting,
)

GROUP = Group("kimi-tp16", 2)
GROUPED = Config(unit=UNIT, group=GROUP)
NODE1 = TP8[4:]
SECOND_NODE = SERVER_ARGS.replace("nnodes=1, node_rank=0", "nnodes=2, node_rank=1")
CAPTURE_BEGIN = "Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB"
CAPTURE_END = "Capture cuda graph end. Time elapsed: 10.12 s. mem usage=1.17 GB. avail mem=19.21 GB."
DRAFT_BEGIN = "Capture draft cuda graph begin. This can take up to several minutes. avail mem=17.52 GB"
DRAFT_END = "Capture draft cuda graph end. Time elapsed: 12.04 s. mem usage=0.38 GB. avail mem=17.14 GB."


def node(args: str = SECOND_NODE, config: Config = GROUPED) -> Journal:
    """A node whose server logged `args`, its ranks through weight loading and into the KV cache."""
    j = Journal(config)
    j.systemd(MID_STARTED, "Started sglang.service - SGLang server.", JOB_TYPE="start", INVOCATION_ID=INV)
    j.log(MAIN, args)
    j.wait(5)
    j.every("Init torch distributed begin.", NODE1)
    j.every("Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB", NODE1)
    j.wait(5)
    j.every("Load weight begin. avail mem=137.95 GB", NODE1)
    j.every("Load weight end. elapsed=50.71 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=120.43 GB, mem usage=17.54 GB.", NODE1)
    j.every("KV Cache is allocated. #tokens: 2600000, K size: 49.59 GB, V size: 49.59 GB", NODE1)
    j.every("Memory pool end. avail mem=20.61 GB", NODE1)
    j.wait(1)
    return j


def capturing(apart: float = 0.0, ended: tuple[str, ...] = ()) -> InvocationView:
    """Node 1's ranks in the capture; the last one begins it `apart` seconds after the others."""
    first, last = NODE1[:-1], NODE1[-1:]
    j = node()
    j.every(CAPTURE_BEGIN, first)
    j.every(CAPTURE_END, tuple(r for r in ended if r in first))
    j.wait(apart)
    j.every(CAPTURE_BEGIN, last)
    j.every(CAPTURE_END, tuple(r for r in ended if r in last))
    return j.invocation()


def test_the_node_rank_is_the_configs_else_the_servers_own() -> None:
    single = Journal(GROUPED)
    up_to_capture(single)  # its server_args say nnodes=1
    assert node_rank(Config(unit=UNIT), node().invocation()) is None  # not in a group
    assert node_rank(GROUPED, single.invocation()) is None
    assert node_rank(GROUPED, None) is None
    assert node_rank(GROUPED, node().invocation()) == 1
    assert node_rank(replace(GROUPED, group=replace(GROUP, node_rank=0)), node().invocation()) == 0
    assert node_rank(replace(GROUPED, group=replace(GROUP, node_rank=1)), single.invocation()) == 1


def test_ranks_that_fell_silent_within_the_lockstep_spread_wait_together() -> None:
    assert waiting_ranks(capturing(), NODE1, None)
    assert waiting_ranks(capturing(apart=LOCKSTEP_SPREAD), NODE1, None)
    # one rank that went on for a while after its peers fell silent: not a collective
    assert not waiting_ranks(capturing(apart=LOCKSTEP_SPREAD + 1), NODE1, None)


def test_only_every_rank_of_the_node_stalled_in_one_phase_waits() -> None:
    inv = capturing()
    assert not waiting_ranks(inv, NODE1[:-1], None)  # one rank is not stalled: it is the culprit's peer
    assert not waiting_ranks(inv, (*NODE1, "TP0"), None)  # a rank this node never saw
    j = node()
    j.every(CAPTURE_BEGIN, NODE1[:-1])  # the last one still in the KV cache's allocation
    assert not waiting_ranks(j.invocation(), NODE1, None)
    assert not waiting_ranks(_no_ranks(), NODE1, None)


def _no_ranks(args: str | None = None) -> InvocationView:
    """A start-up no rank has logged in yet (`args`: the server's arguments, logged)."""
    j = Journal(GROUPED)
    j.systemd(MID_STARTED, "Started sglang.service - SGLang server.", JOB_TYPE="start", INVOCATION_ID=INV)
    if args is not None:
        j.log(MAIN, args)
    return j.invocation()


def test_ranks_that_finished_the_phase_wait_for_the_next_collective_however_far_apart() -> None:
    assert waiting_ranks(capturing(apart=600, ended=NODE1), NODE1, None)
    # three finished, the fourth hangs in it long after they went quiet: it is the node's own culprit
    assert not waiting_ranks(capturing(apart=600, ended=NODE1[:-1]), NODE1, None)


def test_the_gpus_waiting_signature_on_every_rank_is_waiting_too() -> None:
    apart = capturing(apart=600)
    assert waiting_ranks(apart, NODE1, gpu_waiting=NODE1)
    assert waiting_ranks(apart, NODE1, gpu_waiting=(*NODE1, "TP0"))
    assert not waiting_ranks(apart, NODE1, gpu_waiting=NODE1[:-1])
    assert not waiting_ranks(apart, NODE1, gpu_waiting=())


def stalls(inv: InvocationView, now: float) -> list[policy.Verdict]:
    """The policy's verdicts without a group: one stall per rank."""
    return policy.evaluate(inv, now, Config(unit=UNIT))


def test_a_waiting_node_gets_one_waiting_for_node_verdict_in_place_of_its_stalls() -> None:
    inv = capturing(apart=20)  # silent since the first of them fell silent, 20 s before the last
    now = inv.ranks[-1].phase_start + 1300  # type: ignore[operator]
    stalled = stalls(inv, now)
    assert [(v.kind, v.rank) for v in stalled] == [(VerdictKind.STALLED, r) for r in NODE1]
    [waiting] = with_node_waiting(inv, stalled, now + 20, GROUPED)
    assert (waiting.kind, waiting.rank, waiting.cause, waiting.phase, waiting.at) == (
        VerdictKind.WAITING_FOR_NODE, None, "other_node", "cuda_graph_capture", now + 20)
    assert waiting.message == ("sglang.service: waiting for another node: all 4 ranks of node 1 of 2 (group "
                               "kimi-tp16) wait in cuda_graph_capture for 22m20s, none of them the culprit; "
                               "not restarting alone (the group decides)")
    lost = replace(stalled[0], kind=VerdictKind.LINES_LOST, rank=None)
    assert [v.kind for v in with_node_waiting(inv, [*stalled, lost], now, GROUPED)] == [
        VerdictKind.LINES_LOST, VerdictKind.WAITING_FOR_NODE]
    # where the node's rank is not known, it is "a node"
    unknown = Journal(GROUPED)
    up_to_capture(unknown)  # its server_args say nnodes=1
    unknown.every(CAPTURE_BEGIN)
    unknown.wait(1300)
    single = unknown.invocation()
    [waiting] = with_node_waiting(single, stalls(single, unknown.now), unknown.now, GROUPED)
    assert "all 8 ranks of a node of 2 (group kimi-tp16) wait in cuda_graph_capture for 21m40s" in waiting.message


def test_a_node_with_a_culprit_of_its_own_or_no_group_keeps_its_verdicts() -> None:
    inv = capturing()
    now = inv.ranks[-1].phase_start + 1300  # type: ignore[operator]
    stalled = stalls(inv, now)
    assert with_node_waiting(inv, stalled, now, Config(unit=UNIT)) == stalled
    assert with_node_waiting(inv, [], now, GROUPED) == []
    crashed = replace(stalled[0], kind=VerdictKind.CRASHED)
    assert with_node_waiting(inv, [*stalled, crashed], now, GROUPED) == [*stalled, crashed]
    hung = capturing(apart=600, ended=NODE1[:-1])  # one rank hung while its peers finished
    late = hung.ranks[-1].phase_start + 1300  # type: ignore[operator]
    [own] = with_node_waiting(hung, stalls(hung, late), late, GROUPED)
    assert (own.kind, own.rank) == (VerdictKind.STALLED, "TP7")


def through_capture(args: str, draft_ended: tuple[str, ...] = ()) -> InvocationView:
    j = node(args)
    j.every(CAPTURE_BEGIN, NODE1)
    j.wait(10)
    j.every(CAPTURE_END, NODE1)
    if draft_ended:
        j.every(DRAFT_BEGIN, NODE1)
        j.wait(12)
        j.every(DRAFT_END, draft_ended)
    return j.invocation()


def test_a_second_node_is_done_when_every_rank_finished_its_last_capture() -> None:
    plain = SECOND_NODE.replace("speculative_algorithm='EAGLE3'", "speculative_algorithm=None")
    assert node_done(through_capture(plain))
    assert not node_done(through_capture(SECOND_NODE))  # EAGLE3: the draft's capture is the last
    assert node_done(through_capture(SECOND_NODE, draft_ended=NODE1))
    assert not node_done(through_capture(SECOND_NODE, draft_ended=NODE1[:-1]))
    # node 0 serves HTTP and says "fired up"; a single node too
    assert not node_done(through_capture(plain.replace("node_rank=1", "node_rank=0")))
    assert not node_done(through_capture(plain.replace("nnodes=2, node_rank=1", "nnodes=1, node_rank=0")))
    assert not node_done(through_capture(plain.replace("nnodes=2", "nnodes=1")))  # a node rank, no second node
    assert not node_done(_no_ranks())
    assert not node_done(_no_ranks(SECOND_NODE.replace("tp_size=8", "tp_size=1000000")))  # promises no rank
