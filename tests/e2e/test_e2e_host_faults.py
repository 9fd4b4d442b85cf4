"""A failing host under the real systemd: the watcher's state directory (/run/phasewatch-state) is a
tiny tmpfs, filled with dd while a start-up is under way, or mounted read-only before the watcher
starts. Either way the watcher stays up (NRestarts 0), still catches the hang and restarts the unit
once, and says it is degraded: one journal alert per thing it cannot keep, the metric, its status."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import STATE_DIR, UNIT, WATCHER, Scenario, restarts_by_phasewatch

DEGRADED_ID = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7a"
METRICS = "http://127.0.0.1:9877"
HANG = "--scale 0.01 --hang TP3:draft_cuda_graph_capture"


@pytest.fixture
def tiny_state_dir(scenario: Scenario) -> Iterator[Scenario]:
    box = scenario.box
    uid = box.run("id", "-u", "phasewatch").stdout.strip()
    gid = box.run("id", "-g", "phasewatch").stdout.strip()
    box.run("mkdir", "-p", STATE_DIR)
    box.run("mount", "-t", "tmpfs", "-o", f"size=256k,mode=0755,uid={uid},gid={gid}", "tmpfs-state", STATE_DIR)
    try:
        yield scenario
    finally:
        print(box.show(WATCHER, "ActiveState", "NRestarts", "StatusText", "Result"))  # shown when a test fails
        print(scenario.watcher_log()[-6000:])
        box.systemctl("stop", WATCHER, UNIT, check=False)
        box.run("umount", "-l", STATE_DIR, check=False)


def metric(scenario: Scenario, name: str, **labels: str) -> float | None:
    text = scenario.box.run("curl", "-sf", f"{METRICS}/metrics", check=False).stdout
    wanted = {"unit": UNIT, **labels}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body, _, value = line.rpartition(" ")
            pairs = dict(p.split("=", 1) for p in body[len(name) + 1:-1].split(","))
            if {k: v.strip('"') for k, v in pairs.items()} == wanted:
                return float(value)
    return None


def degraded_alerts(scenario: Scenario) -> list[dict[str, Any]]:
    return [a for a in scenario.alerts() if a.get("MESSAGE_ID") == DEGRADED_ID]


def hang_caught_once_and_degraded(scenario: Scenario, kept_in_memory: set[str]) -> None:
    box = scenario.box
    [restart] = box.wait_for(lambda: restarts_by_phasewatch(scenario), 90, "phasewatch's restart")
    stalled = [a for a in scenario.alerts() if a.get("PHASEWATCH_VERDICT") == "stalled"]
    assert [(a["PHASEWATCH_RANK"], a["PHASEWATCH_PHASE"]) for a in stalled] == [("TP3", "draft_cuda_graph_capture")]
    box.wait_for(lambda: metric(scenario, "phasewatch_unit_ready") == 1.0, 90, "the next start-up to be ready")
    assert len(restarts_by_phasewatch(scenario)) == 1
    assert len(scenario.invocations()) == 2
    for what in kept_in_memory:
        box.wait_for(lambda w=what: metric(scenario, "phasewatch_state_degraded", what=w) == 1.0, 30,
                     f"phasewatch_state_degraded{{what={what}}}")
    alerts = degraded_alerts(scenario)
    assert {a["PHASEWATCH_CAUSE"] for a in alerts} >= kept_in_memory
    assert len(alerts) == len({a["PHASEWATCH_CAUSE"] for a in alerts})  # once each
    assert all(a["PRIORITY"] == "3" for a in alerts)
    watcher = box.show(WATCHER, "ActiveState", "NRestarts", "StatusText")
    assert watcher["ActiveState"] == "active" and watcher["NRestarts"] == "0"
    assert "in memory only" in watcher["StatusText"]
    assert "Traceback" not in scenario.watcher_log()
    assert not box.run("sh", "-c", f"ls {STATE_DIR} | grep corrupt", check=False).stdout


def test_state_dir_filled_mid_start_up(tiny_state_dir: Scenario) -> None:
    scenario = tiny_state_dir
    box = scenario.box
    scenario.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    box.wait_for(lambda: scenario.lines("Load weight begin"), 60, "the start-up to be under way")
    box.run("sh", "-c", f"dd if=/dev/zero of={STATE_DIR}/filler bs=4k 2>/dev/null; true")
    assert box.run("sh", "-c", f"df --output=avail {STATE_DIR} | tail -1").stdout.strip() == "0"
    scenario.sim("--scale 0.01")  # the next start-up is a healthy one
    hang_caught_once_and_degraded(scenario, {"state"})
    history = box.run("ls", STATE_DIR).stdout.split()
    assert f"{UNIT}.history.sqlite3" in history  # opened before the disk filled, never moved aside


def test_read_only_state_dir(tiny_state_dir: Scenario) -> None:
    scenario = tiny_state_dir
    box = scenario.box
    box.run("mount", "-o", "remount,ro", STATE_DIR)
    scenario.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    scenario.sim("--scale 0.01")
    hang_caught_once_and_degraded(scenario, {"history", "state"})
    assert box.run("ls", "-A", STATE_DIR).stdout.split() == []
