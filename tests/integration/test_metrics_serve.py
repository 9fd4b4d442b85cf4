"""Metrics and /status: a fresh CollectorRegistry per test, a pipeline fed with real SGLang lines (the
v0.5.9 start-up of test_policy), values read with `registry.get_sample_value`; one HTTP round trip
on an ephemeral loopback port; `promtool check metrics` on the exposition."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.exposition import generate_latest

from fakes import (
    UNIT,
    MetricsFixture,
    up_to_draft_capture,
    up_to_ready,
)
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.records import Phase
from phasewatch.sinks.http import serve
from phasewatch.stages.s4_judge import policy


@pytest.fixture
def m() -> MetricsFixture:
    return MetricsFixture()


def stalled_journal() -> MetricsFixture:
    config = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(6, None)})
    m = MetricsFixture(config)
    up_to_draft_capture(m.journal)
    m.journal.wait(7)
    return m


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (apt-get install prometheus; scripts/setup.sh)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def test_http_round_trip_of_metrics_and_status() -> None:
    m = stalled_journal()
    m.exporter.saw_verdicts(m.journal.verdicts())
    m.publish()
    server = serve("127.0.0.1:0", m.exporter)
    assert server is not None
    try:
        host, port = server.address
        assert host == "127.0.0.1" and port > 0
        code, content_type, body = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and content_type.startswith("text/plain; version=")  # no Accept: the text format
        text = body.decode()
        assert f'phasewatch_rank_phase{{phase="draft_cuda_graph_capture",rank="TP3",unit="{UNIT}"}} 1.0' in text
        assert "# TYPE phasewatch_phase_duration_seconds histogram" in text
        code, content_type, body = get(f"http://127.0.0.1:{port}/status")
        assert (code, content_type) == (200, "application/json")
        status = json.loads(body)
        assert status["unit"] == UNIT
        assert status["invocation"]["phase"] == "draft_cuda_graph_capture"
        assert status["invocation"]["ranks"]["TP3"]["deadline_seconds"] == 6
        assert status["invocation"]["ranks"]["TP3"]["elapsed_seconds"] == 7
        assert {v["kind"] for v in status["invocation"]["verdicts"]} == {"stalled"}
        assert status["restart_budget"]["state"] == "armed"
        assert get(f"http://127.0.0.1:{port}/nothing")[0] == 404
        assert get(f"http://127.0.0.1:{port}/")[0] == 200
    finally:
        server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_bind_failure_is_logged_and_the_daemon_runs_on(m: MetricsFixture, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="phasewatch.sinks.http"):
            assert serve(f"127.0.0.1:{port}", m.exporter) is None
    assert f"cannot listen on 127.0.0.1:{port}" in caplog.text
    assert "running without /metrics and /status" in caplog.text


@pytest.mark.parametrize("stage", ["empty", "stalled", "ready"])
def test_promtool_accepts_the_exposition(stage: str) -> None:
    tool = promtool()
    if stage == "stalled":
        m = stalled_journal()
        m.exporter.saw_verdicts(policy.evaluate(m.journal.invocation(), m.journal.now, m.journal.config))
        m.exporter.restarted("stalled")
        m.exporter.observe_probe(0.2, False)
        m.publish()
    else:
        m = MetricsFixture()
        if stage == "ready":
            up_to_ready(m.journal)
            m.publish()
    exposition = generate_latest(m.registry)
    result = subprocess.run([tool, "check", "metrics"], input=exposition, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == ""
