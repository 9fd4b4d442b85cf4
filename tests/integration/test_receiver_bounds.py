"""PROBE-S4 C-1, C-2, L-2, L-5 on real sockets: the group's Alertmanager webhook receiver bounded
like the metrics listener. Eight connections of another local user (uid 65534, `setpriv`), each
trickling a byte every 2 s and reopened when cut, no longer keep a valid notification out; a
connection is cut at its deadline however slowly it trickles; a busy receiver answers 503; refusals
are counted each but logged once a minute; a port held by another process is an alert, a metric
at 0, and bound again once free; never bound, the loop raises UnavailableError (exit 69)."""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from phasewatch.clock import SystemClock
from phasewatch.config.load import Config
from phasewatch.config.sections import Group, GroupReceiver
from phasewatch.errors import UnavailableError
from phasewatch.sinks.peers import peer_key
from phasewatch.sources.base import Instant
from phasewatch.sources.receiver.alert_receiver import AlertReceiverSource, read_token, start_receiver
from phasewatch.sources.receiver.receiver_gate import Gate
from phasewatch.sources.receiver.receiver_http import Deadlines

UNIT = "sglang-kimi.service"
GROUP = Group("kimi-tp16", 2)
TOKEN = "s3cret-token-of-the-group-0123456789"
STRANGER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
TRICKLER = """import socket, sys, time
port, count, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def opened():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"P")
    return s
held = [opened() for _ in range(count)]
print("trickling", flush=True)
while True:
    time.sleep(every)
    for n, s in enumerate(held):
        try:
            s.sendall(b"O")  # 'POST /alertmanager ...', one byte at a time, never ended
        except OSError:
            s.close()
            time.sleep(0.2)
            try:
                held[n] = opened()
            except OSError:
                pass
"""
needs_stranger = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                    reason="needs root and setpriv to connect as another user")


def notification(starts_at: float) -> bytes:
    alert = {"status": "firing", "labels": {"alertname": "PhasewatchGroupRestart", "group": GROUP.name,
                                            "culprit_node": "1", "culprit_rank": "TP12",
                                            "phase": "cuda_graph_capture", "reason": "stalled"},
             "annotations": {}, "fingerprint": "0f1e2d3c4b5a6978",
             "startsAt": datetime.fromtimestamp(starts_at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    return json.dumps({"version": "4", "status": "firing", "alerts": [alert]}).encode()


def post(address: tuple[str, int], body: bytes, token: str | None = TOKEN) -> int:
    request = urllib.request.Request(f"http://{address[0]}:{address[1]}/alertmanager", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        with exc:  # (its response holds the socket: closed now, not when the collector finds it)
            return int(exc.code)


def spec(tmp_path: Path, listen: str = "127.0.0.1:0") -> GroupReceiver:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o400)  # (others may not read it: file_trust.check_token_file)
    return GroupReceiver(listen, str(token_file))


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[AlertReceiverSource]:
    made = AlertReceiverSource(UNIT, GROUP, spec(tmp_path), read_token(spec(tmp_path)), peer_of=peer_key)
    made.listen()
    yield made
    made.close()


@needs_stranger
def test_eight_trickling_connections_of_another_user_do_not_keep_a_notification_out(
        receiver: AlertReceiverSource) -> None:
    trickler = subprocess.Popen([*STRANGER, sys.executable, "-c", TRICKLER, str(receiver.address[1]), "8", "2"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert trickler.stdout is not None and trickler.stdout.readline().strip() == "trickling"
        time.sleep(0.5)  # the listener has taken (or refused) all 8
        for _ in range(3):
            assert post(receiver.address, notification(time.time())) == 200
            time.sleep(1)
        assert len(receiver.take()) == 3
        assert receiver.counts()["refused"].get("busy", 0) >= 4  # uid 65534's 5th to 8th
    finally:
        trickler.kill()
        trickler.wait()
        if trickler.stdout is not None:
            trickler.stdout.close()


def test_a_trickling_connection_is_cut_at_the_deadline(tmp_path: Path) -> None:
    made = AlertReceiverSource(UNIT, GROUP, spec(tmp_path), read_token(spec(tmp_path)), deadline=1.5)
    made.listen()
    try:
        conn = socket.create_connection(made.address)
        began = time.monotonic()
        with conn:
            for byte in b"POST /alertmanager HTTP/1.0\r\nContent-Length: 10\r\n":
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    break
                if select.select([conn], [], [], 0.3)[0]:
                    break  # cut: EOF readable
        assert 1.4 < time.monotonic() - began < 5
        deadline = time.monotonic() + 5
        while made.counts()["refused"] != {"timeout": 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made.counts()["refused"] == {"timeout": 1}
    finally:
        made.close()


def test_a_busy_receiver_answers_503_with_retry_after(tmp_path: Path) -> None:
    made = AlertReceiverSource(UNIT, GROUP, spec(tmp_path), read_token(spec(tmp_path)), gate=Gate(total=1, kept=0))
    made.listen()
    try:
        with socket.create_connection(made.address) as holder:
            holder.sendall(b"POST")
            time.sleep(0.2)
            with socket.create_connection(made.address, timeout=5) as second:
                answer = second.recv(4096)
        assert answer.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
        assert b"\r\nRetry-After: 5\r\n" in answer
        assert made.counts()["refused"]["busy"] == 1
    finally:
        made.close()


def test_refusals_are_counted_each_and_logged_once_a_minute(receiver: AlertReceiverSource,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phasewatch")
    for _ in range(30):
        assert post(receiver.address, notification(time.time()), token=None) == 401
    assert receiver.counts()["refused"] == {"no_token": 30}
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == [f"[{UNIT}] webhook request from uid {os.geteuid()} refused: no_token"]


def test_a_notification_nested_too_deep_is_a_400(receiver: AlertReceiverSource) -> None:
    assert post(receiver.address, b"[" * 100_000 + b"]" * 100_000) == 400
    assert post(receiver.address, notification(time.time() + 3600)) == 400  # startsAt an hour ahead
    assert receiver.counts()["refused"] == {"bad_payload": 2} and receiver.take() == []


def readable(fd: int, within: float) -> bool:
    return bool(select.select([fd], [], [], within)[0])


def test_a_held_port_is_alerted_shown_and_bound_again_once_free(tmp_path: Path) -> None:
    squatter = socket.create_server(("127.0.0.1", 0))
    listen = f"127.0.0.1:{squatter.getsockname()[1]}"
    config = Config(unit=UNIT, group=Group(GROUP.name, 2, receiver=spec(tmp_path, listen)))
    said: list[str] = []
    made = start_receiver(config, said.append, peer_key, spacing=0.2, give_up_after=60)
    assert made is not None
    try:
        [why] = said
        assert f"cannot listen for Alertmanager on {listen}" in why and "exits (status 69" in why
        assert made.counts()["up"] == {"": 0}
        squatter.close()
        deadline = time.monotonic() + 10
        while not made.up and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made.counts()["up"] == {"": 1} and made.address[1] == int(listen.rsplit(":", 1)[1])
        assert post(made.address, notification(time.time())) == 200
    finally:
        made.close()


def test_a_port_never_bound_ends_the_daemon_with_status_69(tmp_path: Path) -> None:
    squatter = socket.create_server(("127.0.0.1", 0))
    listen = f"127.0.0.1:{squatter.getsockname()[1]}"
    config = Config(unit=UNIT, group=Group(GROUP.name, 2, receiver=spec(tmp_path, listen)))
    made = start_receiver(config, lambda why: None, peer_key, spacing=0.1, give_up_after=0.3)
    assert made is not None
    try:
        [wake] = made.fds()
        assert readable(wake, 10)  # the loop is woken ...
        clock = SystemClock()
        with pytest.raises(UnavailableError, match="cannot listen for Alertmanager") as raised:
            made.collect(Instant(clock.monotonic(), clock.wall()), [wake])  # ... and ends
        assert raised.value.exit_status == 69
    finally:
        made.close()
        squatter.close()


def test_a_socket_passed_by_systemd_is_used_instead_of_binding(tmp_path: Path) -> None:
    if shutil.which("systemd-socket-activate") is None:
        pytest.skip("systemd-socket-activate missing")
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]  # (a free port, closed again)
    listen = f"127.0.0.1:{port}"
    script = f"""import sys, time
from phasewatch.config.load import Config
from phasewatch.config.sections import Group, GroupReceiver
from phasewatch.sources.receiver.alert_receiver import start_receiver
receiver = GroupReceiver("127.0.0.1:1", {str(tmp_path / "token")!r})
config = Config(unit={UNIT!r}, group=Group({GROUP.name!r}, 2, receiver=receiver))
made = start_receiver(config, lambda why: print("unbound", why, flush=True), lambda a: "peer")
print("listening", made.address, flush=True)
while not made.take():
    time.sleep(0.05)
print("taken", flush=True)
"""
    spec(tmp_path)
    # (the config names port 1, which this user may not bind: only the passed socket can serve)
    child = subprocess.Popen(["systemd-socket-activate", "-l", listen, "--fdname=receiver", sys.executable, "-c",
                              script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if post(("127.0.0.1", port), notification(time.time())) == 200:
                    break  # (the first connection starts the child)
            except urllib.error.URLError:
                time.sleep(0.2)  # (not listening yet)
        out = child.communicate(timeout=20)[0]
        assert f"listening ('127.0.0.1', {port})" in out and "taken" in out and "unbound" not in out, out
    finally:
        child.kill()
        child.communicate()


def test_a_connection_handed_to_the_deadlines_as_the_receiver_closes_is_closed_not_collected() -> None:
    """A refused (busy) connection lingers on the deadline thread, and is closed when the receiver
    closes; one handed in after (a trickler connecting again during the close) is closed at once:
    left in the stopped thread's list, the collector found it later, in another test, unclosed."""
    deadlines = Deadlines()
    lingering, peer = socket.socketpair()
    late, late_peer = socket.socketpair()
    try:
        deadlines.add(time.monotonic() + 3600, lingering.close)
        deadlines.stop()
        assert deadlines.add(time.monotonic() + 3600, late.close) == -1
        assert late.fileno() == -1
        until = time.monotonic() + 5
        while lingering.fileno() != -1 and time.monotonic() < until:
            time.sleep(0.01)
        assert lingering.fileno() == -1
    finally:
        for sock in (lingering, peer, late, late_peer):
            sock.close()
