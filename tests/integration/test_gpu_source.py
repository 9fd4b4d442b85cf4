"""The NVML source (sources/gpu.py) with a fake pynvml module: its own worker thread, a wedged
driver that never stalls the caller, no NVML said once."""

from __future__ import annotations

import logging
import threading
import time
import types
from typing import Any

from phasewatch.sources.gpu import NvmlSource


def fake_nvml(block: threading.Event | None = None, fail_init: Exception | None = None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    values: dict[str, Any] = {
        "nvmlInit": lambda: (_ for _ in ()).throw(fail_init) if fail_init else None,
        "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H200",
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(total=150 << 30),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=100, memory=0),
        "nvmlDeviceGetPcieThroughput": lambda h, c: 450,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [types.SimpleNamespace(pid=4711, usedGpuMemory=1 << 30)],
        "nvmlDeviceGetProcessUtilization": lambda h, ts: [types.SimpleNamespace(pid=4711, smUtil=100, timeStamp=7)],
        "NVML_PCIE_UTIL_TX_BYTES": 0, "NVML_PCIE_UTIL_RX_BYTES": 1,
    }

    def power(handle: int) -> int:
        if block is not None:
            block.wait(10)  # a wedged driver
        return 134_000
    values["nvmlDeviceGetPowerUsage"] = power
    for name, value in values.items():
        setattr(module, name, value)
    return module


def _wait(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_source_reads_every_gpu_in_its_own_thread() -> None:
    source = NvmlSource(lambda: fake_nvml(), interval=0.05)
    assert source.state() == "off" and source.take() == []
    source.want(True)
    _wait(lambda: len(source._readings) >= 2)
    readings = source.take()
    assert readings and readings[0].power_mw == 134_000 and readings[0].processes == {4711: 1 << 30}
    assert readings[0].process_sm_util == {4711: 100.0}
    assert source.infos()[0].power_limit_mw == 700_000 and source.infos()[0].name == "NVIDIA H200"
    assert source.state() == "ok" and source.problem() is None
    source.want(False)


def test_a_wedged_driver_never_stalls_the_caller_and_is_said_to_be_stuck() -> None:
    block = threading.Event()
    source = NvmlSource(lambda: fake_nvml(block), interval=0.05, deadline=0.2)
    source.want(True)
    time.sleep(0.4)
    began = time.monotonic()
    assert source.take() == [] and source.state() == "stuck"
    assert time.monotonic() - began < 0.1  # the loop's side returns at once
    assert source.problem() == "NVML not answering"
    block.set()
    _wait(lambda: source.state() == "ok")
    assert source.state() == "ok"
    source.want(False)


def test_no_nvml_is_said_once_and_gives_nothing(caplog: Any) -> None:
    def missing() -> types.ModuleType:
        raise ImportError("No module named 'pynvml'")
    caplog.set_level(logging.WARNING, logger="phasewatch")
    source = NvmlSource(missing, interval=0.05)
    source.want(True)
    _wait(lambda: source.state() == "unavailable")
    for _ in range(3):
        assert source.take() == []
    assert "nvidia-ml-py is not installed" in (source.problem() or "")
    assert len([r for r in caplog.records if "GPU signs of life" in r.getMessage()]) == 1
    permission = NvmlSource(lambda: fake_nvml(fail_init=RuntimeError("Insufficient Permissions")), interval=0.05)
    permission.want(True)
    _wait(lambda: permission.state() == "unavailable")
    assert "/dev/nvidiactl" in (permission.problem() or "")
