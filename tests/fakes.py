"""Fakes shared by tests: things that stand in for the daemon's edges, and a scripted SGLang unit
(`Journal`) writing the start-up of SGLANG-LOGS.md §9 into a Pipeline on a FakeClock."""

from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry

from phasewatch.clock import FakeClock
from phasewatch.config.load import Config
from phasewatch.judge import Judge
from phasewatch.pipeline import Pipeline
from phasewatch.records import MAIN, MID_STARTED, JournalRecord
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sources.journal.journal_reader import APPEND
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s5_act.respond import Memory


class ScriptedJournal:
    """Stands in for JournalFollower: entries are pushed by the test; the fd is a real pipe."""

    def __init__(self) -> None:
        self.pending: list[JournalRecord] = []
        self.cursor: str | None = None
        self.rejected: dict[str, int] = {}
        self.behind = False
        self.read_error: OSError | None = None
        self.position: float | None = None  # the last entry read's time
        self.at_end = True
        self.head: float | None = None  # the journal's oldest entry's time (None: unknown)
        self._read, self._write = os.pipe()

    def push(self, *records: JournalRecord) -> None:
        self.pending.extend(records)
        os.write(self._write, b"!")

    def read(self, limit: int = 1000) -> list[JournalRecord]:
        out, self.pending = self.pending[:limit], self.pending[limit:]
        if out:
            self.cursor = f"c{len(out)}"
            self.position = out[-1].realtime
        self.at_end = not self.pending
        return out

    def fileno(self) -> int:
        return self._read

    def wait_result(self) -> int:
        os.read(self._read, 1024)
        return APPEND

    def seek_realtime(self, seconds: float) -> None: ...

    def seek_tail(self) -> None: ...

    def reopen(self) -> bool:
        return True

    def realtime_back(self, entries: int) -> float | None:
        return None

    def head_realtime(self) -> float | None:
        return self.head

    def catch_up_entries(self, since: float, runs: object, end: object) -> None:
        return None  # (no C reader: the follower reads them)

    def drop_pages(self) -> int:
        self.dropped = getattr(self, "dropped", 0) + 1
        return 0


# --- a scripted SGLang unit: the start-up of SGLANG-LOGS.md §9 (v0.5.9, --tp 8, EAGLE3) ---------------

INV = "6f1c0c3a9a2b4e53a0f1d2c3b4a59687"
T0 = 1771804502.0  # 2026-02-22 23:55:02 UTC
UNIT = "sglang.service"
TP8 = tuple(f"TP{i}" for i in range(8))
MAIN_PID = 4711
PIDS = {MAIN: MAIN_PID, **{rank: 4800 + i for i, rank in enumerate(TP8)}}

SERVER_ARGS = (
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.3-70B-Instruct', "
    "tokenizer_path='meta-llama/Llama-3.3-70B-Instruct', tokenizer_mode='auto', load_format='auto', "
    "host='0.0.0.0', port=30000, tp_size=8, dp_size=1, pp_size=1, ep_size=1, nnodes=1, node_rank=0, "
    "watchdog_timeout=300, speculative_algorithm='EAGLE3', "
    "speculative_draft_model_path='lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B', speculative_num_steps=5, "
    "cuda_graph_max_bs=512)"
)


class Journal:
    """An SGLang unit writing to the journal, read by a Pipeline; time moves only with `wait`."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config(unit=UNIT)
        self.clock = FakeClock(wall=T0)
        self.pipeline = Pipeline(self.config)

    # -- writing ---------------------------------------------------------------------------------
    def record(self, message: str, pid: int | None, **fields: object) -> None:
        now = self.clock.wall()
        self.pipeline.feed(JournalRecord(message=message, realtime=now, pid=pid, invocation_id=INV,
                                         **fields), now)  # type: ignore[arg-type]

    def log(self, rank: str, message: str) -> None:
        """`[2026-02-22 23:55:14 TP3] message` from that rank's process (`main`: no tag)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.clock.wall()))
        tag = "" if rank == MAIN else f" {rank}"
        self.record(f"[{stamp}{tag}] {message}", PIDS[rank])

    def raw(self, rank: str, text: str) -> None:
        """An unprefixed entry (traceback line, tqdm frames, torch C++ log) from that rank's process."""
        self.record(text, PIDS[rank])

    def every(self, message: str, ranks: tuple[str, ...] = TP8) -> None:
        for rank in ranks:
            self.log(rank, message)

    def systemd(self, message_id: str, message: str, **extra: str) -> None:
        """PID 1 writing about the unit."""
        self.record(message, 1, message_id=message_id, unit=UNIT, extra=extra)

    def wait(self, seconds: float) -> None:
        self.clock.jump(seconds)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.clock.wall()

    def invocation(self) -> InvocationView:
        inv = self.pipeline.snapshot().current
        assert inv is not None
        return inv

    def verdicts(self, at: float | None = None) -> list[policy.Verdict]:
        return policy.evaluate(self.invocation(), self.now if at is None else at, self.config,
                               self.pipeline.profile)

    def outcome(self, at: float | None = None) -> str:
        return policy.outcome(self.invocation(), self.verdicts(at))

    def next_deadline(self) -> float:
        return policy.next_deadline(self.invocation(), self.now, self.config)


def kinds(verdicts: list[policy.Verdict]) -> list[tuple[str, str | None, str | None, str | None]]:
    return [(v.kind, v.rank, v.phase, v.cause) for v in verdicts]


# --- the start-up of SGLANG-LOGS.md §9, a step at a time -----------------------------------------


def launch(j: Journal) -> None:
    j.systemd(MID_STARTED, "Started sglang.service - SGLang server.", JOB_TYPE="start", INVOCATION_ID=INV)
    j.raw(MAIN, "Max running requests is reset to 48 for speculative decoding. You can override this by "
                "explicitly setting --max-running-requests.")
    j.log(MAIN, SERVER_ARGS)
    j.wait(7)
    j.log(MAIN, "Using default HuggingFace chat template with detected content format: string")


def dist_init(j: Journal) -> None:
    j.wait(5)
    j.every("Init torch distributed begin.")
    j.raw("TP0", "[Gloo] Rank 0 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7")
    j.log("TP0", "sglang is using nccl==2.27.5")
    j.wait(2)
    j.every("Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB")


def weight_load(j: Journal, shards: int = 30) -> None:
    j.every("Load weight begin. avail mem=137.95 GB")
    j.log("TP0", "Using model weights format ['*.safetensors']")
    for n in range(shards + 1):
        j.raw("TP0", f"\rLoading safetensors checkpoint shards: {100 * n // shards:3d}% Completed | "
                     f"{n}/{shards} [00:{n:02d}<00:46,  1.62s/it]\n")
        j.wait(1.6)
    j.every("Load weight end. elapsed=50.71 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=120.43 GB, mem usage=17.54 GB.")


def kv_cache_alloc(j: Journal) -> None:
    j.wait(1)
    j.log("TP0", "Using KV cache dtype: torch.bfloat16")
    j.every("KV Cache is allocated. #tokens: 2600000, K size: 49.59 GB, V size: 49.59 GB")
    j.every("Memory pool end. avail mem=20.61 GB")


def capture_bar(j: Journal, n: int, total: int = 23, avail: str = "20.12") -> None:
    j.raw("TP0", f"\rCapturing batches (bs=48 avail_mem={avail} GB): {100 * n // total:3d}%|#         | "
                 f"{n}/{total} [00:{n:02d}<00:09,  2.44it/s]")


def cuda_graph_capture(j: Journal) -> None:
    j.wait(1)
    j.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    j.log("TP0", "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, "
                 "30, 32, 40, 44, 48]")
    j.wait(10)
    capture_bar(j, 23)
    j.every("Capture cuda graph end. Time elapsed: 10.12 s. mem usage=1.17 GB. avail mem=19.21 GB.")


def draft_weight_load(j: Journal) -> None:
    j.every("Init torch distributed begin.")
    j.every("Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
    j.every("Load weight begin. avail mem=19.23 GB")
    j.raw("TP0", "\rLoading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]\n")
    j.wait(2)
    j.raw("TP0", "\rLoading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  1.11it/s]\n")
    j.every("Load weight end. elapsed=1.42 s, type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
            "avail mem=18.79 GB, mem usage=0.44 GB.")
    j.every("KV Cache is allocated. #tokens: 2600000, K size: 0.62 GB, V size: 0.62 GB")
    j.every("Memory pool end. avail mem=17.55 GB")


def draft_capture_begin(j: Journal) -> None:
    j.every("Capture draft cuda graph begin. This can take up to several minutes. avail mem=17.52 GB")


def draft_capture_end(j: Journal) -> None:
    j.every("Capture draft cuda graph end. Time elapsed: 12.04 s. mem usage=0.38 GB. avail mem=17.14 GB.")
    j.log("TP0", "max_total_num_tokens=2600000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                 "max_running_requests=48, context_len=131072, available_gpu_mem=16.93 GB")


def http_server_start(j: Journal) -> None:
    j.wait(1)
    j.log(MAIN, "INFO:     Started server process [4711]")
    j.log(MAIN, "INFO:     Waiting for application startup.")
    j.log(MAIN, "INFO:     Application startup complete.")
    j.log(MAIN, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")


def warmup(j: Journal) -> None:
    j.wait(1)
    j.log(MAIN, 'INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK')
    j.log("TP0", "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                 "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False")


def ready(j: Journal) -> None:
    j.wait(1)
    j.log(MAIN, 'INFO:     127.0.0.1:51544 - "POST /generate HTTP/1.1" 200 OK')
    j.log(MAIN, "The server is fired up and ready to roll!")


def serving(j: Journal) -> None:
    j.wait(150)
    j.log(MAIN, 'INFO:     10.0.3.17:40212 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    j.log("TP0", "Decode batch, #running-req: 12, #token: 48213, token usage: 0.02, accept len: 3.41, "
                 "accept rate: 0.43, cuda graph: True, gen throughput (token/s): 1021.55, #queue-req: 0")


def up_to_capture(j: Journal) -> None:
    launch(j)
    dist_init(j)
    weight_load(j)
    kv_cache_alloc(j)


def up_to_draft_capture(j: Journal) -> None:
    up_to_capture(j)
    cuda_graph_capture(j)
    draft_weight_load(j)
    j.wait(1)
    draft_capture_begin(j)


def up_to_ready(j: Journal) -> None:
    up_to_draft_capture(j)
    j.wait(12)
    draft_capture_end(j)
    http_server_start(j)
    warmup(j)
    ready(j)


class MetricsFixture:
    """A journal read by a pipeline, and an exporter on a fresh registry sharing the journal's clock."""

    def __init__(self, config: Config | None = None) -> None:
        self.journal = Journal(config)
        self.registry = CollectorRegistry()
        self.exporter = Exporter(self.journal.config, self.registry, self.journal.clock)

    def publish(self, memory: Memory | None = None) -> None:
        step = Judge(self.journal.config, self.journal.pipeline).judge(self.journal.now)
        self.exporter.publish(step, memory or Memory())

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"unit": UNIT, **labels})
