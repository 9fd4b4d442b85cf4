"""`phasewatch init` against units in a real systemd: the shipped example unit read over D-Bus, and a
unit that runs `python -m sglang.launch_server` (the simulator behind that name) whose start-up in
the journal sizes the limits. check-config accepts what init writes; an edited file is not replaced."""

from __future__ import annotations

from e2e_env import REPO, VENV, Scenario

CONFIG_DIR = "/run/phasewatch-init"
LOOKALIKE = "sglang-lookalike.service"
# `python -m sglang.launch_server` with the arguments of a real TP=8 EAGLE-3 server; the module is the
# simulator (fast: --scale 0.01), found through PYTHONPATH.
LAUNCH_SERVER = f"""import runpy, sys
sys.argv = ["sglang_sim", "run", "--scale", "0.01", "--port", "30001", "--unit", "{LOOKALIKE}"]
runpy.run_path("{REPO}/tools/sglang_sim.py", run_name="__main__")
"""
LOOKALIKE_UNIT = f"""[Service]
Type=simple
Environment=PYTHONPATH=/run/simpkg PYTHONUNBUFFERED=1 SGLANG_WARMUP_TIMEOUT=900
ExecStart={VENV}/bin/python -m sglang.launch_server --model-path /models/Kimi-K2.5-INT4 --tp 8 \\
    --speculative-algorithm EAGLE3 --dist-timeout 300
TimeoutStartSec=90s
KillMode=control-group
TimeoutStopSec=5s
"""


def init(scenario: Scenario, *args: str) -> tuple[int, str, str]:
    result = scenario.box.run(f"{VENV}/bin/phasewatch", "init", *args, "--config-dir", CONFIG_DIR, check=False,
                              timeout=120)
    return result.returncode, result.stdout, result.stderr


def words(text: str) -> str:
    """A message as words: the commands wrap their lines at 100 columns."""
    return " ".join(text.split())


def test_init_reads_the_example_unit_over_dbus_and_writes_a_config_check_config_accepts(scenario: Scenario) -> None:
    box = scenario.box
    box.write("/run/systemd/system/sglang-example.service", (REPO / "units" / "sglang-kimi.service").read_text())
    box.systemctl("daemon-reload")
    box.run("rm", "-rf", CONFIG_DIR)
    code, dry, err = init(scenario, "sglang-example", "--dry-run")
    assert code == 0, err
    assert "unit: sglang-example.service\nengine: sglang\n" in dry
    assert "TP=8" in dry and "speculative EAGLE3" in dry and "runs as User=sglang" in dry
    assert "TimeoutStartSec=2m bounds only the fork (Type=simple)" in dry
    assert box.read(f"{CONFIG_DIR}/sglang-example.yaml") is None  # --dry-run writes nothing
    code, out, err = init(scenario, "sglang-example.service")
    assert code == 0, err
    assert f"wrote {CONFIG_DIR}/sglang-example.yaml" in out
    assert "systemctl enable --now phasewatch@sglang-example.service" in out
    assert box.read(f"{CONFIG_DIR}/sglang-example.yaml") == dry
    checked = box.run(f"{VENV}/bin/phasewatch", "check-config", f"{CONFIG_DIR}/sglang-example.yaml", check=False)
    assert checked.returncode == 0, checked.stderr
    assert "unit sglang-example.service, engine sglang" in words(checked.stdout)  # (fitted to 100 columns)
    # Again: unchanged. Edited: refused with the diff, the file kept; --force replaces it.
    assert "unchanged" in init(scenario, "sglang-example")[1]
    edited = dry.replace("deadline: 45m", "deadline: 50m")
    box.write(f"{CONFIG_DIR}/sglang-example.yaml", edited)
    code, out, err = init(scenario, "sglang-example")
    assert code == 73, err
    assert "-    deadline: 50m\n+    deadline: 45m" in out and "was edited" in err
    assert box.read(f"{CONFIG_DIR}/sglang-example.yaml") == edited
    assert init(scenario, "sglang-example", "--force")[0] == 0
    assert box.read(f"{CONFIG_DIR}/sglang-example.yaml") == dry


def test_init_sizes_limits_from_the_last_start_up_in_the_journal(scenario: Scenario) -> None:
    box = scenario.box
    box.write("/run/simpkg/sglang/__init__.py", "")
    box.write("/run/simpkg/sglang/launch_server.py", LAUNCH_SERVER)
    box.write(f"/run/systemd/system/{LOOKALIKE}", LOOKALIKE_UNIT)
    box.systemctl("daemon-reload")
    box.run("rm", "-rf", CONFIG_DIR)
    try:
        box.systemctl("start", LOOKALIKE)
        box.wait_for(lambda: any("fired up" in str(e.get("MESSAGE"))
                                 for e in box.journal(f"_SYSTEMD_UNIT={LOOKALIKE}")), 120, "the lookalike server ready")
    finally:
        box.systemctl("stop", LOOKALIKE, check=False)
    code, text, err = init(scenario, "sglang-lookalike", "--dry-run")
    assert code == 0, err
    assert "its last start-up in the journal sized the limits" in text
    assert "(last start-up: " in text  # at least one phase carries its measured duration
    # dist_init brought a minute under --dist-timeout 300; the warm-up under the scheduler watchdog
    assert "  dist_init:" in text and "--dist-timeout 300: dist_init's deadline (4m) comes first" in text
    assert "timer lint: no engine or systemd timer ends a start-up before these limits" in text
    code, out, err = init(scenario, "sglang-lookalike")
    assert code == 0, err
    checked = box.run(f"{VENV}/bin/phasewatch", "check-config", f"{CONFIG_DIR}/sglang-lookalike.yaml", check=False)
    assert checked.returncode == 0, checked.stderr


def test_init_refuses_a_unit_that_runs_no_known_engine(scenario: Scenario) -> None:
    code, out, err = init(scenario, "other")
    assert code == 78 and "runs no engine phasewatch knows" in words(err)
    # An unknown unit exits as every command that reads a unit does (errors.EXIT_STATUSES: 3).
    code, out, err = init(scenario, "no-such-thing")
    assert code == 3 and "no-such-thing.service: no such unit (not known to systemd" in words(err), (code, err)
