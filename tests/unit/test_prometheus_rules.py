"""config/prometheus/phasewatch-rules.yml: valid for promtool, its unit tests pass, every alert is
tested, and every phasewatch metric it names is one phasewatch exports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from phasewatch.config import Config
from phasewatch.sinks.metrics import Exporter

RULES_DIR = Path(__file__).resolve().parents[2] / "config" / "prometheus"
RULES = RULES_DIR / "phasewatch-rules.yml"
RULE_TESTS = RULES_DIR / "phasewatch-rules.test.yml"


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(RULE_TESTS.read_text())
    fired = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    assert alerts - fired == set()


def test_rules_name_only_metrics_phasewatch_exports() -> None:
    registry = CollectorRegistry()
    Exporter(Config(unit="sglang-kimi.service"), registry)
    exported: set[str] = set()
    for family in registry.collect():
        exported.add(family.name)
        if family.type == "counter":
            exported.add(family.name + "_total")
        if family.type == "histogram":
            exported.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
        if family.type == "info":
            exported.add(family.name + "_info")
    rules = yaml.safe_load(RULES.read_text())
    named = {name for g in rules["groups"] for r in g["rules"]
             for name in re.findall(r"(?<![:\w])phasewatch_\w+", r["expr"])}
    assert named and named - exported == set()
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert all(name.count(":") == 2 for name in recorded)  # level:metric:operations
