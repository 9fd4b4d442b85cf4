"""The bench (bench/run.py, docs/performance.md) in its quick mode, so the harness cannot rot.

Small N, one repetition, a few seconds per part. It asserts only that every row was produced:
never a time (the machine is shared; timings are for `make bench` to report, not for CI to judge).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sandbox import REPO

READERS = {"a_raw_reader", "b_journalctl_grep", "c_fail2ban_regex", "d_phasewatch_replay"}


def test_quick_bench_produces_every_row(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    r = json.loads((tmp_path / "results.json").read_text())

    settings = r["settings"]
    for key, starts in (("catchup", settings["invocations"]), ("catchup_crash", settings["crash_invocations"]),
                        ("catchup_access", 1), ("catchup_decode", 1)):  # the four journal mixes
        catchup = r[key]
        assert set(catchup["median"]) == READERS
        assert catchup["found"]["a_raw_reader"]["entries"] == catchup["entries"] > 0
        assert catchup["found"]["b_journalctl_grep"]["marker_lines"] > 0
        assert "matched" in catchup["found"]["c_fail2ban_regex"]["lines"]
        assert catchup["found"]["d_phasewatch_replay"]["invocations"] == starts
    for key in ("rebuild", "rebuild_crash", "rebuild_decode"):  # the daemon's own catch-up, in C and not
        rebuilt = r[key]["found"]
        assert rebuilt["e_daemon_rebuild"]["reader"] == "C" and rebuilt["f_daemon_rebuild_python"]["reader"] == "Python"
        assert rebuilt["e_daemon_rebuild"]["entries"] == rebuilt["f_daemon_rebuild_python"]["entries"] > 0
        assert set(r[key]["cpu_seconds"]) == {"a_raw_reader", "e_daemon_rebuild", "f_daemon_rebuild_python"}
    assert set(r["scale"]) == {str(n) for n in r["settings"]["scale"]}
    for row in r["scale"].values():
        assert row["max_rss_kib"]["d_phasewatch_replay"][0] > 0

    assert r["follow"]["lines"] == r["settings"]["follow_lines"]
    steps = r["follow_steps"]  # progress steps, journal -> /status over HTTP, with where the time went
    assert steps["steps"] == r["settings"]["follow_steps"] and len(steps["delays"]) + steps["missed"] == steps["steps"]
    assert len(steps["to_journal"]) == len(steps["to_publish"]) == len(steps["delays"]) > 0
    for key in ("action_idle", "action_busy"):
        assert len(r[key]["runs"]) == r["settings"]["action_reps"]
    for key in ("idle_rate", "idle_silent_ready", "idle_silent_starting"):
        assert r[key]["daemon_rss_max_kib"] > 0 and r[key]["thread_wakeups"]
    assert r["burst"]["journal_entries"] > r["burst"]["lines"] > 0
    assert r["burst"]["daemon_entries"] is not None
    assert r["follow_rate"]["entries"] > 0 and r["burst"]["follow"]["entries"] > 0
    assert set(r["idle_silent_starting"]["expected"]) == {"watchdog", "sampling", "deadlines"}
    for round_ in r["journal_pages"]["rounds"]:  # every reader found the journal's last entry
        assert {x["how"] for x in round_["readers"]} == {"cursor", "tail", "readall"}
        assert all(x["found"] for x in round_["readers"])

    doc = (tmp_path / "performance.md").read_text()
    for heading in ("## Targets", "## 1. Catch-up", "## 2. Follow latency", "## 3. Action latency",
                    "## 4. Idle cost", "## 5. Burst", "## 6. Scale", "## Reproduce"):
        assert heading in doc
    assert doc.count(": replay ≥") == 12  # three references, four mixes
    assert "### serving-heavy" in doc and "### crash-heavy" in doc and "### access-heavy" in doc
    assert "### decode-heavy" in doc and "| 2 | progress step → `/status` over HTTP" in doc
    assert "### The daemon's own catch-up at its start" in doc
    assert doc.count("| 2 | entry → daemon status") == 2
