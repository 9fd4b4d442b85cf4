"""The vLLM engine: its module (engines/vllm.py: prefixes, process tags, titles, arguments, expected
ranks), its profile (profiles/vllm.yaml) through the whole pipeline, and replay's engine detection."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from phasewatch.cli import main
from phasewatch.config.load import Config
from phasewatch.engines import ServerInfo, detect_engine, engine_module
from phasewatch.engines import vllm as vllm_engine
from phasewatch.pipeline import Pipeline
from phasewatch.records import MAIN, JournalRecord, LineKind, Phase
from phasewatch.sources.host.procs import rank_from_title
from phasewatch.stages.s1_read.lines import LineSplitter
from phasewatch.stages.s3_track.snapshot import InvocationView

VLLM = Config(unit="vllm.service", engine="vllm")
YEAR = 2026
T0 = 1_780_000_000.0  # journal times for the daemon-side tests


def pasted(text: str, year: int | None = YEAR) -> InvocationView:
    """A pasted log (no journal fields) through the vLLM pipeline."""
    pipeline = Pipeline(VLLM, default_year=year)
    pipeline.feed_all([JournalRecord(message=line) for line in text.splitlines()], now=None)
    [inv] = pipeline.snapshot().invocations
    return inv


def phases(inv: InvocationView) -> dict[str, str]:
    return {r.rank: r.phase.value for r in inv.ranks}


@pytest.mark.parametrize(("line", "rank", "message"), [
    ("INFO 06-02 11:03:11 [backends.py:170] Compiling a graph", None, "Compiling a graph"),
    ("INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3 GB", None,
     "Loading model weights took 2.3 GB"),
    ("(Worker_TP3 pid=9) INFO 05-12 09:15:24 [gpu_worker.py:1] x", "TP3", "x"),
    ("(Worker_DP0_TP3_EP3 pid=9) INFO 05-12 09:15:24 [gpu_worker.py:1] x", "DP0 TP3 EP3", "x"),
    ("(Worker_PP1_TP0 pid=9) INFO 05-12 09:15:24 [gpu_worker.py:1] x", "PP1 TP0", "x"),
    ("(VllmWorker rank=5 pid=2573) ERROR 07-01 19:03:19 [multiproc_executor.py:492] x", "TP5", "x"),
    ("(VllmWorkerProcess pid=13105) INFO 08-19 07:51:03 model_runner.py:732] x", "pid13105", "x"),
    ("(RayWorkerWrapper pid=25062, ip=10.0.128.18) INFO 07-28 13:55:32 utils.py:784] x",
     "pid25062@10.0.128.18", "x"),
    ("(ServeReplica:default:LLMServer:q pid=1) (EngineCore pid=2) (RayWorkerProc pid=3) (Worker_TP1 pid=3) "
     "INFO 08-14 11:58:42 [weight_utils.py:803] x", "TP1", "x"),
    ("(EngineCore_DP1 pid=7) INFO 05-12 09:15:24 [core.py:1] x", None, "x"),
    ("vllm-service  | INFO 06-16 09:48:14 [config.py:600] x", None, "x"),
    ("\u2502 INFO 03-21 20:15:44 [monitor.py:33] x", None, "x"),
    ("(Worker_TP0 pid=115) ", "TP0", ""),
])
def test_prefix_grammar_reads_process_tags_as_ranks(line: str, rank: str | None, message: str) -> None:
    [prefix] = vllm_engine.find_prefixes(line)
    assert prefix.rank == rank
    assert line[prefix.end:] == message


def test_engine_core_and_api_server_are_not_ranks_by_their_tag() -> None:
    [core] = vllm_engine.find_prefixes("(EngineCore_DP1 pid=7) INFO 05-12 09:15:24 [core.py:1] x")
    [bare] = vllm_engine.find_prefixes("(EngineCore pid=7) INFO 05-12 09:15:24 [core.py:1] x")
    [api] = vllm_engine.find_prefixes("(APIServer pid=1) INFO 05-12 09:15:24 [api_server.py:1] x")
    assert (core.untagged_rank, bare.untagged_rank, api.untagged_rank) == ("DP1", "TP0", MAIN)


def test_a_tag_inside_a_message_is_not_a_second_record() -> None:
    line = "(EngineCore_DP0 pid=7) ERROR 05-12 09:15:24 [core.py:1] worker (pid=12) exited"
    assert len(vllm_engine.find_prefixes(line)) == 1


def test_year_comes_from_a_dated_wrapper_else_the_default_else_none() -> None:
    line = "INFO 06-02 11:03:11 [backends.py:170] x"
    ci = "[2025-08-12T08:42:32Z] (EngineCore_0 pid=1) INFO 08-12 01:42:32 [x.py:1] y"
    assert LineSplitter(vllm_engine.find_prefixes, 2026).feed(JournalRecord(line))[0].ts == 1780398191.0
    assert LineSplitter(vllm_engine.find_prefixes, 2026).feed(JournalRecord(ci))[0].ts == 1754962952.0
    assert LineSplitter(vllm_engine.find_prefixes, None).feed(JournalRecord(line))[0].ts is None


def test_the_year_turns_between_december_and_january() -> None:
    splitter = LineSplitter(vllm_engine.find_prefixes, 2025)
    late = splitter.feed(JournalRecord("INFO 12-31 23:59:59 [a.py:1] x"))[0].ts
    early = splitter.feed(JournalRecord("INFO 01-01 00:00:01 [a.py:1] y"))[0].ts
    assert late is not None and early is not None and early - late == 2.0


def test_a_logged_traceback_with_the_prefix_on_every_line_is_one_record() -> None:
    head = "(Worker_TP1 pid=9) ERROR 05-12 09:15:24 [multiproc_executor.py:671] "
    splitter = LineSplitter(vllm_engine.find_prefixes, YEAR)
    lines = [line for text in ("Traceback (most recent call last):", '  File "/x/gpu_worker.py", line 3, in f',
                               "torch.OutOfMemoryError: CUDA out of memory.")
             for line in splitter.feed(JournalRecord(head + text))]
    assert [line.kind for line in lines] == [LineKind.RECORD, LineKind.CONTINUATION, LineKind.CONTINUATION]
    assert len({line.record_id for line in lines}) == 1


@pytest.mark.parametrize("first", ["Traceback (most recent call last):", '  File "/v/cli/main.py", line 9, in main'])
def test_pythons_own_traceback_through_the_prefixer_is_one_record(first: str) -> None:
    """The API server's uncaught traceback: vLLM's prefix, no logger header, on every line. Another
    process's line between its lines does not join it, and ends it."""
    splitter = LineSplitter(vllm_engine.find_prefixes, YEAR)
    api, core = "(APIServer pid=1) ", "(EngineCore_DP0 pid=7) "
    texts = [(api, first), (api, '  File "/v/api_server.py", line 3, in run_server'), (api, "    await serve()"),
             (api, "    ^^^^^^^^^^^^^"), (api, "torch._dynamo.exc.Unsupported: call_function"),
             (core, "    self.model_runner.load_model()"), (api, '  File "/v/utils.py", line 5, in wait')]
    lines = [line for who, text in texts for line in splitter.feed(JournalRecord(who + text, pid=1))]
    assert [line.kind for line in lines] == [LineKind.RECORD] + [LineKind.CONTINUATION] * 4 + [LineKind.RECORD] * 2
    assert len({line.record_id for line in lines[:5]}) == 1


V1_TP1 = """\
(APIServer pid=1) INFO 06-19 15:35:00 [api_server.py:1] vLLM API server version 0.11.0
(APIServer pid=1) INFO 06-19 15:35:00 [utils.py:1] non-default args: {'model_tag': 'q', 'port': 8001, 'model': 'q'}
(EngineCore_DP0 pid=7) INFO 06-19 15:35:10 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: \
model='q', tensor_parallel_size=1
(EngineCore_DP0 pid=7) INFO 06-19 15:35:12 [parallel_state.py:1] rank 0 in world size 1 is assigned as DP rank 0
(EngineCore_DP0 pid=7) INFO 06-19 15:35:12 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...
(EngineCore_DP0 pid=7) INFO 06-19 15:35:40 [gpu_model_runner.py:1] Model loading took 15.3 GiB and 27.9 seconds
(EngineCore_DP0 pid=7) INFO 06-19 15:35:45 [backends.py:1] Dynamo bytecode transform time: 5.2 s
(EngineCore_DP0 pid=7) INFO 06-19 15:36:20 [monitor.py:1] torch.compile takes 35.0 s in total
(EngineCore_DP0 pid=7) INFO 06-19 15:36:25 [gpu_worker.py:1] Available KV cache memory: 50.1 GiB
(EngineCore_DP0 pid=7) INFO 06-19 15:36:25 [kv_cache_utils.py:1] GPU KV cache size: 364,000 tokens
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:12<00:00,  5.4it/s]
Capturing CUDA graphs (decode, FULL): 100%|##########| 35/35 [00:05<00:00,  6.2it/s]
(EngineCore_DP0 pid=7) INFO 06-19 15:36:45 [gpu_model_runner.py:1] Graph capturing finished in 18 secs, took 0.5 GiB
(EngineCore_DP0 pid=7) INFO 06-19 15:36:45 [core.py:1] init engine (profile, create kv cache, warmup model) took \
65.0 seconds
(APIServer pid=1) INFO 06-19 15:36:46 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8001
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
"""


def test_a_one_gpu_v1_start_up_goes_through_every_phase_to_ready() -> None:
    inv = pasted(V1_TP1)
    spans = [s.phase for s in inv.rank("DP0").spans]  # type: ignore[union-attr]
    assert spans == [Phase.LAUNCH, Phase.DIST_INIT, Phase.WEIGHT_LOAD, Phase.KV_CACHE_ALLOC,
                     Phase.CUDA_GRAPH_CAPTURE, Phase.HTTP_SERVER_START, Phase.READY]
    # torch.compile is the jit_compile sub-phase inside the profiling run (stages/s3_track/jit.py), not a span:
    # from Dynamo's first line to "torch.compile takes".
    jit = inv.rank("DP0").jit  # type: ignore[union-attr]
    assert jit is not None and jit.parent is Phase.WEIGHT_LOAD and jit.end is not None and jit.first is not None
    assert jit.end - jit.first == 35.0
    assert phases(inv) == {MAIN: "ready", "DP0": "ready"}
    assert inv.server is not None and (inv.server.port, inv.server.version) == (8001, "0.11.0")


V1_TP2 = """\
(EngineCore_DP0 pid=7) INFO 05-12 09:13:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: \
model='m', tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1
(Worker_TP0 pid=8) INFO 05-12 09:13:04 [parallel_state.py:1] rank 0 in world size 2 is assigned as DP rank 0
(Worker_TP1 pid=9) INFO 05-12 09:13:04 [parallel_state.py:1] rank 1 in world size 2 is assigned as DP rank 0
(Worker_TP0 pid=8) INFO 05-12 09:13:05 [gpu_model_runner.py:1] Starting to load model m...
(Worker_TP1 pid=9) INFO 05-12 09:13:05 [gpu_model_runner.py:1] Starting to load model m...
(EngineCore_DP0 pid=7) INFO 05-12 09:13:30 [kv_cache_utils.py:1] GPU KV cache size: 364,000 tokens
"""


def test_with_workers_the_engine_core_is_a_coordinator_not_a_rank() -> None:
    inv = pasted(V1_TP2)
    assert phases(inv) == {MAIN: "launch", "TP0": "weight_load", "TP1": "weight_load"}


def test_version_0_11_arguments_promise_the_worker_ranks_older_ones_none() -> None:
    args = vllm_engine.parse_server_args(V1_TP2.splitlines()[0])
    assert args["tp_size"] == "2" and args["version"] == "0.11.0"
    assert ServerInfo.from_args(args).expected_ranks() == ("TP0", "TP1")
    older = vllm_engine.parse_server_args("Initializing an LLM engine (v0.6.1) with config: tensor_parallel_size=2")
    assert ServerInfo.from_args(older).expected_ranks() == ()  # V0 workers carry no rank
    ep = {**args, "dp_size": "2", "enable_expert_parallel": "True", "ep_size": "4"}
    assert ServerInfo.from_args(ep).expected_ranks() == ("DP0 TP0 EP0", "DP0 TP1 EP1", "DP1 TP0 EP2", "DP1 TP1 EP3")


def test_v0_driver_untagged_is_tp0_beside_its_pid_tagged_workers() -> None:
    inv = pasted("INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3 GB\n"
                 "(VllmWorkerProcess pid=13105) INFO 08-19 07:51:03 model_runner.py:732] "
                 "Loading model weights took 2.3 GB\n"
                 "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: 6241\n")
    # The driver's KV sizing follows every worker's load (lockstep): the worker is past its load too.
    assert phases(inv) == {"TP0": "kv_cache_alloc", "pid13105": "kv_cache_alloc"}


def test_lockstep_moves_the_quiet_ranks_of_the_same_engine_only() -> None:
    """Recent vLLM logs many steps on the first worker only: the others follow it, within its DP group."""
    head = "INFO 05-12 09:13:0{} [x.py:1] "
    inv = pasted("\n".join([
        "(Worker_DP0_TP0 pid=1) " + head.format(1) + "Starting to load model m...",
        "(Worker_DP0_TP1 pid=2) " + head.format(1) + "Starting to load model m...",
        "(Worker_DP1_TP0 pid=3) " + head.format(1) + "Starting to load model m...",
        "(Worker_DP0_TP0 pid=1) " + head.format(5) + "Available KV cache memory: 10.98 GiB"]))
    assert phases(inv) == {"DP0 TP0": "kv_cache_alloc", "DP0 TP1": "kv_cache_alloc", "DP1 TP0": "weight_load"}


def test_a_rank_stuck_in_a_step_still_stalls_its_engine() -> None:
    """Lockstep only moves ranks when one begins a later step, which a stuck rank prevents."""
    pipeline = Pipeline(VLLM)
    pipeline.feed_all(journal("(Worker_TP0 pid=1) INFO 05-12 09:13:01 [x.py:1] Starting to load model m...\n"
                              "(Worker_TP1 pid=2) INFO 05-12 09:13:01 [x.py:1] Starting to load model m...\n"
                              "(Worker_TP0 pid=1) INFO 05-12 09:13:09 [x.py:1] Model loading took 9 GiB and 8 s\n",
                              T0), None)
    deadline = VLLM.limits(Phase.WEIGHT_LOAD).deadline
    assert deadline is not None
    [judgement] = pipeline.judge(T0 + deadline + 60)
    assert [(v.kind, v.rank) for v in judgement.verdicts if v.kind == "stalled"] == [("stalled", "TP1")]


def journal(text: str, start: float, pid: int = 100) -> list[JournalRecord]:
    return [JournalRecord(message=line, realtime=start + i, pid=pid, invocation_id="inv")
            for i, line in enumerate(text.splitlines())]


LOADING = """\
(EngineCore_DP0 pid=7) INFO 07-15 07:11:31 [gpu_model_runner.py:1] Starting to load model m...
"""


@pytest.mark.parametrize(("later", "stalled"), [
    ("(APIServer pid=1) DEBUG 07-15 07:11:34 [utils.py:1] Waiting for 1 local, 0 remote core engine proc(s) to start.",
     True),
    ("(EngineCore_DP0 pid=7) INFO 07-15 07:11:34 [shm_broadcast.py:1] No available shared memory broadcast block "
     "found in 60 seconds.", True),
    ("(EngineCore_DP0 pid=7) INFO 07-15 07:11:34 [weight_utils.py:1] Loaded weight 7 of 9", False),
])
def test_heartbeats_are_no_sign_of_life(later: str, stalled: bool) -> None:
    """The API server's 'Waiting for core engine' poll (and a broadcast wait) every minute for the
    whole stall window keep nothing alive; any other line does."""
    pipeline = Pipeline(VLLM)
    stall = VLLM.limits(Phase.WEIGHT_LOAD).stall
    assert stall is not None
    pipeline.feed_all(journal(LOADING, T0), None)
    for minute in range(1, int(stall // 60) + 2):
        pipeline.feed(JournalRecord(message=later, realtime=T0 + 60 * minute, pid=101, invocation_id="inv"), None)
    now = T0 + stall + 90
    [judgement] = pipeline.judge(now)
    assert (judgement.outcome == "stalled") is stalled
    assert not [v for v in judgement.verdicts if v.kind == "crashed"]


def test_a_worker_oom_traceback_is_the_crash_not_the_parents_echo() -> None:
    head = "(Worker_TP1 pid=9) ERROR 05-12 09:14:00 [multiproc_executor.py:671] "
    text = V1_TP2 + "".join(head + t + "\n" for t in (
        "WorkerProc hit an exception.", "Traceback (most recent call last):",
        '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 3530, in capture_model',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")) + (
        "(EngineCore_DP0 pid=7) ERROR 05-12 09:14:01 [multiproc_executor.py:231] Worker proc VllmWorker-1 died "
        "unexpectedly, shutting down executor.\n"
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}\n")
    pipeline = Pipeline(VLLM, default_year=YEAR)
    pipeline.feed_all([JournalRecord(message=line) for line in text.splitlines()], now=None)
    [judgement] = pipeline.judge(T0 * 2)
    [crash] = [v for v in judgement.verdicts if v.kind == "crashed"]
    assert (crash.rank, crash.cause, crash.phase) == ("TP1", "oom", "cuda_graph_capture")


def test_vllm_titles_name_worker_ranks_only() -> None:
    assert rank_from_title(b"VLLM::Worker_DP0_TP3_EP3\0") == "DP0 TP3 EP3"
    assert rank_from_title(b"VLLM::Worker_TP1") == "TP1"
    assert rank_from_title(b"VLLM::EngineCore_DP0") is None
    assert rank_from_title(b"sglang::scheduler_TP2\0") == "TP2"
    assert engine_module("vllm").rank_from_title("python3") is None


def test_detection_needs_vllm_signs_and_prefers_sglang_when_both_hint() -> None:
    assert detect_engine(V1_TP1.splitlines()) == "vllm"
    assert detect_engine(["INFO 06-02 11:03:11 [backends.py:170] Compiling a graph"]) == "vllm"
    mixed = ["INFO 11-26 14:23:34 weight_utils.py:243] Using model weights format ['*.safetensors']",
             "[2024-11-26 14:25:58] Initialization failed. warmup error: Traceback (most recent call last):"]
    assert detect_engine(mixed) == "sglang"
    assert detect_engine(["hello"]) == "sglang"


def test_replay_detects_vllm_and_an_undated_paste_shows_no_1970(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "bars.log"
    log.write_text("(VllmWorker rank=0 pid=241) \n"
                   "Loading safetensors checkpoint shards:  58% Completed | 95/163 [03:06<02:14,  1.98s/it]\n")
    assert main(["replay", "--json", str(log)]) == 0
    out = capsys.readouterr().out
    assert "1970" not in out
    [inv] = json.loads(out)["invocations"]
    assert inv["started_at"] is None and inv["ranks"]["TP0"]["phase"] == "weight_load"
    assert main(["replay", str(log)]) == 0
    table = capsys.readouterr().out
    assert "1970" not in table and "no time stamps" in table


def test_replay_engine_option_overrides_detection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "v.log"
    log.write_text(V1_TP1)
    assert main(["replay", "--json", "--engine", "sglang", str(log)]) == 0
    sglang_view = json.loads(capsys.readouterr().out)["invocations"][0]
    assert main(["replay", "--json", str(log)]) == 0
    vllm_view = json.loads(capsys.readouterr().out)["invocations"][0]
    assert (sglang_view["outcome"], vllm_view["outcome"]) == ("starting", "ready")


def test_untagged_lines_are_tp0_alone_and_a_coordinator_beside_numbered_workers() -> None:
    """0.8-0.10 tagged only the workers: the untagged engine core then coordinates; alone it is the rank."""
    kv = "INFO 06-02 11:03:18 [kv_cache_utils.py:637] GPU KV cache size: 1,131,008 tokens"
    load = "(VllmWorker rank={0} pid=1{0}) INFO 06-02 11:03:00 [gpu_model_runner.py:1] Starting to load model m..."
    assert phases(pasted(kv)) == {"TP0": "kv_cache_alloc"}
    beside = pasted("\n".join([load.format(0), load.format(1), kv]))
    assert phases(beside) == {MAIN: "launch", "TP0": "weight_load", "TP1": "weight_load"}


VLLM_SHAPES = ["(", "(a pid=", " pid=1", "(Worker_TP0 pid=1) ", "INFO 01-01 00:00:00 [a.py:1] ", "INFO 01-01 ",
               "2025-01-01T00:00:00 ", "(EngineCore_DP0 pid=1) ", "Traceback (most recent call last):", "-", " ",
               ", ip=1.2.3.4)", "\u2502 ", "Free memory on device ", "Waiting for 1 local, "]


@settings(max_examples=15, deadline=None, derandomize=True)
@example(["("], "")
@example(["INFO 01-01 00:00:00 [a.py:1] "], "")
@given(st.lists(st.sampled_from(VLLM_SHAPES), min_size=1, max_size=3), st.sampled_from(["", ")", "\n", "Error:"]))
def test_vllm_grammar_time_per_byte_stays_flat_for_adversarial_lines(units: list[str], tail: str) -> None:
    """As test_bounded_cost's property, through the vLLM prefixes and rules: 8x the bytes, < 24x the time."""
    unit = "".join(units)

    def one_step(size: int) -> float:
        text = unit * (size // len(unit)) + tail
        best = float("inf")
        for _ in range(3):
            pipeline = Pipeline(VLLM)
            start = time.perf_counter()
            pipeline.feed(JournalRecord(text, T0, pid=100, invocation_id="inv"), T0)
            pipeline.judge(T0 + 1)
            best = min(best, time.perf_counter() - start)
        return best

    ratio = one_step(64 * 1024) / max(one_step(8 * 1024), 1e-4)
    assert ratio < 24.0, f"{unit!r} * n + {tail!r}: 8x the bytes cost {ratio:.1f}x"


def test_an_engine_core_beside_ray_workers_is_their_coordinator() -> None:
    """Ray's workers carry a PID only; an engine core tag beside them is still no rank of its own."""
    inv = pasted("(RayWorkerWrapper pid=9) INFO 06-02 11:03:00 [gpu_model_runner.py:1] Starting to load model m...\n"
                 "(EngineCore_DP0 pid=7) INFO 06-02 11:03:18 [kv_cache_utils.py:637] GPU KV cache size: 1,131 tokens\n")
    assert phases(inv) == {MAIN: "launch", "pid9": "weight_load"}


def test_stats_with_running_requests_after_ready_are_serving() -> None:
    stats = ("(APIServer pid=1) INFO 06-19 15:41:02 [loggers.py:123] Engine 000: Avg prompt throughput: 120.5 "
             "tokens/s, Avg generation throughput: 33.1 tokens/s, Running: 2 reqs, Waiting: 0 reqs")
    inv = pasted(V1_TP1 + stats + "\n")
    assert phases(inv) == {MAIN: "serving", "DP0": "serving"}
    assert inv.proof_of_life is not None


def test_a_worker_first_seen_compiling_is_tracked_with_its_jit_sub_phase() -> None:
    # A window that opens in the profiling run: the worker's first line is torch.compile's.
    inv = pasted("""\
(Worker_TP0 pid=8) INFO 05-12 09:13:45 [backends.py:1] Dynamo bytecode transform time: 5.2 s
(Worker_TP0 pid=8) INFO 05-12 09:14:20 [monitor.py:1] torch.compile takes 35.0 s in total
""")
    rank = inv.rank("TP0")
    assert rank is not None and rank.jit is not None and rank.jit.first is not None and rank.jit.end is not None
    assert rank.jit.end - rank.jit.first == 35.0 and inv.cold
