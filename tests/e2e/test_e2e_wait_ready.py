"""`phasewatch wait-ready` as systemd uses it: in the server's own ExecStartPost= (the unit stays
activating until the model is truly ready; a stall fails the start and Restart= takes over), and
as the shipped oneshot sglang-kimi-ready.service that other units order themselves after."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import CONFIG_PATH, REPO, UNIT, VENV, Scenario
from sandbox import Sandbox

POST_DROPIN = "/run/systemd/system/sglang-kimi.service.d/wait-ready.conf"
CONFIG = CONFIG_PATH
FAILED = "d9b373ed55a64feb8242e02dbe79a49c"  # PID 1: the unit failed


def fired_up_at(scenario: Scenario) -> float:
    [line] = scenario.box.wait_for(lambda: scenario.lines("The server is fired up and ready to roll!"), 60,
                                   "the ready line")
    return int(line["__REALTIME_TIMESTAMP"]) / 1e6


@pytest.fixture
def execstartpost(sandbox: Sandbox) -> Iterator[None]:
    sandbox.write(POST_DROPIN, f"""[Service]
ExecStartPost=+{VENV}/bin/phasewatch wait-ready %n --timeout 90s --config {CONFIG}
TimeoutStartSec=120s
""")
    sandbox.systemctl("daemon-reload")
    yield
    sandbox.run("rm", "-f", POST_DROPIN, "/run/systemd/system/sglang-kimi.service.d/restart.conf")
    sandbox.systemctl("daemon-reload")


def test_execstartpost_holds_the_start_until_ready(scenario: Scenario, execstartpost: None) -> None:
    scenario.configure("--scale 0.01")
    began = time.time()
    result = scenario.box.run("systemctl", "start", UNIT, check=False, timeout=150)
    returned = time.time()
    assert result.returncode == 0, result.stderr
    ready = fired_up_at(scenario)
    assert began + 5 < ready <= returned  # the start job finished only once the model was ready
    assert scenario.unit("ActiveState")["ActiveState"] == "active"


def test_execstartpost_fails_a_stalled_start_and_restart_takes_over(scenario: Scenario,
                                                                     execstartpost: None) -> None:
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture", restart="on-failure",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.box.systemctl("start", "--no-block", UNIT)
    scenario.box.wait_for(lambda: scenario.unit("ActiveState")["ActiveState"] == "activating", 30, "activating")
    scenario.sim("--scale 0.01")  # read at the next ExecStart=: systemd's restart brings a healthy one
    failures = f"MESSAGE_ID={FAILED}"
    failed = scenario.box.wait_for(
        lambda: [e for e in scenario.box.journal(f"UNIT={UNIT}", "_PID=1", failures)
                 if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= scenario.started_at], 60, "the failed start")
    assert failed[0]["UNIT_RESULT"] == "exit-code"
    scenario.box.wait_for(lambda: scenario.unit("ActiveState", "NRestarts") == {"ActiveState": "active",
                                                                                "NRestarts": "1"},
                          120, "systemd's restart to reach ready")
    assert len(scenario.invocations()) >= 1
    log = "\n".join(str(e.get("MESSAGE")) for e in scenario.box.journal(f"_SYSTEMD_UNIT={UNIT}")
                    if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= scenario.started_at)
    assert re.search(r"TP3 stalled in draft_cuda_graph_capture", log)


def _install_ready_unit(box: Sandbox) -> None:
    text = (REPO / "units" / "sglang-kimi-ready.service").read_text()
    text = text.replace("ExecStart=/usr/local/bin/phasewatch wait-ready sglang-kimi.service --timeout 45m",
                        f"ExecStart={VENV}/bin/phasewatch wait-ready sglang-kimi.service --timeout 90s "
                        f"--config {CONFIG}\nBindReadOnlyPaths={REPO}")
    assert f"{VENV}/bin/phasewatch wait-ready" in text
    box.write("/run/systemd/system/sglang-kimi-ready.service", text)
    box.write("/run/systemd/system/router.service", """[Unit]
Requires=sglang-kimi-ready.service
After=sglang-kimi-ready.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
""")
    box.systemctl("daemon-reload")


def test_ready_oneshot_orders_other_units_after_real_readiness(scenario: Scenario) -> None:
    _install_ready_unit(scenario.box)
    scenario.configure("--scale 0.01")
    scenario.box.systemctl("start", UNIT)
    result = scenario.box.run("systemctl", "start", "router.service", check=False, timeout=150)
    assert result.returncode == 0, result.stderr
    ready = fired_up_at(scenario)
    shown: dict[str, Any] = scenario.box.show("router.service", "ActiveState", "ExecMainStartTimestampMonotonic")
    assert shown["ActiveState"] == "active"
    started = scenario.box.run("journalctl", "-u", "router.service", "-o", "json", "--no-pager").stdout
    starts = [int(m) / 1e6 for m in re.findall(r'"__REALTIME_TIMESTAMP":"(\d+)"', started)]
    assert starts and min(starts) >= ready
    assert scenario.box.show("sglang-kimi-ready.service", "ActiveState")["ActiveState"] == "active"
    scenario.box.systemctl("stop", "router.service", "sglang-kimi-ready.service", check=False)
