"""Engine-timer lint against a real systemd: the unit's TimeoutStartSec= and Environment= read over
D-Bus, server_args from the journal; `check-config --unit` prints the warnings and the daemon alerts
once, with its MESSAGE_ID."""

from __future__ import annotations

from typing import Any

from e2e_env import CONFIG_PATH, TIMER_LINT_ID, UNIT, VENV, Scenario

DROPIN = f"/run/systemd/system/{UNIT}.d/timers.conf"


def timer_alerts(scenario: Scenario) -> list[dict[str, Any]]:
    """This scenario's timer notices (the sandbox's journal holds earlier tests' too)."""
    return [e for e in scenario.box.journal(f"PHASEWATCH_UNIT={UNIT}", f"MESSAGE_ID={TIMER_LINT_ID}")
            if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= scenario.started_at]


def test_unit_timers_over_dbus_are_checked_against_the_limits(scenario: Scenario) -> None:
    scenario.box.write(DROPIN, "[Service]\nEnvironment=SGLANG_WARMUP_TIMEOUT=120\nTimeoutStartSec=5min\n"
                               "ExecStartPost=/bin/true\n")
    scenario.box.systemctl("daemon-reload")
    try:
        # GPU signs off: the stall windows in force are the /proc ones (with them on, a rank whose GPU
        # waits is judged in 3m, before NCCL's 600 s: tests/unit/test_gpu_policy.py).
        scenario.configure("--scale 0.01", vitals={"gpu": False})
        scenario.start()
        alerts = scenario.box.wait_for(lambda: timer_alerts(scenario), 60, "the alert")
        [alert] = alerts
        assert "SGLang's warm-up timeout (SGLANG_WARMUP_TIMEOUT)" in alert["MESSAGE"]
        assert "TimeoutStartSec=5m" in alert["MESSAGE"]
        # The default /proc limits are past engine timers too (capture stall windows 20m > NCCL's 600 s;
        # warmup stall 11m > the 300 s scheduler watchdog): a hang there is ended by the engine first.
        codes = alert["PHASEWATCH_CAUSE"].split(",")
        assert codes == ["stall_after_nccl", "stall_after_nccl", "warmup_deadline_after_engine",
                         "warmup_stall_after_watchdog", "deadline_after_timeout_start"]
        checked = scenario.box.run(f"{VENV}/bin/phasewatch", "check-config", CONFIG_PATH,
                                   "--unit", UNIT, "--wide", check=False)  # (a warning a line)
        assert checked.returncode == 0, checked.stderr
        warnings = [line for line in checked.stdout.splitlines() if line.startswith("warning: ")]
        assert len(warnings) == len(codes), checked.stdout
        assert "(warmup 2m)" in warnings[2] and "TimeoutStartSec=5m" in warnings[4]
        scenario.box.wait_for(lambda: scenario.lines("The server is fired up"), 60, "ready")
        assert len(timer_alerts(scenario)) == 1
    finally:
        scenario.box.run("rm", "-f", DROPIN)
        scenario.box.systemctl("daemon-reload")
