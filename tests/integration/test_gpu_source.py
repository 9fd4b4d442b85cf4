"""The NVML source (sources/host/gpu.py) with a fake pynvml module: its own worker thread, a wedged
driver that never stalls the caller, no NVML said once."""

from __future__ import annotations

import logging
import threading
import time
import types
from typing import Any

import pytest

from phasewatch.sources.host.gpu import NvmlSource


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


def _nvml_with(**changes: Any) -> types.ModuleType:
    module = fake_nvml()
    for name, value in changes.items():
        if value is None:
            delattr(module, name)
        else:
            setattr(module, name, value)
    return module


def _readings(source: NvmlSource, count: int = 3) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 5
    while len(got) < count and time.monotonic() < deadline:
        got += source.take()
        time.sleep(0.01)
    return got


@pytest.mark.parametrize("row, changes, skipped", [
    ("a process with pid=None", {"nvmlDeviceGetComputeRunningProcesses":
                                 lambda h: [types.SimpleNamespace(pid=None, usedGpuMemory=1),
                                            types.SimpleNamespace(pid=4711, usedGpuMemory=1 << 30)]}, "process"),
    ('smUtil="x"', {"nvmlDeviceGetProcessUtilization":
                    lambda h, ts: [types.SimpleNamespace(pid=4711, smUtil="x", timeStamp=7)]},
     "process utilisation sample"),
    ("NVML_PCIE_UTIL_RX_BYTES missing (an older binding)", {"NVML_PCIE_UTIL_RX_BYTES": None}, "PCIe counter"),
    ("a power limit of infinity", {"nvmlDeviceGetEnforcedPowerLimit": lambda h: float("inf")},
     "GPU description"),
])
def test_a_value_nvml_gives_in_a_shape_not_foreseen_is_skipped_said_once(
        caplog: Any, row: str, changes: dict[str, Any], skipped: str) -> None:
    """PROBE-S4 L-1: the conversion after a guarded call raised out of the worker; the thread died and
    the source still said `ok`, reading nothing. Now the value is skipped (said once), the rest read."""
    caplog.set_level(logging.WARNING, logger="phasewatch")
    source = NvmlSource(lambda: _nvml_with(**changes), interval=0.02)
    source.want(True)
    readings = _readings(source)
    source.want(False)
    assert len(readings) >= 3, row
    assert source.state() == "ok" and source.problem() is None
    assert readings[-1].power_mw == 134_000
    said = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(said) == 1 and f"NVML gave a {skipped} phasewatch cannot read" in said[0], said


def test_a_worker_that_ends_is_a_state_said_and_started_again(caplog: Any) -> None:
    """PROBE-S4 L-1: a call raising SystemExit ended the worker unsaid. Now: `failed`, the problem in
    status and the metric's state, a log line, and the worker started again; readings flow again."""
    caplog.set_level(logging.WARNING, logger="phasewatch")
    calls = {"n": 0}

    def power(handle: int) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise SystemExit(3)
        return 134_000

    source = NvmlSource(lambda: _nvml_with(nvmlDeviceGetPowerUsage=power), interval=0.02, backoff=0.3)
    source.want(True)
    _wait(lambda: source.state() == "failed")
    assert source.state() == "failed"
    assert "the NVML worker ended: SystemExit: 3; started again in 0.3 s (1 of 5 this hour)" in (source.problem() or "")
    assert "the NVML worker ended: SystemExit" in caplog.text
    _wait(lambda: source.state() == "ok")
    assert source.state() == "ok" and _readings(source, 2)
    source.want(False)


def test_a_worker_that_keeps_ending_stays_failed_and_says_it_gave_up() -> None:
    def power(handle: int) -> int:
        raise SystemExit(3)

    source = NvmlSource(lambda: _nvml_with(nvmlDeviceGetPowerUsage=power), interval=0.02, backoff=0.001)
    source.want(True)
    _wait(lambda: "not started again" in (source.problem() or ""))
    assert source.state() == "failed" and "ended 6 times within an hour" in (source.problem() or "")
    assert source.take() == []
    thread = source._thread
    assert thread is not None
    _wait(lambda: not thread.is_alive())
    assert not thread.is_alive() and source.state() == "failed"


def test_the_rows_that_held_still_hold() -> None:
    """PROBE-S4 L-1's held rows: nvmlInit hanging is `stuck`; power raising after 3 calls is a reading
    without power, the worker alive."""
    block = threading.Event()
    hanging = NvmlSource(lambda: _nvml_with(nvmlInit=lambda: block.wait(10)), interval=0.02, deadline=0.2)
    hanging.want(True)
    _wait(lambda: hanging.state() == "stuck")
    assert hanging.state() == "stuck" and hanging.problem() == "NVML not answering"
    block.set()
    calls = {"n": 0}

    def power(handle: int) -> int:
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return 134_000

    source = NvmlSource(lambda: _nvml_with(nvmlDeviceGetPowerUsage=power), interval=0.02)
    source.want(True)
    readings = _readings(source, 6)
    assert len(readings) >= 6 and readings[-1].power_mw is None and source.state() == "ok"
    source.want(False)
    hanging.want(False)


def test_pci_addresses_and_health_are_read_where_nvml_answers() -> None:
    """Issue 38: the PCI address maps a kernel XID line to its GPU; the health calls that answer are
    read, those that do not (NOT_SUPPORTED) are None."""
    nvml = _nvml_with(nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=b"00000000:3B:00.0"),
                      nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 1,
                      nvmlDeviceGetRemappedRows=lambda h: (0, 2, 1, 0),
                      nvmlDeviceGetFieldValues=lambda h, ids: (_ for _ in ()).throw(RuntimeError("Not Supported")))
    source = NvmlSource(lambda: nvml, interval=0.05)
    source.want(True)
    _wait(lambda: bool(source.health()))
    assert source.pci_addresses() == {0: "0000:3b:00"}
    health = source.health()[0]
    assert (health.retired_pages_pending, health.remap_pending, health.remap_failed, health.recovery_action) == \
        (True, True, False, None)
    source.want(False)
