"""Crash attribution from the failure lines' own text: the deepest frame that names a phase, and the
ranks named inside messages (healthy, waiting, culprit), with elimination against server_args."""

from __future__ import annotations

import pytest

from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import Phase
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s2_interpret.crashfacts import (
    CrashFacts,
    Role,
    ServerRanks,
    crash_facts,
    mentions_in,
    traceback_phase,
)
from phasewatch.stages.s4_judge.verdict import Verdict

SGL = "/sgl-workspace/sglang/python/sglang/srt"


def frame(path: str, func: str, indent: str = "  ") -> str:
    return f'{indent}File "{SGL}/{path}", line 42, in {func}'


# -- the deepest frame that names a phase ---------------------------------------------------------

def test_the_deepest_frame_that_names_a_phase_wins() -> None:
    texts = ["Scheduler hit an exception: Traceback (most recent call last):",
             frame("managers/scheduler.py", "__init__"),
             frame("model_executor/model_runner.py", "initialize"),
             frame("model_executor/model_runner.py", "load_model"),
             frame("model_executor/model_runner.py", "init_memory_pool"),
             frame("mem_cache/memory_pool.py", "__init__"),
             '  File "/usr/lib/python3/site-packages/torch/cuda/memory.py", line 9, in empty',
             "torch.OutOfMemoryError: CUDA out of memory."]
    assert traceback_phase(texts) is Phase.KV_CACHE_ALLOC


def test_init_cuda_graphs_in_a_draft_worker_is_draft_capture_not_draft_load() -> None:
    texts = [frame("managers/scheduler.py", "__init__"),
             frame("speculative/eagle_worker.py", "__init__"),
             frame("speculative/eagle_worker.py", "init_cuda_graphs"),
             "RuntimeError: boom"]
    assert traceback_phase(texts) is Phase.DRAFT_CUDA_GRAPH_CAPTURE


def test_target_phases_under_a_draft_worker_are_the_drafts() -> None:
    texts = [frame("speculative/eagle_worker.py", "__init__"),
             frame("managers/tp_worker.py", "__init__"),
             frame("model_executor/model_runner.py", "load_model"),
             frame("model_loader/loader.py", "load_weights")]
    assert traceback_phase(texts) is Phase.DRAFT_WEIGHT_LOAD
    assert traceback_phase([frame("speculative/eagle_worker.py", "__init__")]) is None
    assert traceback_phase([frame("speculative/ngram_worker.py", "init_cuda_graphs")]) is \
        Phase.DRAFT_CUDA_GRAPH_CAPTURE


def test_frames_without_indentation_and_eaten_underscores_are_frames() -> None:
    texts = [frame("managers/scheduler.py", "init", indent=""),
             frame("model_executor/model_runner.py", "init_device_graphs", indent=""),
             frame("model_executor/cuda_graph_runner.py", "init", indent="")]
    assert traceback_phase(texts) is Phase.CUDA_GRAPH_CAPTURE


def test_the_first_traceback_of_a_chain_that_names_a_phase_is_where_it_died() -> None:
    texts = [frame("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
             '  File "/x/site-packages/torch/cuda/graphs.py", line 1, in capture_end',
             "RuntimeError: CUDA error: out of memory",
             "During handling of the above exception, another exception occurred:",
             frame("managers/scheduler.py", "__init__"),
             frame("model_executor/model_runner.py", "init_memory_pool"),
             "Exception: Capture cuda graph failed"]
    assert traceback_phase(texts) is Phase.CUDA_GRAPH_CAPTURE
    assert traceback_phase(["Traceback (most recent call last):", "ValueError: x"]) is None


# -- ranks named in message text ------------------------------------------------------------------

def test_ranks_in_message_text_become_facts() -> None:
    healthy = mentions_in("ValueError: TP rank 2 could finish the model loading, but there are other ranks", "TP2")
    assert [(m.number, m.role) for m in healthy] == [(2, Role.HEALTHY)]
    listed = mentions_in("RuntimeError: Ranks 1, 3 failed to pass monitoredBarrier in 480000 ms", None)
    assert [(m.number, m.role) for m in listed] == [(1, Role.CULPRIT), (3, Role.CULPRIT)]
    one = mentions_in("[Rank 0]: Rank 5 failed to pass monitoredBarrier in 480000 ms", None)
    assert [(m.number, m.role) for m in one] == [(5, Role.CULPRIT)]
    nccl = mentions_in("[Rank 4]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
                       "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 ms", "TP4")
    assert [(m.number, m.role, m.seq, m.op) for m in nccl] == [(4, Role.WAITING, 7, "ALLREDUCE")]
    assert mentions_in("Rank 0 scheduler is dead. Please check if there are relevant logs.", "main") == []
    newer = mentions_in("[PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog caught collective operation timeout: "
                        "WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000)", "TP5")
    assert [(m.number, m.role, m.op) for m in newer] == [(5, Role.WAITING, "BROADCAST")]


def test_a_waiting_rank_is_the_rank_that_printed_it_whatever_its_group_rank() -> None:
    every = ("PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1")
    layout = ServerRanks(tp=2, pp=2, local=every, every=every)
    facts = crash_facts([("PP1 TP1", ("[PG ID 3 PG GUID 5 Rank 1] Watchdog caught collective operation timeout",))],
                        layout, list(every))
    assert facts.waiting == ("PP1 TP1",)


LAYOUT4 = ServerRanks(tp=4, local=("TP0", "TP1", "TP2", "TP3"), every=("TP0", "TP1", "TP2", "TP3"))


def test_named_culprits_win_over_elimination() -> None:
    facts = crash_facts([("TP0", ("TP rank 0 could finish the model loading",
                                  "[Rank 0]: Rank 3 failed to pass monitoredBarrier in 480000 ms"))],
                        LAYOUT4, ["TP0", "TP1", "TP2", "TP3"])
    assert facts == CrashFacts(healthy=("TP0",), culprits=("TP3",), found_by="named", phase=Phase.WEIGHT_LOAD)


def test_when_only_the_waiting_ranks_speak_the_silent_expected_rank_is_the_culprit() -> None:
    line = "[Rank {0}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, N"
    facts = crash_facts([(f"TP{i}", (line.format(i),)) for i in (0, 1, 3)], LAYOUT4, ["TP0", "TP1", "TP3"])
    assert facts.culprits == ("TP2",) and facts.found_by == "elimination"
    assert facts.waiting == ("TP0", "TP1", "TP3") and facts.phase is None


def test_without_a_layout_and_nobody_behind_the_culprit_is_unknown() -> None:
    facts = crash_facts([("TP6", ("[Rank 6] Watchdog caught collective operation timeout",))], None, ["TP0", "TP6"])
    assert facts.culprits == () and facts.waiting == ("TP6",) and facts.known


def test_without_a_layout_a_rank_behind_the_reporters_is_the_culprit() -> None:
    facts = crash_facts([("TP0", ("TP rank 0 could finish the model loading",))], None, ["TP0", "TP1"],
                        earlier=["TP1"])
    assert facts.culprits == ("TP1",) and facts.healthy == ("TP0",)


def test_every_local_rank_waiting_puts_the_culprit_on_another_node() -> None:
    every = tuple(f"TP{i}" for i in range(16))
    layout = ServerRanks(tp=16, local=every[:8], every=every)
    facts = crash_facts([(f"TP{i}", (f"[Rank {i}] Watchdog caught collective operation timeout",))
                         for i in range(8)], layout, list(every[:8]))
    assert facts.remote and facts.culprits == every[8:] and facts.found_by == "elimination"


def test_an_nccl_reporter_in_a_different_collective_than_the_rest_is_the_culprit() -> None:
    def line(rank: int, seq: int, op: str) -> str:
        return (f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                f"OpType={op}, NumelIn=1, NumelOut=1, Timeout(ms)=600000)")
    fatals = [("TP0", (line(0, 9, "ALLREDUCE"),)), ("TP1", (line(1, 9, "ALLREDUCE"),)),
              ("TP2", (line(2, 9, "ALLGATHER"),)), ("TP3", (line(3, 9, "ALLREDUCE"),))]
    facts = crash_facts(fatals, LAYOUT4, ["TP0", "TP1", "TP2", "TP3"])
    assert facts.culprits == ("TP2",) and facts.found_by == "minority" and "TP2" not in facts.waiting


def test_global_ranks_map_to_pp_and_dp_labels() -> None:
    every = ("PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1")
    layout = ServerRanks(tp=2, pp=2, local=every, every=every)
    facts = crash_facts([(None, ("Ranks 2 failed to pass monitoredBarrier",))], layout, list(every))
    assert facts.culprits == ("PP1 TP0",)
    dp = ServerRanks(tp=2, dp=2, local=("DP0 TP0", "DP0 TP1", "DP1 TP0", "DP1 TP1"))
    facts = crash_facts([("DP1 TP0", ("[Rank 0]: Rank 1 failed to pass monitoredBarrier in 480000 ms",))], dp,
                        list(dp.local))
    assert facts.culprits == ("DP1 TP1",)


# -- the verdict, through the whole pipeline -------------------------------------------------------

ARGS = ("[2026-02-22 23:55:02] server_args=ServerArgs(model_path='m', tp_size={tp}, dp_size=1, pp_size=1, "
        "nnodes=1, node_rank=0, port=30000)")


def judge(lines: list[str], now_offset: float = 0.0) -> Verdict:
    records = parse_source(("\n".join(lines) + "\n").encode("utf-8"), default_year=2026).records
    pipeline = Pipeline(Config(unit="sglang.service", crash_cause_wait=0))  # a complete log, as replay judges it
    pipeline.feed_all(records, None)
    [inv] = pipeline.snapshot().invocations
    [judgement] = pipeline.judge((inv.last_ts or 0.0) + now_offset)
    [crash] = [v for v in judgement.verdicts if v.kind == "crashed"]
    return crash


def test_the_verdict_names_the_culprit_the_barrier_names_not_the_rank_that_raised() -> None:
    lines = [ARGS.format(tp=4)]
    lines += [f"[2026-02-22 23:56:0{i} TP{i}] Load weight begin. avail mem=78.50 GB" for i in range(4)]
    lines += [f"[2026-02-22 23:57:0{i} TP{i}] Load weight end. type=LlamaForCausalLM, avail mem=40.1 GB"
              for i in (0, 1, 3)]
    lines += ["[rank0]:[E222 00:05:01.123456789 ProcessGroupGloo.cpp:143] [Rank 0]: Rank 2 failed to pass "
              "monitoredBarrier in 480000 ms",
              "[2026-02-23 00:05:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
              frame("managers/scheduler.py", "__init__"),
              frame("model_executor/model_runner.py", "load_model"),
              "ValueError: TP rank 0 could finish the model loading, but there are other ranks that didn't "
              "finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node.",
              "[2026-02-23 00:05:02] Received sigquit from a child process. It usually means the child failed."]
    crash = judge(lines)
    assert crash.rank == "TP2" and crash.phase == "weight_load" and crash.cause == "load_barrier_timeout"
    assert crash.facts is not None and crash.facts.healthy == ("TP0",) and crash.facts.culprits == ("TP2",)
    assert "culprit(s): TP2 (named in the failure lines); healthy: TP0" in crash.message


def test_nccl_timeouts_of_the_waiting_ranks_name_the_silent_one_by_elimination() -> None:
    lines = [ARGS.format(tp=4)]
    lines += [f"[2026-02-22 23:57:0{i} TP{i}] Load weight end. type=LlamaForCausalLM, avail mem=40.1 GB"
              for i in range(4)]
    lines += [f"[rank{i}]:[E222 00:07:1{i}.482113552 ProcessGroupNCCL.cpp:685] [Rank {i}] Watchdog caught "
              "collective operation timeout: WorkNCCL(SeqNum=37, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
              "Timeout(ms)=600000) ran for 600041 milliseconds before timing out." for i in (0, 1, 3)]
    crash = judge(lines)
    assert crash.rank == "TP2" and crash.cause == "nccl_timeout"
    assert crash.facts is not None and crash.facts.found_by == "elimination"
    assert crash.facts.waiting == ("TP0", "TP1", "TP3")


def test_a_rank_with_its_own_exception_is_the_culprit_while_the_others_time_out() -> None:
    lines = [ARGS.format(tp=2),
             "[2026-02-22 23:57:00 TP0] Load weight end. type=LlamaForCausalLM, avail mem=40.1 GB",
             "[2026-02-22 23:57:01 TP1] Scheduler hit an exception: Traceback (most recent call last):",
             frame("managers/scheduler.py", "__init__"),
             frame("model_executor/model_runner.py", "init_cuda_graphs"),
             frame("model_executor/cuda_graph_runner.py", "capture"),
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
             "[rank0]:[E222 00:07:10.482113552 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"]
    crash = judge(lines)
    assert crash.rank == "TP1" and crash.phase == "cuda_graph_capture" and crash.cause == "oom"
    assert crash.facts is not None and crash.facts.waiting == ("TP0",)


def test_a_plain_crash_has_no_rank_facts() -> None:
    crash = judge(["[2026-02-22 23:57:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                   frame("speculative/eagle_worker.py", "__init__"),
                   frame("speculative/eagle_worker.py", "init_cuda_graphs"),
                   "RuntimeError: boom"])
    assert crash.facts is None and crash.rank == "TP0" and crash.phase == "draft_cuda_graph_capture"


@pytest.mark.parametrize("text", ["TP rank 99999999999 could finish the model loading",
                                  "Ranks " + ", ".join(["1"] * 5000) + " failed to pass monitoredBarrier"])
def test_hostile_rank_numbers_cost_nothing(text: str) -> None:
    facts = crash_facts([("TP0", (text,))], LAYOUT4, ["TP0"])
    assert len(facts.culprits) <= 4


def test_too_few_reports_name_nobody_by_elimination() -> None:
    """One waiting rank of eight: the seven others may simply not have reported yet."""
    every = tuple(f"TP{i}" for i in range(8))
    layout = ServerRanks(tp=8, local=every, every=every)
    facts = crash_facts([("TP5", ("[Rank 5] Watchdog caught collective operation timeout",))], layout, list(every))
    assert facts.culprits == () and facts.waiting == ("TP5",)


def test_the_launchers_scheduler_index_names_this_nodes_process() -> None:
    local = ("DP0 TP0", "DP0 TP1", "DP1 TP0", "DP1 TP1")
    layout = ServerRanks(tp=2, dp=2, local=local)
    text = "RuntimeError: Rank 2 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL)"
    assert crash_facts([("main", (text,))], layout, list(local)).culprits == ("DP1 TP0",)
    text = "Subprocess scheduler_3 (pid=4711) crashed with exit code -6. Triggering SIGQUIT for cleanup..."
    assert crash_facts([("main", (text,))], layout, list(local)).culprits == ("DP1 TP1",)
