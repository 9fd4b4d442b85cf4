"""Two hosts on one machine: a group restart through a real Prometheus and a real Alertmanager.

Two throwaway systemds, each in a network namespace this test makes (`ip netns add`), joined by a
veth pair with test-only addresses, 10.250.0.1/30 (node 0) and 10.250.0.2/30 (node 1), on nothing
but these two namespaces. Each runs tools/multinode_sim.py as sglang-kimi.service (TP16 over two
nodes: node 0 TP0..TP7, node 1 TP8..TP15, whose ranks meet at barriers kept by node 0's process
over the veth) and phasewatch with `group: {name: kimi-tp16, nodes: 2}` and its Alertmanager
webhook receiver on the node's address. Node 0's sandbox also runs Prometheus (scraping both
phasewatch instances every 5 s, evaluating the shipped rules every 5 s) and two Alertmanagers (the
shipped route and receiver: both nodes' webhooks, the bearer token from a file), both sent every
alert, so each node gets each notification twice.

Node 1's TP12 hangs in CUDA graph capture; node 0's ranks wait at the next barrier. Node 1 judges
TP12 stalled, node 0 "waiting for another node"; PhasewatchGroupRestart fires; both units are
restarted once; the second start-up is ready on both. The time from the culprit's verdict to both
restarts is printed (pytest -s) and checked under 60 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import STATE_DIR, UNIT, VENV, WATCHER, WATCHER_DROPIN, at
from sandbox import REPO, Sandbox

NODES = ("10.250.0.1", "10.250.0.2")
GROUP = "kimi-tp16"
TOKEN = "e2e-group-token-0123456789abcdef"
TOKEN_PATH = "/run/phasewatch/group.token"
CONFIG_PATH = "/run/phasewatch/sglang-kimi.yaml"
SCRAPE = EVALUATION = 5  # seconds: the latency budget below assumes these
PROM, AM = "http://127.0.0.1:9090", "http://127.0.0.1:9093"
STARTED = "39f53479d3a045ac8e11786248231fbf"
SIM_UNIT = f"""[Unit]
Description=simulated SGLang TP16 over two nodes (phasewatch e2e)

[Service]
Type=simple
EnvironmentFile=/run/sglang-sim.env
ExecStart={VENV}/bin/python {REPO}/tools/multinode_sim.py --nnodes 2 --tp 16 --dist-init-addr {NODES[0]}:5000 \
--step 0.3 $SIM_ARGS
KillMode=control-group
TimeoutStopSec=5s
"""
# The node's address is allowed beside localhost (docs/multi-node.md: the firewall).
GROUP_DROPIN = "[Service]\nIPAddressAllow=10.250.0.0/30\n"
PROMETHEUS_CONFIG = f"""global:
  scrape_interval: {SCRAPE}s
  scrape_timeout: 4s
  evaluation_interval: {EVALUATION}s
rule_files:
  - {REPO}/config/prometheus/phasewatch-rules.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:9093', '127.0.0.1:9095']
scrape_configs:
  - job_name: phasewatch
    static_configs:
      - targets: ['{NODES[0]}:9877', '{NODES[1]}:9877']
"""


def alertmanager_config() -> str:
    shipped = (REPO / "config" / "alertmanager" / "phasewatch-group.yml").read_text()
    return (shipped.replace("node0.example:9878", f"{NODES[0]}:9878").replace("node1.example:9878", f"{NODES[1]}:9878")
            .replace("/etc/alertmanager/phasewatch-group.token", "/run/am/group.token"))


def config(node: int) -> str:
    return json.dumps({
        "unit": UNIT, "rank_skew": "5m", "health": {"enabled": False},
        "restart_budget": {"max": 3, "window": "6h", "backoff": "1s"},
        "phases": {"cuda_graph_capture": {"deadline": "5m", "stall": "6s"}},
        "metrics": {"listen": f"{NODES[node]}:9877"},
        "group": {"name": GROUP, "nodes": 2,
                  "receiver": {"listen": f"{NODES[node]}:9878", "token_file": TOKEN_PATH}}})


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[Sandbox, Sandbox]]:
    for tool in ("prometheus", "prometheus-alertmanager", "curl"):
        if shutil.which(tool) is None:
            message = f"{tool} missing (apt-get install prometheus prometheus-alertmanager curl; scripts/setup.sh)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    names = (f"pwg0-{os.getpid()}", f"pwg1-{os.getpid()}")
    veth = (f"pwga{os.getpid() % 100000}", f"pwgb{os.getpid() % 100000}")
    boxes: list[Sandbox] = []
    made: list[str] = []
    try:
        for name in names:
            ip("netns", "add", name)
            made.append(name)
        ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, end, address in zip(names, veth, NODES, strict=True):
            ip("link", "set", end, "netns", name)
            ip("-n", name, "addr", "add", f"{address}/30", "dev", end)
            ip("-n", name, "link", "set", end, "up")
        for node, name in enumerate(names):
            box = Sandbox(netns=name)
            box.boot()
            boxes.append(box)
            box.write("/run/systemd/system/sglang-kimi.service", SIM_UNIT)
            box.write("/run/systemd/system/phasewatch@.service", (REPO / "units" / "phasewatch@.service").read_text())
            box.write("/run/systemd/system/phasewatch@.service.d/e2e.conf", WATCHER_DROPIN)
            box.write("/run/systemd/system/phasewatch@.service.d/group.conf", GROUP_DROPIN)
            box.write(CONFIG_PATH, config(node))
            box.write(TOKEN_PATH, TOKEN + "\n")
            box.run("chown", "987:987", TOKEN_PATH)
            box.run("chmod", "0400", TOKEN_PATH)
            box.systemctl("daemon-reload")
        hub = boxes[0]
        hub.write("/run/prom/prometheus.yml", PROMETHEUS_CONFIG)
        hub.write("/run/am/alertmanager.yml", alertmanager_config())
        hub.write("/run/am/group.token", TOKEN + "\n")
        hub.run("systemd-run", "--unit=prom-test.service", "/usr/bin/prometheus",
                "--config.file=/run/prom/prometheus.yml", "--storage.tsdb.path=/run/prom-data",
                "--web.listen-address=127.0.0.1:9090")
        # Two Alertmanagers, both sent every alert, not even gossiping: each node gets every
        # notification twice (an HA pair's worst case) and acts once.
        for n, port in enumerate((9093, 9095)):
            hub.run("systemd-run", f"--unit=am-test-{n}.service", "/usr/bin/prometheus-alertmanager",
                    "--config.file=/run/am/alertmanager.yml", f"--storage.path=/run/am-data-{n}",
                    f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=")
        for url in (f"{PROM}/-/ready", f"{AM}/-/ready", "http://127.0.0.1:9095/-/ready"):
            hub.wait_for(lambda u=url: hub.run("curl", "-sf", u, check=False).returncode == 0, 60, url)
        yield boxes[0], boxes[1]
    finally:
        for box in boxes:
            box.shutdown()
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def curl(box: Sandbox, *args: str) -> str:
    return box.run("curl", "-sS", "-m", "10", *args, check=False).stdout


def post(box: Sandbox, node: int, body: str, token: str | None = TOKEN) -> str:
    """The HTTP status of a POST to node's receiver, from node 0's sandbox."""
    auth = ["-H", f"Authorization: Bearer {token}"] if token else []
    return curl(box, "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Content-Type: application/json",
                *auth, "--data-binary", body, f"http://{NODES[node]}:9878/alertmanager")


def metric(box: Sandbox, node: int, name: str, **labels: str) -> float:
    text = curl(box, f"http://{NODES[node]}:9877/metrics")
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def status(box: Sandbox, node: int) -> dict[str, Any]:
    text = curl(box, f"http://{NODES[node]}:9877/status")
    try:
        document: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return document


def alerts(box: Sandbox, kind: str, since: float) -> list[dict[str, Any]]:
    return [e for e in box.journal(f"PHASEWATCH_UNIT={UNIT}", f"PHASEWATCH_VERDICT={kind}") if at(e) >= since]


def starts(box: Sandbox, since: float) -> list[dict[str, Any]]:
    return [e for e in box.journal(f"UNIT={UNIT}", "_PID=1", f"MESSAGE_ID={STARTED}") if at(e) >= since]


def firing(box: Sandbox) -> list[dict[str, Any]]:
    out = curl(box, "-G", f"{AM}/api/v2/alerts", "--data-urlencode", "filter=alertname=PhasewatchGroupRestart")
    try:
        return [a for a in json.loads(out) if a["status"]["state"] == "active"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return []


def begin(boxes: tuple[Sandbox, Sandbox], hang: bool) -> float:
    for node, box in enumerate(boxes):
        box.systemctl("stop", WATCHER, UNIT, check=False)
        box.systemctl("reset-failed", check=False)
        box.run("rm", "-rf", STATE_DIR, check=False)
        args = f"--node-rank {node}" + (" --hang TP12:cuda_graph_capture" if hang and node == 1 else "")
        box.write("/run/sglang-sim.env", f"SIM_ARGS={args}\n")
    began = time.time()
    for box in boxes:
        box.systemctl("start", WATCHER)
    for box in boxes:
        box.wait_for(lambda b=box: b.show(WATCHER, "ActiveState")["ActiveState"] == "active", 30, "phasewatch")
    for box in boxes:
        box.systemctl("start", UNIT)
    return began


def healthy_next(box: Sandbox, node: int) -> None:
    """The start-up after the restart is a healthy one."""
    box.write("/run/sglang-sim.env", f"SIM_ARGS=--node-rank {node}\n")


def notification(alert: dict[str, Any], group: str = GROUP) -> str:
    labels = {**alert["labels"], "group": group}
    return json.dumps({"version": "4", "status": "firing", "receiver": "phasewatch-group", "groupLabels": {},
                       "alerts": [{"status": "firing", "labels": labels, "annotations": alert["annotations"],
                                   "startsAt": alert["startsAt"], "endsAt": alert["endsAt"],
                                   "fingerprint": alert["fingerprint"]}]})


def test_a_hang_on_node_1_restarts_both_nodes_once_through_prometheus_and_alertmanager(
        nodes: tuple[Sandbox, Sandbox]) -> None:
    hub, other = nodes
    began = begin(nodes, hang=True)
    # Node 1 judges TP12 stalled; node 0, whose ranks all finished capture and wait, waits for another node.
    [verdict] = other.wait_for(lambda: alerts(other, "stalled", began), 90, "node 1's stall verdict")
    assert verdict["PHASEWATCH_RANK"] == "TP12" and verdict["PHASEWATCH_PHASE"] == "cuda_graph_capture"
    [waiting] = hub.wait_for(lambda: alerts(hub, "waiting_for_node", began), 60, "node 0 waiting for node 1")
    assert "waiting for another node: all 8 ranks of node 0 of 2 (group kimi-tp16)" in waiting["MESSAGE"]
    assert alerts(hub, "stalled", began) == []
    for node, box in enumerate(nodes):
        healthy_next(box, node)
    [alert] = hub.wait_for(lambda: firing(hub), 60, "PhasewatchGroupRestart in Alertmanager")
    assert {k: alert["labels"][k] for k in ("group", "culprit_node", "culprit_rank", "phase", "reason")} == {
        "group": GROUP, "culprit_node": "1", "culprit_rank": "TP12", "phase": "cuda_graph_capture",
        "reason": "stalled"}

    # Both nodes restart, once, each saying so in its journal with the culprit node, rank and reason.
    decided = [box.wait_for(lambda b=box: alerts(b, "group_restart", began), 60, "the group restart")[0]
               for box in nodes]
    for entry in decided:
        assert "restarted by the group kimi-tp16: node 1 TP12 stalled in cuda_graph_capture" in entry["MESSAGE"]
        assert (entry["PHASEWATCH_RANK"], entry["PHASEWATCH_CAUSE"]) == ("TP12", "stalled")
    latency = max(at(e) for e in decided) - at(verdict)
    print(f"\ngroup restart latency: culprit's verdict -> both restarts {latency:.1f} s "
          f"(scrape {SCRAPE} s, evaluation {EVALUATION} s, Alertmanager group_wait 1 s)")
    assert latency < 60

    # The second start-up reaches ready on both nodes (node 1: done once its ranks captured).
    for node, box in enumerate(nodes):
        box.wait_for(lambda b=box, n=node: status(hub, n).get("invocation", {}).get("outcome") == "ready", 90,
                     f"node {node} ready")
    hub.wait_for(lambda: not firing(hub), 60, "the alert to resolve")
    for node in (0, 1):  # both Alertmanagers delivered it to both nodes
        assert metric(hub, node, "phasewatch_group_webhook_notifications_total") >= 2
        assert metric(hub, node, "phasewatch_group_restarts_total", act="restart") == 1

    # Alertmanager's repeat of the same decision (resent by hand, as it would be): nothing restarts;
    # nor after phasewatch itself restarted and forgot what it handled (the start-up began after it).
    repeat = notification(alert)
    assert [post(hub, n, repeat) for n in (0, 1)] == ["200", "200"]
    for box in nodes:
        box.systemctl("restart", WATCHER)
    for node, box in enumerate(nodes):
        box.wait_for(lambda n=node: status(hub, n).get("invocation", {}).get("outcome") == "ready", 60,
                     f"node {node}'s phasewatch again")
    assert [post(hub, n, repeat) for n in (0, 1)] == ["200", "200"]
    # A forged notification without the token, and one for another group: refused and counted.
    assert post(hub, 1, repeat, token=None) == "401"
    assert post(hub, 1, repeat, token="not-the-token-of-this-group") == "401"
    assert post(hub, 1, notification(alert, group="another-group")) == "403"
    time.sleep(2 * SCRAPE)
    for box in nodes:
        assert len(starts(box, began)) == 2, "one start, one restart"
    assert metric(hub, 1, "phasewatch_group_webhook_refused_total", reason="no_token") == 1
    assert metric(hub, 1, "phasewatch_group_webhook_refused_total", reason="bad_token") == 1
    assert metric(hub, 1, "phasewatch_group_webhook_refused_total", reason="other_group") == 1
    for node in (0, 1):
        assert metric(hub, node, "phasewatch_group_restarts_total", act="ignored") == 1  # (since its restart)
    # The history of each node: the start-up the group ended.
    for box in nodes:
        report = box.run(f"{VENV}/bin/phasewatch", "report", UNIT, "--state-dir", STATE_DIR, check=False).stdout
        assert "restarted by the group: node 1 TP12 stalled in cuda_graph_capture" in report, report


def test_a_hold_on_node_0_stops_the_group_restart_there_and_the_alert_says_so(
        nodes: tuple[Sandbox, Sandbox]) -> None:
    hub, other = nodes
    began = begin(nodes, hang=True)
    hub.run(f"{VENV}/bin/phasewatch", "hold", UNIT, "--for", "1h", "--reason", "driver update",
            "--state-dir", STATE_DIR)
    [alert] = hub.wait_for(lambda: firing(hub), 120, "PhasewatchGroupRestart in Alertmanager")
    assert alert["annotations"]["held_nodes"] == "node 0"
    [refused] = hub.wait_for(lambda: alerts(hub, "group_restart", began), 60, "node 0's refusal")
    assert "not restarting this node: held by the operator" in refused["MESSAGE"]
    assert "(driver update)" in refused["MESSAGE"]
    other.wait_for(lambda: alerts(other, "group_restart", began), 60, "node 1's group restart")
    time.sleep(2 * SCRAPE)
    assert len(starts(hub, began)) == 1 and len(starts(other, began)) == 2
