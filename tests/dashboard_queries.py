"""The PromQL of config/grafana/phasewatch-dashboard.json, with Grafana's variables filled in, for the
tests that check it (tests/unit/test_grafana_dashboard.py; the e2e Prometheus runs it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "config" / "grafana" / "phasewatch-dashboard.json"
# What Grafana substitutes before it sends a query: its interval macros, and the variables' "All".
MACROS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$job": ".*", "$instance": ".*",
          "$unit": ".*"}
LABEL_VALUES_RE = re.compile(r"^label_values\((.*),\s*\w+\)$", re.S)


def load() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def raw_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) of every query: panel targets, annotations, variables' label_values()."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dashboard["annotations"]["list"] if "expr" in a]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES_RE.match(variable["query"]["query"])
            assert match is not None, variable
            out.append((f"variable {variable['name']}", match.group(1)))
    return out


def substituted(expr: str) -> str:
    for macro in sorted(MACROS, key=len, reverse=True):
        expr = expr.replace(macro, MACROS[macro])
    return expr


def queries() -> list[tuple[str, str]]:
    return [(where, substituted(expr)) for where, expr in raw_queries(load())]
