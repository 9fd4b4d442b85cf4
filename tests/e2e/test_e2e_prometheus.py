"""A real Prometheus scraping phasewatch inside the sandbox (its own loopback: nothing of the host's
is reached, and the host's Prometheus, if any, is not started: the sandbox boots basic.target).

Prometheus runs as a transient unit with a 1 s scrape of phasewatch's 127.0.0.1:9877 and loads
config/prometheus/phasewatch-rules.yml; the test asks its HTTP API, from inside the sandbox, what it
saw of a start-up whose TP3 hangs in the draft model's CUDA graph capture, phasewatch's restart, and
the healthy start-up after it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import UNIT, Scenario
from sandbox import REPO, Sandbox

PROMETHEUS = "/usr/bin/prometheus"
PROM_UNIT = "prom-test.service"
PROM = "http://127.0.0.1:9090"
METRICS = "http://127.0.0.1:9877"
CONFIG = f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {REPO}/config/prometheus/phasewatch-rules.yml
scrape_configs:
  - job_name: phasewatch
    static_configs:
      - targets: ['127.0.0.1:9877']
"""
RANK_PHASES = ("launch", "dist_init", "weight_load", "kv_cache_alloc", "cuda_graph_capture", "draft_weight_load",
               "draft_cuda_graph_capture")


@pytest.fixture(scope="module")
def prometheus(sandbox: Sandbox) -> Iterator[Sandbox]:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None or shutil.which("curl") is None:
        missing = "prometheus, promtool or curl not installed (apt-get install prometheus curl; scripts/setup.sh)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    sandbox.write("/run/prom-test/prometheus.yml", CONFIG)
    sandbox.run("systemd-run", f"--unit={PROM_UNIT}", PROMETHEUS, "--config.file=/run/prom-test/prometheus.yml",
                "--storage.tsdb.path=/run/prom-data", f"--web.listen-address={PROM.removeprefix('http://')}")
    try:
        sandbox.wait_for(lambda: sandbox.run("curl", "-sf", f"{PROM}/-/ready", check=False).returncode == 0, 60,
                         "Prometheus to be ready")
        rules = api(sandbox, "rules")
        assert {g["name"] for g in rules["groups"]} >= {"phasewatch.records", "phasewatch.alerts"}
        yield sandbox
    finally:
        sandbox.systemctl("stop", PROM_UNIT, check=False)
        sandbox.run("rm", "-rf", "/run/prom-data", check=False)


def api(box: Sandbox, path: str, **params: str | float) -> Any:
    args = ["curl", "-sf", "-G", f"{PROM}/api/v1/{path}"]
    for key, value in params.items():
        args += ["--data-urlencode", f"{key}={value}"]
    document = json.loads(box.run(*args).stdout)
    assert document["status"] == "success", document
    return document["data"]


def query(box: Sandbox, expr: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(box, "query", query=expr)["result"]
    return result


def query_range(box: Sandbox, expr: str, start: float, end: float, step: float = 0.5) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(box, "query_range", query=expr, start=start, end=end, step=step)["result"]
    return result


def values(series: dict[str, Any]) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in series["values"]]


def longest_run(points: list[tuple[float, float]], step: float) -> float:
    """The longest stretch of a query_range result without a gap (seconds)."""
    best, start = 0.0, None
    for (t, _), previous in zip(points, [None, *points[:-1]], strict=True):
        if previous is None or t - previous[0] > step * 1.5:
            start = t
        assert start is not None
        best = max(best, t - start)
    return best


def test_prometheus_follows_the_ranks_through_the_phases_and_sees_the_restart(
        prometheus: Sandbox, scenario: Scenario) -> None:
    box = prometheus
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    began = time.time()
    scenario.start()
    scenario.sim("--scale 0.01")  # the start-up after phasewatch's restart is a healthy one
    box.wait_for(lambda: (s := scenario.status()) and len(s["restarted"]) == 1, 90, "phasewatch's restart")
    scenario.wait_state("ready", timeout=90)
    box.wait_for(lambda: query(box, 'phasewatch_unit_ready{job="phasewatch"} == 1'), 15,
                 "Prometheus to scrape the ready start-up")
    end = time.time() + 1

    assert [s["value"][1] for s in query(box, 'up{job="phasewatch"}')] == ["1"]

    # TP0 went through the phases: the state set was 1 for each phase that lasts more than a scrape
    # interval at this speed (dist_init, kv_cache_alloc, draft_weight_load take milliseconds here).
    seen = {s["metric"]["phase"] for s in query_range(box, 'phasewatch_rank_phase{rank="TP0"} == 1', began, end)}
    assert {"weight_load", "cuda_graph_capture", "draft_cuda_graph_capture", "ready"} <= seen, seen
    # ... and every completed phase of every rank is in the duration histogram (both start-ups).
    counts = {s["metric"]["phase"]: float(s["value"][1])
              for s in query(box, "phasewatch_phase_duration_seconds_count")}
    assert all(counts[phase] >= 8 for phase in RANK_PHASES), counts
    assert counts["http_server_start"] >= 1 and counts["warmup"] >= 1

    # TP3 sat in draft_cuda_graph_capture, not waiting, its elapsed time approaching the 6 s deadline.
    [hung] = query_range(box, 'phasewatch_rank_phase{rank="TP3",phase="draft_cuda_graph_capture"} == 1', began, end)
    assert longest_run(values(hung), step=0.5) >= 4
    elapsed = query_range(box, 'max_over_time(phasewatch_phase_elapsed_seconds{rank="TP3"}[30s])', began, end)
    assert max(v for _, v in values(elapsed[0])) >= 4.5
    ratio = query_range(box, 'unit_rank:phasewatch_phase_deadline:ratio{rank="TP3"}', began, end)
    assert max(v for s in ratio for _, v in values(s)) > 0.7

    # The stall was counted once (TP3 alone), the restarts rose from 0 to 1, one start-up reached ready.
    [restarts] = query_range(box, f'phasewatch_restarts_total{{unit="{UNIT}",reason="stalled"}}', began, end)
    points = values(restarts)
    assert points[0][1] == 0 and points[-1][1] == 1
    assert [v for _, v in points] == sorted(v for _, v in points)
    [verdicts] = query(box, 'phasewatch_verdicts_total{kind="stalled",phase="draft_cuda_graph_capture"}')
    assert verdicts["value"][1] == "1"
    [startups] = query(box, "phasewatch_startup_duration_seconds_count")
    assert startups["value"][1] == "1"
    # One failed start-up took one of three from the budget; ready alone does not give it back (only
    # after restart_budget.stable, 10m, healthy).
    [remaining] = query_range(box, "phasewatch_restart_budget_remaining", began, end)
    assert min(v for _, v in values(remaining)) == 2 and values(remaining)[-1][1] == 2
    [info] = query(box, "phasewatch_info")
    assert (info["metric"]["tp"], info["metric"]["nnodes"], info["metric"]["speculative"]) == ("8", "1", "EAGLE3")
    assert int(float(query(box, "phasewatch_journal_entries_total")[0]["value"][1])) > 200

    # The shipped rules ran on it: the stall alert fired.
    alerts = query_range(box, 'ALERTS{alertname="PhasewatchStalled",alertstate="firing"}', began, end)
    assert [a["metric"]["unit"] for a in alerts] == [UNIT]

    # A live scrape passes promtool, and /status on the same listener tells the same story.
    check = box.run("sh", "-c", f"curl -sf {METRICS}/metrics | promtool check metrics", check=False)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr
    status = json.loads(box.run("curl", "-sf", f"{METRICS}/status").stdout)
    assert status["unit"] == UNIT
    assert status["invocation"]["unit_state"] == "ready"
    assert status["restart_budget"]["state"] == "armed" and status["restart_budget"]["remaining"] == 2


def test_every_dashboard_query_runs_on_prometheus(prometheus: Sandbox) -> None:
    """Each query of config/grafana/phasewatch-dashboard.json, Grafana's variables filled in, as an instant
    and a range query: none may error (an empty result is fine). Run after the test above, most of them
    find the start-ups it left in Prometheus."""
    from dashboard_queries import queries
    box = prometheus
    now = time.time()
    answered = 0
    for where, expr in queries():
        try:
            instant = query(box, expr)
            query_range(box, expr, now - 600, now, step=5)
        except Exception as exc:  # api() asserts success; curl -f fails on 400 (a bad query)
            raise AssertionError(f"{where}: {expr!r}: {exc}") from exc
        answered += bool(instant)
    assert answered >= 1
