"""phasewatch under journal load, in the throwaway systemd (PROBE-S3 H-2, H-3, H-4): started after a
million serving lines it is READY within seconds and judges; journal rotation and vacuum during a
flood of 50k lines a second cost it no crash, and a hang during the flood is judged and restarted.

The flood comes from tests/e2e/journal_flood.py, started by an ExecStartPost= of the simulated unit
(so its lines are the unit's: `_SYSTEMD_UNIT=sglang-kimi.service`) and released by a file.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from e2e_env import REPO, UNIT, VENV, WATCHER, Scenario, message_of, restarts_by_phasewatch

GO, DONE = "/run/flood-go", "/run/flood-done"
FLOOD_DROPIN = "/run/systemd/system/sglang-kimi.service.d/flood.conf"
JOURNALD_DROPIN = "/run/systemd/journald.conf.d/flood.conf"


@pytest.fixture
def flood(scenario: Scenario) -> Iterator[Scenario]:
    """The scenario with room in the journal for a million entries, the flood writer installed; both
    taken away after."""
    box = scenario.box
    box.run("rm", "-f", GO, DONE)
    box.write(JOURNALD_DROPIN, "[Journal]\nSystemMaxUse=1500M\n")
    box.systemctl("restart", "systemd-journald")
    try:
        yield scenario
    finally:
        box.systemctl("stop", WATCHER, UNIT, check=False)
        box.run("rm", "-f", FLOOD_DROPIN, JOURNALD_DROPIN, GO, DONE, check=False)
        box.systemctl("daemon-reload")
        box.run("journalctl", "--rotate", check=False)
        box.run("journalctl", "--vacuum-files=1", check=False)
        box.systemctl("restart", "systemd-journald")


def install_flood(scenario: Scenario, lines: int, rate: float, kind: str) -> None:
    writer = f"{VENV}/bin/python {REPO}/tests/e2e/journal_flood.py --go {GO} --done {DONE} --lines {lines} " \
             f"--rate {rate} --kind {kind}"
    scenario.box.write(FLOOD_DROPIN, f"[Service]\nExecStartPost=/bin/sh -c '{writer} &'\n")
    scenario.box.systemctl("daemon-reload")


def test_started_after_a_million_serving_lines_phasewatch_is_ready_within_10s_and_judges(flood: Scenario) -> None:
    box = flood.box
    flood.configure("--scale 0.01")
    install_flood(flood, 1_000_000, 0, "access")
    flood.start()
    flood.wait_state("ready", timeout=90)
    box.systemctl("stop", WATCHER)  # (it need not read the flood as it comes: the test is its start after)
    box.write(GO, "")
    box.wait_for(lambda: box.read(DONE), 240, "the million access lines")
    began = time.monotonic()
    box.systemctl("start", WATCHER)  # Type=notify: returns at READY=1
    took = time.monotonic() - began
    status = flood.status()
    assert took < 10, f"READY after {took:.1f}s\n{flood.watcher_log()[-3000:]}"
    assert status is not None and status["state"] in ("ready", "serving"), status
    assert status["ranks"]["TP3"] in ("ready", "serving")
    assert status["entries"] < 200_000  # the start-up and the recent window, not the serving bulk
    # and it judges: the server killed now is a crash of this start-up
    box.systemctl("kill", "--kill-who=main", "-s", "KILL", UNIT)
    # (only this start-up's: the rebuild reads from 5 s before it began, and a start-up of the module
    # before that crashed then is alerted too by a daemon whose state file has not seen it)
    try:
        [crash] = box.wait_for(lambda: [a for a in flood.alerts() if a.get("PHASEWATCH_VERDICT") == "crashed"
                                        and a.get("PHASEWATCH_INVOCATION") == status["invocation_id"]], 30,
                               "the crash alert")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {box.read(DONE)}; READY after {took:.1f}s; status {flood.status()}; alerts "
                             f"{[a['MESSAGE'] for a in flood.alerts()]}\n{flood.watcher_log()[-4000:]}") from None
    assert box.show(WATCHER, "NRestarts")["NRestarts"] == "0"


def test_rotation_and_vacuum_during_a_50k_lines_a_second_flood_cost_no_crash_and_the_hang_is_judged(
        flood: Scenario) -> None:
    box = flood.box
    flood.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                    phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    install_flood(flood, 600_000, 50_000, "noise")
    flood.start()
    flood.sim("--scale 0.004")  # the next start-up is a healthy one
    box.wait_for(lambda: [e for e in flood.lines("Capture draft cuda graph begin") if "TP3]" in e["MESSAGE"]], 90,
                 "TP3 in draft capture")
    # The other ranks end the phase 1.6 s later. Under the flood journald takes their lines in seconds
    # late (it reads the server's stdout when it gets to it), and lines it has not taken are lines no
    # reader can see: released before them, the flood would turn TP3's hang into all eight ranks'.
    box.wait_for(lambda: len({rank for e in flood.lines("Capture draft cuda graph end")
                              for rank in re.findall(r"\bTP\d+\b", message_of(e))}) == 7, 60,
                 "the other ranks' draft capture end")
    box.write(GO, "")  # the flood, while TP3 hangs
    stop = threading.Event()
    rotations = [0]

    def rotate_and_vacuum() -> None:
        while not stop.is_set() and not box.read(DONE):
            box.run("journalctl", "--rotate", check=False)
            box.run("journalctl", "--vacuum-files=6", check=False)
            rotations[0] += 1
            stop.wait(0.5)

    churn = threading.Thread(target=rotate_and_vacuum)
    churn.start()
    try:
        status = box.wait_for(lambda: (s := flood.status()) and len(s["restarted"]) == 1 and s, 150,
                              "phasewatch's restart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {box.read(DONE)}; {rotations[0]} rotations; status {flood.status()}; "
                             f"{box.show(WATCHER, 'NRestarts', 'ActiveState')}; alerts "
                             f"{[a['MESSAGE'] for a in flood.alerts()]}\n{flood.watcher_log()[-5000:]}") from None
    finally:
        stop.set()
        churn.join()
    assert rotations[0] >= 5
    [stalled] = [a for a in flood.alerts() if a.get("PHASEWATCH_VERDICT") == "stalled"]
    assert (stalled["PHASEWATCH_RANK"], stalled["PHASEWATCH_PHASE"]) == ("TP3", "draft_cuda_graph_capture")
    assert stalled["PHASEWATCH_INVOCATION"] == status["restarted"][0]
    assert restarts_by_phasewatch(flood)
    assert box.show(WATCHER, "NRestarts", "ActiveState") == {"NRestarts": "0", "ActiveState": "active"}
    log = flood.watcher_log()
    assert "Traceback" not in log, log[-3000:]
