"""PROBE-S4 L-3: `phasewatch vitals record` wrote its header last, so a recording killed (SIGKILL,
OOM, a reboot) was refused whole by `replay` ("not a ... header"). Now the header is written first,
padded, and rewritten in place at the end: a real recorder over a real process, killed mid-way, leaves
a trace `replay` reads; one that ends normally has its final header in the same 4096 bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from phasewatch.stages.s4_judge import vitals_trace

ROOT = Path(__file__).resolve().parents[2]


def record(out: Path, pid: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "phasewatch", "vitals", "record", "--pid", str(pid), "--out",
                             str(out), "--no-gpu", "--interval", "0.1s", "--rank", f"TP0={pid}", *extra],
                            env={**os.environ, "PYTHONPATH": str(ROOT / "daemon")}, stderr=subprocess.DEVNULL)


def lines_of(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_a_recording_killed_mid_way_is_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "killed.jsonl"
    target = subprocess.Popen(["sleep", "60"])
    recorder = record(out, target.pid)
    try:
        deadline = time.monotonic() + 30
        while lines_of(out) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        recorder.send_signal(signal.SIGKILL)
        recorder.wait(10)
    finally:
        target.kill()
        target.wait()
    with out.open(encoding="utf-8") as handle:
        first = handle.readline()
        trace = vitals_trace.parse([first, *handle])
    assert len(first.encode()) == vitals_trace.HEADER_BYTES
    assert trace.ranks == {"TP0": target.pid} and len(trace.samples) >= 3


def test_a_recording_that_ends_rewrites_its_header_in_place(tmp_path: Path) -> None:
    out = tmp_path / "ended.jsonl"
    target = subprocess.Popen(["sleep", "60"])
    recorder = record(out, target.pid, "--window", "w:progress:1:2", "--note", "ended")
    try:
        deadline = time.monotonic() + 30
        while lines_of(out) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(10) == 0
    finally:
        target.kill()
        target.wait()
    first = out.read_text(encoding="utf-8").split("\n", 1)[0]
    assert len(first) == vitals_trace.HEADER_BYTES - 1
    header = json.loads(first)
    assert header["note"] == "ended" and header["windows"][0]["name"] == "w"
    assert len(vitals_trace.parse(out.read_text(encoding="utf-8").splitlines()).samples) >= 3
