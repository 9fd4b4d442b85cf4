"""config/grafana/phasewatch-dashboard.json: a Grafana 10+ dashboard whose every query names only metrics
phasewatch exports (or its recording rules record). tests/integration/test_grafana_dashboard_promtool.py
parses each query with promtool; tests/e2e/test_e2e_prometheus.py runs each against a real Prometheus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from dashboard_queries import load, panels, raw_queries
from phasewatch.config.load import Config
from phasewatch.records import PHASE_NAMES
from phasewatch.sinks.metrics.exporter import Exporter

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "prometheus" / "phasewatch-rules.yml"
METRICS_DOC = REPO / "docs" / "metrics.md"
NAME_RE = re.compile(r"(?<![:\w$])(phasewatch_\w+|[a-z_]+:phasewatch_\w+:\w+)")


def exported_names() -> set[str]:
    """Every sample name the real collector exports, as Prometheus stores them."""
    registry = CollectorRegistry()
    Exporter(Config(unit="sglang-kimi.service"), registry)
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "info": ("_info",)}
        names.update(family.name + s for s in suffixes.get(family.type, ()))
    return names


def recorded_names() -> set[str]:
    rules = yaml.safe_load(RULES.read_text())
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def test_it_is_a_grafana_10_dashboard_with_a_datasource_and_unit_instance_variables() -> None:
    dashboard = load()
    assert dashboard["schemaVersion"] >= 38  # Grafana 10.0
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"instance", "unit"} <= set(variables)
    for p in panels(dashboard):
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
            assert p["targets"], p["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_the_panels_the_issue_asks_for_are_there() -> None:
    dashboard = load()
    by_type = {(p["type"], p["title"]) for p in panels(dashboard)}
    assert ("state-timeline", "Phase of each rank") in by_type
    exprs = "\n".join(expr for _, expr in raw_queries(dashboard))
    for needed in ("phasewatch_rank_phase", "unit_rank:phasewatch_phase_deadline:ratio",
                   "phasewatch_phase_progress_ratio",
                   "rate(phasewatch_rank_intake_bytes_total", "phasewatch_verdicts_total", "phasewatch_restarts_total",
                   "phasewatch_restart_budget_remaining", "phasewatch_startup_duration_seconds_bucket",
                   "phasewatch_startup_eta_seconds"):
        assert needed in exprs, needed


def test_the_phase_timeline_maps_every_phase_to_a_named_state() -> None:
    [timeline] = [p for p in panels(load()) if p["type"] == "state-timeline"]
    [mapping] = timeline["fieldConfig"]["defaults"]["mappings"]
    named = {int(value): option["text"] for value, option in mapping["options"].items()}
    assert [named[i] for i in sorted(named)] == list(PHASE_NAMES)
    expr = timeline["targets"][0]["expr"]
    assert [int(n) for n in re.findall(r"\* (\d+)", expr)] == sorted(named)
    assert re.findall(r'phase="(\w+)"', expr) == list(PHASE_NAMES)


def test_every_query_names_only_metrics_phasewatch_exports() -> None:
    known = exported_names() | recorded_names()
    documented = set(re.findall(r"`(phasewatch_\w+)`", METRICS_DOC.read_text()))
    for where, expr in raw_queries(load()):
        names = set(NAME_RE.findall(expr))
        assert names or "up{" in expr, where
        assert names - known == set(), f"{where}: {sorted(names - known)} not exported"
        undocumented = {n for n in names if ":" not in n
                        and n not in documented and re.sub(r"_(bucket|count|sum)$", "", n) not in documented}
        assert undocumented == set(), f"{where}: {sorted(undocumented)} not in docs/metrics.md"


@pytest.mark.parametrize("expr", ["phasewatch_nonexistent_seconds", "unit_rank:phasewatch_nope:ratio"])
def test_the_name_check_would_catch_a_wrong_name(expr: str) -> None:
    assert set(NAME_RE.findall(expr)) - (exported_names() | recorded_names())
