#!/usr/bin/env python3
"""A faithful simulated SGLang v0.5.9 start-up: Kimi-K2.5 INT4 (547 GB), TP=8, EAGLE-3 draft model.

Lines follow the v0.5.9 strings of the SGLang log catalog (SGLANG-LOGS.md §2, §9), tqdm bars with
their `\\r` frames. A start-up is a schedule of `Emit`s (time, writer, text), built with faults:

    --hang TP3:draft_cuda_graph_capture   the rank stops once it entered the phase
    --kill TP5:weight_load                the rank's process is SIGKILLed in the phase
    --exception TP4:cuda_graph_capture    a Python exception with traceback on that rank; the
                                          parent's SIGQUIT line comes first, then it kills all
    --oom TP5:cuda_graph_capture          the same, with CUDA out of memory during capture
    --slow-load 3                         weight loading 3 times slower, still progressing
    --health-fail-after 2                 after ready, /health stops answering 2 s later (it hangs)
    --decode-every 0.5                    after ready, TP0 logs a Decode batch line every 0.5 s
    --silent-load 30:stream               early in weight loading every rank prints nothing for 30 real
                                          seconds while streaming a page-cached file (read() and mmap
                                          page touches), then goes on: silent but healthy
    --silent-load 30:spin                 the same silence, but the ranks only spin the CPU (the classic
                                          hang in a collective), then go on
    --silent-capture 30                   early in CUDA graph capture every rank prints nothing for 30
                                          real seconds and only sleeps (what their GPUs do is for a
                                          fake NVML to say: tests/e2e/fake_nvml), then goes on

Two ways to play it:
    json   print it as `journalctl -o json --all` would (with PID 1's entries), for replay tests;
    run    really run it: one process per rank titled `sglang::scheduler_TPn` writing to the
           inherited stderr at `--scale` speed, and the HTTP server (`/health`, `/model_info`,
           `/generate`) on `--port` once the ranks are ready.

    python3 tools/sglang_sim.py json --hang TP3:draft_cuda_graph_capture > startup.json
    python3 tools/sglang_sim.py --scenario healthy > examples/sglang-kimi-healthy.json   (SCENARIOS)
    python3 tools/sglang_sim.py run --scale 0.02 --port 30000
"""

from __future__ import annotations

import argparse
import http.server
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Iterator

RANKS = 8
MAIN = -1
CAPTURE_BS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48]
SHARDS = 64
MODEL = "moonshotai/Kimi-K2.5"
DRAFT = "lightseekorg/kimi-k2.5-eagle3"
MID_STARTED = "39f53479d3a045ac8e11786248231fbf"
MID_MAIN_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
MID_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"


@dataclass(frozen=True)
class Emit:
    t: float  # seconds after the unit started
    writer: int  # MAIN or the TP rank
    text: str
    logged: bool = True  # False: written raw (tracebacks, tqdm), without the logging prefix
    newline: bool = True  # False: a tqdm frame, followed by more frames and a final "\n"
    phase: str = ""  # the phase this line belongs to (for faults)


@dataclass(frozen=True)
class Faults:
    hang: dict[int, str] = field(default_factory=dict)
    kill: dict[int, str] = field(default_factory=dict)
    exception: dict[int, str] = field(default_factory=dict)
    oom: dict[int, str] = field(default_factory=dict)
    slow_load: float = 1.0
    health_fail_after: float | None = None  # seconds after ready (real seconds, not scaled)
    decode_every: float | None = None
    silent_load: str | None = None  # "SECONDS:stream" or "SECONDS:spin"
    silent_capture: float | None = None  # real seconds of silence early in CUDA graph capture


@dataclass(frozen=True)
class Silence:
    at: float  # seconds after the unit started
    seconds: float  # real seconds, whatever the scale
    mode: str  # stream | spin | idle (the GPU works: nothing to see from /proc)


@dataclass(frozen=True)
class Plan:
    emits: tuple[Emit, ...]
    kill_at: dict[int, float]  # rank -> time its process dies (SIGKILL)
    crash_at: float | None  # the parent kills the whole tree at this time
    hung: dict[int, float]  # rank -> time it stops writing
    ready_at: float | None  # "fired up" time; the HTTP server runs from uvicorn_at
    uvicorn_at: float | None
    silence: Silence | None = None


def _all_ranks(t: float, text: str, phase: str, spread: float) -> list[Emit]:
    order = [0, 3, 6, 1, 7, 5, 2, 4]
    return [Emit(t + spread * i / RANKS, rank, text, phase=phase) for i, rank in enumerate(order)]


def _bar(t0: float, seconds: float, avail: float, phase: str) -> list[Emit]:
    """TP0's capture bar: one frame per batch size over `seconds`, then the closing newline."""
    total = len(CAPTURE_BS)
    out = [Emit(t0, 0, f"\r  0%|          | 0/{total} [00:00<?, ?it/s]", logged=False, newline=False, phase=phase)]
    for done, bs in enumerate(reversed(CAPTURE_BS)):
        t = t0 + seconds * done / total
        desc = f"Capturing batches (bs={bs} avail_mem={avail - 0.04 * done:.2f} GB)"
        filled = "#" * (10 * done // total)
        out.append(Emit(t, 0, f"\r{desc}: {100 * done // total:3d}%|{filled:<10}| {done}/{total} "
                        f"[00:{int(t - t0) % 60:02d}<00:00, {total / max(seconds, 0.01):.2f}it/s]",
                        logged=False, newline=False, phase=phase))
    out.append(Emit(t0 + seconds, 0, f"\rCapturing batches (bs=1 avail_mem={avail - 0.9:.2f} GB): 100%|##########| "
                    f"{total}/{total} [00:{int(seconds) % 60:02d}<00:00, 2.44it/s]", logged=False, newline=False,
                    phase=phase))
    out.append(Emit(t0 + seconds, 0, "", logged=False, phase=phase))
    return out


def build(scale: float = 1.0, faults: Faults | None = None) -> Plan:
    """The whole start-up, phase by phase, with `scale` shrinking every duration (1.0 = real time)."""
    faults = faults or Faults()
    s = scale

    def _ranks(t: float, text: str, phase: str, spread: float = 0.4) -> list[Emit]:
        return _all_ranks(t, text, phase, spread * s)
    emits: list[Emit] = [
        Emit(0.2 * s, MAIN, "Max running requests is reset to 48 for speculative decoding. You can override this "
             "by explicitly setting --max-running-requests.", logged=False, phase="launch"),
        Emit(0.5 * s, MAIN, f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', "
             "tokenizer_mode='auto', load_format='auto', trust_remote_code=True, host='0.0.0.0', port=30000, "
             "mem_fraction_static=0.85, tp_size=8, dp_size=1, pp_size=1, ep_size=1, nnodes=1, node_rank=0, "
             "enable_dp_attention=False, speculative_algorithm='EAGLE3', "
             f"speculative_draft_model_path='{DRAFT}', speculative_num_steps=3, speculative_eagle_topk=1, "
             "speculative_num_draft_tokens=4, cuda_graph_max_bs=512, watchdog_timeout=300, enable_metrics=True)",
             phase="launch"),
    ]
    t = 6 * s
    emits += _ranks(t, "Init torch distributed begin.", "dist_init")
    emits.append(Emit(t + 1 * s, 0, "sglang is using nccl==2.27.5", phase="dist_init"))
    emits += _ranks(t + 2 * s, "Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB", "dist_init")
    t += 3 * s
    emits += _ranks(t, "Load weight begin. avail mem=137.95 GB", "weight_load")
    emits.append(Emit(t + 0.2 * s, 0, "Using model weights format ['*.safetensors']", phase="weight_load"))
    emits.append(Emit(t + 30 * s, MAIN, "Using default HuggingFace chat template with detected content format: "
                      "string", phase="weight_load"))
    per_shard = 8.4 * s * faults.slow_load
    for n in range(SHARDS + 1):
        elapsed = n * 8.4 * faults.slow_load
        emits.append(Emit(t + 0.5 * s + n * per_shard, 0, f"\rLoading safetensors checkpoint shards: "
                          f"{100 * n // SHARDS:3d}% Completed | {n}/{SHARDS} [{int(elapsed) // 60:02d}:"
                          f"{int(elapsed) % 60:02d}<00:00,  {8.4 * faults.slow_load:.2f}s/it]",
                          logged=False, phase="weight_load"))
    t += 1 * s + SHARDS * per_shard
    emits.append(Emit(t, 0, "", logged=False, phase="weight_load"))
    emits += _ranks(t + 1 * s, f"Load weight end. elapsed={SHARDS * 8.4 * faults.slow_load:.2f} s, "
                    "type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=69.61 GB, "
                    "mem usage=68.34 GB.", "weight_load", spread=2)
    t += 4 * s
    emits.append(Emit(t, 0, "Using KV cache dtype: torch.bfloat16", phase="kv_cache_alloc"))
    emits += _ranks(t + 1 * s, "KV Cache is allocated. #tokens: 1200000, KV size: 41.49 GB", "kv_cache_alloc")
    emits += _ranks(t + 2 * s, "Memory pool end. avail mem=24.80 GB", "kv_cache_alloc")
    t += 3 * s
    emits += _ranks(t, "Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB",
                    "cuda_graph_capture")
    emits.append(Emit(t + 0.5 * s, 0, f"Capture cuda graph bs {CAPTURE_BS}", phase="cuda_graph_capture"))
    capture = 290 * s
    emits += _bar(t + 1 * s, capture, 24.3, "cuda_graph_capture")
    emits += _ranks(t + 1.5 * s + capture, "Capture cuda graph end. Time elapsed: 290.12 s. mem usage=1.17 GB. "
                    "avail mem=23.43 GB.", "cuda_graph_capture")
    t += capture + 3 * s
    emits += _ranks(t, "Init torch distributed begin.", "draft_weight_load")
    emits += _ranks(t + 0.2 * s, "Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB",
                    "draft_weight_load")
    emits += _ranks(t + 0.5 * s, "Load weight begin. avail mem=23.40 GB", "draft_weight_load")
    emits.append(Emit(t + 1 * s, 0, "\rLoading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
                      logged=False, phase="draft_weight_load"))
    emits.append(Emit(t + 9 * s, 0, "\rLoading safetensors checkpoint shards: 100% Completed | 1/1 "
                      "[00:08<00:00,  8.11s/it]", logged=False, phase="draft_weight_load"))
    emits += _ranks(t + 10 * s, "Load weight end. elapsed=9.42 s, type=LlamaForCausalLMEagle3, "
                    "dtype=torch.bfloat16, avail mem=22.20 GB, mem usage=1.20 GB.", "draft_weight_load")
    emits += _ranks(t + 11 * s, "KV Cache is allocated. #tokens: 1200000, K size: 0.62 GB, V size: 0.62 GB",
                    "draft_weight_load")
    emits += _ranks(t + 11.5 * s, "Memory pool end. avail mem=20.90 GB", "draft_weight_load")
    t += 13 * s
    emits += _ranks(t, "Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.80 GB",
                    "draft_cuda_graph_capture")
    draft = 160 * s
    emits += _bar(t + 0.5 * s, draft, 20.6, "draft_cuda_graph_capture")
    emits += _ranks(t + 1 * s + draft, "Capture draft cuda graph end. Time elapsed: 160.40 s. mem usage=0.38 GB. "
                    "avail mem=20.42 GB.", "draft_cuda_graph_capture")
    t += draft + 2 * s
    emits += _ranks(t, "Capture draft extend cuda graph begin. This can take up to several minutes. "
                    "avail mem=20.40 GB", "draft_cuda_graph_capture")
    extend = 95 * s
    emits += _bar(t + 0.5 * s, extend, 20.3, "draft_cuda_graph_capture")
    emits += _ranks(t + 1 * s + extend, "Capture draft extend cuda graph end. Time elapsed: 95.10 s. "
                    "mem usage=0.21 GB. avail mem=20.19 GB.", "draft_cuda_graph_capture")
    t += extend + 2 * s
    emits.append(Emit(t, 0, "max_total_num_tokens=1200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                      "max_running_requests=48, context_len=262144, available_gpu_mem=20.19 GB", phase="ready"))
    uvicorn_at = t + 1 * s
    lines = ["INFO:     Started server process [{pid}]", "INFO:     Waiting for application startup.",
             "INFO:     Application startup complete.",
             "INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)",
             'INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK']
    emits += [Emit(uvicorn_at + 0.05 * i * s, MAIN, line, phase="http_server_start") for i, line in enumerate(lines)]
    emits.append(Emit(t + 2 * s, 0, "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                      "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False",
                      phase="warmup"))
    emits.append(Emit(t + 3 * s, MAIN, 'INFO:     127.0.0.1:51544 - "POST /generate HTTP/1.1" 200 OK', phase="warmup"))
    ready_at = t + 3.5 * s
    emits.append(Emit(ready_at, MAIN, "The server is fired up and ready to roll!", phase="ready"))
    emits.sort(key=lambda e: e.t)
    silence = _silence(emits, faults, s)
    if silence is not None:
        emits = [replace(e, t=e.t + silence.seconds) if e.t > silence.at else e for e in emits]
        uvicorn_at, ready_at = uvicorn_at + silence.seconds, ready_at + silence.seconds
    return replace(_apply_faults(emits, faults, s, uvicorn_at, ready_at), silence=silence)


def _silence(emits: list[Emit], faults: Faults, s: float) -> Silence | None:
    """--silent-load: a gap in every writer's lines right after TP0's first loading bar frame."""
    if faults.silent_capture is not None:
        return Silence(_phase_start(emits, 0, "cuda_graph_capture") + 0.6 * s, faults.silent_capture, "idle")
    if faults.silent_load is None:
        return None
    seconds, _, mode = faults.silent_load.partition(":")
    return Silence(_phase_start(emits, 0, "weight_load") + 0.6 * s, float(seconds), mode)


SILENT_FILE = "/tmp/sglang-sim-weights.bin"
SILENT_FILE_SIZE = 256 << 20


def _make_weights_file() -> None:
    """A 256 MiB file for --silent-load ...:stream, written once (then it is in the page cache)."""
    try:
        if os.path.getsize(SILENT_FILE) == SILENT_FILE_SIZE:
            return
    except OSError:
        pass
    block = bytes(range(256)) * 4096
    with open(SILENT_FILE + ".part", "wb") as handle:
        for _ in range(SILENT_FILE_SIZE // len(block)):
            handle.write(block)
    os.replace(SILENT_FILE + ".part", SILENT_FILE)


def _silent_work(silence: Silence, start: float) -> None:
    """Print nothing from `silence.at` for `silence.seconds`: stream the file, or only spin."""
    delay = start + silence.at - time.time()
    if delay > 0:
        time.sleep(delay)
    end = time.time() + silence.seconds
    if silence.mode == "idle":
        time.sleep(silence.seconds)
        return
    if silence.mode == "spin":
        # A collective's busy-wait; at a 20 % duty cycle per rank, to spare a shared CI runner's cores.
        while time.time() < end:
            busy = time.time() + 0.02
            while time.time() < busy:
                pass
            time.sleep(0.08)
        return
    chunk = 8 << 20
    window = 32 << 20  # the kernel may map a whole large folio (up to MBs) per fault: touch many pages
    buffer = bytearray(1 << 20)
    offset = 0
    with open(SILENT_FILE, "rb", buffering=0) as handle:
        while time.time() < end:
            handle.seek(offset % (SILENT_FILE_SIZE - chunk))
            for _ in range(chunk // len(buffer)):
                handle.readinto(buffer)  # read(): page cache -> our buffer, no page fault
            touched = 0
            with mmap.mmap(handle.fileno(), window, offset=offset, access=mmap.ACCESS_READ) as mapped:
                for page in range(0, window, mmap.PAGESIZE):
                    touched += mapped[page]  # a fresh mapping: each first touch is a (minor) page fault
            offset = (offset + window) % SILENT_FILE_SIZE
            time.sleep(0.1)


def _phase_start(emits: list[Emit], rank: int, phase: str) -> float:
    times = [e.t for e in emits if e.writer == rank and e.phase == phase]
    if not times:
        raise ValueError(f"TP{rank} prints nothing in phase {phase!r}")
    return min(times)


def _apply_faults(emits: list[Emit], faults: Faults, s: float, uvicorn_at: float, ready_at: float) -> Plan:
    hung: dict[int, float] = {}
    kill_at: dict[int, float] = {}
    crash_at: float | None = None
    for rank, phase in faults.hang.items():
        hung[rank] = _phase_start(emits, rank, phase) + 0.01
    for rank, phase in faults.kill.items():
        kill_at[rank] = _phase_start(emits, rank, phase) + 2 * s
    crashes = {**{r: ("exception", p) for r, p in faults.exception.items()},
               **{r: ("oom", p) for r, p in faults.oom.items()}}
    for rank, (kind, phase) in crashes.items():
        at = _phase_start(emits, rank, phase) + 2 * s
        emits = [e for e in emits if e.t < at]
        emits.append(Emit(at, MAIN, "Received sigquit from a child process. It usually means the child failed."))
        emits.append(Emit(at + 0.05, rank, "Scheduler hit an exception: Traceback (most recent call last):"))
        error = ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
                 f"{rank} has a total capacity of 139.81 GiB of which 1.12 GiB is free." if kind == "oom" else
                 "RuntimeError: CUDA error: an illegal memory access was encountered")
        frames = ['  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3079, in '
                  "run_scheduler_process",
                  "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
                  '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2147, in '
                  "init_device_graphs", "    self.graph_runner = graph_runners[self.device](self)", error]
        if kind == "oom":
            frames += ["Possible solutions:", "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)"]
        emits += [Emit(at + 0.05, rank, line, logged=False) for line in frames]
        crash_at = at + 0.3  # kill_process_tree, once the child's traceback is out
    # Ranks that hang or die write nothing afterwards; everything after a crash is gone.
    kept = [e for e in emits
            if not (e.writer in hung and e.t > hung[e.writer])
            and not (e.writer in kill_at and e.t >= kill_at[e.writer])
            and not (crash_at is not None and e.t > crash_at)]
    stops = [*hung.values(), *kill_at.values()]
    if stops:
        # The other ranks block in the next collective: nothing reaches the HTTP server.
        blocked_after = min(stops)
        phase_end = min((e.t for e in emits if e.t > blocked_after and e.writer == 0
                         and e.phase not in ("", _phase_of(emits, blocked_after))), default=None)
        kept = [e for e in kept if phase_end is None or e.t < phase_end]
        uvicorn_at = ready_at = float("inf")
    if crash_at is not None:
        uvicorn_at = ready_at = float("inf")
    return Plan(tuple(sorted(kept, key=lambda e: e.t)), kill_at, crash_at, hung,
                None if ready_at == float("inf") else ready_at, None if uvicorn_at == float("inf") else uvicorn_at)


def _phase_of(emits: list[Emit], t: float) -> str:
    return next((e.phase for e in reversed(emits) if e.t <= t and e.writer == 0), "")


def stamp(base: float, t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(base + t))


def rendered(emit: Emit, base: float, pid: int = 0, port: int = 30000) -> str:
    """What the process writes: logging records get SGLang's `[date time TPn] ` prefix."""
    text = emit.text.format(pid=pid, port=port) if "{" in emit.text and emit.writer == MAIN else emit.text
    if not emit.logged or not text:
        return text
    tag = "" if emit.writer == MAIN else f" TP{emit.writer}"
    return f"[{stamp(base, emit.t)}{tag}] {text}"


# --- json: as journalctl -o json --all shows it --------------------------------------------------

def journal_json(plan: Plan, base: float = 1796025600.0, unit: str = "sglang-kimi.service",
                 invocation: str = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d", main_pid: int = 4711
                 ) -> Iterator[dict[str, object]]:
    """journald's view: a line is one entry, an unfinished line is flushed when another PID writes."""
    def entry(t: float, fields: dict[str, object]) -> dict[str, object]:
        return {"__REALTIME_TIMESTAMP": str(int((base + t) * 1e6)), **fields}

    def message(text: str) -> object:
        raw = text.encode()
        return list(raw) if any(b < 32 and b != 9 for b in raw) else text

    def stream(t: float, writer: int, text: str, line_break: str | None) -> dict[str, object]:
        fields: dict[str, object] = {"_PID": str(main_pid if writer == MAIN else main_pid + 10 + writer),
                                     "_SYSTEMD_UNIT": unit, "_SYSTEMD_INVOCATION_ID": invocation,
                                     "SYSLOG_IDENTIFIER": "python3", "PRIORITY": "6", "MESSAGE": message(text)}
        if line_break:
            fields["_LINE_BREAK"] = line_break
        return entry(t, fields)

    yield entry(0.0, {"_PID": "1", "_UID": "0", "UNIT": unit, "MESSAGE_ID": MID_STARTED, "INVOCATION_ID": invocation,
                      "JOB_TYPE": "start", "JOB_RESULT": "done", "MESSAGE": f"Started {unit} - SGLang Kimi-K2.5."})
    partial: dict[int, tuple[float, str]] = {}
    for emit in plan.emits:
        for writer, (_, held) in list(partial.items()):
            if writer != emit.writer:
                yield stream(emit.t, writer, held, "pid-change")
                del partial[writer]
        text = rendered(emit, base, main_pid)
        if not emit.newline:
            since, held = partial.get(emit.writer, (emit.t, ""))
            partial[emit.writer] = (since, held + text)
            continue
        since, held = partial.pop(emit.writer, (emit.t, ""))
        yield stream(emit.t, emit.writer, held + text, None)
    if plan.crash_at is not None:
        yield entry(plan.crash_at + 0.1, {"_PID": "1", "_UID": "0", "UNIT": unit, "MESSAGE_ID": MID_MAIN_EXITED,
                                          "INVOCATION_ID": invocation, "EXIT_CODE": "killed", "EXIT_STATUS": "9",
                                          "MESSAGE": f"{unit}: Main process exited, code=killed, status=9/KILL"})
        yield entry(plan.crash_at + 0.2, {"_PID": "1", "_UID": "0", "UNIT": unit, "MESSAGE_ID": MID_FAILED,
                                          "INVOCATION_ID": invocation, "UNIT_RESULT": "signal",
                                          "MESSAGE": f"{unit}: Failed with result 'signal'."})


# --- run: really run it -------------------------------------------------------------------------

def _play(plan: Plan, writer: int, start: float, base: float, port: int, decode_every: float | None = None) -> None:
    """Write this process's lines at their times; die or hang where the plan says."""
    out = sys.stderr
    pid = os.getpid()
    silence = plan.silence if writer != MAIN else None
    for emit in plan.emits:
        if emit.writer != writer:
            continue
        if silence is not None and emit.t > silence.at:
            _silent_work(silence, start)
            silence = None
        delay = start + emit.t - time.time()
        if delay > 0:
            time.sleep(delay)
        text = rendered(emit, base, pid, port)
        if NATIVE_NUL and text.startswith(("RuntimeError: ", "Exception: ")):
            _send_with_nul(text)
            continue
        out.write(text + ("\n" if emit.newline else ""))
        out.flush()
    if writer == 0 and decode_every and plan.ready_at is not None:
        tokens = 48213
        while True:
            delay = start + plan.ready_at - time.time()
            time.sleep(max(delay, 0) + decode_every)
            tokens += 2048
            stamp_now = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write(f"[{stamp_now} TP0] Decode batch, #running-req: 12, #token: {tokens}, token usage: 0.02, "
                      "accept len: 3.41, accept rate: 0.43, cuda graph: True, gen throughput (token/s): 1021.55, "
                      "#queue-req: 0\n")
            out.flush()
    if writer in plan.kill_at:
        delay = start + plan.kill_at[writer] - time.time()
        if delay > 0:
            time.sleep(delay)
        os.kill(os.getpid(), signal.SIGKILL)
    if writer in plan.hung:
        simulated_hang_in_collective()
    while True:  # a scheduler waits for requests until killed
        time.sleep(3600)


# SGLANG_SIM_NATIVE_NUL=1: the exception's last line goes to the journal over the native protocol
# with a NUL in it (a server's JournalHandler can; a stdout stream cannot: NUL breaks its line).
NATIVE_NUL = os.environ.get("SGLANG_SIM_NATIVE_NUL") == "1"


def _send_with_nul(text: str) -> None:
    from systemd import journal

    head, _, tail = text.partition(": ")
    journal.send(f"{head}: \x00{tail}", PRIORITY="3")


def simulated_hang_in_collective() -> None:
    """A hung rank blocks here for good: a named frame that `py-spy dump` shows (the e2e looks for it)."""
    while True:
        time.sleep(3600)


class _Handler(http.server.BaseHTTPRequestHandler):
    ready_at = float("inf")
    hang_from = float("inf")  # /health stops answering from this time on
    protocol_version = "HTTP/1.1"

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path in ("/health", "/health_generate"):
            if time.time() >= self.hang_from:
                time.sleep(3600)  # a scheduler that no longer produces tokens
            up = time.time() >= self.ready_at
            self._answer(200 if up else 503, b"{}" if up else b'{"status": "starting"}')
        elif self.path in ("/model_info", "/get_model_info"):
            self._answer(200, json.dumps({"model_path": MODEL, "is_generation": True}).encode())
        else:
            self._answer(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer(200, b'{"text": " Paris."}')

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        stamp_now = time.strftime("%Y-%m-%d %H:%M:%S")
        host, port = self.client_address[:2]
        status = args[1] if len(args) > 1 else ""
        sys.stdout.write(f'[{stamp_now}] INFO:     {host}:{port} - "{self.requestline}" {status}\n')
        sys.stdout.flush()


def run(plan: Plan, port: int, faults: Faults | None = None, hostile: int = 0) -> int:
    start = time.time()
    base = start
    for text in hostile_lines(stamp(base, 0.0)) * hostile:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()
    children: list[subprocess.Popen[bytes]] = []
    script = os.path.abspath(__file__)
    plan_file = os.environ.get("SGLANG_SIM_PLAN_FILE")
    if plan.silence is not None and plan.silence.mode == "stream":
        _make_weights_file()
    for rank in range(RANKS):
        # SGLang's process titles: /proc/PID/cmdline starts with sglang::scheduler_TPn.
        args = [f"sglang::scheduler_TP{rank}", script, "_rank", str(rank), str(start), str(port)]
        children.append(subprocess.Popen(args, executable=sys.executable, env={**os.environ,
                                         "SGLANG_SIM_PLAN_FILE": plan_file or ""}))
    if plan.uvicorn_at is not None:
        _Handler.ready_at = start + (plan.ready_at or float("inf"))
        if faults is not None and faults.health_fail_after is not None and plan.ready_at is not None:
            _Handler.hang_from = start + plan.ready_at + faults.health_fail_after

        def serve() -> None:
            delay = start + plan.uvicorn_at - time.time() if plan.uvicorn_at is not None else 0
            if delay > 0:
                time.sleep(delay)
            server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Handler)
            server.serve_forever()

        threading.Thread(target=serve, daemon=True).start()
    if plan.crash_at is not None:
        main_lines = [e for e in plan.emits if e.writer == MAIN]
        threading.Thread(target=_play_main, args=(main_lines, start, base, port), daemon=True).start()
        delay = start + plan.crash_at - time.time()
        if delay > 0:
            time.sleep(delay)
        for child in children:  # kill_process_tree: SIGKILL to the children, then to itself
            child.kill()
        os.kill(os.getpid(), signal.SIGKILL)
    _play_main([e for e in plan.emits if e.writer == MAIN], start, base, port)
    for child in children:
        child.wait()
    return 0


def hostile_lines(when: str) -> list[str]:
    """Lines a log reader must survive, as the server's own output: numbers past Python's 4300-digit
    `int()` limit where a rank tag, a `gpu_id`, a batch size and a tqdm count go, and text that makes
    a backtracking pattern quadratic (spaces before a `%`, "Socket " repeated)."""
    huge = "9" * 5000
    return [
        f"[{when} TP{huge}] Load weight begin. avail mem=137.95 GB",
        f"[gpu_id={huge}] Load weight begin. avail mem=137.95 GB",
        f"[{when} TP0] Capturing batches (bs={huge} avail_mem=1.00 GB):  50%|#####     | {huge}/{huge} "
        "[00:01<00:01,  1.00it/s]",
        " " * 30000 + "%",
        "Socket " * 20000,
    ]


def _play_main(lines: list[Emit], start: float, base: float, port: int) -> None:
    for emit in lines:
        delay = start + emit.t - time.time()
        if delay > 0:
            time.sleep(delay)
        stream = sys.stdout if emit.text.startswith("INFO:") else sys.stderr
        stream.write(rendered(emit, base, os.getpid(), port) + "\n")
        stream.flush()
    while True:
        time.sleep(3600)


# --- command line -------------------------------------------------------------------------------

def _faults_from(args: argparse.Namespace) -> Faults:
    def parse(values: list[str] | None, what: str) -> dict[int, str]:
        out: dict[int, str] = {}
        for value in values or []:
            rank, _, phase = value.partition(":")
            if not rank.startswith("TP") or not rank[2:].isdigit() or not phase:
                raise SystemExit(f"--{what}: expected TPn:phase, got {value!r}")
            out[int(rank[2:])] = phase
        return out

    silent = args.silent_load
    if silent is not None:
        seconds, _, mode = silent.partition(":")
        try:
            valid = float(seconds) > 0 and mode in ("stream", "spin")
        except ValueError:
            valid = False
        if not valid:
            raise SystemExit(f"--silent-load: expected SECONDS:stream or SECONDS:spin, got {silent!r}")
    return Faults(parse(args.hang, "hang"), parse(args.kill, "kill"), parse(args.exception, "exception"),
                  parse(args.oom, "oom"), args.slow_load, args.health_fail_after, args.decode_every, silent,
                  args.silent_capture)


# The bundled examples (examples/sglang-kimi-NAME.json): `--scenario NAME` is `json` with these faults.
SCENARIOS = {"healthy": [], "stall-draft-capture": ["--hang", "TP3:draft_cuda_graph_capture"],
             "crash-oom-capture": ["--oom", "TP5:cuda_graph_capture"]}


def _die_with_parent() -> None:
    """SGLang's schedulers ask the kernel for SIGKILL when their parent dies (PR_SET_PDEATHSIG): a stop
    that ends the main process ends the ranks even where systemd cannot kill the cgroup (the e2e
    sandbox's systemd sometimes logs 'Failed to kill control group ... Input/output error')."""
    if sys.platform != "linux":
        return
    import ctypes

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request was in place
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_rank":
        rank, start, port = int(argv[1]), float(argv[2]), int(argv[3])
        _die_with_parent()
        with open(os.environ["SGLANG_SIM_PLAN_FILE"], encoding="utf-8") as handle:
            spec = json.load(handle)
        faults = Faults(**{k: {int(r): p for r, p in v.items()} if isinstance(v, dict) else v
                           for k, v in spec["faults"].items()})
        plan = build(spec["scale"], faults)
        _play(plan, rank, start, start, port, faults.decode_every)
        return 0
    parser = argparse.ArgumentParser(prog="sglang_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("json", "run"), help="json (with --scenario, the default) or run")
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), help="a bundled example's start-up, as json")
    parser.add_argument("--scale", type=float, default=1.0, help="duration factor (1.0 = real minutes)")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--unit", default="sglang-kimi.service")
    for what in ("hang", "kill", "exception", "oom"):
        parser.add_argument(f"--{what}", action="append", metavar="TPn:PHASE")
    parser.add_argument("--slow-load", type=float, default=1.0, metavar="FACTOR")
    parser.add_argument("--health-fail-after", type=float, metavar="SECONDS")
    parser.add_argument("--decode-every", type=float, metavar="SECONDS")
    parser.add_argument("--hostile", type=int, nargs="?", const=1, default=0, metavar="TIMES",
                        help="first print lines with 5000-digit numbers and quadratic-regex bait, TIMES times "
                        "(run mode)")
    parser.add_argument("--silent-load", metavar="SECONDS:MODE")
    parser.add_argument("--silent-capture", type=float, metavar="SECONDS")
    args = parser.parse_args(argv)
    if args.scenario is not None:
        if args.mode == "run":
            parser.error("--scenario prints a bundled example's journal (json mode)")
        args = parser.parse_args(["json", *SCENARIOS[args.scenario], *argv])
    elif args.mode is None:
        parser.error("expected json, run or --scenario NAME")
    faults = _faults_from(args)
    plan = build(args.scale, faults)
    if args.mode == "json":
        for entry in journal_json(plan, unit=args.unit):
            sys.stdout.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return 0
    runtime = os.environ.get("RUNTIME_DIRECTORY") or ("/run" if os.access("/run", os.W_OK) else "/tmp")
    plan_path = os.path.join(runtime, f"sglang-sim-{os.getpid()}.json")
    with open(plan_path, "w", encoding="utf-8") as handle:
        json.dump({"scale": args.scale, "faults": {"hang": faults.hang, "kill": faults.kill,
                                                   "exception": faults.exception, "oom": faults.oom,
                                                   "slow_load": faults.slow_load,
                                                   "health_fail_after": faults.health_fail_after,
                                                   "decode_every": faults.decode_every,
                                                   "silent_load": faults.silent_load,
                                                   "silent_capture": faults.silent_capture}}, handle)
    os.environ["SGLANG_SIM_PLAN_FILE"] = plan_path
    return run(plan, args.port, faults, args.hostile)


if __name__ == "__main__":
    sys.exit(main())
