"""A fake `pynvml` for the e2e tests (the NVML seam: CI has no GPU). The daemon imports it from
PYTHONPATH, set by the test's drop-in. It replays one labelled window of a recorded
phasewatch-vitals-trace/1 (PHASEWATCH_FAKE_NVML=TRACE:WINDOW) on 8 GPUs, GPU n holding the process
titled `..._TPn` (found in /proc, as NVML's process list gives host PIDs): a sample a second,
in a loop, the same for every GPU. PHASEWATCH_FAKE_NVML_LEAD=N plays the recording's first N GPU
samples once before (an idle GPU before the window: what the GPU's quiet numbers are learnt from).
GPU n sits at PCI bus BUSES[n] (GPU 3, TP3's, at 0000:3b:00, the address of the driver's XID lines in
test_e2e_gpu_fault.py)."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
GPUS = 8
BUSES = (0x18, 0x2a, 0x3a, 0x3b, 0x9a, 0xab, 0xba, 0xdb)


class NVMLError(Exception):
    pass


_state: dict[str, Any] = {}


def nvmlInit() -> None:
    path, _, window = os.environ["PHASEWATCH_FAKE_NVML"].rpartition(":")
    with open(path) as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    header, samples = lines[0], lines[1:]
    chosen = next(w for w in header["windows"] if w["name"] == window)
    readings = [s["gpus"][0] for s in samples if chosen["begin"] + 2 <= s["t"] <= chosen["end"] and s["gpus"]]
    rank_pid = str(next(iter(header["ranks"].values())))
    lead = [s["gpus"][0] for s in samples if s["gpus"]][:int(os.environ.get("PHASEWATCH_FAKE_NVML_LEAD") or 0)]
    _state.update(gpu=header["gpus"][0], readings=readings, pid=rank_pid, lead=lead, began=time.time())


def nvmlDeviceGetCount() -> int:
    return GPUS


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return str(_state["gpu"]["name"]) + " (fake)"


def nvmlDeviceGetMemoryInfo(handle: int) -> Any:
    return SimpleNamespace(total=_state["gpu"]["memory_total_bytes"])


def nvmlDeviceGetEnforcedPowerLimit(handle: int) -> int:
    return int(_state["gpu"]["power_limit_mw"])


def _now() -> dict[str, Any]:
    lead, since = _state["lead"], time.time() - _state["began"]
    if since < len(lead):
        return lead[int(since)]  # type: ignore[no-any-return]
    readings = _state["readings"]
    return readings[int(time.time()) % len(readings)]  # type: ignore[no-any-return]


def nvmlDeviceGetPciInfo(handle: int) -> Any:
    return SimpleNamespace(busId=f"00000000:{BUSES[handle]:02X}:00.0".encode())


def nvmlDeviceGetUtilizationRates(handle: int) -> Any:
    reading = _now()
    return SimpleNamespace(gpu=reading["sm_util"], memory=reading["mem_util"])


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_now()["power_mw"])


def nvmlDeviceGetPcieThroughput(handle: int, counter: int) -> int:
    value = _now().get("pcie_rx_kbps" if counter == NVML_PCIE_UTIL_RX_BYTES else "pcie_tx_kbps")
    if value is None:
        raise NVMLError("Not Supported")
    return int(value)


def _rank_pid(index: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                title = handle.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if title.endswith(f"_TP{index}".encode()):
            return int(entry)
    return None


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Any]:
    pid = _rank_pid(handle)
    used = _now().get("processes", {}).get(_state["pid"], 1 << 30)
    return [] if pid is None else [SimpleNamespace(pid=pid, usedGpuMemory=used)]


def nvmlDeviceGetProcessUtilization(handle: int, last_seen: int) -> list[Any]:
    raise NVMLError("Not Found")
