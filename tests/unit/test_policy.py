"""Verdicts from a tracker snapshot and `now`, driven through the whole pipeline with real SGLang lines.

The lines are those of SGLANG-LOGS.md §9 (v0.5.9, `--tp 8`, EAGLE3). A FakeClock dates every
journal entry and is the `now` of every judgement; nothing sleeps.
"""

from __future__ import annotations

import math

import pytest

from fakes import (
    INV,
    T0,
    TP8,
    UNIT,
    Journal,
    capture_bar,
    dist_init,
    draft_capture_end,
    http_server_start,
    kinds,
    launch,
    serving,
    up_to_capture,
    up_to_draft_capture,
    up_to_ready,
    warmup,
)
from phasewatch.config.load import DEFAULT_CRASH_CAUSE_WAIT, DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.pipeline import Pipeline
from phasewatch.records import (
    MAIN,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    JournalRecord,
    Phase,
)
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s4_judge.policy import ECHO_GRACE, next_deadline


@pytest.fixture
def journal() -> Journal:
    return Journal()


def test_the_whole_start_up_is_judged_clean(journal: Journal) -> None:
    up_to_ready(journal)
    serving(journal)
    inv = journal.invocation()
    assert [(r.rank, r.phase) for r in inv.ranks] == [(label, Phase.SERVING) for label in (MAIN, *TP8)]
    spans = [s.phase for s in inv.rank("TP3").spans]  # type: ignore[union-attr]
    assert spans == [p for p in Phase if p is not Phase.JIT_COMPILE]  # a sub-phase, never a span
    assert journal.verdicts() == []


# --- stalled -------------------------------------------------------------------------------------


def _draft_capture_with_advancing_bar(j: Journal, minutes: int) -> float:
    """Every rank in the draft capture; TP0's bar moves once a minute. Returns when the phase began."""
    up_to_draft_capture(j)
    began = j.now
    for minute in range(1, minutes + 1):
        j.wait(60)
        capture_bar(j, minute % 23, avail="17.10")
    return began


def test_stalled_by_deadline_not_at_the_limit(journal: Journal) -> None:
    began = _draft_capture_with_advancing_bar(journal, 19)
    limit = DEFAULT_LIMITS[Phase.DRAFT_CUDA_GRAPH_CAPTURE].deadline
    assert limit == 1200
    assert journal.verdicts(at=began + limit) == []


def test_stalled_by_deadline_one_second_past_the_limit(journal: Journal) -> None:
    began = _draft_capture_with_advancing_bar(journal, 19)
    verdicts = journal.verdicts(at=began + 1201)
    assert kinds(verdicts) == [("stalled", rank, "draft_cuda_graph_capture", "deadline") for rank in TP8]
    assert all(v.at == began + 1201 and v.invocation_id == INV for v in verdicts)


def test_stalled_by_deadline_message_names_rank_phase_duration_and_limit(journal: Journal) -> None:
    began = _draft_capture_with_advancing_bar(journal, 20)
    journal.wait(began + 21 * 60 - journal.now)
    tp3 = next(v for v in journal.verdicts() if v.rank == "TP3")
    assert tp3.message == (f"{UNIT}: TP3 stalled in draft_cuda_graph_capture for 21m (limit 20m); "
                           "7 other rank(s) in the same phase")
    assert journal.outcome() == "stalled"


def test_stalled_by_stall_window_after_the_last_line(journal: Journal) -> None:
    launch(journal)
    dist_init(journal)
    journal.every("Load weight begin. avail mem=137.95 GB")
    journal.raw("TP0", "\rLoading safetensors checkpoint shards:  50% Completed | 15/30 "
                       "[00:24<00:24,  1.63s/it]\n")
    last = journal.now
    stall = DEFAULT_LIMITS[Phase.WEIGHT_LOAD].stall
    assert stall == 900
    assert journal.verdicts(at=last + stall) == []
    verdicts = journal.verdicts(at=last + stall + 1)
    assert kinds(verdicts) == [("stalled", rank, "weight_load", "no_progress") for rank in TP8]
    assert verdicts[0].message == (f"{UNIT}: TP0 stalled in weight_load: no output or progress for 15m1s "
                                   "(stall window 15m); 7 other rank(s) in the same phase")


def test_stalled_by_stall_window_of_a_phase_that_ended(journal: Journal) -> None:
    """Every rank finished kv_cache_alloc, and nothing followed: the wait after it stalls too."""
    up_to_capture(journal)
    last = journal.now
    assert journal.verdicts(at=last + 600) == []
    assert kinds(journal.verdicts(at=last + 601)) == [
        ("stalled", rank, "kv_cache_alloc", "no_progress") for rank in TP8]
    assert journal.verdicts(at=last + 601)[5].message.startswith(
        f"{UNIT}: TP5 stalled after kv_cache_alloc ended: no output or progress for 10m1s (stall window 10m)")


def test_stalled_not_for_a_silent_rank_while_tp0_capture_bar_advances(journal: Journal) -> None:
    """Ranks in a collective move together: TP0's bar is the sign of life of all its peers."""
    up_to_capture(journal)
    journal.wait(1)
    journal.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    began = journal.now
    for n in range(1, 26):  # 25 minutes of a slow capture, a frame a minute, under the 30m deadline
        journal.wait(60)
        capture_bar(journal, n % 23)
    inv = journal.invocation()
    tp5 = inv.rank("TP5")
    assert tp5 is not None and tp5.last_activity == began
    stall = DEFAULT_LIMITS[Phase.CUDA_GRAPH_CAPTURE].stall
    assert stall is not None and journal.now - tp5.last_activity > stall
    assert journal.verdicts() == []
    # Once the bar stops too, every rank of the phase is stalled.
    assert {v.rank for v in journal.verdicts(at=journal.now + stall + 1)} == set(TP8)


def test_stalled_in_launch_when_no_rank_prints(journal: Journal) -> None:
    """The main process, and ranks server_args promised of which none printed a line."""
    launch(journal)
    began = journal.invocation().rank(MAIN).phase_start  # type: ignore[union-attr]
    assert began == T0
    assert journal.verdicts(at=began + 600) == []
    verdicts = journal.verdicts(at=began + 601)
    # One verdict: the ranks server_args promised are judged only once one of them has spoken.
    assert kinds(verdicts) == [("stalled", MAIN, "launch", "deadline")]
    assert verdicts[0].message.startswith(f"{UNIT}: main stalled in launch for 10m1s (limit 10m)")


def test_stalled_by_configured_limits() -> None:
    """weight_load without deadline, a 1m stall window: an hour of shards is fine, a quiet minute is not."""
    j = Journal(Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(None, 60)}))
    launch(j)
    dist_init(j)
    j.every("Load weight begin. avail mem=137.95 GB")
    for n in range(120):
        j.wait(30)
        j.raw("TP0", f"\rLoading safetensors checkpoint shards: {n * 100 // 120:3d}% Completed | {n}/120 "
                     "[00:30<00:30, 30.00s/it]\n")
        assert j.verdicts() == []
    assert j.verdicts(at=j.now + 60) == []
    assert kinds(j.verdicts(at=j.now + 61))[0] == ("stalled", "TP0", "weight_load", "no_progress")


# --- straggler -----------------------------------------------------------------------------------


def _tp7_left_behind_in_weight_load(j: Journal) -> float:
    launch(j)
    dist_init(j)
    j.every("Load weight begin. avail mem=137.95 GB")
    j.wait(50)
    first_exit = j.now
    j.every("Load weight end. elapsed=50.71 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=120.43 GB, mem usage=17.54 GB.", TP8[:7])
    j.wait(1)
    j.every("KV Cache is allocated. #tokens: 2600000, K size: 49.59 GB, V size: 49.59 GB", TP8[:7])
    return first_exit


def test_straggler_not_before_rank_skew(journal: Journal) -> None:
    first_exit = _tp7_left_behind_in_weight_load(journal)
    assert journal.config.rank_skew == 300
    assert journal.verdicts(at=first_exit + 300) == []


def test_straggler_after_rank_skew(journal: Journal) -> None:
    first_exit = _tp7_left_behind_in_weight_load(journal)
    verdicts = journal.verdicts(at=first_exit + 301)
    assert kinds(verdicts) == [("straggler", "TP7", "weight_load", "rank_skew")]
    assert verdicts[0].message == (f"{UNIT}: TP7 is still in weight_load; other ranks left weight_load "
                                   "5m1s ago (rank skew limit 5m)")
    assert journal.outcome(at=first_exit + 301) == "stalled"


def test_straggler_that_never_printed(journal: Journal) -> None:
    """server_args said tp_size=8; TP6 printed nothing while the others finished dist init."""
    launch(journal)
    journal.every("Init torch distributed begin.", TP8[:6] + TP8[7:])
    journal.wait(2)
    first_exit = journal.now
    journal.every("Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB", TP8[:6] + TP8[7:])
    journal.every("Load weight begin. avail mem=137.95 GB", TP8[:6] + TP8[7:])
    verdicts = journal.verdicts(at=first_exit + 301)
    assert kinds(verdicts) == [("straggler", "TP6", "launch", "rank_skew")]
    assert "TP6 has not printed anything" in verdicts[0].message


# --- crashed -------------------------------------------------------------------------------------

CAPTURE_OOM = (
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3180, '
    "in run_scheduler_process",
    "    scheduler = Scheduler(",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2147, '
    "in init_device_graphs",
    "    self.graph_runner = graph_runners[self.device](self)",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", '
    "line 372, in __init__",
    '    raise Exception(',
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 139.81 GiB of which 1.12 GiB is free. Of the allocated memory 131.90 GiB is allocated by "
    "PyTorch.",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
)


def test_crashed_failing_rank_is_the_one_whose_own_line_shows_the_exception(journal: Journal) -> None:
    up_to_capture(journal)
    journal.wait(1)
    journal.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    journal.wait(4)
    # journald interleaves the writers: the parent's reaction lands before the child's record.
    journal.log(MAIN, "Received sigquit from a child process. It usually means the child failed.")
    crashed_at = journal.now
    journal.log("TP3", "Scheduler hit an exception: Traceback (most recent call last):")
    for line in CAPTURE_OOM[1:]:
        journal.raw("TP3", line)
    verdicts = journal.verdicts(at=crashed_at + 30)
    assert kinds(verdicts) == [("crashed", "TP3", "cuda_graph_capture", "oom")]
    assert verdicts[0].at == crashed_at
    assert verdicts[0].message.startswith(f"{UNIT}: TP3 crashed in cuda_graph_capture (oom): ")
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in verdicts[0].message
    assert journal.outcome(at=crashed_at + 30) == "crashed"


def test_crashed_with_parent_echo_only_waits_for_the_child_then_names_the_main_process(journal: Journal) -> None:
    up_to_capture(journal)
    journal.log(MAIN, "Received sigquit from a child process. It usually means the child failed.")
    echoed = journal.now
    # The failing child's own lines usually follow within moments: no verdict yet, but a deadline.
    assert journal.verdicts(at=echoed + ECHO_GRACE - 0.1) == []
    assert next_deadline(journal.invocation(), echoed, journal.config) == echoed + ECHO_GRACE
    (verdict,) = journal.verdicts(at=echoed + ECHO_GRACE)
    assert (verdict.kind, verdict.rank, verdict.cause) == ("crashed", MAIN, None)
    assert "crashed in launch (cause unknown)" in verdict.message


def test_crashed_verdict_key_is_stable_when_the_culprit_shows_up_late(journal: Journal) -> None:
    up_to_capture(journal)
    journal.log(MAIN, "Received sigquit from a child process. It usually means the child failed.")
    (early,) = journal.verdicts(at=journal.now + ECHO_GRACE)
    journal.log("TP3", "Scheduler hit an exception: Traceback (most recent call last):")
    (late,) = journal.verdicts(at=journal.now + DEFAULT_CRASH_CAUSE_WAIT)
    assert (early.rank, late.rank) == (MAIN, "TP3")
    assert early.key == late.key


def test_crashed_cause_nccl_timeout_from_torch_watchdog(journal: Journal) -> None:
    up_to_capture(journal)
    journal.wait(1)
    journal.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    journal.wait(600)
    journal.raw("TP5", "[rank5]:[E0222 00:06:16.482113552 ProcessGroupNCCL.cpp:685] [Rank 5] Watchdog caught "
                       "collective operation timeout: WorkNCCL(SeqNum=37, OpType=ALLREDUCE, NumelIn=1, "
                       "NumelOut=1, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")
    journal.raw("TP5", "[rank5]:[E0222 00:06:16.482410000 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID "
                       "0(default_pg) Rank 5] Some NCCL operations have failed or timed out. Due to the "
                       "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                       "corrupted/incomplete data.")
    journal.raw("TP5", "terminate called after throwing an instance of 'c10::DistBackendError'")
    journal.log(MAIN, "Rank 0 scheduler is dead. Please check if there are relevant logs.")
    journal.log(MAIN, "Exit code: -6")
    (verdict,) = journal.verdicts()
    # TP5 waited 600 s in a collective: a bystander, not the culprit. One reporter of eight leaves
    # seven candidates, too many to name by elimination: the culprit is not shown.
    assert (verdict.kind, verdict.rank, verdict.phase, verdict.cause) == (
        "crashed", None, "cuda_graph_capture", "nccl_timeout")
    assert verdict.facts is not None and verdict.facts.waiting == ("TP5",) and verdict.facts.culprits == ()
    assert "rank unknown" in verdict.message and "timed out waiting: TP5" in verdict.message


def test_crashed_cause_dist_init_timeout_from_dist_store_error(journal: Journal) -> None:
    launch(journal)
    journal.wait(5)
    journal.every("Init torch distributed begin.", TP8[:7])
    journal.wait(1801)
    journal.log("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
    journal.raw("TP0", '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
                       'model_runner.py", line 731, in init_torch_distributed')
    journal.raw("TP0", "    initialize_model_parallel(")
    journal.raw("TP0", "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. "
                       "7/8 clients joined.")
    journal.log(MAIN, "Received sigquit from a child process. It usually means the child failed.")
    (verdict,) = journal.verdicts()
    assert (verdict.kind, verdict.rank, verdict.phase, verdict.cause) == (
        "crashed", "TP0", "dist_init", "dist_init_timeout")


def test_crashed_cause_warmup_failed(journal: Journal) -> None:
    up_to_draft_capture(journal)
    journal.wait(12)
    draft_capture_end(journal)
    http_server_start(journal)
    warmup(journal)
    journal.wait(600)
    journal.log(MAIN, "Initialization failed. warmup error: Traceback (most recent call last):")
    journal.raw(MAIN, '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/'
                      'http_server.py", line 1687, in _execute_server_warmup')
    journal.raw(MAIN, "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port=30000): "
                      "Read timed out. (read timeout=600)")
    (verdict,) = journal.verdicts()
    assert (verdict.kind, verdict.rank, verdict.phase, verdict.cause) == (
        "crashed", MAIN, "warmup", "warmup_failed")


def test_crashed_cause_killed_from_unit_failed_with_signal_and_no_lines(journal: Journal) -> None:
    up_to_capture(journal)
    journal.wait(30)
    journal.systemd(MID_MAIN_EXITED, "sglang.service: Main process exited, code=killed, status=9/KILL",
                    EXIT_CODE="killed", EXIT_STATUS="9")
    journal.systemd(MID_FAILED, "sglang.service: Failed with result 'signal'.", UNIT_RESULT="signal")
    (verdict,) = journal.verdicts()
    assert (verdict.kind, verdict.rank, verdict.cause) == ("crashed", MAIN, "killed")
    assert verdict.message.endswith("(unit result signal, exit killed/9)")
    assert verdict.at == journal.now


def test_crashed_cause_exit_code_from_unit_failed_with_exit_code(journal: Journal) -> None:
    launch(journal)
    journal.systemd(MID_MAIN_EXITED, "sglang.service: Main process exited, code=exited, status=1/FAILURE",
                    EXIT_CODE="exited", EXIT_STATUS="1")
    journal.systemd(MID_FAILED, "sglang.service: Failed with result 'exit-code'.", UNIT_RESULT="exit-code")
    journal.systemd(MID_STOPPED, "Stopped sglang.service - SGLang server.")
    (verdict,) = journal.verdicts()
    assert (verdict.kind, verdict.rank, verdict.phase, verdict.cause) == (
        "crashed", MAIN, "launch", "exit_code")
    assert journal.outcome() == "crashed"


def test_crashed_after_ready_only_when_a_scheduler_dies(journal: Journal) -> None:
    up_to_ready(journal)
    journal.wait(3600)
    assert journal.verdicts() == []
    journal.log("TP2", "Scheduler hit an exception: Traceback (most recent call last):")
    journal.raw("TP2", "RuntimeError: CUDA error: an illegal memory access was encountered")
    journal.log(MAIN, "SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    assert kinds(journal.verdicts()) == [("crashed", "TP2", "ready", "cuda_error")]


# --- lines lost ----------------------------------------------------------------------------------


def test_lines_lost_verdict_from_journald_suppression(journal: Journal) -> None:
    up_to_capture(journal)
    journal.record("Suppressed 1234 messages from sglang.service", None, message_id=MID_SUPPRESSED,
                   object_unit=UNIT, n_dropped=1234)
    verdicts = journal.verdicts()
    assert kinds(verdicts) == [("lines_lost", None, None, "journald_rate_limit")]
    assert verdicts[0].message.startswith(f"{UNIT}: journald dropped 1234 line(s) of this start-up")
    assert journal.outcome() == "starting"


# --- no start-up verdicts once ready -------------------------------------------------------------


def test_no_startup_verdicts_once_ready(journal: Journal) -> None:
    up_to_ready(journal)
    assert journal.invocation().state.value == "ready"
    assert journal.verdicts(at=journal.now + 7 * 86400) == []
    assert journal.next_deadline() == math.inf


# --- next_deadline -------------------------------------------------------------------------------


def test_next_deadline_is_the_earliest_future_deadline(journal: Journal) -> None:
    up_to_capture(journal)
    journal.wait(1)
    journal.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    began = journal.now
    journal.wait(100)
    capture_bar(journal, 5)
    # Stall window from the bar (100 + 1200) comes before the deadline from the begin (1800).
    assert journal.next_deadline() == began + 100 + 1200
    journal.wait(1200)
    capture_bar(journal, 10)
    assert journal.next_deadline() == began + 1800


def test_next_deadline_brackets_the_first_verdict(journal: Journal) -> None:
    _tp7_left_behind_in_weight_load(journal)
    deadline = journal.next_deadline()
    assert math.isfinite(deadline)
    assert journal.verdicts(at=deadline - 1) == []
    assert journal.verdicts(at=deadline) == []  # limits are inclusive
    assert journal.verdicts(at=deadline + 1) != []


def test_next_deadline_steps_from_one_deadline_to_the_next(journal: Journal) -> None:
    first_exit = _tp7_left_behind_in_weight_load(journal)
    assert journal.next_deadline() == first_exit + 300  # straggler TP7
    journal.wait(first_exit + 301 - journal.now)
    assert kinds(journal.verdicts()) == [("straggler", "TP7", "weight_load", "rank_skew")]
    # Next: the ranks waiting in kv_cache_alloc since first_exit + 1 reach its 10m deadline.
    after = journal.next_deadline()
    assert after == first_exit + 1 + 600
    assert kinds(journal.verdicts(at=after)) == [("straggler", "TP7", "weight_load", "rank_skew")]
    assert kinds(journal.verdicts(at=after + 1)) == [
        *(("stalled", rank, "kv_cache_alloc", "deadline") for rank in TP8[:7]),
        ("straggler", "TP7", "weight_load", "rank_skew")]


@pytest.mark.parametrize("end_state", ["ready", "crashed", "stopped"])
def test_next_deadline_is_inf_when_nothing_is_pending(journal: Journal, end_state: str) -> None:
    if end_state == "ready":
        up_to_ready(journal)
    elif end_state == "crashed":
        up_to_capture(journal)
        journal.log("TP1", "Scheduler hit an exception: Traceback (most recent call last):")
        journal.raw("TP1", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                           "Current value: self.server_args.mem_fraction_static=0.85")
        journal.wait(DEFAULT_CRASH_CAUSE_WAIT)  # past the wait for a specific cause: nothing pending
    else:
        up_to_capture(journal)
        journal.systemd(MID_STOPPING, "Stopping sglang.service - SGLang server...", JOB_TYPE="stop")
    assert journal.next_deadline() == math.inf


# --- outcome -------------------------------------------------------------------------------------


def test_outcome_starting(journal: Journal) -> None:
    up_to_capture(journal)
    assert journal.outcome() == "starting"


def test_outcome_ready(journal: Journal) -> None:
    up_to_ready(journal)
    assert journal.outcome() == "ready"


def test_outcome_serving(journal: Journal) -> None:
    up_to_ready(journal)
    serving(journal)
    assert journal.outcome() == "serving"


def test_outcome_stalled(journal: Journal) -> None:
    up_to_capture(journal)
    assert journal.outcome(at=journal.now + 601) == "stalled"


def test_outcome_crashed(journal: Journal) -> None:
    up_to_capture(journal)
    journal.log("TP1", "Scheduler hit an exception: Traceback (most recent call last):")
    journal.raw("TP1", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                       "Current value: self.server_args.mem_fraction_static=0.85")
    assert kinds(journal.verdicts()) == [("crashed", "TP1", "kv_cache_alloc", "oom")]
    assert journal.outcome() == "crashed"


def test_outcome_stopped(journal: Journal) -> None:
    up_to_capture(journal)
    journal.systemd(MID_STOPPING, "Stopping sglang.service - SGLang server...", JOB_TYPE="stop")
    assert journal.outcome(at=journal.now + 3600) == "stopped"
    journal.wait(5)
    journal.systemd(MID_STOPPED, "Stopped sglang.service - SGLang server.")
    assert journal.invocation().state.value == "stopped"
    assert journal.outcome(at=journal.now + 3600) == "stopped"
    assert journal.verdicts(at=journal.now + 3600) == []


def test_outcomes_are_the_documented_ones() -> None:
    assert policy.OUTCOMES == ("starting", "ready", "serving", "stalled", "crashed", "stopped")


def test_second_node_of_a_multi_node_server_is_ready_when_its_ranks_finished_capture() -> None:
    """node_rank 1 has no HTTP server and no "fired up" line: its ranks' last capture ends it."""
    pipeline = Pipeline(Config(unit=UNIT))
    t = 1_800_000_000.0
    lines = ["[2026-11-29 08:00:00] server_args=ServerArgs(model_path='m', tp_size=16, nnodes=2, node_rank=1, "
             "speculative_algorithm=None)"]
    for message in ("Init torch distributed begin.", "Init torch distributed ends. elapsed=1.00 s, mem usage=1 GB",
                    "Load weight begin. avail mem=137.95 GB", "Load weight end. elapsed=5.00 s, type=X, avail mem=1 GB",
                    "Memory pool end. avail mem=20.00 GB", "Capture cuda graph begin. This can take up to several "
                    "minutes. avail mem=20.40 GB"):
        lines += [f"[2026-11-29 08:00:01 TP{n}] {message}" for n in range(8, 16)]
    lines += [f"[2026-11-29 08:00:09 TP{n}] Capture cuda graph end. Time elapsed: 8.00 s. mem usage=1.17 GB. "
              "avail mem=19.21 GB." for n in range(8, 16)]
    for n, line in enumerate(lines):
        pipeline.feed(JournalRecord(line, t + n * 0.01, pid=100 + n % 9, invocation_id="inv"), None)
    inv = pipeline.snapshot().current
    assert inv is not None
    assert [r.rank for r in inv.scheduler_ranks] == [f"TP{n}" for n in range(8, 16)]
    later = t + 7200
    assert policy.evaluate(inv, later, pipeline.config) == []
    assert policy.outcome(inv, []) == "ready"
    assert next_deadline(inv, t + 10, pipeline.config) == math.inf


def test_a_request_error_after_ready_is_not_a_crash(journal: Journal) -> None:
    """uvicorn logs one request's traceback; the server goes on serving."""
    up_to_ready(journal)
    journal.raw("TP0", "Exception in ASGI application")
    journal.raw("TP0", "Traceback (most recent call last):")
    journal.raw("TP0", '  File "/usr/lib/python3/dist-packages/uvicorn/protocols/http/h11_impl.py", line 1, in run')
    journal.raw("TP0", "ValueError: prompt is too long")
    assert [v.kind for v in journal.verdicts()] == []
    assert journal.outcome() in ("ready", "serving")
    journal.log("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
    assert [(v.kind, v.rank) for v in journal.verdicts(at=journal.now + DEFAULT_CRASH_CAUSE_WAIT)] == [
        ("crashed", "TP0")]


def test_an_asgi_request_error_during_warmup_is_not_a_crash(journal: Journal) -> None:
    """uvicorn's per-request traceback, even before ready, is one request's error."""
    up_to_draft_capture(journal)
    journal.log(MAIN, 'INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK')
    journal.log(MAIN, "ERROR:    Exception in ASGI application")
    for line in ("Traceback (most recent call last):",
                 '  File "/usr/lib/python3/dist-packages/uvicorn/protocols/http/h11_impl.py", line 1, in run',
                 "ValueError: The input (262401 tokens) is longer than the model's context length."):
        journal.raw(MAIN, line)
    assert [v.kind for v in journal.verdicts()] == []
    assert journal.outcome() == "starting"
