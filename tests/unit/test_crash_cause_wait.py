"""A crash whose cause is only generic waits a short, bounded time for the line that names a specific
one (vLLM's "WorkerProc failed to start." comes before the OutOfMemoryError that ends its traceback),
unless the unit's invocation ends first; a crash with a specific cause is reported at once. The
daemon judges after every journal record, so these feed the records one at a time on a fake clock."""

from __future__ import annotations

import math

import pytest

from phasewatch.clock import FakeClock
from phasewatch.config.load import DEFAULT_CRASH_CAUSE_WAIT, Config, parse_config
from phasewatch.errors import ConfigError
from phasewatch.pipeline import Pipeline
from phasewatch.records import MID_FAILED, JournalRecord, VerdictKind
from phasewatch.stages.s4_judge import policy

T0 = 1_780_000_000.0
INV = "inv"
UNIT = "vllm.service"
WAIT = DEFAULT_CRASH_CAUSE_WAIT
PIDS = {"Worker_TP0": 201, "Worker_TP1": 202, "EngineCore_DP0": 200}

START = [
    ("Worker_TP0", "world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:4321 backend=nccl"),
    ("Worker_TP1", "world_size=2 rank=1 local_rank=1 distributed_init_method=tcp://127.0.0.1:4321 backend=nccl"),
    ("Worker_TP0", "Starting to load model /models/llama..."),
    ("Worker_TP1", "Starting to load model /models/llama..."),
    ("Worker_TP0", "Model loading took 7.5 GiB and 12.3 seconds"),
    ("Worker_TP1", "Model loading took 7.5 GiB and 12.3 seconds"),
    ("Worker_TP0", "Memory profiling takes 3.20 seconds"),
    ("Worker_TP1", "Memory profiling takes 3.20 seconds"),
]
OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_worker.py", line 263, in determine_available_memory',
    "    self.model_runner.profile_run()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
    "79.19 GiB of which 1.21 GiB is free.",
]
VALUE_TRACEBACK = [*OOM_TRACEBACK[:3], "ValueError: the model's max seq len is larger than the cache"]


class VllmUnit:
    """A two-worker vLLM unit writing to the journal, judged after every record as the daemon does."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config(unit=UNIT, engine="vllm")
        self.clock = FakeClock(wall=T0)
        self.pipeline = Pipeline(self.config, default_year=2026)
        self.seen: list[policy.Verdict] = []

    def record(self, message: str, pid: int, **fields: object) -> None:
        now = self.clock.wall()
        self.pipeline.feed(JournalRecord(message=message, realtime=now, pid=pid, invocation_id=INV,
                                         **fields), now)  # type: ignore[arg-type]
        self.seen.extend(self.crashes())

    def log(self, process: str, message: str, level: str = "INFO") -> None:
        self.record(f"({process} pid={PIDS[process]}) {level} 05-28 20:26:40 [x.py:1] {message}", PIDS[process])

    def raw(self, process: str, lines: list[str]) -> None:
        for line in lines:
            self.record(f"({process} pid={PIDS[process]}) {line}", PIDS[process])

    def crashes(self, at: float | None = None) -> list[policy.Verdict]:
        inv = self.pipeline.snapshot().current
        assert inv is not None
        now = self.clock.wall() if at is None else at
        return [v for v in policy.evaluate(inv, now, self.config, self.pipeline.profile)
                if v.kind == VerdictKind.CRASHED]

    def next_deadline(self) -> float:
        inv = self.pipeline.snapshot().current
        assert inv is not None
        return policy.next_deadline(inv, self.clock.wall(), self.config)

    def start(self) -> None:
        for process, message in START:
            self.log(process, message)
            self.clock.jump(1)


def test_generic_failure_line_waits_for_the_oom_that_follows_it() -> None:
    unit = VllmUnit()
    unit.start()
    unit.log("Worker_TP1", "WorkerProc failed to start.", "ERROR")
    failed_at = unit.clock.wall()
    assert unit.crashes() == []  # generic so far: wait for the traceback's last line
    assert unit.next_deadline() == failed_at + WAIT
    unit.clock.jump(0.05)
    unit.raw("Worker_TP1", OOM_TRACEBACK)
    # The specific cause arrived: reported at once, not at the end of the wait.
    assert unit.seen and unit.clock.wall() < failed_at + WAIT
    crash = unit.seen[0]
    assert (crash.rank, crash.phase, crash.cause) == ("TP1", "kv_cache_alloc", "oom")
    assert all(v.cause == "oom" for v in unit.seen)
    assert unit.next_deadline() == failed_at + WAIT  # one wake-up at most, harmless once reported


def test_generic_cause_is_reported_when_the_wait_is_over() -> None:
    unit = VllmUnit()
    unit.start()
    unit.log("Worker_TP1", "WorkerProc failed to start.", "ERROR")
    failed_at = unit.clock.wall()
    unit.raw("Worker_TP1", VALUE_TRACEBACK)
    assert unit.crashes(at=failed_at + WAIT - 0.01) == []
    [crash] = unit.crashes(at=failed_at + WAIT)
    assert (crash.rank, crash.phase, crash.cause) == ("TP1", "kv_cache_alloc", "python_exception")
    assert crash.at == failed_at  # dated at its first line, not at the end of the wait
    unit.clock.jump(WAIT)
    assert unit.next_deadline() == math.inf


def test_the_unit_failing_ends_the_wait() -> None:
    unit = VllmUnit()
    unit.start()
    unit.log("Worker_TP1", "WorkerProc failed to start.", "ERROR")
    assert unit.crashes() == []
    unit.record("vllm.service: Failed with result 'exit-code'.", 1, message_id=MID_FAILED, unit=UNIT,
                extra={"UNIT_RESULT": "exit-code"})
    [crash] = unit.crashes()
    assert (crash.rank, crash.cause) == ("TP1", "python_exception")


def test_a_specific_cause_is_reported_at_once() -> None:
    unit = VllmUnit()
    unit.start()
    unit.raw("Worker_TP1", ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
    [crash] = unit.crashes()
    assert (crash.rank, crash.cause) == ("TP1", "oom")


def test_no_wait_when_configured_off() -> None:
    unit = VllmUnit(Config(unit=UNIT, engine="vllm", crash_cause_wait=0))
    unit.start()
    unit.log("Worker_TP1", "WorkerProc failed to start.", "ERROR")
    [crash] = unit.crashes()
    assert crash.cause == "python_exception"


@pytest.mark.parametrize(("text", "wait"), [("crash_cause_wait: 10s\n", 10.0), ("crash_cause_wait: none\n", 0.0),
                                            ("", WAIT)])
def test_the_wait_is_configurable(text: str, wait: float) -> None:
    assert parse_config("unit: vllm.service\n" + text).crash_cause_wait == wait


def test_the_wait_is_bounded() -> None:
    with pytest.raises(ConfigError, match=r"^crash_cause_wait: at most 60s"):
        parse_config("unit: vllm.service\ncrash_cause_wait: 2m\n")


def test_the_wait_counts_from_the_culprits_line_not_from_an_older_request_error() -> None:
    """After ready, one request's traceback is no crash; hours later a worker dies: its generic line
    still waits for its own cause line."""
    unit = VllmUnit()
    unit.start()
    unit.record("(APIServer pid=100) INFO:     Application startup complete.", 100)
    unit.record("(APIServer pid=100) ValueError: prompt is too long", 100)  # a request's error: no crash
    assert unit.crashes() == []
    unit.clock.jump(3600)
    unit.log("Worker_TP1", "WorkerProc failed.", "ERROR")
    failed_at = unit.clock.wall()
    assert unit.crashes() == []
    assert unit.next_deadline() == failed_at + WAIT
    unit.raw("Worker_TP1", OOM_TRACEBACK)
    [crash] = unit.crashes()
    assert (crash.rank, crash.cause) == ("TP1", "oom")
