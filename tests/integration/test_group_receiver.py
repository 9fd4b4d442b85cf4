"""The group's Alertmanager webhook receiver on a real loopback socket: what it refuses and counts,
and the daemon (its edges faked, tests/unit/test_daemon.py's way) restarting once per decision."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, Group, PhaseLimits
from phasewatch.config.sections import GroupReceiver
from phasewatch.errors import ConfigError
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.receiver.alert_receiver import AlertReceiverSource, read_token
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

GROUP = Group("kimi-tp16", 2)
UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
TOKEN = "s3cret-token-of-the-group-0123456789"
INV = "0123456789abcdef0123456789abcdef"
STALL_CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})


def rfc3339(ts: float) -> str:
    # Go's way: nanoseconds and a zone
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f123Z")


def notification(starts_at: float, group: str = "kimi-tp16", status: str = "firing") -> bytes:
    alert = {"status": status, "labels": {"alertname": "PhasewatchGroupRestart", "group": group,
                                          "culprit_node": "1", "culprit_rank": "TP12",
                                          "phase": "cuda_graph_capture", "reason": "stalled",
                                          "severity": "critical", "trigger": "verdict"},
             "annotations": {"held_nodes": "", "summary": "..."}, "startsAt": rfc3339(starts_at),
             "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "0f1e2d3c4b5a6978"}
    return json.dumps({"version": "4", "status": status, "receiver": "phasewatch-group",
                       "groupLabels": {"group": group}, "alerts": [alert]}).encode()


def daemon(tmp_path: Path, config: Config, receiver: AlertReceiverSource
           ) -> tuple[Daemon, RecordingUnit, RecordingAlerter, FakeClock]:
    from fakes import ScriptedJournal

    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter = RecordingAlerter(UNIT)
    app = compose(config, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(receiver=receiver))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    return app, unit, alerter, clock


def post(address: tuple[str, int], body: bytes, token: str | None = TOKEN, path: str = "/alertmanager",
         method: str = "POST") -> int:
    req = urllib.request.Request(f"http://{address[0]}:{address[1]}{path}", data=body if method == "POST" else None,
                                 method=method, headers={"Content-Type": "application/json",
                                                         **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        with exc:  # (its response holds the socket: closed now, not when the collector finds it)
            return int(exc.code)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[AlertReceiverSource]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o400)
    spec = GroupReceiver("127.0.0.1:0", str(token_file))
    made = AlertReceiverSource(UNIT, GROUP, spec, read_token(spec), clock=FakeClock(wall=T0 + 60))
    made.listen()
    yield made
    made.close()


def test_the_receiver_refuses_anything_but_this_groups_notification_with_the_token(
        receiver: AlertReceiverSource) -> None:
    address = receiver.address
    assert post(address, notification(T0), token=None) == 401
    assert post(address, notification(T0), token="wrong-token-wrong-token") == 401
    assert post(address, notification(T0), path="/other") == 404
    assert post(address, b"", method="GET") == 405
    assert post(address, notification(T0, group="other")) == 403
    assert post(address, b"{not json") == 400
    assert receiver.take() == []
    assert post(address, notification(T0 + 5)) == 200
    [taken] = receiver.take()
    assert taken.culprit_rank == "TP12" and taken.group == "kimi-tp16"
    assert receiver.counts()["refused"] == {"no_token": 1, "bad_token": 1, "path": 1, "method": 1,
                                            "other_group": 1, "bad_payload": 1}


def test_a_short_token_file_stops_the_daemon(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("short\n")
    (tmp_path / "token").chmod(0o400)
    with pytest.raises(ConfigError, match="16 to 4096"):
        read_token(GroupReceiver("127.0.0.1:0", str(tmp_path / "token")))


def test_the_daemon_restarts_once_per_group_decision_and_never_alone(tmp_path: Path, receiver: AlertReceiverSource
                                                                    ) -> None:
    group = replace(GROUP, receiver=GroupReceiver("127.0.0.1:0", "/t"))
    app, unit, alerter, clock = daemon(tmp_path, replace(STALL_CONFIG, group=group), receiver)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    [waiting] = alerter.sent
    assert waiting["PHASEWATCH_VERDICT"] == "waiting_for_node" and unit.restarts == []
    assert post(receiver.address, notification(T0 + 62)) == 200
    clock.jump(2)
    app.step(max_wait=5)
    assert unit.restarts == [INV]
    alert = alerter.sent[-1]
    assert alert["PHASEWATCH_VERDICT"] == "group_restart" and alert["PHASEWATCH_RANK"] == "TP12"
    assert "restarted by the group kimi-tp16: node 1 TP12 stalled in cuda_graph_capture" in alert["MESSAGE"]
    assert post(receiver.address, notification(T0 + 62)) == 200  # Alertmanager's repeat
    clock.jump(2)
    app.step(max_wait=5)
    assert unit.restarts == [INV] and receiver.counts()["acts"] == {"restart": 1, "ignored": 1}
    assert app.group.ended_by == {INV: "restarted by the group: node 1 TP12 stalled in cuda_graph_capture"}


def test_the_receiver_speaks_tls_when_given_a_certificate_and_refuses_plain_http(tmp_path: Path) -> None:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o400)
    spec = GroupReceiver("127.0.0.1:0", str(token_file), str(cert), str(key))
    made = AlertReceiverSource(UNIT, GROUP, spec, read_token(spec), clock=FakeClock(wall=T0 + 60))
    made.listen()
    try:
        host, port = made.address
        context = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(f"https://{host}:{port}/alertmanager", data=notification(T0 + 5), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10, context=context) as answer:
            assert answer.status == 200
        assert len(made.take()) == 1
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            post(made.address, notification(T0 + 5))  # plain HTTP to the TLS listener
        deadline = time.monotonic() + 10  # (the client may see the TLS alert before the server counted it)
        while made.counts()["refused"] != {"tls": 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made.counts()["refused"] == {"tls": 1}
    finally:
        made.close()
