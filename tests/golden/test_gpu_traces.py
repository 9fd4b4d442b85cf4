"""`phasewatch vitals replay --json` over every recorded trace (tests/golden/gpu-traces: real
recordings on an H200, phasewatch-vitals-trace/1) meets the judging rule of issue 23: in every
`progress` window with at least two whole periods, >= 90 % of the periods alive and never two dead
periods in a row; in every `no_progress` window, no period alive that ends after its first 10 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted((ROOT / "tests" / "golden" / "gpu-traces").glob("*.jsonl"))


def replay(trace: Path, period: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "phasewatch", "vitals", "replay", str(trace), "--json",
                          "--period", period], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT / "daemon"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def check(document: dict, rank_filter: str | None = None) -> list[str]:
    problems = []
    for window in document["windows"]:
        begin, end = window["begin"], window["end"]
        inside = [p for p in document["periods"] if p["from"] >= begin and p["to"] <= end]
        overlapping = [p for p in document["periods"] if p["to"] > begin + 10 and p["from"] < end]
        for rank in sorted({r for p in document["periods"] for r in p["ranks"]}):
            if window["expect"] == "progress" and len(inside) >= 2:
                alive = [p["ranks"].get(rank, {}).get("alive", False) for p in inside]
                if sum(alive) < 0.9 * len(alive):
                    problems.append(f"{window['name']} {rank}: {sum(alive)} of {len(alive)} periods alive")
                if any(not a and not b for a, b in zip(alive, alive[1:], strict=False)):
                    problems.append(f"{window['name']} {rank}: two dead periods in a row")
            if window["expect"] == "no_progress":
                for p in overlapping:
                    if p["ranks"].get(rank, {}).get("alive"):
                        problems.append(f"{window['name']} {rank}: alive {p['from']}-{p['to']}: "
                                        f"{p['ranks'][rank]['why']}")
    return problems


def test_the_repo_holds_the_shared_and_the_device_recordings() -> None:
    names = {t.name for t in TRACES}
    assert {"cuda-graph-capture.jsonl", "hang-wait-kernel.jsonl", "torch-compile-autotune.jsonl",
            "weight-load-cold.jsonl", "hang-gloo-allreduce.jsonl", "idle-blocked-recv.jsonl"} <= names
    assert {"hang-poll-host-memory.jsonl", "hang-python-spin.jsonl", "launch-bound-capture.jsonl",
            "weight-load-slow-storage.jsonl", "warmup-host-heavy.jsonl"} <= names  # issue 35


@pytest.mark.parametrize("period", ["5s", "2s", "10s"])
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_every_window_is_judged_as_labelled(trace: Path, period: str) -> None:
    document = replay(trace, period)
    if period == "5s":
        assert document["periods"], "no whole period in the trace"
    assert check(document) == []


def test_the_wait_kernel_is_named() -> None:
    document = replay(ROOT / "tests" / "golden" / "gpu-traces" / "hang-wait-kernel.jsonl", "5s")
    texts = [p["ranks"]["TP0"]["text"] for p in document["periods"][1:]]
    assert all("waiting" in t and "flat" in t and "likely a collective" in t for t in texts), texts
