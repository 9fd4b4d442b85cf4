"""The restart gate against a real systemd (issue 38): a broken GPU, the same failure twice.

The driver's XID lines are kernel entries (`_TRANSPORT=kernel`, which only journald sets, for
/dev/kmsg): a unit cannot write one. They are made as a journal export and imported with
systemd-journal-remote into the sandbox's journal directory, where the daemon's kernel reader
(sources/host/gpu_health.py) finds the new file. NVML is the fake of tests/e2e/fake_nvml, whose GPU 3 (held
by TP3's process) sits at PCI 0000:3b:00.

- Start-up 1: a kernel XID 13 (the application's own fault) on TP3's GPU, and the XID 79 text written
  by the unit itself (an ExecStartPre= line, even with SyslogIdentifier=kernel): TP3 crashes and is
  restarted; the unit's line is never read as an XID.
- Start-up 2: a kernel XID 79 (fallen off the bus) on TP3's GPU: TP3's crash is said to be on a
  faulted GPU, a gpu_fault alert names GPU 3 and TP3, the restart is refused with a paging alert.
- A stall on TP3, then one on TP5: both restarted (different failures); TP5's again: refused ("the
  same failure twice"). (After a refusal only a person starts the unit, and that clears the count.)
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from e2e_env import UNIT, Scenario, at, restarts_by_phasewatch
from test_e2e_gpu_vitals import DROPIN, _fake_nvml

CONFIG: dict[str, Any] = {
    "vitals": {"period": "1s"},
    "actions": {"crashed": ["alert", "restart"], "stalled": ["alert", "restart"]},
}
CRASH = "--scale 0.01 --exception TP3:cuda_graph_capture"
FORGED = "/run/systemd/system/sglang-kimi.service.d/forged-xid.conf"
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
XID_13 = ("NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on "
          "(GPC 0, TPC 0, SM 0): Out Of Range Address")
STAGING = "/var/log/journal/staging"


def kernel_line(scenario: Scenario, message: str, name: str) -> None:
    """`message` as the kernel's entry, now: a journal export imported by systemd-journal-remote, then
    moved whole into the journal's directory (readable by the systemd-journal group, as journald's)."""
    box = scenario.box
    export = (f"__REALTIME_TIMESTAMP={int(time.time() * 1e6)}\n__MONOTONIC_TIMESTAMP=1000000\n"
              f"_BOOT_ID={uuid.uuid4().hex}\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nPRIORITY=3\n"
              f"_HOSTNAME=phasewatch-e2e\nMESSAGE={message}\n\n")
    box.write(f"/run/{name}.export", export)
    machine = box.run("cat", "/etc/machine-id").stdout.strip()
    box.run("mkdir", "-p", STAGING)
    box.run("/lib/systemd/systemd-journal-remote", "-o", f"{STAGING}/remote-{name}.journal", f"/run/{name}.export")
    box.run("chgrp", "systemd-journal", f"{STAGING}/remote-{name}.journal")
    box.run("mv", f"{STAGING}/remote-{name}.journal", f"/var/log/journal/{machine}/remote-{name}.journal")


def on_its_gpu(scenario: Scenario, invocation: str) -> None:
    """Waits until the vitals show TP3 holding its GPU in this start-up (NVML's process list): the
    rank a GPU's XID is mapped to."""
    scenario.box.wait_for(lambda: (s := scenario.status()) and s.get("invocation_id") == invocation
                          and "GPU" in ((s.get("vitals") or {}).get("TP3") or ""), 30, "TP3 seen on its GPU")


def verdicts(scenario: Scenario, kind: str) -> list[dict[str, Any]]:
    return [a for a in scenario.alerts() if a.get("PHASEWATCH_VERDICT") == kind]


def test_a_kernel_xid_79_on_tp3s_gpu_refuses_the_restart_an_xid_13_or_the_units_own_line_does_not(
        scenario: Scenario) -> None:
    box = scenario.box
    _fake_nvml(scenario, "cuda-graph-capture.jsonl", "cuda_graph_capture")
    box.write(FORGED, f"[Service]\nSyslogIdentifier=kernel\nExecStartPre=/bin/echo '{XID_79}'\n")
    box.systemctl("daemon-reload")
    try:
        scenario.configure(CRASH, **CONFIG, restart_budget={"max": 3, "window": "6h", "backoff": "1s",
                                                             "same_failure": 5})
        scenario.start()
        [started] = box.wait_for(lambda: scenario.invocations(), 30, "start-up 1")
        on_its_gpu(scenario, started["INVOCATION_ID"])
        kernel_line(scenario, XID_13, "xid13")
        box.wait_for(lambda: "XID 13 in the kernel's lines" in scenario.watcher_log(), 30, "the XID 13 read")
        box.wait_for(lambda: len(scenario.invocations()) == 2, 90, "phasewatch's restart after the crash")
        first, second = (e["INVOCATION_ID"] for e in scenario.invocations())
        assert verdicts(scenario, "restart_refused") == []
        faults = [a for a in verdicts(scenario, "gpu_fault") if a["PHASEWATCH_INVOCATION"] == first]
        assert len(faults) == 1, [a["MESSAGE"] for a in faults]
        app_fault = faults[0]
        assert (app_fault["PHASEWATCH_RANK"], app_fault["PHASEWATCH_CAUSE"]) == ("TP3", "xid_13")
        assert "recommended action: restart_app" in app_fault["MESSAGE"]
        assert [e for e in box.journal(f"_SYSTEMD_UNIT={UNIT}") if XID_79 in str(e.get("MESSAGE"))]  # (written)
        assert "XID 79" not in scenario.watcher_log()  # the unit's own line is no kernel line

        on_its_gpu(scenario, second)
        kernel_line(scenario, XID_79, "xid79")
        [refused] = box.wait_for(lambda: verdicts(scenario, "restart_refused"), 90, "the refused restart")
        assert (refused["PHASEWATCH_INVOCATION"], refused["PHASEWATCH_CAUSE"], refused["PRIORITY"]) == (
            second, "gpu_fault", "2")
        assert "not restarting onto a faulted GPU: TP3 needs reboot (xid_79)" in refused["MESSAGE"]
        assert "reboot the node" in refused["PHASEWATCH_REMEDY"]
        faults = [a for a in verdicts(scenario, "gpu_fault") if a["PHASEWATCH_INVOCATION"] == second]
        # (the XID 13 of start-up 1 falls in the minute before start-up 2 too: alerted for it first)
        fallen = [a for a in faults if a["PHASEWATCH_CAUSE"] == "xid_79"]
        assert len(fallen) == 1, [a["MESSAGE"] for a in faults]
        fault = fallen[0]
        assert (fault["PHASEWATCH_RANK"], fault["PHASEWATCH_CAUSE"]) == ("TP3", "xid_79")
        assert "GPU 3 (PCI 0000:3b:00) (TP3's GPU) reported XID 79 (GPU has fallen off the bus)" in fault["MESSAGE"]
        [crash] = [a for a in verdicts(scenario, "crashed") if a["PHASEWATCH_INVOCATION"] == second]
        assert "on a faulted GPU: GPU 3 (PCI 0000:3b:00) reported XID 79" in crash["MESSAGE"]
        status = scenario.status() or {}
        assert "not restarting onto a faulted GPU" in (status.get("restart_refused") or ""), status
        time.sleep(3)  # (a start made anyway follows the refusal at once; a crashed unit is started, not restarted)
        assert len(scenario.invocations()) == 2
    finally:
        box.run("rm", "-f", DROPIN, FORGED)
        box.systemctl("daemon-reload")
        # The kernel's XIDs must not reach the next test's start-up (a daemon reads an hour back).
        box.run("sh", "-c", "rm -f /var/log/journal/*/remote-xid*.journal", check=False)


def test_a_different_stall_is_restarted_the_same_one_twice_in_a_row_is_refused(scenario: Scenario) -> None:
    box = scenario.box
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture", **CONFIG,
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    scenario.sim("--scale 0.01 --hang TP5:draft_cuda_graph_capture")  # the start-ups after it stall on TP5
    box.wait_for(lambda: len(restarts_by_phasewatch(scenario)) == 2, 120, "TP3's stall, then TP5's, restarted")
    [refused] = box.wait_for(lambda: verdicts(scenario, "restart_refused"), 90, "TP5's second stall refused")
    assert refused["PHASEWATCH_CAUSE"] == "same_failure" and refused["PRIORITY"] == "2"
    assert ("not restarting: the same failure twice: stalled in draft_cuda_graph_capture (deadline) on TP5"
            in refused["MESSAGE"]), refused["MESSAGE"]
    time.sleep(3)  # (a restart made anyway follows the refusal at once)
    assert len(restarts_by_phasewatch(scenario)) == 2 and len(scenario.invocations()) == 3
    stalls = sorted(verdicts(scenario, "stalled"), key=at)
    assert [a["PHASEWATCH_RANK"] for a in stalls] == ["TP3", "TP5", "TP5"]
    assert refused["PHASEWATCH_INVOCATION"] == stalls[-1]["PHASEWATCH_INVOCATION"]
