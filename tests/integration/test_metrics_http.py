"""The metrics listener under hostile clients: slow ones time out, resets are counted (no traceback),
concurrency is bounded, and /status names the daemon that serves it."""

from __future__ import annotations

import logging
import os
import socket
import struct
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

UNIT = "sglang-kimi.service"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MetricsServer]:
    monkeypatch.setattr(metrics._Handler, "timeout", 0.3)  # READ_TIMEOUT, shortened for the test
    exporter = Exporter(Config(unit=UNIT), CollectorRegistry(), FakeClock(wall=1771804502.0))
    running = serve("127.0.0.1:0", exporter)
    assert running is not None
    yield running
    running.close()


def scrape(server: MetricsServer) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.address[1]}/metrics", timeout=5) as response:
        return str(response.read().decode())


def errors(server: MetricsServer, reason: str) -> float:
    prefix = f'phasewatch_http_connection_errors_total{{reason="{reason}",unit="{UNIT}"}} '
    return float(next(line for line in scrape(server).splitlines() if line.startswith(prefix))[len(prefix):])


def wait_for(condition: object, seconds: float = 10.0) -> None:
    """Real sockets, real threads: wait (bounded) for the listener to get there."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def test_slow_client_times_out(server: MetricsServer) -> None:
    with socket.create_connection(("127.0.0.1", server.address[1]), timeout=10) as slow:
        slow.sendall(b"GET /metr")  # and then nothing
        assert "phasewatch_unit_ready" in scrape(server)  # others are served meanwhile
        started = time.monotonic()
        assert slow.recv(1024) == b""  # the listener hung up on it
        assert time.monotonic() - started < 8
    wait_for(lambda: errors(server, "timeout") == 1)
    assert errors(server, "timeout") == 1


def test_connection_reset_is_counted_not_traced(server: MetricsServer, capfd: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="phasewatch.sinks.http"):
        for _ in range(3):
            rude = socket.create_connection(("127.0.0.1", server.address[1]), timeout=5)
            rude.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers not finished
            rude.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            rude.close()  # RST
        wait_for(lambda: errors(server, "reset") == 3)
    assert errors(server, "reset") == 3
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_concurrency_is_bounded(server: MetricsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics._Handler, "timeout", 30.0)  # the idle ones hold their slots
    monkeypatch.setattr(metrics, "MAX_PER_PEER", metrics.MAX_CONNECTIONS)  # the bound over all peers
    idle = [socket.create_connection(("127.0.0.1", server.address[1]), timeout=5)
            for _ in range(metrics.MAX_CONNECTIONS + 3)]
    try:
        wait_for(lambda: sum(1 for s in idle if _closed(s)) >= 3, 5.0)
        assert sum(1 for s in idle if _closed(s)) == 3  # the ones past the limit, at once
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: errors(server, "busy") == 3)
    assert errors(server, "busy") == 3


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


def test_status_names_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INVOCATION_ID", "0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    exporter = Exporter(Config(unit=UNIT), CollectorRegistry(), FakeClock(wall=1771804502.0))
    document = exporter.status()
    assert document["unit"] == UNIT
    assert document["daemon"] == {"invocation_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "pid": os.getpid()}
