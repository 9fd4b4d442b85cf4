"""GPU health (sources/host/gpu_nvml_health.py) over what NVML answered on a real H200, driver 580.159.04
(tests/golden/nvml-health/, recorded by tools/nvml_device/nvml_health.py): each call answered or
refused as it was there; a healthy Hopper GPU reads healthy, and the calls Hopper refuses (retired
pages: it remaps rows instead) are no answer, not a fault."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from phasewatch.sources.host.gpu_nvml_health import RECOVERY_ACTION_FIELD, read_health
from phasewatch.stages.s4_judge.gpu_fault import GpuHealth

RECORDED = Path(__file__).parents[1] / "golden" / "nvml-health" / "h200-580.159.04.json"


class NVMLError(Exception):
    pass


def recorded_nvml(calls: dict[str, Any], recovery_field: int | None) -> Any:
    """A binding that answers as the recording did: the value, or the error NVML raised."""

    def replay(key: str) -> Any:
        answer = calls[key]
        if "error" in answer:
            raise NVMLError(answer["text"])
        return answer["value"]

    def field_values(handle: Any, fields: list[int]) -> list[Any]:
        [value] = replay("nvmlDeviceGetFieldValues(recovery_action)")
        assert fields == [value["fieldId"]]  # the field the recording asked for
        return [SimpleNamespace(nvmlReturn=value["nvmlReturn"], value=SimpleNamespace(uiVal=value["uiVal"]))]

    binding = SimpleNamespace(
        nvmlDeviceGetRetiredPagesPendingStatus=lambda handle: replay("nvmlDeviceGetRetiredPagesPendingStatus"),
        nvmlDeviceGetRemappedRows=lambda handle: tuple(replay("nvmlDeviceGetRemappedRows")),
        nvmlDeviceGetFieldValues=field_values)
    if recovery_field is not None:
        binding.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = recovery_field
    return binding


def test_a_healthy_h200_reads_healthy_as_nvml_answered_it() -> None:
    recording = json.loads(RECORDED.read_text())
    [gpu] = recording["gpus"]
    assert gpu["calls"]["nvmlDeviceGetRetiredPagesPendingStatus"]["error"] == "NVMLError_NotSupported"
    nvml = recorded_nvml(gpu["calls"], 230 if gpu["binding_has_recovery_field"] else None)
    health = read_health(nvml, 0, object(), lambda function, *args: function(*args))
    assert health == GpuHealth(0, retired_pages_pending=None, remap_pending=False, remap_failed=False,
                               recovery_action=0, lost=False)


def test_a_binding_without_the_recovery_field_asks_the_field_nvml_numbers_it() -> None:
    [gpu] = json.loads(RECORDED.read_text())["gpus"]
    assert gpu["calls"]["nvmlDeviceGetFieldValues(recovery_action)"]["value"][0]["fieldId"] == RECOVERY_ACTION_FIELD
    health = read_health(recorded_nvml(gpu["calls"], None), 0, object(), lambda function, *args: function(*args))
    assert health.recovery_action == 0
