"""The group's Alertmanager webhook receiver against a real unprivileged user (uid 65534), in the
throwaway systemd (PROBE-S4 C-1, C-2). phasewatch runs as the shipped unit with `group.receiver` on
127.0.0.1:9878; root posts notifications as Alertmanager would (curl).

- uid 65534 holds 8 connections, trickling a byte every 3 s and reopening each one cut: root's
  notifications are still accepted (the per-peer limit, the 10 s deadline).
- uid 65534 holds the port when phasewatch starts: a `receiver_unbound` journal alert,
  `phasewatch_group_receiver_up 0`; once the squatter is gone, the receiver binds within the 5 s
  re-bind spacing and takes notifications.
- with the shipped `phasewatch-receiver@.socket`, PID 1 holds the port: uid 65534 cannot bind it,
  and phasewatch serves on the socket systemd passed.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from e2e_env import UNIT, WATCHER, Scenario, at
from sandbox import REPO

TOKEN = "e2e-receiver-token-0123456789abcdef"
TOKEN_PATH = "/run/phasewatch/group.token"
RECEIVER = "127.0.0.1:9878"
SOCKET = "phasewatch-receiver@sglang-kimi.socket"
NOBODY = ["systemd-run", "--uid=65534", "--gid=65534", "--property=Type=exec"]
TRICKLER = """import socket, time
def opened():
    s = socket.create_connection(("127.0.0.1", 9878))
    s.sendall(b"P")
    return s
held = [opened() for _ in range(8)]
while True:
    time.sleep(3)
    for n, s in enumerate(held):
        try:
            s.sendall(b"O")
        except OSError:
            s.close()
            time.sleep(0.2)
            try:
                held[n] = opened()
            except OSError:
                pass
"""
SQUATTER = """import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (past the earlier tests' TIME_WAITs)
try:
    s.bind(("127.0.0.1", 9878))
except OSError as exc:
    print("squat failed:", exc, flush=True)
    sys.exit(3)
s.listen()
print("squatting", flush=True)
time.sleep(600)
"""


def notification() -> str:
    starts = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    alert = {"status": "firing", "labels": {"alertname": "PhasewatchGroupRestart", "group": "kimi-tp16",
                                            "culprit_node": "1", "culprit_rank": "TP12",
                                            "phase": "cuda_graph_capture", "reason": "stalled"},
             "annotations": {}, "startsAt": starts, "fingerprint": f"e2e{time.time_ns()}"}
    return json.dumps({"version": "4", "status": "firing", "alerts": [alert]})


def configure(s: Scenario) -> None:
    s.configure(group={"name": "kimi-tp16", "nodes": 2, "receiver": {"listen": RECEIVER, "token_file": TOKEN_PATH}})
    s.box.write(TOKEN_PATH, TOKEN + "\n")
    s.box.run("chown", "phasewatch:phasewatch", TOKEN_PATH)
    s.box.run("chmod", "0400", TOKEN_PATH)


def post(s: Scenario) -> str:
    return s.box.run("curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                     "-H", f"Authorization: Bearer {TOKEN}", "--data-binary", notification(),
                     f"http://{RECEIVER}/alertmanager", check=False).stdout


def metric(s: Scenario, name: str, **labels: str) -> float | None:
    out = s.box.run("curl", "-sf", "-m", "5", "http://127.0.0.1:9877/metrics", check=False).stdout
    for line in out.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def start_watcher(s: Scenario) -> None:
    s.box.systemctl("start", WATCHER)
    s.box.wait_for(lambda: metric(s, "phasewatch_group_receiver_up") is not None, 60, "phasewatch's /metrics")


def as_nobody(s: Scenario, unit: str, script: str) -> None:
    s.box.run(*NOBODY, f"--unit={unit}", "/usr/bin/python3", "-c", script)


def test_trickling_connections_of_another_user_leave_alertmanager_served(scenario: Scenario) -> None:
    s = scenario
    configure(s)
    start_watcher(s)
    as_nobody(s, "trickler.service", TRICKLER)
    try:
        s.box.wait_for(lambda: (metric(s, "phasewatch_group_webhook_refused_total", reason="busy") or 0) >= 4,
                       30, "uid 65534's 5th to 8th connections refused as busy")
        began = time.monotonic()
        codes = []
        for _ in range(4):  # across the tricklers' 10 s deadline and their reconnections
            codes.append(post(s))
            time.sleep(3)
        assert codes == ["200"] * 4, codes
        assert time.monotonic() - began < 30
        assert s.box.show("trickler.service", "ActiveState")["ActiveState"] == "active"
        assert (metric(s, "phasewatch_group_webhook_refused_total", reason="timeout") or 0) >= 4  # cut at 10 s
        assert metric(s, "phasewatch_group_webhook_notifications_total") == 4
    finally:
        s.box.systemctl("stop", "trickler.service", check=False)


def test_a_squatter_on_the_port_is_alerted_and_the_receiver_binds_once_it_is_gone(scenario: Scenario) -> None:
    s = scenario
    configure(s)
    as_nobody(s, "squatter.service", SQUATTER)
    try:
        s.box.wait_for(lambda: "squatting" in s.box.run("journalctl", "-u", "squatter.service", "-o", "cat",
                                                         check=False).stdout, 30, "the squatter")
        since = time.time()
        start_watcher(s)
        [alert] = s.box.wait_for(lambda: [e for e in s.box.journal(f"PHASEWATCH_UNIT={UNIT}",
                                                                   "PHASEWATCH_VERDICT=receiver_unbound")
                                          if at(e) >= since], 30, "the receiver_unbound alert")
        assert alert["PRIORITY"] == "2" and f"cannot listen for Alertmanager on {RECEIVER}" in alert["MESSAGE"]
        assert metric(s, "phasewatch_group_receiver_up", group="kimi-tp16") == 0
    finally:
        s.box.systemctl("stop", "squatter.service", check=False)
    s.box.wait_for(lambda: metric(s, "phasewatch_group_receiver_up", group="kimi-tp16") == 1, 30,
                   "the receiver bound again")
    assert post(s) == "200"
    assert s.box.show(WATCHER, "ActiveState")["ActiveState"] == "active"


def test_the_socket_unit_keeps_the_port_from_any_user_and_phasewatch_serves_on_it(scenario: Scenario) -> None:
    s = scenario
    configure(s)
    s.box.write("/run/systemd/system/phasewatch-receiver@.socket",
                (REPO / "units" / "phasewatch-receiver@.socket").read_text())
    s.box.systemctl("daemon-reload")
    try:
        s.box.systemctl("start", SOCKET)
        since = time.time()
        squat = s.box.run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                          SQUATTER, check=False)
        assert squat.returncode == 3 and "Address already in use" in squat.stdout
        start_watcher(s)
        assert metric(s, "phasewatch_group_receiver_up", group="kimi-tp16") == 1
        assert post(s) == "200"
        logged = s.box.run("journalctl", "-u", WATCHER, "-o", "cat", "--since", f"@{since:.0f}", check=False).stdout
        assert "Alertmanager webhook on socket passed by systemd" in logged, logged
        assert not s.box.journal(f"PHASEWATCH_UNIT={UNIT}", "PHASEWATCH_VERDICT=receiver_unbound") or all(
            at(e) < since for e in s.box.journal(f"PHASEWATCH_UNIT={UNIT}", "PHASEWATCH_VERDICT=receiver_unbound"))
    finally:
        s.box.systemctl("stop", WATCHER, SOCKET, check=False)
        s.box.run("rm", "-f", "/run/systemd/system/phasewatch-receiver@.socket", check=False)
        s.box.systemctl("daemon-reload")
