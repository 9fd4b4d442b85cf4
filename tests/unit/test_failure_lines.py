"""The failure lines of SGLang and vLLM beyond the corpus, written from the engines' log strings
(and those of uvicorn, huggingface_hub, transformers, torch and Python they run on): each new
line class gives a crash with the specific cause an operator acts on (the culprit, its phase and
the telling line: stages/s4_judge/crash_culprit.py), and a near-miss line (a
warning or a harmless line that mentions the same words) gives no crash and no such cause."""

from __future__ import annotations

import pytest

from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.profile.load import load_builtin_profile
from phasewatch.records import JournalRecord, VerdictKind
from phasewatch.sources.journal.formats import parse_source

VLLM_START = [
    "(Worker_TP0 pid=201) INFO 05-28 20:26:40 [parallel_state.py:1] world_size=2 rank=0 local_rank=0 "
    "distributed_init_method=tcp://127.0.0.1:4321 backend=nccl",
    "(Worker_TP1 pid=202) INFO 05-28 20:26:40 [parallel_state.py:1] world_size=2 rank=1 local_rank=1 "
    "distributed_init_method=tcp://127.0.0.1:4321 backend=nccl",
    "(Worker_TP0 pid=201) INFO 05-28 20:26:41 [gpu_model_runner.py:1] Starting to load model /models/m...",
    "(Worker_TP1 pid=202) INFO 05-28 20:26:41 [gpu_model_runner.py:1] Starting to load model /models/m...",
]
SGLANG_START = [
    "[2026-02-22 23:55:10 TP0] Init torch distributed begin.",
    "[2026-02-22 23:55:10 TP1] Init torch distributed begin.",
    "[2026-02-22 23:55:12 TP0] Load weight begin. avail mem=78.20 GB",
    "[2026-02-22 23:55:12 TP1] Load weight begin. avail mem=78.20 GB",
]
START = {"vllm": VLLM_START, "sglang": SGLANG_START}


def crash(engine: str, lines: list[str]) -> tuple[str | None, str | None] | None:
    """(rank, cause) of the crash a saved log shows, judged at its last line as replay does; None: no crash."""
    log = "\n".join([*START[engine], *lines]) + "\n"
    records = parse_source(log.encode("utf-8"), default_year=2026).records
    pipeline = Pipeline(Config(unit="x.service", engine=engine, crash_cause_wait=0), default_year=2026)
    pipeline.feed_all(records, None)
    [inv] = pipeline.snapshot().invocations
    [judgement] = pipeline.judge(inv.last_ts or 0.0)
    crashes = [v for v in judgement.verdicts if v.kind == VerdictKind.CRASHED]
    return (crashes[0].rank, crashes[0].cause) if crashes else None


def fatal_rules(engine: str, line: str) -> list[str]:
    """The fatal rules a line (after its prefix) fires."""
    pipeline = Pipeline(Config(unit="x.service", engine=engine), default_year=2026)
    pipeline.feed(JournalRecord(message=line), None)
    pipeline.flush(None)
    inv = pipeline.current()
    return [f.rule or "" for f in inv.fatals] if inv is not None else []


# --- vLLM ------------------------------------------------------------------------------------------

V = "(Worker_TP1 pid=202) ERROR 05-28 20:26:45 [multiproc_executor.py:706] "
CORE = "(EngineCore_DP0 pid=200) ERROR 05-28 20:26:45 [core.py:718] "
API = "(APIServer pid=100) ERROR 05-28 20:26:45 [api_server.py:1] "


@pytest.mark.parametrize(("lines", "expected"), [
    # the worker's busy loop died (0.11 on): its own line, then the traceback's last line
    ([V + "WorkerProc failed.", V + "Traceback (most recent call last):",
      V + "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"],
     ("TP1", "nccl_error")),
    # 0.7-0.9: the engine core logged its traceback in the same record
    ([CORE + "EngineCore hit an exception: Traceback (most recent call last):",
      CORE + '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 378, in run_engine_core',
      CORE + "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can "
             "be stored in KV cache (45456). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
             "when initializing the engine."],
     ("main", "oom")),  # the engine core of workers is their coordinator
    ([V + "WorkerProc failed to start.", V + "Traceback (most recent call last):",
      V + "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6650a1b2)",
      V + "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json."],
     ("TP1", "hf_auth")),
    ([V + "WorkerProc failed to start.", V + "Traceback (most recent call last):",
      V + "RuntimeError: Cannot find any model weights with `/models/m`"], ("TP1", "model_not_found")),
    ([API + "Traceback (most recent call last):",
      API + "RuntimeError: Failed to load the tokenizer. If the tokenizer is a custom tokenizer not yet available "
            "in the HuggingFace transformers library, consider setting `trust_remote_code=True`"],
     ("main", "tokenizer_error")),
    (["(APIServer pid=100) ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
      "address already in use"], ("main", "port_in_use")),
    (["(APIServer pid=100) OSError: [Errno 98] Address already in use"], ("main", "port_in_use")),
    ([V + "WorkerProc failed to start.", V + "Traceback (most recent call last):",
      V + "ModuleNotFoundError: No module named 'vllm._C'"], ("TP1", "import_error")),
    (["(Worker_TP1 pid=202) Fatal Python error: Segmentation fault"], ("TP1", "native_crash")),
    (["(RayWorkerWrapper pid=2315, ip=10.0.0.2) ray.exceptions.RayTaskError(ValueError): "
      "ray::RayWorkerWrapper.execute_method() (pid=2315, ip=10.0.0.2, actor_id=ab12)"],
     ("pid2315@10.0.0.2", "python_exception")),
], ids=["worker-failed-after-start", "engine-core-hit-v0-kv-cache", "gated-repo", "no-weights", "tokenizer",
        "uvicorn-bind", "socket-bind", "import", "segfault", "ray-task-error"])
def test_vllm_failure_lines_crash_with_their_cause(lines: list[str], expected: tuple[str, str]) -> None:
    assert crash("vllm", lines) == expected


@pytest.mark.parametrize("line", [
    "(APIServer pid=100) WARNING 05-28 20:26:45 [utils.py:1] Address already in use for port 29500; "
    "trying port 29501",
    "(Worker_TP1 pid=202) INFO 05-28 20:26:45 [multiproc_executor.py:1] WorkerProc shutting down.",
    "(Worker_TP1 pid=202) DEBUG 05-28 20:26:45 [multiproc_executor.py:1] [shutdown] WorkerProc: exiting after "
    "shutdown request",
    "(EngineCore_DP0 pid=200) DEBUG 05-28 20:26:45 [core.py:1] EngineCore interrupted.",
    "(APIServer pid=100) WARNING 05-28 20:26:45 [_custom_ops.py:20] Failed to import from vllm._C with "
    "ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')",
    "(APIServer pid=100) INFO 05-28 20:26:45 [utils.py:1] faulthandler is on: a Fatal Python error: dumps "
    "every thread",
    "(APIServer pid=100) WARNING 05-28 20:26:45 [utils.py:1] RayTaskError(ValueError) retried 1 time",
    "(APIServer pid=100) WARNING 05-28 20:26:45 [config.py:1] HF_TOKEN is not set; gated repos cannot be "
    "downloaded",
])
def test_vllm_near_misses_are_no_crash(line: str) -> None:
    assert crash("vllm", [line]) is None


@pytest.mark.parametrize(("line", "phase"), [
    ("(APIServer pid=1) INFO 06-02 11:03:56 [api_server.py:1336] Starting vLLM API server on http://0.0.0.0:8000",
     "http_server_start"),
    ("(APIServer pid=1) INFO 10-06 15:56:40 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
     "http_server_start"),
    ("(APIServer pid=1) INFO 03-02 09:12:40 [api_server.py:1100] Starting vLLM server on http://0.0.0.0:8000",
     "http_server_start"),
    # a launcher's line before vLLM runs (corpus 053, GPUStack): the API server has not started
    ("2025-08-17 19:54:47.873656+00:00 - gpustack.worker.backends.vllm - INFO - Starting vLLM server: "
     "/opt/torchenv/bin/vllm", "launch"),
    ("Starting vLLM server: /opt/torchenv/bin/vllm serve /models/m --port 8000", "launch"),
])
def test_vllm_api_server_start_across_versions(line: str, phase: str) -> None:
    pipeline = Pipeline(Config(unit="x.service", engine="vllm"), default_year=2026)
    pipeline.feed_all(parse_source((line + "\n").encode("utf-8"), default_year=2026).records, None)
    [inv] = pipeline.snapshot().invocations
    phases = {r.phase.value for r in inv.ranks} or {"launch"}
    assert phases == {phase}


# --- SGLang ----------------------------------------------------------------------------------------

S = "[2026-02-22 23:55:20 TP1] "


@pytest.mark.parametrize(("lines", "expected"), [
    ([S + "Scheduler hit an exception: Traceback (most recent call last):",
      "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
      "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3"],
     ("TP1", "nccl_error")),
    ([S + "Scheduler hit an exception: Traceback (most recent call last):",
      "OSError: You are trying to access a gated repo.",
      "Access to model meta-llama/Llama-3.1-8B is restricted. You must have access to it and be authenticated to "
      "access it. Please log in."], ("TP1", "hf_auth")),
    ([S + "Scheduler hit an exception: Traceback (most recent call last):",
      "OSError: /models/m does not appear to have a file named config.json. Checkout "
      "'https://huggingface.co//models/m/tree/None' for available files."], ("TP1", "model_not_found")),
    (["[2026-02-22 23:55:20] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
      "address already in use"], ("main", "port_in_use")),
    ([S + "Scheduler hit an exception: Traceback (most recent call last):",
      "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: "
      "cuGreenCtxDestroy"], ("TP1", "import_error")),
    ([S + "Scheduler hit an exception: Traceback (most recent call last):",
      "ValueError: Tokenizer class TikTokenTokenizer does not exist or is not currently imported."],
     ("TP1", "tokenizer_error")),
], ids=["nccl-error", "gated-repo", "no-config", "uvicorn-bind", "undefined-symbol", "tokenizer"])
def test_sglang_failure_lines_crash_with_their_cause(lines: list[str], expected: tuple[str, str]) -> None:
    assert crash("sglang", lines) == expected


@pytest.mark.parametrize("line", [
    "[2026-02-22 23:55:20] WARNING: address already in use on port 30000, trying another",
    # SGLang's SIGCHLD handler warns about any child (a JIT compiler too): alone it is no crash
    "[2026-02-22 23:55:20] Child process unexpectedly failed with exitcode=256. pid=32885",
    "[2026-02-22 23:55:20 TP1] NCCL_DEBUG is not set: NCCL errors will be terse",
    "[2026-02-22 23:55:20 TP1] faulthandler is on: a Fatal Python error: dumps every thread",
])
def test_sglang_near_misses_are_no_crash(line: str) -> None:
    assert crash("sglang", [line]) is None


# --- the cause classes on their own ----------------------------------------------------------------

NEAR_MISS_CAUSES = [
    ("hf_auth", "HF_TOKEN is not set; gated repos cannot be downloaded"),
    ("hf_auth", "Using token from HF_TOKEN for meta-llama/Llama-3.1-8B"),
    ("model_not_found", "Found 4 model weights files in /models/m"),
    ("tokenizer_error", "Loaded the tokenizer in 0.4 s"),
    ("port_in_use", "Started server on 0.0.0.0:8000 (port 8000 in use by this server)"),
    ("import_error", "Failed to import from vllm._C with ImportError('libcudart.so.12')"),
    ("native_crash", "faulthandler is on: a Fatal Python error: dumps every thread"),
]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("cause", "line"), NEAR_MISS_CAUSES)
def test_cause_near_misses_are_not_that_cause(engine: str, cause: str, line: str) -> None:
    assert load_builtin_profile(engine).classify_cause([line]) != cause


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_uvicorn_rule_no_longer_fires_on_any_mention_of_a_busy_address(engine: str) -> None:
    assert "uvicorn_failure" not in fatal_rules(engine, "retrying: address already in use")
    bind = "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"
    assert "uvicorn_failure" in fatal_rules(engine, bind)
