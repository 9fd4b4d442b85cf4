"""Every query of config/grafana/phasewatch-dashboard.json (Grafana's variables filled in) parses as
PromQL: promtool checks them as the expressions of recording rules."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboard_queries import queries


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (apt-get install prometheus; scripts/setup.sh)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}:check", "expr": expr} for i, (_, expr) in enumerate(queries())]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries())} rules found" in result.stdout


def test_a_broken_query_would_fail(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [
        {"record": "dashboard:broken:check", "expr": "sum by (rank (phasewatch_rank_phase)"}]}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
