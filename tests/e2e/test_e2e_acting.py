"""Issue 22, part 1 (PROBE-S3 C-1) against the real systemd, with the shipped WatchdogSec=30s: a hook
that hangs to its default timeout, a py-spy that floods, an nvidia-smi that never returns, not even
to SIGKILL (frozen in a v1 freezer cgroup, as a driver call on a wedged GPU is: the kill stays
pending), and a daemon SIGKILLed mid-action. In each, the hung start-up is restarted exactly once,
within its bound, and (but the last, which is killed on purpose) phasewatch is never killed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import REPO, STATE_DIR, UNIT, VENV, WATCHER, Scenario, at, move_to, restarts_by_phasewatch

HANG = "--scale 0.01 --hang TP3:draft_cuda_graph_capture"
DEADLINE = 6.0
FAKEBIN = "/run/pw-fakebin"
FREEZER = "/sys/fs/cgroup/freezer/pw-e2e-stuck"
SLACK = 12.0  # journald, D-Bus and a loaded 2-core machine


@pytest.fixture
def acting(scenario: Scenario) -> Iterator[Scenario]:
    box = scenario.box
    box.run("mkdir", "-p", FAKEBIN)
    box.write(f"/run/systemd/system/{WATCHER}.d/fakebin.conf",
              f"[Service]\nEnvironment=PATH={FAKEBIN}:/usr/local/bin:/usr/bin:/bin\n")
    box.systemctl("daemon-reload")
    try:
        yield scenario
    finally:
        print(box.show(WATCHER, "ActiveState", "NRestarts", "Result"))  # shown when a test fails
        print(scenario.watcher_log()[-8000:])
        box.run("sh", "-c", f"[ -d {FREEZER} ] && echo THAWED > {FREEZER}/freezer.state; true", check=False)
        box.run("umount", str(VENV / "bin" / "py-spy"), check=False)
        box.run("rm", "-rf", FAKEBIN, f"/run/systemd/system/{WATCHER}.d/fakebin.conf", check=False)
        box.systemctl("daemon-reload")
        box.systemctl("stop", WATCHER, check=False)
        box.run("sh", "-c", f"[ -d {FREEZER} ] && rmdir {FREEZER}; true", check=False)


def hang_begins(scenario: Scenario) -> float:
    [begin] = scenario.box.wait_for(
        lambda: [e for e in scenario.lines("Capture draft cuda graph begin") if "TP3]" in e["MESSAGE"]], 60,
        "TP3 entering the hung phase")
    return at(begin)


def watchdog_kills(scenario: Scenario) -> list[dict[str, Any]]:
    return [e for e in scenario.box.journal(f"UNIT={WATCHER}", "_PID=1")
            if at(e) >= scenario.started_at and "Watchdog timeout" in str(e.get("MESSAGE"))]


def restarted_once_within(scenario: Scenario, bound: float, killed: int = 0) -> None:
    box = scenario.box
    begin = hang_begins(scenario)
    scenario.sim("--scale 0.01")  # the next start-up is healthy
    [restart] = box.wait_for(lambda: restarts_by_phasewatch(scenario), DEADLINE + bound + 60, "phasewatch's restart")
    assert at(restart) - begin <= DEADLINE + bound + SLACK, (at(restart) - begin, bound)
    scenario.wait_state("ready", timeout=90)
    assert len(restarts_by_phasewatch(scenario)) == 1 and len(scenario.invocations()) == 2
    watcher = box.show(WATCHER, "ActiveState", "NRestarts")
    assert watcher == {"ActiveState": "active", "NRestarts": str(killed)}, watcher
    assert watchdog_kills(scenario) == []
    assert "Traceback" not in scenario.watcher_log()


def test_a_hook_that_hangs_to_its_default_timeout(acting: Scenario) -> None:
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     hooks={"hang": {"exec": ["/bin/sleep", "300"]}},  # the default timeout: 30s
                     actions={"stalled": ["alert", "hook:hang", "restart"]})
    acting.start()
    restarted_once_within(acting, 30.0 + 1.0)
    assert "hook hang killed after its timeout of 30s" in acting.watcher_log()


def test_a_py_spy_that_floods(acting: Scenario) -> None:
    box = acting.box
    box.write(f"{FAKEBIN}/py-spy", "#!/bin/sh\nexec /usr/bin/yes 'Thread 1 (idle): flooding stand-in'\n")
    box.run("chmod", "0755", f"{FAKEBIN}/py-spy")
    box.run("mount", "--bind", f"{FAKEBIN}/py-spy", str(VENV / "bin" / "py-spy"))  # (this sandbox's mounts only)
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     actions={"stalled": ["evidence", "alert", "restart"]}, evidence={"timeout": "8s"})
    acting.start()
    restarted_once_within(acting, 8.0 + 3.0)
    [alert] = [a for a in acting.alerts() if a.get("PHASEWATCH_VERDICT") == "stalled"]
    text = box.read(alert["PHASEWATCH_EVIDENCE"]) or ""
    assert "flooding stand-in" in text and len(text) < 600 * 1024


def test_an_nvidia_smi_that_never_returns_even_to_sigkill(acting: Scenario) -> None:
    box = acting.box
    pids = f"{STATE_DIR}/smi.pids"
    box.write(f"{FAKEBIN}/nvidia-smi", f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n")
    box.run("chmod", "0755", f"{FAKEBIN}/nvidia-smi")
    box.run("mkdir", "-p", FREEZER)
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     actions={"stalled": ["evidence", "alert", "restart"]}, evidence={"timeout": "10s"})
    acting.start()
    first = box.wait_for(lambda: (box.read(pids) or "").split()[:1], 60, "nvidia-smi to be run for evidence")
    box.write(f"{FREEZER}/cgroup.procs", first[0])
    box.write(f"{FREEZER}/freezer.state", "FROZEN")
    box.wait_for(lambda: (box.read(f"{FREEZER}/freezer.state") or "").strip() == "FROZEN", 10, "the freeze")
    restarted_once_within(acting, 10.0 + 3 * 1.0)
    # Still there, its SIGKILL pending: abandoned, not waited on.
    assert first[0] in (box.read(f"{FREEZER}/cgroup.procs") or "").split()
    assert "did not finish in time" in (box.read(
        [a for a in acting.alerts() if a.get("PHASEWATCH_VERDICT") == "stalled"][0]["PHASEWATCH_EVIDENCE"]) or "")


def test_a_daemon_killed_mid_action_restarts_the_unit_when_it_is_back(acting: Scenario) -> None:
    box = acting.box
    started = f"{STATE_DIR}/hook-started"
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     hooks={"slow": {"exec": ["/bin/sh", "-c", f"touch {started}; exec sleep 300"], "timeout": "1m"}},
                     actions={"stalled": ["alert", "hook:slow", "restart"]})
    acting.start()
    box.wait_for(lambda: box.read(started) is not None, 60, "the slow hook to run")
    assert restarts_by_phasewatch(acting) == []
    box.systemctl("kill", "-s", "KILL", WATCHER)
    restarted_once_within(acting, 5.0 + 10.0, killed=1)  # RestartSec=5s, then the daemon's own start
    assert "making the restart recorded as pending" in acting.watcher_log()
    assert [a["PHASEWATCH_VERDICT"] for a in acting.alerts()].count("stalled") == 1  # sent before the kill


def test_a_guarded_start_waiting_for_leftovers_survives_a_phasewatch_restart(acting: Scenario) -> None:
    """H-6: the start that waited for a leftover lived in the daemon's memory only: after a restart of
    phasewatch (an upgrade) the server stayed stopped once the leftover was gone."""
    box = acting.box
    box.write("/etc/polkit-1/rules.d/51-phasewatch-leftovers.rules",
              (REPO / "units" / "polkit" / "51-phasewatch-leftovers.rules.example").read_text())
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     leftovers={"check": True, "wait": "5m"})
    acting.start()
    acting.sim("--scale 0.01")
    box.run("sh", "-c", "setsid systemd-run --scope --unit=escaped-rank-h6 -q bash -c "
            "\"trap '' TERM; exec -a sglang::scheduler_TP3 sleep 600\" </dev/null >/dev/null 2>&1 &")
    procs = " ".join(f"{root}/system.slice/escaped-rank-h6.scope/cgroup.procs"
                     for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"))
    pid = box.wait_for(lambda: box.run("sh", "-c", f"cat {procs} 2>/dev/null | head -1", check=False).stdout.strip(),
                       20, "the escaped rank")
    # One of this start-up's processes (PROBE-S3 C-2: a title alone is nobody's survivor): in the unit's
    # cgroup when the stop begins, out of it before systemd's SIGKILL.
    move_to(acting, pid, acting.unit("ControlGroup")["ControlGroup"])
    box.wait_for(lambda: acting.unit("ActiveState")["ActiveState"] == "deactivating", 90, "phasewatch's stop",
                 interval=0.05)
    move_to(acting, pid, "/escaped-h6.leaf")
    try:
        box.wait_for(lambda: [a for a in acting.alerts() if a.get("PHASEWATCH_VERDICT") == "restart_blocked"], 90,
                     "the restart_blocked alert")
        box.systemctl("restart", WATCHER)  # an upgrade, while the start waits
        box.wait_for(lambda: box.show(WATCHER, "ActiveState")["ActiveState"] == "active", 30, "phasewatch back")
        time.sleep(2)  # (its first steps)
    finally:
        box.run("kill", "-9", pid, check=False)
    box.wait_for(lambda: len(acting.invocations()) == 2, 30, "the start once the leftover is gone")
    acting.wait_state("ready", timeout=90)
    assert "its start is pending" in acting.watcher_log()


FLAKY_POLKIT = "/etc/polkit-1/rules.d/10-phasewatch-e2e-flaky.rules"
FLAKY_RULE = """// e2e: polkit refuses phasewatch's first two restarts (a transient polkit or D-Bus failure)
var phasewatchE2eRefused = 0;
polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.systemd1.manage-units" && subject.user == "phasewatch" &&
            action.lookup("verb") == "restart" && phasewatchE2eRefused < 2) {
        phasewatchE2eRefused++;
        return polkit.Result.NO;
    }
});
"""


def test_a_refused_restart_is_tried_again(acting: Scenario) -> None:
    """H-7: a RestartUnit that failed once (EINTR, a transient D-Bus or polkit error) was never tried again."""
    box = acting.box
    box.write(FLAKY_POLKIT, FLAKY_RULE)
    try:
        time.sleep(1)  # (polkitd reads its rules again when the directory changes)
        acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
        acting.start()
        restarted_once_within(acting, 1.0 + 2.0 + 2 * 2.0)  # two refusals, the backoffs, the third try
    finally:
        box.run("rm", "-f", FLAKY_POLKIT, check=False)
    failed = [a for a in acting.alerts() if a.get("PHASEWATCH_VERDICT") == "restart_failed"]
    assert len(failed) == 1, failed
    assert acting.watcher_log().count("restart refused (try") == 2


def test_a_nul_in_a_crash_line_reaches_the_hook_escaped(acting: Scenario) -> None:
    """H-1: the crash verdict quotes the line; a NUL in it (sent by the server over the native protocol)
    made the hook's spawn raise `ValueError: embedded null byte` and the daemon exit."""
    box = acting.box
    crash = "--scale 0.01 --exception TP4:cuda_graph_capture"
    acting.configure(crash, hooks={"env": {"exec": ["/usr/bin/env"], "timeout": "5s"}},
                     actions={"crashed": ["alert", "hook:env", "restart"]})
    box.write("/run/sglang-sim.env", f"SIM_ARGS={crash}\nSGLANG_SIM_NATIVE_NUL=1\n")
    acting.start()
    box.wait_for(lambda: [a for a in acting.alerts() if a.get("PHASEWATCH_VERDICT") == "crashed"], 90,
                 "the crashed alert")
    acting.sim("--scale 0.01")
    box.wait_for(lambda: "hook env: PHASEWATCH_MESSAGE=" in acting.watcher_log(), 30, "the hook's output")
    assert "\\x00" in acting.watcher_log()
    box.wait_for(lambda: len(acting.invocations()) == 2, 60, "phasewatch's restart after the crash")
    acting.wait_state("ready", timeout=90)
    assert box.show(WATCHER, "ActiveState", "NRestarts") == {"ActiveState": "active", "NRestarts": "0"}
    assert "Traceback" not in acting.watcher_log()


def test_a_start_up_begun_while_the_hook_ran_is_not_restarted(acting: Scenario) -> None:
    """PROBE-S4 H-1: the operator, reading the alert, restarts the unit while the hook delays
    phasewatch's restart; that restart was then made on the operator's clean new start-up."""
    box = acting.box
    started = f"{STATE_DIR}/hook-started"
    acting.configure(HANG, phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                     hooks={"slow": {"exec": ["/bin/sh", "-c", f"touch {started}; exec sleep 300"], "timeout": "15s"}},
                     actions={"stalled": ["alert", "hook:slow", "restart"]})
    acting.start()
    box.wait_for(lambda: box.read(started) is not None, 60, "the slow hook to run")
    acting.sim("--scale 0.01")  # the operator's start-up is clean
    box.systemctl("restart", UNIT)
    box.wait_for(lambda: "not made: the unit was started again since" in acting.watcher_log(), 15 + 45,
                 "the worker to get to the restart")
    acting.wait_state("ready", timeout=90)
    time.sleep(2)  # (a restart made anyway would show by now: it follows the log line at once)
    assert len(acting.invocations()) == 2  # the first, and the operator's: never a third
    assert len(restarts_by_phasewatch(acting)) == 1  # (the operator's `systemctl restart` is a restart job too)
    assert "restart requested" not in acting.watcher_log()
    assert "Traceback" not in acting.watcher_log()
