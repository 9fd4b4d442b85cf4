"""A simulated SGLang start-up of Kimi-K2.5 INT4 (547 GB) on 8 GPUs with an EAGLE-3 draft model.

Lines follow the v0.5.9 strings of the SGLang log catalog. A scenario is a list of `Emit`s (time
offset, writer, bytes). `journal_json()` renders it the way `journalctl -o json --all` shows it, with
the PID-1 entries around it; the daemon tests (and the demo) play it for real instead.

    python tools/sglang_sim.py --scenario stall-draft-capture --format json > startup.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Iterator

from phasewatch.records import MID_FAILED, MID_MAIN_EXITED, MID_STARTED

RANKS = 8
MAIN_PID = 4711
SCENARIOS = ("healthy", "stall-draft-capture", "crash-oom-capture")
CAPTURE_BS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48]
SHARDS = 64
MODEL = "moonshotai/Kimi-K2.5"
DRAFT = "lightseekorg/kimi-k2.5-eagle3"


@dataclass(frozen=True)
class Emit:
    t: float  # seconds after the unit started
    writer: int  # -1 = main process, else the TP rank
    text: str  # one line as the process writes it (tqdm frames carry their own "\r")
    logged: bool = True  # False: written raw (tracebacks, tqdm), without the logging prefix


def pid_of(writer: int) -> int:
    return MAIN_PID if writer < 0 else MAIN_PID + 10 + writer


def _all(t: float, text: str, spread: float = 0.4) -> list[Emit]:
    order = [0, 3, 6, 1, 7, 5, 2, 4]
    return [Emit(t + spread * i / RANKS, rank, text) for i, rank in enumerate(order)]


def _prefix(rank: int | None, stamp: str) -> str:
    return f"[{stamp}{'' if rank is None else f' TP{rank}'}] "


def _capture_bar(avail: float, seconds: float) -> str:
    frames = [f"\r  0%|          | 0/{len(CAPTURE_BS)} [00:00<?, ?it/s]"]
    for done, bs in enumerate(reversed(CAPTURE_BS)):
        pct = int(100 * done / len(CAPTURE_BS))
        rate = f"{len(CAPTURE_BS) / seconds:.2f}it/s"
        desc = f"Capturing batches (bs={bs} avail_mem={avail - 0.04 * done:.2f} GB)"
        frames.append(f"\r{desc}: {pct:3d}%|#         | {done}/{len(CAPTURE_BS)} [00:00<00:00, {rate}]")
    frames.append(f"\rCapturing batches (bs=1 avail_mem={avail - 0.9:.2f} GB): 100%|##########| "
                  f"{len(CAPTURE_BS)}/{len(CAPTURE_BS)} [00:{int(seconds) % 60:02d}<00:00, 2.44it/s]")
    return "".join(frames)


def script(scenario: str = "healthy", scale: float = 1.0) -> list[Emit]:
    """The start-up as (time, writer, text). `scale` shrinks every duration (1.0 = real minutes)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    s = scale
    out: list[Emit] = [
        Emit(0.5, -1, "Max running requests is reset to 48 for speculative decoding. You can override this by "
                      "explicitly setting --max-running-requests."),
        Emit(1.0, -1, f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', "
                      "tokenizer_mode='auto', load_format='auto', trust_remote_code=True, host='0.0.0.0', "
                      "port=30000, mem_fraction_static=0.85, tp_size=8, dp_size=1, pp_size=1, ep_size=1, "
                      "nnodes=1, node_rank=0, enable_dp_attention=False, speculative_algorithm='EAGLE3', "
                      f"speculative_draft_model_path='{DRAFT}', speculative_num_steps=3, "
                      "speculative_eagle_topk=1, speculative_num_draft_tokens=4, cuda_graph_max_bs=512, "
                      "watchdog_timeout=300, enable_metrics=True)"),
    ]
    t = 6 * s
    out += _all(t, "Init torch distributed begin.")
    out.append(Emit(t + 1 * s, 0, "sglang is using nccl==2.27.5"))
    out += _all(t + 2 * s, "Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB")
    t += 3 * s
    out += _all(t, "Load weight begin. avail mem=137.95 GB")
    out.append(Emit(t + 0.2 * s, 0, "Using model weights format ['*.safetensors']"))
    out.append(Emit(t + 30 * s, -1, "Using default HuggingFace chat template with detected content format: string"))
    per_shard = 8.4 * s
    for n in range(SHARDS + 1):
        pct = int(100 * n / SHARDS)
        out.append(Emit(t + 0.5 * s + n * per_shard, 0, f"\rLoading safetensors checkpoint shards: {pct:3d}% Completed "
                        f"| {n}/{SHARDS} [{int(n * 8.4) // 60:02d}:{int(n * 8.4) % 60:02d}<00:00,  8.40s/it]"))
    t += 1 * s + SHARDS * per_shard
    out.append(Emit(t, 0, ""))
    out += _all(t + 2 * s, "Load weight end. elapsed=541.20 s, type=KimiK25ForConditionalGeneration, "
                "dtype=torch.bfloat16, avail mem=69.61 GB, mem usage=68.34 GB.", spread=3 * s)
    t += 6 * s
    out.append(Emit(t, 0, "Using KV cache dtype: torch.bfloat16"))
    out += _all(t + 1 * s, "KV Cache is allocated. #tokens: 1200000, KV size: 41.49 GB")
    out += _all(t + 2 * s, "Memory pool end. avail mem=24.80 GB")
    t += 4 * s
    out += _all(t, "Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB")
    out.append(Emit(t + 0.5 * s, 0, f"Capture cuda graph bs {CAPTURE_BS}"))
    capture = 290 * s
    out.append(Emit(t + capture, 0, _capture_bar(24.3, capture)))
    if scenario == "crash-oom-capture":
        t_crash = t + 131 * s
        out.append(Emit(t_crash, -1, "Received sigquit from a child process. It usually means the child failed."))
        out.append(Emit(t_crash + 0.1, 5, "Scheduler hit an exception: Traceback (most recent call last):"))
        frames = [
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 372, in __init__',
            "    self.capture()",
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a "
            "total capacity of 139.81 GiB of which 1.12 GiB is free.",
            "Possible solutions:",
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        ]
        out += [Emit(t_crash + 0.1, 5, line, logged=False) for line in frames]
        return sorted((e for e in out if e.t <= t_crash + 0.2), key=lambda e: e.t)
    out += _all(t + capture + 0.5 * s, "Capture cuda graph end. Time elapsed: 290.12 s. mem usage=1.17 GB. "
                "avail mem=23.43 GB.")
    t += capture + 2 * s
    out += _all(t, "Init torch distributed begin.")
    out += _all(t + 0.2 * s, "Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
    out += _all(t + 0.5 * s, "Load weight begin. avail mem=23.40 GB")
    out.append(Emit(t + 1 * s, 0, "\rLoading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]"))
    out.append(Emit(t + 9 * s, 0, "\rLoading safetensors checkpoint shards: 100% Completed | 1/1 [00:08<00:00,  "
                    "8.11s/it]"))
    out += _all(t + 10 * s, "Load weight end. elapsed=9.42 s, type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
                "avail mem=22.20 GB, mem usage=1.20 GB.")
    out += _all(t + 11 * s, "KV Cache is allocated. #tokens: 1200000, K size: 0.62 GB, V size: 0.62 GB")
    out += _all(t + 11.5 * s, "Memory pool end. avail mem=20.90 GB")
    t += 13 * s
    out += _all(t, "Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.80 GB")
    draft = 160 * s
    out.append(Emit(t + draft, 0, _capture_bar(20.6, draft)))
    if scenario == "stall-draft-capture":
        # TP3 never finishes its draft-decode capture; the others do, then wait for it forever.
        done = [e for e in _all(t + draft + 0.5 * s, "Capture draft cuda graph end. Time elapsed: 160.40 s. "
                                "mem usage=0.38 GB. avail mem=20.42 GB.") if e.writer != 3]
        return sorted(out + done, key=lambda e: e.t)
    out += _all(t + draft + 0.5 * s, "Capture draft cuda graph end. Time elapsed: 160.40 s. mem usage=0.38 GB. "
                "avail mem=20.42 GB.")
    t += draft + 1 * s
    out += _all(t, "Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    extend = 95 * s
    out.append(Emit(t + extend, 0, _capture_bar(20.3, extend)))
    out += _all(t + extend + 0.5 * s, "Capture draft extend cuda graph end. Time elapsed: 95.10 s. mem usage=0.21 GB. "
                "avail mem=20.19 GB.")
    t += extend + 2 * s
    out.append(Emit(t, 0, "max_total_num_tokens=1200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                    "max_running_requests=48, context_len=262144, available_gpu_mem=20.19 GB"))
    uvicorn = ["INFO:     Started server process [4711]", "INFO:     Waiting for application startup.",
               "INFO:     Application startup complete.",
               "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
               'INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK']
    out += [Emit(t + 1 * s + 0.1 * i, -1, line) for i, line in enumerate(uvicorn)]
    out.append(Emit(t + 2 * s, 0, "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                    "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False"))
    out.append(Emit(t + 3 * s, -1, 'INFO:     127.0.0.1:51544 - "POST /generate HTTP/1.1" 200 OK'))
    out.append(Emit(t + 3.5 * s, -1, "The server is fired up and ready to roll!"))
    out.append(Emit(t + 20 * s, 0, "Decode batch, #running-req: 12, #token: 48213, token usage: 0.02, accept len: "
                    "3.41, accept rate: 0.43, cuda graph: True, gen throughput (token/s): 1021.55, #queue-req: 0"))
    return sorted(out, key=lambda e: e.t)


def stamp(base: float, t: float) -> str:
    import time as _time

    return _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(base + t))


def rendered(emit: Emit, base: float) -> str:
    """The text a process writes for `emit`: logging records get SGLang's prefix, tqdm frames do not."""
    if not emit.logged or not emit.text or emit.text.startswith("\r") or emit.text.startswith("Max running"):
        return emit.text
    if emit.text.startswith("INFO:"):
        return _prefix(None, stamp(base, emit.t)) + emit.text
    return _prefix(None if emit.writer < 0 else emit.writer, stamp(base, emit.t)) + emit.text


def journal_json(scenario: str, base: float = 1796025600.0, unit: str = "sglang-kimi.service",
                 invocation: str = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d") -> Iterator[dict[str, object]]:
    """Entries as `journalctl -o json --all` prints them (MESSAGE with control characters as bytes)."""
    def entry(t: float, fields: dict[str, object]) -> dict[str, object]:
        return {"__REALTIME_TIMESTAMP": str(int((base + t) * 1e6)), **fields}

    yield entry(0.0, {"_PID": "1", "UNIT": unit, "MESSAGE_ID": MID_STARTED, "INVOCATION_ID": invocation,
                      "JOB_TYPE": "start", "JOB_RESULT": "done", "MESSAGE": f"Started {unit} - SGLang Kimi-K2.5."})
    last = 0.0
    for emit in script(scenario):
        text = rendered(emit, base)
        raw = text.encode()
        message: object = list(raw) if any(b < 32 and b != 9 for b in raw) else text
        last = emit.t
        yield entry(emit.t, {"_PID": str(pid_of(emit.writer)), "_SYSTEMD_UNIT": unit,
                             "_SYSTEMD_INVOCATION_ID": invocation, "SYSLOG_IDENTIFIER": "python3",
                             "PRIORITY": "6", "MESSAGE": message})
    if scenario == "crash-oom-capture":
        yield entry(last + 1, {"_PID": "1", "UNIT": unit, "MESSAGE_ID": MID_MAIN_EXITED, "INVOCATION_ID": invocation,
                               "EXIT_CODE": "killed", "EXIT_STATUS": "9",
                               "MESSAGE": f"{unit}: Main process exited, code=killed, status=9/KILL"})
        yield entry(last + 1.1, {"_PID": "1", "UNIT": unit, "MESSAGE_ID": MID_FAILED, "INVOCATION_ID": invocation,
                                 "UNIT_RESULT": "signal", "MESSAGE": f"{unit}: Failed with result 'signal'."})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/sglang_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="healthy")
    parser.add_argument("--format", choices=("json",), default="json")
    parser.add_argument("--unit", default="sglang-kimi.service")
    args = parser.parse_args(argv)
    for entry in journal_json(args.scenario, unit=args.unit):
        sys.stdout.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
