"""A silent CUDA graph capture judged by its GPUs, against a real systemd (issue 23 point 6).

NVML is faked at its seam (tests/e2e/fake_nvml/pynvml.py, on the daemon's PYTHONPATH through a
drop-in): it replays a window of a real H200 recording (tests/golden/gpu-traces) for every rank's
GPU. Every rank goes silent early in capture and only sleeps (/proc shows nothing). With the
capture's compute signature the ranks are alive for 10x the short GPU stall window and the start-up
reaches ready unjudged; with the waiting signature (a kernel spinning on a flag) they are judged
stalled within the GPU stall window + a sampling period + 2 s, and the alert names the signature.
So are ranks whose GPUs run a kernel polling a flag in host memory (as NCCL's network transport
waits for a peer on another node: steady PCIe traffic both ways, issue 35), after an idle GPU.
"""

from __future__ import annotations

from typing import Any

from e2e_env import UNIT, Scenario
from sandbox import REPO

GPU_STALL = 4.0
PERIOD = 1.0
SILENT = 10 * GPU_STALL
CONFIG: dict[str, Any] = {
    "phases": {"cuda_graph_capture": {"deadline": "5m", "stall": "5m", "gpu_stall": f"{GPU_STALL:g}s"}},
    "vitals": {"period": f"{PERIOD:g}s"},
    "actions": {"stalled": ["alert"], "straggler": ["alert"]},
}
DROPIN = "/run/systemd/system/phasewatch@.service.d/fake-nvml.conf"
TRACES = REPO / "tests" / "golden" / "gpu-traces"


def at(entry: dict[str, Any]) -> float:
    return int(entry["__REALTIME_TIMESTAMP"]) / 1e6


def _fake_nvml(scenario: Scenario, trace: str, window: str, lead: int = 0) -> None:
    scenario.box.write(DROPIN, f"[Service]\nEnvironment=PYTHONPATH={REPO / 'tests' / 'e2e' / 'fake_nvml'}\n"
                               f"Environment=PHASEWATCH_FAKE_NVML={TRACES / trace}:{window}\n"
                               f"Environment=PHASEWATCH_FAKE_NVML_LEAD={lead}\n")
    scenario.box.systemctl("daemon-reload")


def _silence_began(scenario: Scenario) -> float:
    """The last line before the silence: TP0's list of capture batch sizes."""
    return min(at(e) for e in scenario.lines("Capture cuda graph bs") if "TP0]" in e["MESSAGE"])


def test_silent_ranks_whose_gpus_compute_reach_ready_unjudged(scenario: Scenario) -> None:
    _fake_nvml(scenario, "cuda-graph-capture.jsonl", "cuda_graph_capture")
    try:
        scenario.configure(f"--scale 0.01 --silent-capture {SILENT:g}", **CONFIG)
        scenario.start()
        scenario.box.wait_for(lambda: any("computing" in t for t in ((scenario.status() or {}).get("vitals") or {})
                                          .values()), 60, "a rank shown computing on its GPU")
        scenario.wait_state("ready", timeout=150)
        began = _silence_began(scenario)
        end = min(at(e) for e in scenario.lines("Capture cuda graph end") if "TP0]" in e["MESSAGE"])
        assert end - began >= SILENT  # silent in the journal for 10x the GPU stall window
        assert scenario.alerts() == [], [a["MESSAGE"] for a in scenario.alerts()]
        assert len(scenario.invocations()) == 1
    finally:
        scenario.box.run("rm", "-f", DROPIN)
        scenario.box.systemctl("daemon-reload")


def test_silent_ranks_whose_gpus_wait_are_stalled_within_the_gpu_stall_window(scenario: Scenario) -> None:
    _assert_stalled_within_the_gpu_window(scenario, "hang-wait-kernel.jsonl", "hang", "no transfers")


def test_silent_ranks_whose_gpus_poll_host_memory_are_stalled_within_the_gpu_stall_window(
        scenario: Scenario) -> None:
    """The recording's idle GPU first (its quiet PCIe: 1 MB/s), then 75 MB/s of polls, steady, both ways."""
    _assert_stalled_within_the_gpu_window(scenario, "hang-poll-host-memory.jsonl", "hang_poll_host_few",
                                          "of polls: a kernel polls host memory", lead=2)


def _assert_stalled_within_the_gpu_window(scenario: Scenario, trace: str, window: str, named: str,
                                          lead: int = 0) -> None:
    _fake_nvml(scenario, trace, window, lead)
    try:
        scenario.configure(f"--scale 0.01 --silent-capture {SILENT:g}", **CONFIG)
        scenario.start()
        alerts = scenario.box.wait_for(
            lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "stalled"], 90, "a stalled alert")
        began = _silence_began(scenario)
        first = min(alerts, key=at)
        assert first["PHASEWATCH_PHASE"] == "cuda_graph_capture"
        assert at(first) - began <= GPU_STALL + PERIOD + 2.0, (at(first) - began, first["MESSAGE"])
        assert at(first) - began >= GPU_STALL - 0.5
        message = first["MESSAGE"]
        assert "GPU waiting" in message and "flat" in message and "likely a collective" in message, message
        assert named in message, message
        assert UNIT in message
    finally:
        scenario.box.run("rm", "-f", DROPIN)
        scenario.box.systemctl("daemon-reload")
