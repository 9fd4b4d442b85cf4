"""phasewatch against a real systemd, journald, D-Bus and polkit (see sandbox.py).

The simulated server is tools/sglang_sim.py: one process per rank titled sglang::scheduler_TPn,
the v0.5.9 lines of an 8-rank EAGLE-3 start-up, at 1/100 of real time unless said otherwise.
"""

from __future__ import annotations

import json
import time

from e2e_env import STATE_DIR, UNIT, VENV, WATCHER, Scenario, at, restarts_by_phasewatch

STARTED = "39f53479d3a045ac8e11786248231fbf"
# The healthy start-up after phasewatch's restart runs under the same 6 s draft-capture deadline.
# At --scale 0.01 its own draft capture takes 3 s: a reader or a rank starved of CPU for 3 s (two
# cores shared by several sandboxes) saw it "stalled" and restarted it (3 start-ups counted). At
# 0.004 it takes 1.2 s, leaving 4.8 s.
HEALTHY_NEXT = "--scale 0.004"


def test_clean_eagle3_start_up_reaches_ready_without_restart_or_alert(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01")
    scenario.start()
    status = scenario.wait_state("ready", timeout=90)
    assert status["ranks"] == {"main": "ready", **{f"TP{n}": "ready" for n in range(8)}}
    assert scenario.alerts() == []
    assert scenario.unit("NRestarts")["NRestarts"] == "0"
    assert len(scenario.invocations()) == 1
    watcher = scenario.box.show(WATCHER, "ActiveState", "StatusText")
    assert watcher["ActiveState"] == "active"
    assert watcher["StatusText"] == "sglang-kimi: ready"


def test_hung_rank_in_draft_capture_gets_one_alert_and_one_restart_in_time(scenario: Scenario) -> None:
    deadline = 6.0
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    scenario.sim(HEALTHY_NEXT)  # the next start-up is a healthy one
    status = scenario.box.wait_for(lambda: (s := scenario.status()) and len(s["restarted"]) == 1 and s, 90,
                                   "phasewatch's restart")
    first = status["restarted"][0]
    [begin] = [e for e in scenario.lines("Capture draft cuda graph begin") if "TP3]" in e["MESSAGE"]]
    alerts = scenario.box.wait_for(scenario.alerts, 10, "the alert")
    [alert] = alerts
    assert (alert["PHASEWATCH_VERDICT"], alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PRIORITY"]) == (
        "stalled", "TP3", "draft_cuda_graph_capture", "4")
    assert alert["PHASEWATCH_INVOCATION"] == first
    assert alert["MESSAGE"].startswith(f"{UNIT}: TP3 stalled in draft_cuda_graph_capture for ")
    assert "restarting (1 of 3 in 6h)" in alert["MESSAGE"]
    # What to do, with the simulated server's own argument (its server_args: cuda_graph_max_bs=512).
    assert "--cuda-graph-max-bs (512 now)" in alert["PHASEWATCH_REMEDY"]
    assert alert["MESSAGE"].endswith(f"; remedy: {alert['PHASEWATCH_REMEDY']}")
    assert at(alert) - at(begin) <= deadline + 2
    [restart] = scenario.box.wait_for(lambda: restarts_by_phasewatch(scenario), 10, "the restart job")
    assert at(restart) - at(begin) <= deadline + 2
    # The new start-up is tracked from zero, and it is a healthy one.
    status = scenario.wait_state("ready", timeout=90)
    assert status["invocation_id"] != first
    assert len(scenario.invocations()) == 2, startups_told(scenario)
    assert [a["PHASEWATCH_INVOCATION"] for a in scenario.alerts()] == [first]
    assert status["restarted"] == [first]


def test_rank_oom_in_capture_is_crashed_with_a_remedy_from_the_servers_own_arguments(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --oom TP5:cuda_graph_capture", actions={"crashed": ["alert"]})
    scenario.start()
    [alert] = scenario.box.wait_for(lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "crashed"],
                                    90, "the crashed alert")
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PHASEWATCH_CAUSE"]) == (
        "TP5", "cuda_graph_capture", "oom")
    # The simulated server's server_args (cuda_graph_max_bs=512, mem_fraction_static=0.85) and the
    # numbers of its OOM line (2.00 GiB asked, 1.12 GiB free).
    assert alert["PHASEWATCH_REMEDY"] == ("lower --cuda-graph-max-bs (512 now) or --mem-fraction-static (0.85 now); "
                                          "capture needed 2.00 GiB, 1.12 GiB were free")
    assert alert["MESSAGE"].endswith(f"; remedy: {alert['PHASEWATCH_REMEDY']}")
    assert restarts_by_phasewatch(scenario) == []
    # The operator starts it again; the history keeps the crashed start-up and `report` says what to do.
    scenario.box.wait_for(lambda: scenario.unit("ActiveState")["ActiveState"] in ("failed", "inactive"), 60,
                          "the crashed server's unit ended")
    scenario.sim(HEALTHY_NEXT)
    scenario.box.systemctl("start", UNIT)
    try:
        scenario.box.wait_for(lambda: "recorded: crashed" in scenario.watcher_log(), 90, "the start-up recorded")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nphasewatch said:\n{scenario.watcher_log()}") from None
    report = scenario.box.run(f"{VENV}/bin/phasewatch", "report", UNIT, "--state-dir", STATE_DIR, "--json")
    [crashed] = [s for s in json.loads(report.stdout)["startups"]
                 if s["invocation_id"] == alert["PHASEWATCH_INVOCATION"]]
    assert (crashed["outcome"], crashed["remedy"]) == ("crashed", alert["PHASEWATCH_REMEDY"])
    wide = scenario.box.run(f"{VENV}/bin/phasewatch", "report", UNIT, "--state-dir", STATE_DIR, "--wide").stdout
    assert "remedies:\n  " in wide and wide.rstrip().endswith(alert["PHASEWATCH_REMEDY"]), wide
    table = scenario.box.run(f"{VENV}/bin/phasewatch", "report", UNIT, "--state-dir", STATE_DIR).stdout
    assert " ".join(table.split()).endswith(" ".join(alert["PHASEWATCH_REMEDY"].split())), table
    assert max(len(line) for line in table.splitlines()) <= 100, table  # the remedy wrapped, not cut


def startups_told(scenario: Scenario) -> str:
    """What a failure needs to be read: PID 1's words about the unit and phasewatch's log."""
    pid1 = [f"{e['__REALTIME_TIMESTAMP']} {e.get('JOB_TYPE', '')} {e['MESSAGE']}"
            for e in scenario.box.journal(f"UNIT={UNIT}", "_PID=1")
            if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= scenario.started_at]
    return "PID 1:\n" + "\n".join(pid1) + "\nphasewatch:\n" + scenario.watcher_log()


def test_slow_but_progressing_weight_load_is_not_restarted(scenario: Scenario) -> None:
    # A healthy start at this speed takes about 11 s, so one wall-clock limit would be about 17 s;
    # this weight load alone takes about 22 s, but a shard arrives every 0.34 s.
    scenario.configure("--scale 0.01 --slow-load 4", phases={"weight_load": {"deadline": "2m", "stall": "3s"}})
    began = time.time()
    scenario.start()
    scenario.wait_state("ready", timeout=120)
    assert time.time() - began > 17
    assert scenario.alerts() == []
    assert restarts_by_phasewatch(scenario) == []
    assert len(scenario.invocations()) == 1


def test_rank_process_killed_during_weight_load_is_named_within_two_seconds(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --slow-load 4", actions={"rank_died": ["alert"]})
    scenario.start()
    scenario.box.wait_for(lambda: (s := scenario.status()) and s.get("phase") == "weight_load"
                          and s.get("ranks", {}).get("TP5") == "weight_load", 30, "weight loading")
    time.sleep(1.5)  # phasewatch reads the cgroup within a second of a new process's first line
    pid = scenario.box.run("pgrep", "-f", "^sglang::scheduler_TP5").stdout.split()[0]
    killed = time.time()
    scenario.box.run("kill", "-KILL", pid)
    alerts = scenario.box.wait_for(lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "rank_died"],
                                   10, "the rank_died alert")
    [alert] = alerts
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PRIORITY"]) == ("TP5", "weight_load", "3")
    assert f"(pid {pid})" in alert["MESSAGE"]
    assert at(alert) - killed <= 2.0


def test_crash_on_tp4_after_the_parents_sigquit_line_is_its_own_and_systemd_restarts_it(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --exception TP4:cuda_graph_capture", restart="on-failure",
                       actions={"crashed": ["alert", "restart"]})
    scenario.start()
    scenario.sim("--scale 0.01")  # systemd's own restart brings a healthy start-up
    [alert] = scenario.box.wait_for(lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "crashed"],
                                    60, "the crashed alert")
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"], alert["PHASEWATCH_CAUSE"], alert["PRIORITY"]) == (
        "TP4", "cuda_graph_capture", "cuda_error", "3")
    sigquit = scenario.lines("Received sigquit from a child process")
    traceback = scenario.lines("Scheduler hit an exception")
    assert sigquit and traceback and at(sigquit[0]) <= at(traceback[0])
    assert "TP4]" in traceback[0]["MESSAGE"]
    status = scenario.wait_state("ready", timeout=90)
    time.sleep(6)  # past the crash settle time: phasewatch would have restarted by now
    assert restarts_by_phasewatch(scenario) == []
    assert status["restarted"] == [] and scenario.status()["restarted"] == []  # type: ignore[index]
    assert int(scenario.unit("NRestarts")["NRestarts"]) == 1


def test_daemon_restarted_mid_start_up_rebuilds_phases_and_acts_once(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --slow-load 3 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    scenario.sim(HEALTHY_NEXT)
    scenario.box.wait_for(lambda: (s := scenario.status()) and s.get("phase") == "weight_load", 30, "weight loading")
    time.sleep(1)
    scenario.box.systemctl("restart", WATCHER)  # returns once the new daemon sent READY=1
    status = scenario.status()
    assert status is not None and status["phase"] == "weight_load"
    assert {r: p for r, p in status["ranks"].items() if r != "main"} == {f"TP{n}": "weight_load" for n in range(8)}
    scenario.box.wait_for(lambda: restarts_by_phasewatch(scenario), 90, "the restart")
    # Killed right after acting: the next daemon must not restart the unit again for that stall.
    main_pid = scenario.box.show(WATCHER, "MainPID")["MainPID"]
    scenario.box.run("kill", "-KILL", main_pid)
    scenario.box.wait_for(lambda: scenario.box.show(WATCHER, "ActiveState")["ActiveState"] == "active"
                          and "phasewatch watching" in scenario.watcher_log().split("restart requested")[-1],
                          30, "phasewatch to come back")
    scenario.wait_state("ready", timeout=90)
    assert len(restarts_by_phasewatch(scenario)) == 1
    assert len([a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "stalled"]) == 1


def test_operator_stop_is_never_undone(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}})
    scenario.start()
    scenario.box.wait_for(lambda: (s := scenario.status())
                          and s.get("ranks", {}).get("TP3") == "draft_cuda_graph_capture",
                          60, "the hang")
    scenario.box.systemctl("stop", UNIT)
    time.sleep(6)
    assert restarts_by_phasewatch(scenario) == []
    assert len(scenario.invocations()) == 1
    assert scenario.unit("ActiveState")["ActiveState"] == "inactive"
    assert [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "stalled"] == []


def test_spent_budget_gives_up_with_one_critical_alert(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                       # (same_failure above max: the budget, not the same hang twice, stops it here)
                       restart_budget={"max": 1, "window": "1h", "backoff": "1s", "same_failure": 3})
    scenario.start()
    gave_up = scenario.box.wait_for(lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "gave_up"],
                                    90, "giving up")
    assert [a["PRIORITY"] for a in gave_up] == ["2"]
    time.sleep(8)
    assert len(restarts_by_phasewatch(scenario)) == 1
    assert len(scenario.invocations()) == 2
    assert len([a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "gave_up"]) == 1
    assert scenario.status()["budget"] == "gave_up"  # type: ignore[index]


def test_journald_restart_and_rotation_lose_no_line(scenario: Scenario) -> None:
    scenario.configure("--scale 0.02")
    scenario.start()
    for delay, command in ((3, ["systemctl", "restart", "systemd-journald"]), (3, ["journalctl", "--rotate"]),
                           (3, ["systemctl", "restart", "systemd-journald"]), (3, ["journalctl", "--rotate"])):
        time.sleep(delay)
        scenario.box.run(*command)
    status = scenario.wait_state("ready", timeout=120)
    invocation = status["invocation_id"]
    time.sleep(1)  # the unit has written its last line; let both sides settle
    in_journal = scenario.box.journal(f"_SYSTEMD_UNIT={UNIT}", f"_SYSTEMD_INVOCATION_ID={invocation}")
    assert len(in_journal) > 200
    status = scenario.status()
    assert status is not None and status["entries"] == len(in_journal)
    assert status["lines_lost"] == 0
    assert scenario.alerts() == []


def test_least_privilege_restarts_the_watched_unit_and_nothing_else(scenario: Scenario) -> None:
    restart = ("from pystemd.systemd1 import Unit; import sys; "
               "u = Unit(sys.argv[1].encode(), _autoload=True); print(u.Unit.Restart(b'replace'))")
    own = scenario.box.run(f"{VENV}/bin/python", "-c", restart, UNIT, user="phasewatch", check=False)
    assert own.returncode == 0, own.stderr
    other = scenario.box.run(f"{VENV}/bin/python", "-c", restart, "other.service", user="phasewatch", check=False)
    assert other.returncode != 0
    assert "Interactive authentication required" in other.stderr or "AuthorizationRequired" in other.stderr
    assert scenario.box.show("other.service", "ActiveState")["ActiveState"] == "inactive"


def test_config_error_exits_78_naming_key_and_line_without_restart_loop(scenario: Scenario) -> None:
    scenario.box.write("/run/phasewatch/broken.service.yaml",
                       "unit: broken.service\nphases:\n  weight_load:\n    deadline: 5x\n")
    scenario.box.systemctl("start", "phasewatch@broken.service.service", check=False)
    time.sleep(7)  # longer than RestartSec=: a restart loop would have begun
    shown = scenario.box.show("phasewatch@broken.service.service", "ActiveState", "ExecMainStatus", "NRestarts")
    assert (shown["ActiveState"], shown["ExecMainStatus"], shown["NRestarts"]) == ("failed", "78", "0")
    entries = scenario.box.journal("_SYSTEMD_UNIT=phasewatch@broken.service.service")
    log = "\n".join(str(e.get("MESSAGE")) for e in entries)
    assert "phases.weight_load.deadline: expected a duration like 90s, 20m or 1h30m, got '5x'" in log
    assert "line 4" in log
    scenario.box.systemctl("reset-failed", "phasewatch@broken.service.service", check=False)


def test_a_token_others_may_read_exits_78_and_a_name_systemd_refuses_is_a_config_error(scenario: Scenario) -> None:
    """PROBE-S4 H-3: a 0644 token file was taken (any local user could then restart the server
    through the group); the daemon, as phasewatch, now exits 78 naming it. L-4: the name systemd
    refuses over D-Bus (EINVAL from loading the unit) is a ConfigError, exit 78, not 69."""
    watcher = "phasewatch@tokened.service.service"
    scenario.box.write("/run/phasewatch/tokened.token", "a-token-long-enough-0123456789\n")
    scenario.box.run("chmod", "0644", "/run/phasewatch/tokened.token")
    scenario.box.write("/run/phasewatch/tokened.service.yaml", "unit: tokened.service\ngroup:\n  name: g\n  nodes: 2\n"
                       "  receiver:\n    listen: 127.0.0.1:9878\n    token_file: /run/phasewatch/tokened.token\n")
    scenario.box.systemctl("start", watcher, check=False)
    shown = scenario.box.wait_for(lambda: (s := scenario.box.show(watcher, "ActiveState", "ExecMainStatus"))
                                  ["ActiveState"] == "failed" and s, 30, "the daemon's exit")
    assert shown["ExecMainStatus"] == "78"
    log = "\n".join(str(e.get("MESSAGE")) for e in scenario.box.journal(f"_SYSTEMD_UNIT={watcher}"))
    assert "group.receiver.token_file: refused: readable by group and others (mode 0644)" in log
    assert "line 7" in log
    scenario.box.systemctl("reset-failed", watcher, check=False)
    load = ("import sys; from phasewatch.systemd_unit import SystemdUnit; from phasewatch.errors import ConfigError\n"
            "try:\n    SystemdUnit(sys.argv[1]).load_state()\n"
            "except ConfigError as exc:\n    print(exc.exit_status, exc)")
    refused = scenario.box.run(f"{VENV}/bin/python", "-c", load, "sglang-k\u00efmi.service", user="phasewatch")
    assert refused.stdout.startswith("78 unit: systemd refuses the unit name 'sglang-k\u00efmi.service'"), refused
