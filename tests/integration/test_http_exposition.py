"""The daemon's listener over real loopback sockets, served by prometheus_client's WSGI app: gzip when
asked, OpenMetrics when preferred, HEAD like GET without a body, /status beside /metrics, other methods
refused, and a client that resets while the answer is written counted, not traced."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from phasewatch.clock import FakeClock
from phasewatch.config.load import Config
from phasewatch.sinks.http import MetricsServer, serve
from phasewatch.sinks.metrics.exporter import Exporter

UNIT = "sglang-kimi.service"


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    exporter = Exporter(Config(unit=UNIT), CollectorRegistry(), FakeClock(wall=1771804502.0))
    running = serve("127.0.0.1:0", exporter)
    assert running is not None
    yield running
    running.close()


def request(server: MetricsServer, method: str, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.address[1], timeout=5)
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_plain_scrape_is_the_text_format(server: MetricsServer) -> None:
    code, headers, body = request(server, "GET", "/metrics")
    assert code == 200 and headers["content-type"].startswith("text/plain; version=")
    assert "content-encoding" not in headers
    assert f'phasewatch_unit_ready{{unit="{UNIT}"}} 0.0' in body.decode()
    assert int(headers["content-length"]) == len(body)


def test_gzip_when_the_scraper_accepts_it(server: MetricsServer) -> None:
    code, headers, body = request(server, "GET", "/metrics", **{"Accept-Encoding": "gzip"})
    assert code == 200 and headers["content-encoding"] == "gzip"
    assert "phasewatch_unit_ready" in gzip.decompress(body).decode()


def test_openmetrics_when_the_scraper_prefers_it(server: MetricsServer) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    code, headers, body = request(server, "GET", "/metrics", Accept=accept)
    assert code == 200 and headers["content-type"].startswith("application/openmetrics-text")
    assert body.decode().rstrip().endswith("# EOF")


def test_head_answers_like_get_without_a_body(server: MetricsServer) -> None:
    for path in ("/metrics", "/status", "/"):
        got = request(server, "GET", path)
        code, headers, body = request(server, "HEAD", path)
        assert (code, body) == (200, b""), path
        assert headers["content-type"] == got[1]["content-type"], path
        assert int(headers["content-length"]) > 0, path


def test_status_beside_metrics_and_the_rest_refused(server: MetricsServer) -> None:
    code, headers, body = request(server, "GET", "/status")
    assert code == 200 and headers["content-type"] == "application/json"
    assert json.loads(body)["unit"] == UNIT
    assert request(server, "GET", "/nothing")[0] == 404
    code, headers, _ = request(server, "POST", "/metrics")
    assert code == 405 and headers["allow"] == "GET, HEAD"


def test_a_failing_collector_is_a_500_not_a_dead_listener(server: MetricsServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def collect(self) -> Iterator[object]:
            raise RuntimeError("boom")

    registry = server._httpd.exporter.registry
    broken = Broken()
    registry.register(broken)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="phasewatch.sinks.http"):
        assert request(server, "GET", "/metrics")[0] == 500
    registry.unregister(broken)  # type: ignore[arg-type]
    assert request(server, "GET", "/metrics")[0] == 200
    assert "collecting the metrics failed" in caplog.text
