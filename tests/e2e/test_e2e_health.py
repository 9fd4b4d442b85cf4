"""Health after ready, against the simulator's own HTTP server (/health_generate on :30000)."""

from __future__ import annotations

import time

from e2e_env import Scenario

HEALTH = {"interval": "1s", "timeout": "1s", "failures": 3}


def test_server_that_stops_answering_is_unhealthy_after_n_failures(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --health-fail-after 3", health=HEALTH)
    scenario.start()
    scenario.wait_state("ready", timeout=90)
    ready_at = time.time()
    [alert] = scenario.box.wait_for(
        lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "unhealthy"], 30, "unhealthy")
    assert alert["PRIORITY"] == "4"
    assert "3 health probes failed in a row (last: no answer within 1s)" in alert["MESSAGE"]
    log = scenario.watcher_log()
    assert log.count("health probe http://127.0.0.1:30000/health_generate failed") == 3
    # The first probes (before the server stopped answering) passed: no failure before 3 s.
    assert time.time() - ready_at >= 3 + 3


def test_server_busy_with_decode_lines_is_not_probed_into_the_ground(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --health-fail-after 0 --decode-every 0.3", health=HEALTH)
    scenario.start()
    scenario.wait_state("serving", timeout=90)
    time.sleep(8)
    assert [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "unhealthy"] == []
    assert "health probe" not in scenario.watcher_log()


def test_no_probe_during_start_up(scenario: Scenario) -> None:
    # /health would hang from the start; probing it before ready would count failures.
    scenario.configure("--scale 0.01 --slow-load 2 --health-fail-after 0", health=HEALTH)
    scenario.start()
    scenario.box.wait_for(lambda: (s := scenario.status()) and s.get("phase") == "weight_load", 30, "weight_load")
    time.sleep(4)
    assert "health probe" not in scenario.watcher_log()
