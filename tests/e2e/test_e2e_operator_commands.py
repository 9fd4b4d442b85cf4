"""`phasewatch logs` and `phasewatch status` on real journald entries of the simulated unit."""

from __future__ import annotations

import datetime as dt
import json

from e2e_env import CONFIG_PATH, STATE_DIR, UNIT, VENV, WATCHER, Scenario


def test_logs_prints_whole_decoded_lines_where_journalctl_shows_blobs(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01 --oom TP5:cuda_graph_capture")
    scenario.box.systemctl("start", UNIT)  # no daemon: the commands read the journal themselves
    scenario.box.wait_for(lambda: scenario.unit("ActiveState")["ActiveState"] == "failed", 60, "the crash")
    plain = scenario.box.run("journalctl", "-u", UNIT, "--no-pager", "-o", "short").stdout
    assert "blob data]" in plain  # what an operator sees today
    logs = scenario.box.run(f"{VENV}/bin/phasewatch", "logs", UNIT, "--utc").stdout
    assert "blob data" not in logs
    lines = logs.splitlines()
    shards = [line for line in lines if "Loading safetensors checkpoint shards" in line]
    assert 60 <= len(shards) <= 70 and all(" TP0 " in line and "weight_load" in line for line in shards)
    assert shards[-1].rstrip().endswith("64/64 [08:57<00:00,  8.40s/it]")
    # A traceback printed whole, under its record, tagged with the failing rank.
    header = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    tail = lines[header:header + 6]
    assert all(" TP5 " in line and "cuda_graph_capture" in line for line in tail)
    assert any("CUDA out of memory" in line for line in tail)
    only_tp5 = scenario.box.run(f"{VENV}/bin/phasewatch", "logs", UNIT, "--rank", "TP5", "--phase",
                                "cuda_graph_capture").stdout.splitlines()
    assert only_tp5 and all(" TP5 " in line for line in only_tp5)


def test_status_without_a_daemon_reads_the_journal(scenario: Scenario) -> None:
    scenario.configure("--scale 0.01")
    scenario.box.systemctl("start", UNIT)
    scenario.box.wait_for(lambda: scenario.lines("The server is fired up"), 60, "ready")
    result = scenario.box.run(f"{VENV}/bin/phasewatch", "status", UNIT, "--json", check=False)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["source"] == "journal"
    assert document["invocation"]["outcome"] == "ready"
    assert set(document["invocation"]["ranks"]) == {"main", *(f"TP{n}" for n in range(8))}


SQUATTER = """
import http.server, json, sys
body = json.dumps({"unit": sys.argv[1], "daemon": {"invocation_id": "0" * 32, "pid": 1}, "source": "daemon",
                   "invocation": {"invocation_id": "forged", "outcome": "ready", "ranks": {}, "verdicts": []}}).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 9877), Handler).serve_forever()
"""


def test_status_refuses_foreign_daemon(scenario: Scenario) -> None:
    """A local user's process takes metrics.listen before the daemon: `status` says so (exit 4) instead
    of showing its forged "ready"; once the daemon has the port, `status` shows the daemon's document."""
    scenario.configure("--scale 0.01 --hang TP3:weight_load")
    scenario.box.write("/run/squatter.py", SQUATTER)
    scenario.box.run("systemd-run", "--unit=squatter", "-p", "User=nobody", f"{VENV}/bin/python", "/run/squatter.py",
                     UNIT)
    try:
        scenario.box.wait_for(lambda: scenario.box.run("curl", "-sf", "http://127.0.0.1:9877/status",
                                                       check=False).returncode == 0, 30, "the squatter")
        scenario.start()
        scenario.wait_state("starting", timeout=60)
        invocation = scenario.box.show(WATCHER, "InvocationID")["InvocationID"]
        foreign = scenario.box.run(f"{VENV}/bin/phasewatch", "status", UNIT, check=False)
        assert (foreign.returncode, foreign.stdout) == (4, ""), foreign.stderr
        assert (f"names daemon invocation '{'0' * 32}', but {WATCHER} runs as invocation "
                f"{invocation}") in " ".join(foreign.stderr.split())  # (wrapped within 100 columns)
    finally:
        scenario.box.systemctl("stop", "squatter", check=False)
    scenario.box.systemctl("restart", WATCHER)  # now it gets the port
    invocation = scenario.box.show(WATCHER, "InvocationID")["InvocationID"]
    scenario.box.wait_for(lambda: scenario.box.run("curl", "-sf", "http://127.0.0.1:9877/status",
                                                   check=False).returncode == 0, 30, "the daemon's listener")
    ours = scenario.box.run(f"{VENV}/bin/phasewatch", "status", UNIT, "--json", check=False)
    assert ours.returncode in (1, 2), ours.stderr
    document = json.loads(ours.stdout)
    assert (document["source"], document["daemon"]["invocation_id"]) == ("daemon", invocation)
    assert document["invocation"]["invocation_id"] != "forged"


def test_one_unit_one_config_for_every_command(scenario: Scenario) -> None:
    """Issue 36, as an operator meets it: while the daemon of sglang-kimi answers on the default port,
    a typo is an unknown unit (3, the names it knows), not "another process on metrics.listen" (4);
    `replay --unit` takes the short name and judges with the unit's config, as `status` does;
    `wait-ready` says the stall, `logs` with nothing to show says why (66), `check-config` counts every
    wrong setting. Every answer within 100 columns."""
    scenario.configure("--scale 0.01 --hang TP3:weight_load", phases={"weight_load": {"deadline": "2s"}},
                       dry_run=True)
    scenario.start()
    phasewatch = f"{VENV}/bin/phasewatch"
    scenario.box.wait_for(lambda: scenario.box.run(phasewatch, "status", "sglang-kimi", check=False).returncode == 2,
                          90, "the stall by the config's 2s deadline")
    typo = scenario.box.run(phasewatch, "status", "sglang-kimmi", check=False)
    assert (typo.returncode, typo.stdout) == (3, ""), typo.stderr
    assert f"units it knows like it: {UNIT}" in " ".join(typo.stderr.split())
    since = dt.datetime.fromtimestamp(scenario.started_at, dt.timezone.utc).isoformat()  # (not an earlier test's)
    replay = scenario.box.run(phasewatch, "replay", "--unit", "sglang-kimi", "--since", since, check=False)
    assert replay.returncode == 0, replay.stderr
    assert "no invocations found" not in replay.stdout
    last = replay.stdout[replay.stdout.rindex("invocation "):]
    assert "stalled" in last.splitlines()[0] and "TP3" in last  # the 2s deadline of its config
    status = scenario.box.run(phasewatch, "status", "sglang-kimi", check=False)
    assert status.returncode == 2, status.stderr
    # The stalled start-up as wait-ready says it (its lines were up to 140 columns).
    wait = scenario.box.run(phasewatch, "wait-ready", "sglang-kimi", "--timeout", "30s", check=False, timeout=90)
    assert wait.returncode == 2, wait.stdout + wait.stderr
    assert "phasewatch: stalled: sglang-kimi.service: " in wait.stdout and "stalled in weight_load" in wait.stdout
    # An empty answer says why (it was nothing, exit 0); a typo in logs as in status.
    no_rank = scenario.box.run(phasewatch, "logs", "sglang-kimi", "--rank", "TP9", check=False)
    assert (no_rank.returncode, no_rank.stdout) == (66, ""), no_rank.stderr
    assert "no rank TP9 in this start-up" in no_rank.stderr and "TP0–TP7" in no_rank.stderr
    logs_typo = scenario.box.run(phasewatch, "logs", "sglang-kimmi", check=False)
    assert logs_typo.returncode == 3 and f"units it knows like it: {UNIT}" in logs_typo.stderr
    # check-config: every wrong setting counted, each said within 100 columns.
    scenario.box.write("/run/bad-config.yaml", "unit: sglang-kimi.service\nrank_skw: 5m\n"
                       "restart_budget: {max: x, window: 6q}\n")
    bad = scenario.box.run(phasewatch, "check-config", "/run/bad-config.yaml", check=False)
    assert bad.returncode == 78 and bad.stderr.splitlines()[-1] == "phasewatch: 3 errors in /run/bad-config.yaml"
    assert "did you mean rank_skew?" in bad.stderr
    for answer in (typo.stderr, replay.stdout, status.stdout, wait.stdout, no_rank.stderr, logs_typo.stderr,
                   bad.stderr):
        assert max(len(line) for line in answer.splitlines()) <= 100, answer


def test_a_start_up_ended_after_ready_as_every_command_says_it(scenario: Scenario) -> None:
    """Issue 36, the rest of the first hour: bare `status` with the one configured unit answers for it
    (it was 64); `wait-ready` on a start-up stopped after ready says it was ready, then stopped (it
    said "stopped in ready before it was ready"), 2; `report --last 0` is a usage error (64), not
    "no start-ups recorded yet"; every answer within 100 columns."""
    scenario.configure("--scale 0.01")
    scenario.start()
    scenario.wait_state("ready", 90)
    phasewatch = f"{VENV}/bin/phasewatch"
    # One configured unit (earlier modules leave configs of their own in the shared sandbox).
    scenario.box.write("/run/phasewatch/other-unit.yaml", "unit: other-unit.service\n")
    assert scenario.box.run(phasewatch, "status", check=False).returncode == 64  # two: name one
    scenario.box.run("find", "/run/phasewatch", "-maxdepth", "1", "-name", "*.yaml", "!", "-path", CONFIG_PATH,
                     "-delete")
    bare = scenario.box.run(phasewatch, "status", check=False)
    assert bare.returncode == 0 and f"{UNIT}" in bare.stdout, bare.stdout + bare.stderr
    scenario.box.systemctl("stop", UNIT)
    wait = scenario.box.run(phasewatch, "wait-ready", "sglang-kimi", "--timeout", "20s", check=False, timeout=90)
    assert wait.returncode == 2, wait.stdout + wait.stderr
    said = " ".join(wait.stdout.split())
    assert f"{UNIT} was ready," in said and "then stopped" in said and "before it was ready" not in said, said
    none = scenario.box.run(phasewatch, "report", "sglang-kimi", "--last", "0", "--state-dir", STATE_DIR, check=False)
    assert (none.returncode, none.stdout) == (64, ""), none.stderr
    assert "--last" in none.stderr and "no start-ups recorded" not in none.stderr
    report = scenario.box.run(phasewatch, "report", "sglang-kimi", "--state-dir", STATE_DIR, check=False)
    assert report.returncode == 0 and "ready" in report.stdout, report.stderr
    for answer in (bare.stdout, wait.stdout, none.stderr, report.stdout):
        assert max(len(line) for line in answer.splitlines()) <= 100, answer
