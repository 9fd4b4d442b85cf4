"""Edge: one GPU's health as NVML answers it, read by the NVML worker (gpu.py) with its `call`
(which marks the worker busy, so a wedged driver is seen): retired pages pending
(nvmlDeviceGetRetiredPagesPendingStatus), remapped rows pending or failed (nvmlDeviceGetRemappedRows:
corrected, uncorrected, pending, failure), the GPU recovery action of current drivers
(nvmlDeviceGetFieldValues, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), and a GPU that answers GPU_IS_LOST.
A call NVML refuses (NOT_SUPPORTED on an older GPU or driver, a constant the binding lacks) leaves
that answer None."""

from __future__ import annotations

from typing import Any, Callable

from ...stages.s4_judge.gpu_fault import GpuHealth

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION when the binding lacks it: 230, as nvidia-ml-py gives it beside driver
# 580.159.04 on an H200 (tests/golden/nvml-health/)
RECOVERY_ACTION_FIELD = 230


def read_health(nvml: Any, index: int, handle: Any, call: Callable[..., Any]) -> GpuHealth:
    lost = False

    def answer(function_name: str, *args: Any) -> Any:
        nonlocal lost
        function = getattr(nvml, function_name, None)
        if function is None:
            return None
        try:
            return call(function, *args)
        except Exception as exc:  # NVMLError: NOT_SUPPORTED, GPU_IS_LOST...
            if "lost" in str(exc).lower():
                lost = True
            return None

    pending = answer("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    rows = answer("nvmlDeviceGetRemappedRows", handle)
    remap_pending = remap_failed = None
    if isinstance(rows, (tuple, list)) and len(rows) >= 4:
        remap_pending, remap_failed = bool(rows[2]), bool(rows[3])
    field = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", RECOVERY_ACTION_FIELD)
    values = answer("nvmlDeviceGetFieldValues", handle, [field])
    recovery = None
    if isinstance(values, (list, tuple)) and values:
        value = values[0]
        if getattr(value, "nvmlReturn", 0) == 0:
            raw = getattr(getattr(value, "value", None), "uiVal", None)
            recovery = int(raw) if isinstance(raw, int) and not isinstance(raw, bool) else None
    return GpuHealth(index, None if pending is None else bool(pending), remap_pending, remap_failed, recovery, lost)
