"""Health after ready: the probe (through httpx's transport seam) and the unhealthy verdict."""

from __future__ import annotations

import httpx

from phasewatch.config.load import Config, HealthCheck, parse_config
from phasewatch.pipeline import Pipeline
from phasewatch.records import Event, EventKind, JournalRecord
from phasewatch.sources.host.probe import default_url, probe
from phasewatch.stages.s4_judge import policy

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
URL = "http://127.0.0.1:30000/health_generate"


def answer(status: int) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(status, json={}))


def test_probe_ok_on_200() -> None:
    result = probe(URL, 30, answer(200))
    assert (result.ok, result.status, result.error) == (True, 200, None)


def test_probe_fails_on_503() -> None:
    result = probe(URL, 30, answer(503))
    assert (result.ok, result.status, result.error) == (False, 503, "HTTP 503")


def test_probe_fails_on_timeout_with_a_clear_message() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    result = probe(URL, 25, httpx.MockTransport(hang))
    assert (result.ok, result.error) == (False, "no answer within 25s")


def test_probe_fails_on_refused_connection() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    result = probe(URL, 25, httpx.MockTransport(refuse))
    assert not result.ok and result.error == "ConnectError: [Errno 111] Connection refused"


def test_default_url_from_server_args() -> None:
    assert default_url("0.0.0.0", 30000) == URL
    assert default_url("10.0.0.5", 8080) == "http://10.0.0.5:8080/health_generate"
    assert default_url("::1", 30000) == "http://[::1]:30000/health_generate"
    assert default_url(None, None) is None


def test_health_config() -> None:
    config = parse_config("unit: x.service\nhealth:\n  interval: 10s\n  timeout: 25s\n  failures: 2\n")
    assert config.health == HealthCheck(None, 10.0, 25.0, 2, True)


def ready_pipeline(config: Config) -> Pipeline:
    pipeline = Pipeline(config)
    lines = ["[2026-11-29 08:00:00] server_args=ServerArgs(host='0.0.0.0', port=30000, tp_size=1)",
             "[2026-11-29 08:00:01] Load weight begin. avail mem=70.00 GB",
             "[2026-11-29 08:00:09] The server is fired up and ready to roll!"]
    for n, line in enumerate(lines):
        pipeline.feed(JournalRecord(line, T0 + n, pid=10, invocation_id="inv"), T0 + n)
    return pipeline


def fail(pipeline: Pipeline, at: float) -> None:
    pipeline.tracker.apply(Event(EventKind.PROBE_FAILED, at, text="no answer within 30s", invocation_id="inv"), at)


def test_unhealthy_after_n_failed_probes_in_a_row() -> None:
    config = Config(unit=UNIT, health=HealthCheck(failures=3))
    pipeline = ready_pipeline(config)
    inv = pipeline.snapshot().current
    assert inv is not None and inv.server is not None and inv.server.port == 30000
    fail(pipeline, T0 + 40)
    fail(pipeline, T0 + 70)
    assert policy.evaluate(pipeline.snapshot().current, T0 + 71, config) == []  # type: ignore[arg-type]
    fail(pipeline, T0 + 100)
    [verdict] = policy.evaluate(pipeline.snapshot().current, T0 + 101, config)  # type: ignore[arg-type]
    assert (verdict.kind, verdict.cause, verdict.phase, verdict.episode) == ("unhealthy", "health_probe", "ready", 1)
    assert verdict.message == (f"{UNIT}: 3 health probes failed in a row (last: no answer within 30s); "
                               "the server is not answering")


def test_a_good_probe_or_a_batch_line_resets_the_count() -> None:
    config = Config(unit=UNIT, health=HealthCheck(failures=2))
    pipeline = ready_pipeline(config)
    fail(pipeline, T0 + 40)
    pipeline.tracker.apply(Event(EventKind.PROBE_OK, T0 + 50, invocation_id="inv"), T0 + 50)
    fail(pipeline, T0 + 60)
    pipeline.feed(JournalRecord("[2026-11-29 08:01:10] Decode batch, #running-req: 12, #token: 48213, token usage: "
                                "0.02, cuda graph: True, gen throughput (token/s): 1021.55, #queue-req: 0",
                                T0 + 70, pid=11, invocation_id="inv"), T0 + 70)
    fail(pipeline, T0 + 80)
    inv = pipeline.snapshot().current
    assert inv is not None and inv.health_failures == 1 and inv.proof_of_life == T0 + 70
    assert policy.evaluate(inv, T0 + 81, config) == []


def test_probe_results_during_start_up_are_ignored() -> None:
    config = Config(unit=UNIT, health=HealthCheck(failures=1))
    pipeline = Pipeline(config)
    pipeline.feed(JournalRecord("[2026-11-29 08:00:01 TP0] Load weight begin. avail mem=70.00 GB", T0, pid=11,
                                invocation_id="inv"), T0)
    fail(pipeline, T0 + 1)
    inv = pipeline.snapshot().current
    assert inv is not None and inv.health_failures == 0
    assert [v.kind for v in policy.evaluate(inv, T0 + 2, config)] == []


def test_each_run_of_failures_is_its_own_verdict() -> None:
    config = Config(unit=UNIT, health=HealthCheck(failures=1))
    pipeline = ready_pipeline(config)
    fail(pipeline, T0 + 40)
    [first] = policy.evaluate(pipeline.snapshot().current, T0 + 41, config)  # type: ignore[arg-type]
    pipeline.tracker.apply(Event(EventKind.PROBE_OK, T0 + 50, invocation_id="inv"), T0 + 50)
    fail(pipeline, T0 + 60)
    [second] = policy.evaluate(pipeline.snapshot().current, T0 + 61, config)  # type: ignore[arg-type]
    assert first.key != second.key
