"""PROBE-S3 C-2, C-3, C-4 in the real systemd: a local user (uid 65534) who titles a process
`sglang::scheduler_TP3` in a session scope of their own neither keeps a guarded restart from
starting the unit (C-2) nor, dying, gets a healthy container start-up restarted with
`rank_processes: host` (C-3); and a unit whose ExecStart= carries a line break (C-unescaped by
systemd) does not make `phasewatch init` write a key of its choosing (C-4). PROBE-S4 C-3: the line
a crash verdict quotes (a URL with a token in it) reaches uid 65534 neither through /status nor
through `phasewatch status`, and reaches root masked."""

from __future__ import annotations

import json
import time

from e2e_env import CONFIG_PATH, REPO, UNIT, VENV, WATCHER, Scenario, restarts_by_phasewatch
from test_e2e_container import container  # noqa: F401 - the fixture
from test_e2e_init import CONFIG_DIR, init

STRANGER_SCOPE = "/user.slice/user-65534.slice/session-9.scope"
ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


def strangers_rank(scenario: Scenario) -> str:
    """`exec -a sglang::scheduler_TP3 sleep 600` in uid 65534's own session scope: its pid."""
    scenario.box.run("sh", "-c", "setsid systemd-run --scope --slice=user-65534.slice --unit=session-9 --uid=65534 "
                     "--gid=65534 -q bash -c \"exec -a sglang::scheduler_TP3 sleep 600\" </dev/null >/dev/null 2>&1 &")
    procs = " ".join(f"{root}{STRANGER_SCOPE}/cgroup.procs" for root in ROOTS)
    pid: str = scenario.box.wait_for(
        lambda: scenario.box.run("sh", "-c", f"cat {procs} 2>/dev/null | head -1", check=False).stdout.strip(),
        20, "the titled process in uid 65534's session")
    assert scenario.box.run("stat", "-c", "%u", f"/proc/{pid}").stdout.strip() == "65534"
    return pid


def test_c2_another_users_titled_process_does_not_block_a_guarded_restart(scenario: Scenario) -> None:
    scenario.box.write("/etc/polkit-1/rules.d/51-phasewatch-leftovers.rules",
                       (REPO / "units" / "polkit" / "51-phasewatch-leftovers.rules.example").read_text())
    scenario.configure("--scale 0.01 --hang TP3:draft_cuda_graph_capture",
                       phases={"draft_cuda_graph_capture": {"deadline": "6s"}},
                       leftovers={"check": True, "wait": "40s"})
    pid = strangers_rank(scenario)  # prepared in advance: the title costs nothing
    scenario.start()
    scenario.sim("--scale 0.01")
    try:
        scenario.box.wait_for(lambda: len(scenario.invocations()) == 2, 90, "the guarded restart's start")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nphasewatch said:\n{scenario.watcher_log()}") from None
    # The sandbox has no nvidia-smi: the check said it looked at /proc only, and still started.
    assert ("nothing of the old start-up survived in /proc (GPU memory not checked: nvidia-smi missing or did "
            "not answer); starting") in scenario.watcher_log()
    assert [a for a in scenario.alerts() if a.get("PHASEWATCH_VERDICT") == "restart_blocked"] == []
    scenario.wait_state("ready", timeout=90)
    scenario.box.run("kill", "-9", pid)


def test_c3_another_users_titled_process_dying_restarts_nothing_in_host_mode(container: Scenario) -> None:  # noqa: F811
    s = container
    s.configure("--scale 0.01 --slow-load 6", actions={"rank_died": ["alert", "restart"]}, rank_processes="host")
    s.start()
    s.box.wait_for(lambda: s.lines("Load weight begin"), 30, "weight loading")
    pid = strangers_rank(s)  # appears after the start-up began, as the probe's did
    time.sleep(2.5)  # phasewatch looks for rank processes within a second of a new process's first line
    s.box.run("kill", "-KILL", pid)
    status = s.wait_state("ready", timeout=120)
    assert [a for a in s.alerts() if a.get("PHASEWATCH_VERDICT") == "rank_died"] == []
    assert restarts_by_phasewatch(s) == [] and len(s.invocations()) == 1
    assert status["ranks"] == {"main": "ready", **{f"TP{n}": "ready" for n in range(8)}}


INJECTED_UNIT = f"""[Service]
Type=simple
ExecStart={VENV}/bin/python -m sglang.launch_server --model-path "/models/x\\nhooks: {{pwn: {{exec: [/bin/sh, -c, 'id > /run/pwned']}}}}\\nactions: {{stalled: [hook:pwn, alert, restart], rank_died: [hook:pwn]}}\\n#" --tp-size 8
"""  # noqa: E501 - one ExecStart= line, as the probe's


def test_c4_a_line_break_in_execstart_writes_no_key(scenario: Scenario) -> None:
    box = scenario.box
    box.write("/run/systemd/system/sglang-injected.service", INJECTED_UNIT)
    box.systemctl("daemon-reload")
    box.run("rm", "-rf", CONFIG_DIR)
    shown = box.run("systemctl", "show", "-p", "ExecStart", "sglang-injected.service").stdout
    assert "/models/x\nhooks:" in shown or "/models/x\\nhooks:" in shown  # the premise: systemd unescaped it
    code, out, err = init(scenario, "sglang-injected")
    assert code == 0, err
    text = box.read(f"{CONFIG_DIR}/sglang-injected.yaml") or ""
    assert [line for line in text.splitlines() if line.startswith("hooks")] == []
    # init's own actions (evidence for stalls), not the injected `actions: {stalled: [hook:pwn, ...` line
    assert [line for line in text.splitlines() if line.startswith("actions")] == [
        "actions: {stalled: [evidence, alert, restart], straggler: [evidence, alert, restart]}"]
    assert "model /models/x\\x0ahooks: {pwn:" in text  # shown in its comment, escaped
    checked = box.run(f"{VENV}/bin/phasewatch", "check-config", "--json", f"{CONFIG_DIR}/sglang-injected.yaml",
                      check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    loaded = box.run(f"{VENV}/bin/python", "-c", "import sys; from phasewatch.config.load import load_config; "
                     "c = load_config(sys.argv[1]); print(sorted(c.hooks), c.actions.get('stalled'))",
                     f"{CONFIG_DIR}/sglang-injected.yaml").stdout
    assert loaded.startswith("[] ") and "hook:pwn" not in loaded


def test_m5_a_config_others_may_write_is_refused_at_reload_and_at_start(scenario: Scenario) -> None:
    """PROBE-S3 M-5: `chmod 666` on the config, then `systemctl reload`, gave "config reloaded"."""
    box = scenario.box
    scenario.configure("--scale 0.01 --slow-load 20")
    scenario.start()
    box.wait_for(lambda: "phasewatch watching" in scenario.watcher_log(), 60, "the watcher up")
    box.run("chmod", "666", CONFIG_PATH)
    # ExecReload= checks the config first (issue 36): the reload fails, the daemon is never signalled
    assert box.systemctl("reload", WATCHER, check=False).returncode != 0
    box.wait_for(lambda: "refused: writable by group and others" in scenario.watcher_log(), 30, "the refusal")
    assert "config reloaded" not in scenario.watcher_log()
    assert box.show(WATCHER, "ActiveState")["ActiveState"] == "active"  # the running config kept
    box.systemctl("restart", WATCHER, check=False)
    box.wait_for(lambda: box.show(WATCHER, "ActiveState")["ActiveState"] in ("failed", "inactive", "activating"),
                 30, "the watcher refusing to start")
    checked = box.run(f"{VENV}/bin/phasewatch", "check-config", CONFIG_PATH, check=False)
    assert checked.returncode == 78 and "refused: writable by group and others" in " ".join(checked.stderr.split())
    box.run("chmod", "644", CONFIG_PATH)


LEAKY_SERVER = """[Service]
ExecStart=
ExecStart=/bin/sh -c 'echo "Traceback (most recent call last):"; \\
  echo "  File \\"/usr/lib/python3/dist-packages/huggingface_hub/utils/_http.py\\", line 409, in hf_raise"; \\
  echo "OSError: 401 Client Error: Unauthorized for url: https://alice:hf_SECRETTOKEN9876@huggingface.co/api/models/org/private-model (password=hunter2)"; \\
  sleep 1; exit 1'
"""  # noqa: E501 - the probe's line, whole
NOBODY = "65534"


def test_s4_c3_a_crash_lines_credentials_reach_no_other_user(scenario: Scenario) -> None:
    box = scenario.box
    scenario.configure()
    box.write(f"/run/systemd/system/{UNIT}.d/zz-leaky.conf", LEAKY_SERVER)
    box.systemctl("daemon-reload")
    try:
        scenario.start()
        url = "http://127.0.0.1:9877/status"
        as_root: str = box.wait_for(
            lambda: (out := box.run("curl", "-sf", url, check=False).stdout) and '"crashed"' in out and out,
            60, "the crash verdict in /status")
        assert "https://alice:***@huggingface.co/api/models/org/private-model (password=***)" in as_root
        as_nobody = box.run("curl", "-sf", url, user=NOBODY).stdout
        assert "log line withheld" in as_nobody and json.loads(as_nobody)["log_text_withheld"] is True
        shown = box.run(f"{VENV}/bin/phasewatch", "status", UNIT, "--plain", user=NOBODY, check=False)
        assert shown.returncode == 2 and "crashed" in shown.stdout and "log line withheld" in shown.stdout
        journal = box.run("journalctl", "-q", "-u", UNIT, "--no-pager", user=NOBODY, check=False).stdout
        assert "Unauthorized" not in journal  # the premise: the journal refuses uid 65534
        for text in (as_nobody, shown.stdout + shown.stderr):
            assert "Unauthorized" not in text and "huggingface.co" not in text
        for text in (as_root, as_nobody, shown.stdout, scenario.watcher_log()):
            assert "hf_SECRETTOKEN9876" not in text and "hunter2" not in text
    finally:
        box.run("rm", "-f", f"/run/systemd/system/{UNIT}.d/zz-leaky.conf")
        box.systemctl("daemon-reload")
