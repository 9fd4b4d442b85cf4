"""Issue 36: a start-up that has ended is told as of its end. A rank stuck in a phase when the
operator stopped the unit was in it until the stop, not until the last line of a later start-up
(replay, status), and `report` times the phase a row's verdict names by the rank it names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import Faults, build, journal_json

from phasewatch.cli import main
from phasewatch.commands.report import to_table
from phasewatch.records import MID_STOPPED, MID_STOPPING
from phasewatch.sinks.history import PhaseRecord, StartupRecord

UNIT = "sglang-kimi.service"
FIRST, SECOND = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d", "6f2a4dab1c8e5f32b7d9a11e2f3c4d5e"
BASE = 1796025600.0


def stopped_then_started_again(stop_after: float) -> list[dict[str, Any]]:
    """TP3 hangs in draft_cuda_graph_capture; `stop_after` seconds after the last line the operator
    stops the unit; an hour later a healthy start-up."""
    first = list(journal_json(build(scale=0.01, faults=Faults(hang={3: "draft_cuda_graph_capture"})), base=BASE,
                              unit=UNIT, invocation=FIRST))
    last = int(first[-1]["__REALTIME_TIMESTAMP"])
    stop = last + int(stop_after * 1e6)
    for mid, at in ((MID_STOPPING, stop), (MID_STOPPED, stop + 100_000)):
        first.append({"__REALTIME_TIMESTAMP": str(at), "_PID": "1", "_UID": "0", "UNIT": UNIT, "MESSAGE_ID": mid,
                      "INVOCATION_ID": FIRST, "MESSAGE": f"Stopping {UNIT}..."})
    second = list(journal_json(build(scale=0.01), base=BASE + 3600, unit=UNIT, invocation=SECOND, main_pid=5711))
    return first + second


def replay(tmp_path: Path, entries: list[dict[str, Any]], capsys: pytest.CaptureFixture[str],
           *argv: str) -> str:
    log = tmp_path / "log.json"
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert main(["replay", str(log), *argv]) == 0
    return capsys.readouterr().out


def test_a_stuck_ranks_phase_stops_growing_at_the_stop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = stopped_then_started_again(stop_after=15.0)
    out = replay(tmp_path, entries, capsys, "--plain")
    block = out[out.index(f"invocation {FIRST}"):out.index(f"invocation {SECOND}")]
    [tp3] = [line for line in block.splitlines() if line.startswith("TP3 ")]
    running = [cell for cell in tp3.split() if cell.endswith("+")]
    assert running, tp3
    seconds = [int(m) for cell in running for m in re.findall(r"^(\d+)s\+$", cell)]
    assert seconds and all(s < 60 for s in seconds), tp3  # not the hour until the second start-up's last line


def test_report_times_the_verdicts_phase_by_the_stuck_rank() -> None:
    start = BASE
    spans = {"TP0": [("cuda_graph_capture", start, start + 3.0)], "TP3": [("cuda_graph_capture", start, None)]}
    record = StartupRecord(UNIT, FIRST, "fp", start, start + 48.0, "stalled", "deadline",
                           (PhaseRecord("cuda_graph_capture", 3.0, 0.0, None, 1.0, "TP0"),), spans,
                           (("stalled", "TP3", "cuda_graph_capture", start + 40.0),))
    text = to_table([record])
    [row] = [line for line in text.splitlines() if "stalled" in line]
    assert row.split()[5] == "TP3" and row.split()[-1] == "48s+", text
    assert "'+': the verdict's rank (SLOW) was still in that phase when the start-up ended" in text
