"""The daemon under the real systemd: `kill -HUP` and `systemctl reload` read the config again (a new
limit shows in /status), a bad reload keeps the old config and says why; `check-config --privileges`
asks the real polkitd, yes with the shipped rule and no without it, and restarts nothing."""

from __future__ import annotations

import json
from typing import Any

from e2e_env import CONFIG_PATH, UNIT, VENV, WATCHER, Scenario

CONFIG = CONFIG_PATH  # the short instance's config, the one the unit passes
RULE = "/etc/polkit-1/rules.d/50-phasewatch.rules"


def tp3_deadline(scenario: Scenario) -> Any:
    """TP3's deadline in the daemon's own /status (not through `phasewatch status`, which reads the config)."""
    fetch = ("import urllib.request; "
             "print(urllib.request.urlopen('http://127.0.0.1:9877/status', timeout=5).read().decode())")
    result = scenario.box.run(f"{VENV}/bin/python", "-c", fetch, check=False)
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None
    if not document.get("invocation"):
        return None
    rank = document["invocation"]["ranks"].get("TP3") or {}
    return rank.get("deadline_seconds") if rank.get("phase") == "weight_load" else None


def with_deadline(scenario: Scenario, deadline: str) -> None:
    document = {"unit": UNIT, "rank_skew": "1h", "restart_budget": {"max": 3, "window": "6h", "backoff": "1s"},
                "metrics": {"listen": "127.0.0.1:9877"}, "phases": {"weight_load": {"deadline": deadline}}}
    scenario.box.write(CONFIG, json.dumps(document))


def test_hup_reloads_and_a_bad_reload_keeps_the_old_config(scenario: Scenario) -> None:
    box = scenario.box
    scenario.configure("--scale 0.01 --hang TP3:weight_load", rank_skew="1h",
                       phases={"weight_load": {"deadline": "30m"}})
    scenario.start()
    box.wait_for(lambda: tp3_deadline(scenario) == 1800, 60, "TP3 in weight_load with a 30m deadline")
    before = box.show(WATCHER, "MainPID", "InvocationID", "NRestarts")

    with_deadline(scenario, "45m")
    box.run("kill", "-HUP", before["MainPID"])
    box.wait_for(lambda: tp3_deadline(scenario) == 2700, 30, "the 45m deadline after kill -HUP")

    box.write(CONFIG, f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 20x}}\n")
    # Issue 36: ExecReload= checks the config first: the reload fails, the signal is never sent, and
    # where systemctl points (`systemctl status`) shows the error with key, file and line.
    reload = box.systemctl("reload", WATCHER, check=False)
    assert reload.returncode != 0, reload.stdout
    shown = box.run("systemctl", "status", WATCHER, "--no-pager", "-l", "-n", "20", check=False).stdout
    assert "config error: phases.weight_load.deadline" in shown and "line 3" in shown, shown
    assert "reload refused" not in scenario.watcher_log()  # the daemon never saw a signal
    assert box.show(WATCHER, "ActiveState")["ActiveState"] == "active"
    # A SIGHUP sent around the check: the daemon refuses it itself, and its STATUS= says so.
    box.run("kill", "-HUP", before["MainPID"])
    box.wait_for(lambda: "reload refused" in scenario.watcher_log(), 30, "the refused reload in the journal")
    refusal = next(line for line in scenario.watcher_log().splitlines() if "reload refused" in line)
    assert "phases.weight_load.deadline" in refusal and "line 3" in refusal and CONFIG in refusal
    box.wait_for(lambda: "reload refused, the old config stays in force: phases.weight_load.deadline" in
                 box.show(WATCHER, "StatusText")["StatusText"], 30, "STATUS= saying the reload was refused")
    assert tp3_deadline(scenario) == 2700  # the old config still in force

    with_deadline(scenario, "1h")
    box.systemctl("reload", WATCHER)
    box.wait_for(lambda: tp3_deadline(scenario) == 3600, 30, "the 1h deadline after systemctl reload")
    assert "reload refused" not in box.show(WATCHER, "StatusText")["StatusText"]
    assert box.show(WATCHER, "MainPID", "InvocationID", "NRestarts") == before  # the same process throughout
    assert box.show(WATCHER, "ActiveState")["ActiveState"] == "active"


def test_check_config_privileges_asks_polkit_and_restarts_nothing(scenario: Scenario) -> None:
    box = scenario.box
    scenario.configure("--scale 0.01")
    box.systemctl("start", UNIT)
    box.wait_for(lambda: scenario.lines("The server is fired up"), 60, "ready")
    before = scenario.unit("InvocationID", "NRestarts", "MainPID")

    def check() -> Any:
        return box.run(f"{VENV}/bin/phasewatch", "check-config", CONFIG, "--privileges", "--json", check=False)

    allowed = check()
    assert allowed.returncode == 0, allowed.stderr
    answer = json.loads(allowed.stdout)["privileges"]
    assert (answer["user"], answer["unit"], answer["may_restart"]) == ("phasewatch", UNIT, True)
    box.run("mv", RULE, "/run/50-phasewatch.rules.held")
    try:
        refused = box.wait_for(lambda: (r := check()).returncode == 77 and r, 30, "polkit to drop the rule")
        assert json.loads(refused.stdout)["privileges"]["may_restart"] is False
        text = box.run(f"{VENV}/bin/phasewatch", "check-config", CONFIG, "--privileges", check=False)
        assert text.returncode == 77 and "privileges: no, user phasewatch may not restart" in text.stdout
    finally:
        box.run("mv", "/run/50-phasewatch.rules.held", RULE)
    box.wait_for(lambda: check().returncode == 0, 30, "polkit to read the rule again")
    assert scenario.unit("InvocationID", "NRestarts", "MainPID") == before  # nothing was restarted
