"""PROBE-S3 M-3: one local user held 20 connections to /metrics (trickling a header byte every few
seconds, reopening each one cut) and denied 23 of 30 scrapes. Now each peer (a local user by the uid
of its socket, from /proc/net/tcp) holds at most MAX_PER_PEER slots: uid 65534's 20 idle connections
leave the others' scrapes served. Real sockets, a real process of another uid (`setpriv`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from phasewatch.clock import FakeClock
from phasewatch.config.load import Config
from phasewatch.sinks import http as metrics
from phasewatch.sinks.http import MetricsServer, serve
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.peers import kernel_address, peer_key

UNIT = "sglang-kimi.service"
HOLDER = """import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(20)]
for s in held:
    s.sendall(b"G")  # a request begun, never ended
print("holding", flush=True)
time.sleep(60)
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to connect as another user")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MetricsServer]:
    monkeypatch.setattr(metrics._Handler, "timeout", 30.0)  # the idle ones would hold their slots
    running = serve("127.0.0.1:0", Exporter(Config(unit=UNIT), CollectorRegistry(), FakeClock(wall=1771804502.0)))
    assert running is not None
    yield running
    running.close()


def test_kernel_address_is_proc_net_tcps() -> None:
    assert kernel_address("127.0.0.1", 9877) == "0100007F:2695"
    assert kernel_address("::1", 80) == "00000000000000000000000001000000:0050"


def test_one_local_user_cannot_take_every_slot(server: MetricsServer) -> None:
    port = server.address[1]
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                               HOLDER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        time.sleep(0.3)  # the listener has taken (or refused) all 20
        began = time.monotonic()
        for _ in range(5):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                assert b"phasewatch_unit_ready" in response.read()
        assert time.monotonic() - began < 5
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_loopback_peer_is_its_sockets_owner() -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    try:
        assert peer_key(client.getsockname()) == f"uid {os.geteuid()}"
        assert peer_key(("10.1.2.3", 5555)) == "host 10.1.2.3"
    finally:
        client.close()
        listener.close()
