"""The daemon against a vLLM start-up: tools/vllm_sim.py (vLLM 0.11, V1 engine, TP=4: an API server,
an engine core titled VLLM::EngineCore_DP0, workers titled VLLM::Worker_TPn) runs as the watched unit,
phasewatch watches it with `engine: vllm`. The sandbox's unit keeps its name; a drop-in swaps the
simulator.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_env import CONFIG_PATH, REPO, UNIT, VENV, Scenario, restarts_by_phasewatch

DROPIN = f"/run/systemd/system/{UNIT}.d/vllm.conf"
VLLM_DROPIN = f"""[Service]
ExecStart=
ExecStart={VENV}/bin/python {REPO}/tools/vllm_sim.py run --port 8000 $SIM_ARGS
"""

pytestmark = pytest.mark.skipif(not (REPO / "daemon" / "phasewatch" / "profile" / "profiles" / "vllm.yaml").exists(),
                                reason="the vllm profile is not in this checkout")


@pytest.fixture
def vllm(scenario: Scenario) -> Iterator[Scenario]:
    scenario.box.write(DROPIN, VLLM_DROPIN)
    scenario.box.systemctl("daemon-reload")
    try:
        yield scenario
    finally:
        scenario.box.systemctl("stop", UNIT, check=False)
        scenario.box.run("rm", "-f", DROPIN, check=False)
        scenario.box.systemctl("daemon-reload")


def test_vllm_clean_start_up_reaches_ready(vllm: Scenario) -> None:
    vllm.configure("--scale 0.02", engine="vllm")
    vllm.start()
    status = vllm.wait_state("ready", timeout=90)
    assert {f"TP{n}" for n in range(4)} <= set(status["ranks"])
    assert vllm.alerts() == []


def test_vllm_hang_in_torch_compile_gets_one_alert_and_one_restart(vllm: Scenario) -> None:
    # The engine core's "No available shared memory broadcast block" and the API server's "Waiting for
    # 1 local, 0 remote core engine proc(s)" go on during the hang: heartbeats, no sign of progress.
    vllm.configure("--scale 0.02 --hang TP2:jit_compile", engine="vllm", phases={"jit_compile": {"deadline": "6s"}})
    vllm.start()
    vllm.sim("--scale 0.02")  # the next start-up is a healthy one
    status = vllm.box.wait_for(lambda: (s := vllm.status()) and len(s["restarted"]) == 1 and s, 120,
                               "phasewatch's restart")
    first = status["restarted"][0]
    [alert] = vllm.box.wait_for(vllm.alerts, 10, "the alert")
    assert (alert["PHASEWATCH_VERDICT"], alert["PHASEWATCH_PHASE"]) == ("stalled", "jit_compile")
    assert "torch.compile of Qwen/Qwen3-32B" in alert["PHASEWATCH_REMEDY"]  # the simulated server's model
    assert alert["PHASEWATCH_INVOCATION"] == first
    vllm.box.wait_for(lambda: restarts_by_phasewatch(vllm), 10, "the restart job")
    status = vllm.wait_state("ready", timeout=90)
    assert status["invocation_id"] != first
    assert len(restarts_by_phasewatch(vllm)) == 1
    assert [a["PHASEWATCH_INVOCATION"] for a in vllm.alerts()] == [first]


@pytest.mark.parametrize("logs", ["", " --json-logs"], ids=["text", "json"])
def test_vllm_worker_oom_is_crashed_with_oom_cause_on_that_worker(vllm: Scenario, logs: str) -> None:
    """Judged alike whether vLLM logs text or NDJSON (its JSON logging config: no process prefix)."""
    vllm.configure(f"--scale 0.02 --oom TP1:kv_cache_alloc{logs}", engine="vllm", actions={"crashed": ["alert"]})
    vllm.start()
    [alert] = vllm.box.wait_for(lambda: [a for a in vllm.alerts() if a["PHASEWATCH_VERDICT"] == "crashed"],
                                90, "the crashed alert")
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PHASEWATCH_CAUSE"]) == (
        "TP1", "kv_cache_alloc", "oom")
    # The simulated server's own arguments: gpu_memory_utilization=0.92 in its non-default args.
    assert "--gpu-memory-utilization (0.92 now)" in alert["PHASEWATCH_REMEDY"]
    if logs:
        assert vllm.lines('"vllm_process_name": "Worker_TP1"')  # it did log JSON
        # `phasewatch logs` reads it through the daemon's stages: the text, tagged, not the JSON
        shown = vllm.box.run(f"{VENV}/bin/phasewatch", "logs", UNIT, "--config", CONFIG_PATH).stdout.splitlines()
        assert shown and not any("| {" in line for line in shown)
        assert any(" TP1 " in line and "kv_cache_alloc" in line and line.endswith("| WorkerProc failed to start.")
                   for line in shown)
    assert restarts_by_phasewatch(vllm) == []
