"""config/prometheus/phasewatch-rules.yml: valid for promtool, its unit tests pass, every alert is
tested, and every phasewatch metric it names is one phasewatch exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from phasewatch.config.load import Config, Group
from phasewatch.sinks.metrics.exporter import Exporter

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
    Exporter(Config(unit="sglang-kimi.service", group=Group("kimi-tp16", 2)), registry)  # (group: its metrics too)
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


RUNBOOK = RULES_DIR.parents[1] / "docs" / "runbook.md"
SEVERITIES = {"critical", "warning", "info"}
# Alerts about one rank in one phase: their promtool cases must show both labels on the alert.
PER_RANK_ALERTS = {"PhasewatchPhaseNearDeadline", "PhasewatchStalled", "PhasewatchStraggler", "PhasewatchCrashed"}


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load(RULES.read_text())
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def runbook_anchors() -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', RUNBOOK.read_text()))


def test_every_alert_has_a_severity_and_a_runbook_url_to_its_own_section() -> None:
    anchors = runbook_anchors()
    for rule in alert_rules():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbook.md#{rule['alert']}", url
        assert rule["alert"] in anchors, f"docs/runbook.md has no <a id=\"{rule['alert']}\"></a>"


def test_every_runbook_section_says_what_it_means_what_to_run_and_when_to_escalate() -> None:
    text = RUNBOOK.read_text()
    sections = re.split(r'(?m)^<a id="', text)[1:]
    assert {s.split('"', 1)[0] for s in sections} == {r["alert"] for r in alert_rules()}
    for section in sections:
        name = section.split('"', 1)[0]
        assert "**What it means.**" in section, name
        commands = re.search(r"\*\*First three commands\.\*\*\n\n((?:    .+\n|\n)+)", section)
        assert commands is not None, name
        lines = [c for c in commands.group(1).splitlines() if c.strip() and not c.strip().startswith("#")]
        assert len(lines) >= 3, name
        assert "**Escalate when**" in section, name


def test_per_rank_alerts_keep_the_rank_and_phase_labels() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    labelled: dict[str, list[dict[str, str]]] = {}
    for case in tests["tests"]:
        for t in case.get("alert_rule_test", []):
            for alert in t["exp_alerts"]:
                labelled.setdefault(t["alertname"], []).append(alert["exp_labels"])
    for name in PER_RANK_ALERTS:
        assert labelled.get(name), name
        assert all({"rank", "phase"} <= set(labels) for labels in labelled[name]), name
    # ... and no alert expression aggregates them away (promtool would still pass a test that
    # asserted fewer labels if a later edit summed by (instance, job, unit) again).
    for rule in alert_rules():
        if rule["alert"] in PER_RANK_ALERTS:
            assert not re.search(r"\b(sum|max|min|count|avg) by \((?![^)]*rank)", rule["expr"]), rule["alert"]


def test_phasewatch_down_covers_a_down_target_and_a_missing_one() -> None:
    [down] = [r for r in alert_rules() if r["alert"] == "PhasewatchDown"]
    assert 'up{job=~".*phasewatch.*"} == 0' in down["expr"]
    assert 'absent(up{job=~".*phasewatch.*"})' in down["expr"]
    assert down["labels"]["severity"] == "critical"
