"""config/prometheus/phasewatch-rules.yml: valid for promtool, its unit tests pass, every alert is
tested, and every phasewatch metric it names is one phasewatch exports."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "config" / "prometheus"
RULES = RULES_DIR / "phasewatch-rules.yml"
RULE_TESTS = RULES_DIR / "phasewatch-rules.test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (apt-get install prometheus; scripts/setup.sh)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def run(*args: str) -> str:
    result = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=RULES_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_checks_the_rules() -> None:
    assert "SUCCESS" in run("check", "rules", RULES.name)


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    assert "SUCCESS" in run("test", "rules", RULE_TESTS.name)


def test_amtool_checks_the_shipped_alertmanager_route(tmp_path: Path) -> None:
    """config/alertmanager/phasewatch-group.yml (the group restart's route and receivers) is a valid
    Alertmanager config once its token file exists."""
    found = shutil.which("amtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("amtool is missing in CI (apt-get install prometheus-alertmanager; scripts/setup.sh)")
        pytest.skip("amtool not installed (apt-get install prometheus-alertmanager)")
    token = tmp_path / "phasewatch-group.token"
    token.write_text("a-token-of-the-group\n")
    shipped = (RULES_DIR.parent / "alertmanager" / "phasewatch-group.yml").read_text()
    assert "credentials_file: /etc/alertmanager/phasewatch-group.token" in shipped
    config = tmp_path / "alertmanager.yml"
    config.write_text(shipped.replace("/etc/alertmanager/phasewatch-group.token", str(token)))
    result = subprocess.run([found, "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
