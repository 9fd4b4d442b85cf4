"""PROBE-S3 M-4: `phasewatch status` trusted and waited on whatever held the metrics port. Now: a
port held by another user's process is not asked (its socket's owner, /proc/net/tcp), an answer
trickled a byte at a time is cut off at one total deadline, a huge one at a size cap; each is exit
4 (ForeignDaemon), never the unit's state. Real sockets; the squatter runs as uid 65534 (setpriv)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from phasewatch.commands.daemon_answer import get
from phasewatch.commands.status import ask_daemon
from phasewatch.config.load import Config
from phasewatch.errors import ForeignDaemon

UNIT = "sglang-kimi.service"
SQUAT = """import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:
    client, _ = server.accept()
    client.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\n{"unit": "sglang-kimi.service", "daemon": {}, "state": "ready"}')
    client.close()
"""


def serve_once(answer: bytes, delay: float = 0.0) -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def run() -> None:
        server.settimeout(10)
        try:
            client, _ = server.accept()
        except OSError:
            return
        with client:
            try:
                client.recv(4096)
                if delay:
                    for byte in answer:
                        if stop.is_set():
                            return
                        client.sendall(bytes([byte]))
                        time.sleep(delay)
                else:
                    client.sendall(answer)
            except OSError:
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(timeout=5)


@pytest.fixture
def trickler() -> Iterator[int]:
    yield from serve_once(b'HTTP/1.0 200 OK\r\n\r\n{"unit": "sglang-kimi.service", "daemon": {}}' * 10, delay=0.3)


@pytest.fixture
def flooder() -> Iterator[int]:
    yield from serve_once(b"HTTP/1.0 200 OK\r\n\r\n" + b" " * (20 * 1024 * 1024))


def config(port: int) -> Config:
    return Config(unit=UNIT, metrics_listen=f"127.0.0.1:{port}")


def test_a_trickled_answer_is_cut_off_at_one_total_deadline(trickler: int) -> None:
    began = time.monotonic()
    with pytest.raises(ForeignDaemon, match="did not answer within 3s"):
        ask_daemon(config(trickler), expected_invocation=lambda unit: None)
    assert time.monotonic() - began < 5


def test_a_huge_answer_is_refused_at_the_cap(flooder: int) -> None:
    with pytest.raises(ForeignDaemon, match="answers more than 16 MiB"):
        ask_daemon(config(flooder), expected_invocation=lambda unit: None)


def test_nothing_listening_is_none() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    assert get(f"http://127.0.0.1:{port}/status") is None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_port_another_user_holds_is_not_asked() -> None:
    squatter = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                 "-c", SQUAT], stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout is not None
        port = int(squatter.stdout.readline())
        with pytest.raises(ForeignDaemon, match=f"127.0.0.1:{port} is held by a process of uid 65534"):
            ask_daemon(config(port), expected_invocation=lambda unit: None)
    finally:
        squatter.kill()
        squatter.wait()
        if squatter.stdout is not None:
            squatter.stdout.close()


def test_the_daemon_alerts_once_and_binds_again_once_the_port_is_free() -> None:
    """PROBE-S3 M-4, the daemon's side: it said "cannot listen" once in its log and never tried again."""
    import urllib.request

    from prometheus_client import CollectorRegistry

    from phasewatch.clock import FakeClock
    from phasewatch.sinks.http import Rebinder
    from phasewatch.sinks.metrics.exporter import Exporter

    squatter = socket.create_server(("127.0.0.1", 0))
    port = squatter.getsockname()[1]
    said: list[str] = []
    exporter = Exporter(config(port), CollectorRegistry(), FakeClock(wall=1771804502.0))
    rebinder = Rebinder(f"127.0.0.1:{port}", exporter, said.append, spacing=0.2)
    try:
        assert len(said) == 1 and f"cannot listen on 127.0.0.1:{port}" in said[0]
        time.sleep(0.5)
        assert rebinder.server is None  # still held
        squatter.close()
        deadline = time.monotonic() + 10
        while rebinder.server is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the re-bind thread's next try: a real event
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert b"phasewatch_unit_ready" in response.read()
        assert len(said) == 1
    finally:
        squatter.close()
        rebinder.close()
