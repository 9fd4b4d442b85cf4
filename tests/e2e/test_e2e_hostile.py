"""phasewatch against a hostile journal, in the throwaway systemd (see sandbox.py).

The server itself prints lines built to break a log reader (5000-digit numbers, quadratic-regex
bait; tools/sglang_sim.py --hostile) while TP3 hangs, and an unprivileged user (uid 65534) forges
entries in the unit's name with `logger --journald`: a "Started" with a new invocation, a phantom
TP9 line, a "Suppressed 123456 messages" notice and a "fired up and ready". phasewatch must not
restart itself, must still catch the real hang and restart the unit once, and must take none of
the forgeries as the unit's own. The hostile-content half needs branch `content` (issue 9, points
2 and 3): bounded numbers and linear patterns.
"""

from __future__ import annotations

import time
from typing import Any

from e2e_env import UNIT, WATCHER, Scenario, at, restarts_by_phasewatch

DEADLINE = 6.0
FORGED_INVOCATION = "ffffffffffffffffffffffffffffffff"
METRICS = "http://127.0.0.1:9877"
STARTED = "39f53479d3a045ac8e11786248231fbf"
SUPPRESSED = "a596d6fe7bfa4994828e72309e95d61e"


def forge(s: Scenario, **fields: str) -> None:
    """One journal entry sent by uid 65534 (nobody), as any local user could."""
    text = "".join(f"{key}={value}\n" for key, value in fields.items())
    s.box.run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "logger", "--journald",
              input=text.encode())


def forge_all(s: Scenario) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    forge(s, OBJECT_SYSTEMD_UNIT=UNIT, MESSAGE=f"[{when} TP9] Load weight begin. avail mem=137.95 GB")
    forge(s, OBJECT_SYSTEMD_UNIT=UNIT, MESSAGE_ID=SUPPRESSED, N_DROPPED="123456",
          MESSAGE=f"Suppressed 123456 messages from {UNIT}")
    forge(s, OBJECT_SYSTEMD_UNIT=UNIT, MESSAGE=f"[{when}] The server is fired up and ready to roll!")
    forge(s, OBJECT_SYSTEMD_UNIT=UNIT, UNIT=UNIT, MESSAGE_ID=STARTED, INVOCATION_ID=FORGED_INVOCATION,
          JOB_TYPE="start", JOB_RESULT="done", MESSAGE=f"Started {UNIT}.")


def metric(s: Scenario, name: str) -> dict[str, float]:
    """Samples of one metric family, by their label text."""
    out = s.box.run("curl", "-sf", f"{METRICS}/metrics").stdout
    samples: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            samples[labels[len(name):]] = float(value)
    return samples


def test_forged_entries_neither_blind_nor_fool_phasewatch(scenario: Scenario) -> None:
    hang_caught_despite_forgeries(scenario, "")


def test_forged_entries_and_hostile_lines_neither_blind_nor_kill_phasewatch(scenario: Scenario) -> None:
    # Eight times over: a reader that takes seconds per bait line falls far behind the hang's deadline
    # (or past its own WatchdogSec=) on any machine; one that is linear does not notice.
    hang_caught_despite_forgeries(scenario, "--hostile 8")


def hang_caught_despite_forgeries(s: Scenario, sim_args: str) -> None:
    s.configure(f"--scale 0.01 {sim_args} --hang TP3:draft_cuda_graph_capture",
                phases={"draft_cuda_graph_capture": {"deadline": f"{DEADLINE:.0f}s"}})
    s.start()
    watcher_pid = s.box.show(WATCHER, "MainPID")["MainPID"]
    s.sim("--scale 0.01")  # the next start-up is a healthy one
    [started] = s.box.wait_for(s.invocations, 30, "PID 1's Started entry")
    real = started["INVOCATION_ID"]
    [begin] = s.box.wait_for(lambda: [e for e in s.lines("Capture draft cuda graph begin") if "TP3]" in e["MESSAGE"]],
                             60, "TP3 entering the phase it hangs in")
    forge_all(s)
    assert any(e.get("_UID") == "65534" for e in s.box.journal(f"OBJECT_SYSTEMD_UNIT={UNIT}"))

    status: dict[str, Any] = s.box.wait_for(lambda: (st := s.status()) and len(st["restarted"]) == 1 and st, 90,
                                            "phasewatch's restart of the hung start-up")
    assert status["restarted"] == [real]  # the hung one, not the forged invocation
    [restart] = s.box.wait_for(lambda: restarts_by_phasewatch(s), 10, "the restart job")
    alerts = s.box.wait_for(s.alerts, 10, "the alert")
    assert [(a["PHASEWATCH_VERDICT"], a["PHASEWATCH_RANK"], a["PHASEWATCH_INVOCATION"]) for a in alerts] == [
        ("stalled", "TP3", real)]
    # In time: neither the forgeries nor the cost of the hostile lines delayed the verdict.
    assert at(alerts[0]) - at(begin) <= DEADLINE + 2
    assert at(restart) - at(begin) <= DEADLINE + 2

    status = s.wait_state("ready", timeout=90)
    assert status["invocation_id"] not in (real, FORGED_INVOCATION)
    assert "TP9" not in status["ranks"]
    assert status["restarted"] == [real], s.watcher_log()
    assert len(restarts_by_phasewatch(s)) == 1
    assert len(s.invocations()) == 2
    rejected = status["entries_rejected"]
    assert rejected.get("lifecycle_not_from_pid1", 0) >= 1
    assert rejected.get("line_not_from_unit", 0) >= 2
    assert rejected.get("suppression_not_from_journald", 0) >= 1
    assert metric(s, "phasewatch_journal_lines_lost_total") == {f'{{unit="{UNIT}"}}': 0.0}
    by_reason = {labels.split('reason="')[1].split('"')[0]: value
                 for labels, value in metric(s, "phasewatch_entries_rejected_total").items()}
    assert by_reason["line_not_from_unit"] >= 2 and by_reason["lifecycle_not_from_pid1"] >= 1
    assert by_reason["suppression_not_from_journald"] >= 1
    # phasewatch itself never died on what it read.
    watcher = s.box.show(WATCHER, "NRestarts", "MainPID", "ActiveState")
    assert (watcher["NRestarts"], watcher["MainPID"], watcher["ActiveState"]) == ("0", watcher_pid, "active")
    assert "Traceback" not in s.watcher_log()
