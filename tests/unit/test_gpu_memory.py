"""Issue 12, leftovers on the GPUs: nvidia-smi's CSV read purely, and survivors that say what they hold."""

from __future__ import annotations

import logging
from typing import Sequence

import pytest

from phasewatch.sinks.evidence import Ran
from phasewatch.sinks.gpu_memory import APPS, GPUS, GpuHolder, GpuMemory, parse_compute_apps, parse_gpus
from phasewatch.sinks.leftovers import Survivor, with_gpu

GPU_LIST = "0, GPU-aaaa\n3, GPU-dddd\n"
APP_LIST = "GPU-dddd, 4711, 81920\nGPU-aaaa, 4711, 512\nGPU-aaaa, 900, [N/A]\nGPU-eeee, 77, 100\nnonsense\n"


def test_gpus_by_uuid() -> None:
    assert parse_gpus(GPU_LIST + "garbage line\n, GPU-x\n") == {"GPU-aaaa": "0", "GPU-dddd": "3"}


def test_compute_apps_with_their_gpu_index_and_unreadable_lines_skipped() -> None:
    assert parse_compute_apps(APP_LIST, parse_gpus(GPU_LIST)) == [
        GpuHolder(4711, "3", 81920), GpuHolder(4711, "0", 512), GpuHolder(77, "GPU-eeee", 100)]


def test_a_survivor_says_what_it_holds_on_which_gpu() -> None:
    found = [Survivor(4711, "sglang::scheduler_TP3", 2048, "/system.slice/run-r1.scope")]
    [survivor] = with_gpu(found, parse_compute_apps(APP_LIST, parse_gpus(GPU_LIST)), {})
    assert survivor.text() == ("pid 4711 (sglang::scheduler_TP3, 2 MiB resident, holds 81920 MiB on GPU 3, "
                               "holds 512 MiB on GPU 0, cgroup /system.slice/run-r1.scope)")


def test_a_process_of_the_old_startup_holding_gpu_memory_survives_even_unseen_in_proc() -> None:
    holders = [GpuHolder(900, "1", 70000), GpuHolder(901, "2", 100)]  # 901: someone else's job
    [survivor] = with_gpu([], holders, {900: "sglang::scheduler_TP1"})
    assert (survivor.pid, survivor.gpu) == (900, (("1", 70000),))
    assert "sglang::scheduler_TP1, holds 70000 MiB on GPU 1, cgroup unknown (not seen in /proc)" in survivor.text()


class FakeSmi:
    def __init__(self, answers: dict[str, Ran]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Ran:
        self.calls.append(list(argv))
        return self.answers[argv[1]]


def test_both_queries_go_to_nvidia_smi_within_one_bound() -> None:
    smi = FakeSmi({GPUS[0]: Ran(0, GPU_LIST), APPS[0]: Ran(0, APP_LIST)})
    gpu = GpuMemory(lambda: "/usr/bin/nvidia-smi", smi, timeout=5.0, monotonic=lambda: 0.0)
    assert [h.pid for h in gpu.holders() or []] == [4711, 4711, 77]
    assert smi.calls == [["/usr/bin/nvidia-smi", *GPUS], ["/usr/bin/nvidia-smi", *APPS]]


def test_no_nvidia_smi_is_skipped_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    gpu = GpuMemory(lambda: None, FakeSmi({}))
    with caplog.at_level(logging.WARNING):
        assert gpu.holders() is None and gpu.holders() is None
    assert [r.getMessage() for r in caplog.records] == [
        "nvidia-smi not found: the leftovers check does not look at GPU memory"]


def test_an_nvidia_smi_that_fails_or_hangs_means_not_checked_not_free(caplog: pytest.LogCaptureFixture) -> None:
    hung = GpuMemory(lambda: "nvidia-smi", FakeSmi({GPUS[0]: Ran(0, GPU_LIST), APPS[0]: Ran(None, "")}))
    broken = GpuMemory(lambda: "nvidia-smi", FakeSmi({GPUS[0]: Ran(9, "NVIDIA-SMI has failed")}))
    with caplog.at_level(logging.WARNING):
        assert hung.holders() is None and broken.holders() is None
    assert "did not finish in time" in caplog.text and "exit status 9 (NVIDIA-SMI has failed)" in caplog.text
