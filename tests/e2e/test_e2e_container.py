"""A container-wrapped unit: ExecStart runs a client that attaches to a server running elsewhere.

`docker run --rm` (attached) is stood for by a relay: `systemd-run --pipe` starts the simulated server
in a transient service of its own (sim-ranks.service), so its rank processes are NOT in the watched
unit's cgroup; their output goes into a pipe that `cat`, in the watched unit, writes out as its own,
as the docker client does. So every line reaches the journal under the watched unit and one PID
(journald takes the PID and unit of the process that writes to the stream, so the ranks cannot simply
inherit the unit's stdout). phasewatch must judge the start-up from the log alone, restart the watched
unit on a stall, and never take the ranks' absence from the cgroup for their death.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from e2e_env import REPO, UNIT, VENV, Scenario, at, message_of, restarts_by_phasewatch
from sandbox import Sandbox

from phasewatch.sources.host.procs import CGROUP_ROOTS

RANKS_UNIT = "sim-ranks.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/container.conf"
# The client and what it attaches to live and die together, as `docker run --rm` and its container.
CONTAINER_DROPIN = f"""[Service]
ExecStartPre=-/usr/bin/systemctl stop {RANKS_UNIT}
ExecStart=
ExecStart=/bin/sh -c 'exec /usr/bin/systemd-run --pipe --quiet --collect --unit={RANKS_UNIT} \
    -p KillMode=control-group -p TimeoutStopSec=5s \
    {VENV}/bin/python {REPO}/tools/sglang_sim.py run --port 30000 ${{SIM_ARGS}} 2>&1 | /bin/cat'
ExecStopPost=-/usr/bin/systemctl stop {RANKS_UNIT}
"""


@pytest.fixture
def container(scenario: Scenario) -> Iterator[Scenario]:
    box: Sandbox = scenario.box
    box.write(DROPIN, CONTAINER_DROPIN)
    box.systemctl("daemon-reload")
    try:
        yield scenario
    finally:
        box.systemctl("stop", UNIT, RANKS_UNIT, check=False)
        box.run("rm", "-f", DROPIN, check=False)
        box.systemctl("daemon-reload")


def test_container_stall_gets_one_alert_and_one_restart_and_no_rank_death(container: Scenario) -> None:
    s = container
    s.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    s.start()
    s.sim("--scale 0.01")  # the next start-up is a healthy one
    status = s.box.wait_for(lambda: (st := s.status()) and len(st["restarted"]) == 1 and st, 120,
                            "phasewatch's restart")
    first = status["restarted"][0]
    # The premise: every rank's line came through one PID, and no rank ran in the watched unit's cgroup.
    begins = s.lines("Capture draft cuda graph begin")
    said = {rank for e in begins for rank in re.findall(r"(TP\d+)\] Capture draft cuda graph begin", message_of(e))}
    assert said >= {f"TP{n}" for n in range(8)}
    assert len({e["_PID"] for e in begins}) == 1
    alerts = s.box.wait_for(s.alerts, 10, "the alert")
    [alert] = alerts
    assert (alert["PHASEWATCH_VERDICT"], alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"]) == (
        "stalled", "TP3", "draft_cuda_graph_capture")
    assert alert["PHASEWATCH_INVOCATION"] == first
    s.box.wait_for(lambda: restarts_by_phasewatch(s), 10, "the restart job")
    status = s.wait_state("ready", timeout=120)
    assert status["invocation_id"] != first
    assert status["ranks"] == {"main": "ready", **{f"TP{n}": "ready" for n in range(8)}}
    assert len(restarts_by_phasewatch(s)) == 1
    assert [a["PHASEWATCH_VERDICT"] for a in s.alerts()] == ["stalled"]  # no rank_died, no crash
    # The ranks of the running start-up are in the other service's cgroup, none in the watched unit's.
    assert not [t for t in _titles(s.box, UNIT) if t.startswith("sglang::scheduler")]
    assert len([t for t in _titles(s.box, RANKS_UNIT) if t.startswith("sglang::scheduler")]) == 8


def _titles(box: Sandbox, unit: str) -> list[str]:
    """The argv[0] of every process in a unit's cgroup (v1 or v2 hierarchy)."""
    group = box.show(unit, "ControlGroup")["ControlGroup"]
    for root in CGROUP_ROOTS:
        procs = box.read(f"{root}{group}/cgroup.procs")
        if procs is not None:
            return [(box.read(f"/proc/{pid}/cmdline") or "").split("\0")[0] for pid in procs.split()]
    raise AssertionError(f"no cgroup.procs for {unit} ({group})")


def test_container_crash_is_judged_from_the_log(container: Scenario) -> None:
    s = container
    s.configure("--scale 0.01 --exception TP4:cuda_graph_capture", actions={"crashed": ["alert"]})
    s.start()
    [alert] = s.box.wait_for(lambda: [a for a in s.alerts() if a["PHASEWATCH_VERDICT"] == "crashed"],
                             90, "the crashed alert")
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PHASEWATCH_CAUSE"]) == (
        "TP4", "cuda_graph_capture", "cuda_error")
    assert [a["PHASEWATCH_VERDICT"] for a in s.alerts()] == ["crashed"]  # the others' exits: no rank_died


def test_container_rank_killed_is_named_with_rank_processes_host(container: Scenario) -> None:
    # The sandbox is one PID namespace, as a container run with --pid=host: the ranks' titles are visible.
    s = container
    s.configure("--scale 0.01 --slow-load 4", actions={"rank_died": ["alert"]}, rank_processes="host")
    s.start()
    s.box.wait_for(lambda: (st := s.status()) and st.get("ranks", {}).get("TP5") == "weight_load", 30,
                   "weight loading")
    time.sleep(1.5)  # phasewatch looks for rank processes within a second of a new process's first line
    pid = s.box.run("pgrep", "-f", "^sglang::scheduler_TP5").stdout.split()[0]
    killed = time.time()
    s.box.run("kill", "-KILL", pid)
    [alert] = s.box.wait_for(lambda: [a for a in s.alerts() if a["PHASEWATCH_VERDICT"] == "rank_died"],
                             10, "the rank_died alert")
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"]) == ("TP5", "weight_load")
    assert f"(pid {pid})" in alert["MESSAGE"]
    assert at(alert) - killed <= 2.0


def test_container_rank_killed_without_host_mode_is_not_seen_as_a_process(container: Scenario) -> None:
    # The default looks in the unit's cgroup only: the death is left to the log (here the simulated
    # rank dies silently, so nothing is said within the test's time; a stall would follow later).
    s = container
    s.configure("--scale 0.01 --slow-load 4", actions={"rank_died": ["alert"]})
    s.start()
    s.box.wait_for(lambda: (st := s.status()) and st.get("ranks", {}).get("TP5") == "weight_load", 30,
                   "weight loading")
    time.sleep(1.5)
    pid = s.box.run("pgrep", "-f", "^sglang::scheduler_TP5").stdout.split()[0]
    s.box.run("kill", "-KILL", pid)
    time.sleep(3)
    assert [a for a in s.alerts() if a["PHASEWATCH_VERDICT"] == "rank_died"] == []
