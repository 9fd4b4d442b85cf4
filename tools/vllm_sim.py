#!/usr/bin/env python3
"""A simulated vLLM 0.11 (V1 engine) start-up: Qwen3-32B, TP=4, multiprocess executor.

Three kinds of processes, as vLLM runs them: the API server (this process, the unit's main PID), the
engine core (titled `VLLM::EngineCore_DP0`, lines `(EngineCore_DP0 pid=N)`) and one worker per TP rank
(titled `VLLM::Worker_TPn`, lines `(Worker_TPn pid=N)`). Each writes its own lines to the inherited
stderr at `--scale` speed: distributed init, weight load, torch.compile, KV cache sizing, CUDA graph
capture (PIECEWISE then FULL), then uvicorn and "Application startup complete." and `/health`.

Faults (TPn:PHASE, PHASE one of dist_init, weight_load, jit_compile, kv_cache_alloc, cuda_graph_capture):
    --hang TP2:cuda_graph_capture   every worker enters the phase, TP2 never leaves its first step and the
                                    others wait in the collective; the engine core prints vLLM's
                                    "No available shared memory broadcast block" and the API server its
                                    "Waiting for 1 local, 0 remote core engine proc(s)" on their timers
    --oom TP1:kv_cache_alloc        TP1 raises torch.OutOfMemoryError ("WorkerProc failed to start"), the
                                    engine core logs "EngineCore failed to start.", the API server
                                    "Engine core initialization failed" and everything exits 1

With --json-logs every process logs as vLLM does with a JSON logging config (one object a line:
asctime, levelname, name, message, processName, process, vllm_process_name, vllm_pid; no process
prefix); progress bars and raw tracebacks stay text, as they bypass logging.

    python3 tools/vllm_sim.py run --scale 0.01 --port 8000 --hang TP2:cuda_graph_capture
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

TP = 4
MODEL = "Qwen/Qwen3-32B"
VERSION = "0.11.0"
PHASES = ("dist_init", "weight_load", "jit_compile", "kv_cache_alloc", "cuda_graph_capture")
API, CORE = "api", "core"
Line = tuple[float, str, str]  # (seconds after start at scale 1, phase, text)


def _header(level: str, source: str, t: float, start: float) -> str:
    return f"{level} {time.strftime('%m-%d %H:%M:%S', time.localtime(start + t))} [{source}]"


def worker_lines(rank: int) -> list[Line]:
    """One worker's start-up at scale 1 (seconds). TP0 also draws the progress bars."""
    out: list[Line] = [
        (5.0, "dist_init", f"world_size={TP} rank={rank} local_rank={rank} "
                           "distributed_init_method=tcp://127.0.0.1:41235 backend=nccl"),
        (6.0, "dist_init", "vLLM is using nccl==2.27.3"),
        (8.0, "dist_init", f"rank {rank} in world size {TP} is assigned as DP rank 0, PP rank 0, "
                           f"TP rank {rank}, EP rank {rank}"),
        (9.0, "weight_load", f"Starting to load model {MODEL}..."),
        (10.0, "weight_load", "Using model weights format ['*.safetensors']"),
    ]
    if rank == 0:
        out += [(10.0 + 2 * n, "weight_load", f"\rLoading safetensors checkpoint shards: {n * 100 // 17:3d}% "
                                               f"Completed | {n}/17 [00:{2 * n:02d}<00:00,  2.00s/it]")
                for n in range(1, 18)]
    out += [
        (45.0, "weight_load", "Loading weights took 34.12 seconds"),
        (46.0, "weight_load", "Model loading took 15.27 GiB and 36.40 seconds"),
        (48.0, "jit_compile", "Using cache directory: /root/.cache/vllm/torch_compile_cache/3f1a9c2b/"
                              f"rank_{rank}_0/backbone for vLLM's torch.compile"),
        (49.0, "jit_compile", "Dynamo bytecode transform time: 6.21 s"),
        (60.0, "jit_compile", "Compiling a graph for dynamic shape takes 10.84 s"),
        (68.0, "jit_compile", "torch.compile takes 17.05 s in total"),
        (72.0, "kv_cache_alloc", "Available KV cache memory: 40.12 GiB"),
    ]
    if rank == 0:
        out += [(75.0 + n * 0.015, "cuda_graph_capture", f"\rCapturing CUDA graphs (mixed prefill-decode, "
                                                         f"PIECEWISE): {n * 100 // 67:3d}%| | {n}/67 [00:00<00:00]")
                for n in range(0, 68)]
        out += [(76.0 + n * 0.2, "cuda_graph_capture", f"\rCapturing CUDA graphs (decode, FULL): "
                                                       f"{n * 100 // 35:3d}%| | {n}/35 [00:0{n // 10}<00:00]")
                for n in range(1, 36)]
    out += [(88.0, "cuda_graph_capture", "Graph capturing finished in 12 secs, took 0.52 GiB"),
            (88.5, "cuda_graph_capture", "CUDA graph pool memory: 0.52 GiB (actual), 0.61 GiB (estimated)")]
    return out


CORE_LINES: list[Line] = [
    (2.0, "", f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{MODEL}', "
              f"tokenizer='{MODEL}', dtype=torch.bfloat16, max_seq_len=40960, tensor_parallel_size={TP}, "
              "pipeline_parallel_size=1, data_parallel_size=1, quantization=None, seed=0"),
    (74.0, "kv_cache_alloc", "GPU KV cache size: 657,344 tokens"),
    (74.1, "kv_cache_alloc", "Maximum concurrency for 40,960 tokens per request: 16.05x"),
    (90.0, "", "init engine (profile, create kv cache, warmup model) took 44.21 seconds"),
]

API_LINES: list[Line] = [
    (0.0, "", f"vLLM API server version {VERSION}"),
    (0.1, "", f"non-default args: {{'model': '{MODEL}', 'tensor_parallel_size': {TP}, 'port': PORT, "
              "'gpu_memory_utilization': 0.92, 'max_num_seqs': 256}}"),
    (92.0, "", "Starting vLLM API server 0 on http://0.0.0.0:PORT"),
    (92.1, "", "UVICORN Started server process [PID]"),
    (92.2, "", "UVICORN Waiting for application startup."),
    (92.3, "", "UVICORN Application startup complete."),
]
READY_AT = 92.3


def _phase_begin(phase: str) -> float:
    return min(t for t, p, _ in worker_lines(0) if p == phase)


ENDS = ("rank 0 in world size", "Loading weights took", "torch.compile takes", "Available KV cache memory",
        "Graph capturing finished")


def _phase_end(phase: str) -> float:
    """When the phase's closing line comes (the one a hung collective keeps every worker from)."""
    return min(t for t, p, text in worker_lines(0) if p == phase and text.startswith(ENDS))


def _parse_fault(value: str | None) -> tuple[int, str] | None:
    if value is None:
        return None
    rank, _, phase = value.partition(":")
    if not rank.startswith("TP") or not rank[2:].isdigit() or int(rank[2:]) >= TP or phase not in PHASES:
        raise SystemExit(f"vllm_sim: bad fault {value!r}: want TPn:PHASE, n < {TP}, PHASE in {', '.join(PHASES)}")
    return int(rank[2:]), phase


class Writer:
    def __init__(self, tag: str | None, start: float, scale: float) -> None:
        self.tag, self.start, self.scale = tag, start, scale

    def at(self, t: float) -> None:
        delay = self.start + t * self.scale - time.time()
        if delay > 0:
            time.sleep(delay)

    def line(self, t: float, text: str, level: str = "INFO", source: str = "gpu_worker.py:298") -> None:
        self.at(t)
        prefix = f"({self.tag} pid={os.getpid()}) " if self.tag else ""
        if text.startswith("UVICORN "):  # uvicorn's own logger: `INFO:     Application startup complete.`
            sys.stderr.write(f"{prefix}INFO:     {text[len('UVICORN '):]}\n")
        elif text.startswith("\r"):  # a tqdm frame: no logging header, no newline until the last
            sys.stderr.write(text + ("\n" if "100%" in text else ""))
        elif os.environ.get("VLLM_SIM_JSON") == "1":  # vLLM's JSON formatter: no prefix, no header
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.start + t * self.scale)) + ",000"
            record = {"asctime": when, "levelname": level, "name": f"vllm.{source.split('.')[0]}", "message": text,
                      "processName": self.tag or "MainProcess", "process": os.getpid(),
                      "vllm_process_name": self.tag or "APIServer", "vllm_pid": os.getpid()}
            sys.stderr.write(json.dumps(record) + "\n")
        else:
            sys.stderr.write(f"{prefix}{_header(level, source, t * self.scale, self.start)} {text}\n")
        sys.stderr.flush()

    def raw(self, t: float, lines: list[str]) -> None:
        self.at(t)
        prefix = f"({self.tag} pid={os.getpid()}) " if self.tag else ""
        sys.stderr.write("".join(f"{prefix}{line}\n" for line in lines))
        sys.stderr.flush()


def _wait_forever() -> None:
    while True:
        time.sleep(3600)


def run_worker(rank: int, start: float, scale: float, hang: tuple[int, str] | None,
               oom: tuple[int, str] | None) -> int:
    out = Writer(f"Worker_TP{rank}", start, scale)
    lines = worker_lines(rank)
    if hang is not None:
        first = _phase_begin(hang[1])
        # The others go on a little, then wait in the next collective (a bar freezes part way).
        stop = first if rank == hang[0] else first + 0.3 * (_phase_end(hang[1]) - first)
        lines = [line for line in lines if line[0] <= stop]
    if oom is not None:
        lines = [line for line in lines if line[0] <= _phase_begin(oom[1])]
    for t, _, text in lines:
        out.line(t, text)
    if oom is not None and rank == oom[0]:
        t = _phase_begin(oom[1]) + 1.0
        out.line(t, "WorkerProc failed to start.", "ERROR", "multiproc_executor.py:597")
        out.raw(t, ["Traceback (most recent call last):",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 263,'
                    " in determine_available_memory",
                    "    self.model_runner.profile_run()",
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a "
                    "total capacity of 79.19 GiB of which 1.21 GiB is free."])
        return 1
    _wait_forever()
    return 0


def run_core(start: float, scale: float, hang: tuple[int, str] | None, oom: tuple[int, str] | None) -> int:
    out = Writer("EngineCore_DP0", start, scale)
    fault = hang or oom
    cut = _phase_begin(fault[1]) if fault else float("inf")
    for t, _, text in CORE_LINES:
        if t < cut:
            out.line(t, text, source="core.py:77")
    if oom is not None:
        t = cut + 1.5
        out.line(t, "EngineCore failed to start.", "ERROR", "core.py:708")
        out.raw(t, ["Traceback (most recent call last):",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in '
                    "run_engine_core",
                    "Exception: WorkerProc initialization failed due to an exception in a background process. "
                    "See stack trace for root cause."])
        return 1
    if hang is not None:
        t = cut
        while True:
            t += 60.0
            out.line(t, "No available shared memory broadcast block found in 60 seconds. This typically "
                        "happens when some processes are hanging or doing some time-consuming work (e.g. "
                        "compilation, weight/kv cache loading).", "INFO", "shm_broadcast.py:466")
    _wait_forever()
    return 0


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"" if self.path == "/health" else b'{"object":"list","data":[]}'
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def run_api(args: argparse.Namespace) -> int:
    start = time.time()
    scale = args.scale
    script = os.path.abspath(__file__)
    common = [str(start), str(scale), args.hang or "-", args.oom or "-"]
    children = [subprocess.Popen(["VLLM::EngineCore_DP0", script, "_core", *common], executable=sys.executable)]
    children += [subprocess.Popen([f"VLLM::Worker_TP{rank}", script, "_worker", str(rank), *common],
                                  executable=sys.executable) for rank in range(TP)]

    def stop(signum: int, frame: object) -> None:
        for child in children:
            child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    out = Writer("APIServer", start, scale)
    hang, oom = _parse_fault(args.hang), _parse_fault(args.oom)
    for t, _, text in API_LINES[:2]:
        out.line(t, text.replace("PORT", str(args.port)), source="api_server.py:1839")
    if oom is not None:
        t = _phase_begin(oom[1]) + 2.0
        poll = 10.0
        while poll < t:
            out.line(poll, "Waiting for 1 local, 0 remote core engine proc(s) to start.", source="utils.py:799")
            poll += 10.0
        out.line(t, "Engine core initialization failed. See root cause above.", "ERROR", "api_server.py:1850")
        out.raw(t, ["Traceback (most recent call last):",
                    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
        out.at(t + 0.3)
        for child in children:
            child.kill()
        return 1
    if hang is not None:
        poll = 10.0
        while True:
            out.line(poll, "Waiting for 1 local, 0 remote core engine proc(s) to start.", source="utils.py:799")
            poll += 10.0
    out.at(API_LINES[2][0])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for t, _, text in API_LINES[2:]:
        text = text.replace("PORT", str(args.port)).replace("PID", str(os.getpid()))
        out.line(t, text, source="launcher.py:44" if "API server 0" in text else "server.py:84")
    _wait_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_core", "_worker"):
        rank = int(argv[1]) if argv[0] == "_worker" else -1
        start, scale, hang, oom = argv[-4:]
        faults = (_parse_fault(None if hang == "-" else hang), _parse_fault(None if oom == "-" else oom))
        if argv[0] == "_core":
            return run_core(float(start), float(scale), *faults)
        return run_worker(rank, float(start), float(scale), *faults)
    parser = argparse.ArgumentParser(prog="vllm_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("run",))
    parser.add_argument("--scale", type=float, default=1.0, help="duration factor (1.0 = real seconds)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--hang", metavar="TPn:PHASE")
    parser.add_argument("--oom", metavar="TPn:PHASE")
    parser.add_argument("--json-logs", action="store_true", help="log NDJSON, as vLLM's JSON logging config does")
    args = parser.parse_args(argv)
    if args.json_logs:
        os.environ["VLLM_SIM_JSON"] = "1"  # the engine core and workers inherit it
    _parse_fault(args.hang)
    _parse_fault(args.oom)
    return run_api(args)


if __name__ == "__main__":
    sys.exit(main())
