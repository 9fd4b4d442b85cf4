"""Signs of life beyond log lines, against a real systemd (issue 11 point 2).

Every rank goes silent early in weight loading for three times the stall window. Streaming a
page-cached file (read() and mmap page touches) is progress: no verdict, the start-up reaches ready.
Only spinning the CPU is not: stalled within the stall window (plus a sampling period and a margin).
phasewatch runs as its static user, the server as root: /proc/PID/io is not readable to it, so the
page faults carry the first case (docs/operations.md); with the drop-in granting
CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH the bytes read show too.
"""

from __future__ import annotations

import json
from typing import Any

from e2e_env import UNIT, VENV, WATCHER, Scenario

STALL = 8.0
PERIOD = 2.0
SILENT = 3 * STALL
CONFIG: dict[str, Any] = {
    "phases": {"weight_load": {"deadline": "5m", "stall": f"{STALL:g}s"}},
    "vitals": {"period": f"{PERIOD:g}s"},
    "actions": {"stalled": ["alert"], "straggler": ["alert"]},
}
PTRACE_DROPIN = "/run/systemd/system/phasewatch@.service.d/vitals-ptrace.conf"


def at(entry: dict[str, Any]) -> float:
    return int(entry["__REALTIME_TIMESTAMP"]) / 1e6


def _silence_began(scenario: Scenario) -> float:
    """The last line any rank printed before the silence: TP0's first loading bar frame."""
    begins = [at(e) for e in scenario.lines("Load weight begin") if "TP0]" in e["MESSAGE"]]
    return min(begins)  # the target model's (the draft model's comes later)


def _get(scenario: Scenario, path: str) -> str:
    """The daemon's /status or /metrics, fetched inside the sandbox (its own loopback)."""
    url = f"http://127.0.0.1:9877{path}"
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=2).read().decode())"
    return scenario.box.run(str(VENV / "bin" / "python"), "-c", code, check=False).stdout


def _silent_stream_reaches_ready(scenario: Scenario, texts: tuple[str, ...], metric: str) -> None:
    scenario.configure(f"--scale 0.01 --silent-load {SILENT:g}:stream", **CONFIG)
    scenario.start()
    seen: list[str] = []

    def streaming() -> bool:
        status = scenario.status() or {}
        vitals = status.get("vitals") or {}
        seen.extend(vitals.values())
        return any(all(t in v for t in texts) for v in vitals.values())

    try:
        scenario.box.wait_for(streaming, 60, f"a rank shown {' and '.join(texts)}")
    except AssertionError:
        pid = scenario.box.show(WATCHER, "MainPID")["MainPID"]
        caps = scenario.box.run("grep", "^Cap", f"/proc/{pid}/status", check=False).stdout
        raise AssertionError(f"shown: {sorted(set(seen))}; watcher {pid}: {caps}; "
                             f"{scenario.watcher_log()[-1500:]}") from None
    document = json.loads(_get(scenario, "/status"))
    assert any(all(t in r["text"] for t in texts) for r in document["vitals"]["ranks"].values()), document["vitals"]
    assert f'{metric}{{rank="TP3",unit="{UNIT}"}}' in _get(scenario, "/metrics")
    scenario.wait_state("ready", timeout=120)
    assert scenario.lines("Load weight end")
    began = _silence_began(scenario)
    end = min(at(e) for e in scenario.lines("Load weight end") if "TP0]" in e["MESSAGE"])
    assert end - began >= SILENT  # the ranks really were silent for 3x the stall window
    assert scenario.alerts() == [], [a["MESSAGE"] for a in scenario.alerts()]
    assert len(scenario.invocations()) == 1


def test_silent_ranks_streaming_a_page_cached_file_are_not_stalled_and_reach_ready(scenario: Scenario) -> None:
    _silent_stream_reaches_ready(scenario, ("faulting in",), "phasewatch_rank_page_faults_total")


def test_with_the_ptrace_drop_in_the_bytes_read_show_too(scenario: Scenario) -> None:
    # docs/operations.md: /proc/PID/io is mode 0400 of the process's owner, and then a ptrace check;
    # the capabilities count only in the host's user namespace (no PrivateUsers=).
    caps = "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH"
    scenario.box.write(PTRACE_DROPIN, f"[Service]\nPrivateUsers=no\nCapabilityBoundingSet={caps}\n"
                                      f"AmbientCapabilities={caps}\n")
    scenario.box.systemctl("daemon-reload")
    try:
        _silent_stream_reaches_ready(scenario, ("reading", "MB/s", "faulting in"), "phasewatch_rank_intake_bytes_total")
    finally:
        scenario.box.run("rm", "-f", PTRACE_DROPIN)
        scenario.box.systemctl("stop", WATCHER, check=False)
        scenario.box.systemctl("daemon-reload")


def test_silent_ranks_only_spinning_the_cpu_are_stalled_within_the_stall_window(scenario: Scenario) -> None:
    scenario.configure(f"--scale 0.01 --silent-load {SILENT:g}:spin", **CONFIG)
    scenario.start()
    alerts = scenario.box.wait_for(lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "stalled"],
                                   60, "a stalled alert")
    began = _silence_began(scenario)
    first = min(alerts, key=at)
    assert first["PHASEWATCH_PHASE"] == "weight_load"
    assert "no output or progress" in first["MESSAGE"]
    assert at(first) - began <= STALL + PERIOD + 2.0, at(first) - began
    assert at(first) - began >= STALL - 0.5
    status = scenario.status() or {}
    assert not any(("reading" in t or "faulting" in t) for t in (status.get("vitals") or {}).values()), status
    assert UNIT in first["MESSAGE"]
