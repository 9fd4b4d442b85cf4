"""History of start-ups, limits learned from it, and the ETA, on simulated Kimi-K2.5 start-ups
(tools/sglang_sim.py at real speed: weight loading about 9 minutes, the whole start about 19)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from learn_startups import LOADS, UNIT, finished
from phasewatch.sinks.history import History, StartupRecord


@pytest.fixture(scope="module")
def records() -> list[StartupRecord]:
    return [finished(n, load) for n, load in enumerate(LOADS)]


def test_history_survives_kill_9_mid_write(tmp_path: Path, records: list[StartupRecord]) -> None:
    path = tmp_path / "history.sqlite3"
    writer = subprocess.Popen([sys.executable, "-c", f"""
import sys, pickle, dataclasses
sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "daemon")!r})
from phasewatch.sinks.history import History
record = pickle.loads(sys.stdin.buffer.read())
history = History({str(path)!r})
print("ready", flush=True)
n = 0
while True:
    n += 1
    history.add(dataclasses.replace(record, invocation_id=f"inv-{{n}}"))
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    import pickle

    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write(pickle.dumps(records[0]))
    writer.stdin.close()
    assert writer.stdout.readline().strip() == b"ready"
    time.sleep(0.5)  # the writer is mid-transaction most of the time
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    history = History(path)
    stored = history.startups(UNIT)
    assert len(stored) >= 1
    assert all(len(r.phases) == len(records[0].phases) for r in stored)  # no half-written start-up
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
