"""Instance names in a real systemd: phasewatch@sglang-kimi.service watches sglang-kimi.service (the
instance is the unit's name without `.service`), and the older long form
phasewatch@sglang-kimi.service.service still works, each reading the config under either name."""

from __future__ import annotations

import json

from e2e_env import BASE_CONFIG, CONFIG_PATH, UNIT, WATCHER, Scenario

LONG_WATCHER = f"phasewatch@{UNIT}.service"
LONG_CONFIG = f"/run/phasewatch/{UNIT}.yaml"


def _watching(scenario: Scenario, watcher: str) -> str:
    scenario.box.systemctl("start", watcher)
    scenario.box.wait_for(lambda: scenario.box.show(watcher, "ActiveState")["ActiveState"] == "active", 30,
                          f"{watcher} active")
    return "\n".join(str(e.get("MESSAGE")) for e in scenario.box.journal(f"_SYSTEMD_UNIT={watcher}"))


def test_short_instance_name_watches_the_unit_and_the_long_form_still_works(scenario: Scenario) -> None:
    assert WATCHER == "phasewatch@sglang-kimi.service"
    scenario.configure()  # writes the short form's config, /run/phasewatch/sglang-kimi.yaml
    log = _watching(scenario, WATCHER)
    assert f"phasewatch watching {UNIT} (config {CONFIG_PATH})" in log
    scenario.box.systemctl("start", UNIT)
    scenario.wait_state("ready", 60)
    scenario.box.systemctl("stop", WATCHER)
    # The long form finds the short form's config (its own name, sglang-kimi.service.yaml, is absent).
    log = _watching(scenario, LONG_WATCHER)
    assert f"phasewatch watching {UNIT} (config {CONFIG_PATH})" in log
    scenario.box.systemctl("stop", LONG_WATCHER)


def test_short_instance_reads_an_older_install_s_long_config(scenario: Scenario) -> None:
    scenario.box.write(LONG_CONFIG, json.dumps(BASE_CONFIG, indent=1))
    try:
        log = _watching(scenario, WATCHER)
        assert f"phasewatch watching {UNIT} (config {LONG_CONFIG})" in log
    finally:
        scenario.box.systemctl("stop", WATCHER, check=False)
        scenario.box.run("rm", "-f", LONG_CONFIG, check=False)
