"""The systemd integration files stay in step with the daemon: catalog ids, exit status, names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from phasewatch.stages.s4_judge.init_config import untouched

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "units"


def make_install_files(stage: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(REPO), "install-files", f"DESTDIR={stage}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_keeps_the_operators_polkit_rule_and_config(tmp_path: Path) -> None:
    rule = tmp_path / "etc" / "polkit-1" / "rules.d" / "50-phasewatch.rules"
    config = tmp_path / "etc" / "phasewatch" / "sglang-kimi.yaml"
    first = make_install_files(tmp_path)
    assert first.returncode == 0, first.stderr
    assert rule.read_text() == (UNITS / "polkit" / "50-phasewatch.rules").read_text()
    # The example, sealed as unedited: `phasewatch init` may replace it (the README's Quick start).
    installed = config.read_text()
    assert installed.startswith((REPO / "config" / "phasewatch.yaml").read_text())
    assert untouched(installed) and not untouched(installed.replace("deadline:", "deadline: ", 1))
    edited = rule.read_text().replace('["sglang-kimi.service"]', '["sglang-kimi.service", "sglang-draft.service"]')
    rule.write_text(edited)
    config.write_text("unit: sglang-kimi.service\n")
    again = make_install_files(tmp_path)
    assert again.returncode == 0, again.stderr
    assert rule.read_text() == edited
    assert config.read_text() == "unit: sglang-kimi.service\n"
    assert "kept" in again.stdout and "50-phasewatch.rules" in again.stdout
    # The shipped rule stays available beside it, and nothing host-wide for journald is installed.
    shipped = tmp_path / "usr" / "local" / "share" / "phasewatch" / "polkit" / "50-phasewatch.rules"
    assert shipped.read_text() == (UNITS / "polkit" / "50-phasewatch.rules").read_text()
    assert not (tmp_path / "etc" / "systemd").exists()
    unit = (tmp_path / "usr" / "local" / "lib" / "systemd" / "system" / "phasewatch@.service").read_text()
    assert "ExecStart=/usr/local/bin/phasewatch run" in unit
