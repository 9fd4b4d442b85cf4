"""`phasewatch status`: the daemon's /status when one answers, the same document from the journal when
none does, the table, exit statuses, and --watch's output in a log."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from phasewatch.cli import main
from phasewatch.commands.status import exit_status, render_table, status_url, watch
from phasewatch.config import Config

UNIT = "sglang-kimi.service"
DAEMON_INVOCATION = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
HOUR_AGO = time.time() - 3600


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- a stub daemon -----------------------------------------------------------------------------

def rank(phase: str, **more: Any) -> dict[str, Any]:
    return {"phase": phase, "phase_ended": False, "seen": True, "progress": None, "last_activity": None,
            "phases": [], "elapsed_seconds": 192.0, "deadline_seconds": 1200.0, "stall_seconds": 1200.0,
            "quiet_seconds": 2.0, **more}


def document(outcome: str, verdicts: list[dict[str, Any]] | None = None, unit: str = UNIT) -> dict[str, Any]:
    phase = {"ready": "ready", "serving": "serving"}.get(outcome, "draft_cuda_graph_capture")
    ranks = {"main": rank("launch"), **{f"TP{n}": rank(phase) for n in range(8)}}
    ranks["TP0"]["progress"] = {"n": 7, "total": 23, "percent": 30, "desc": "Capturing batches (bs=64)", "bs": 64,
                                "avail_mem_gb": 20.1, "phase": phase}
    budget = {"state": "armed", "remaining": 3, "window_seconds": 21600.0}
    return {"unit": unit, "now": "2026-11-30T08:20:00.000Z", "restart_budget": budget,
            "daemon": {"invocation_id": DAEMON_INVOCATION, "pid": 4242},
            "invocation": {"invocation_id": "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d", "outcome": outcome, "phase": phase,
                           "started_at": "2026-11-30T08:00:00.000Z", "last_line_at": "2026-11-30T08:19:58.000Z",
                           "judged_at": "2026-11-30T08:20:00.000Z", "unit_state": "starting", "lines_lost": 0,
                           "server": None, "ranks": ranks, "verdicts": verdicts or [], "elapsed_seconds": 1200.0}}


STALLED = [{"kind": "stalled", "phase": "draft_cuda_graph_capture", "rank": "TP3", "cause": "deadline",
            "message": f"{UNIT}: TP3 stalled in draft_cuda_graph_capture for 20m1s (limit 20m)", "at": None}]


def test_status_url_asks_loopback_for_a_wildcard_listen_address() -> None:
    assert status_url("127.0.0.1:9877") == "http://127.0.0.1:9877/status"
    assert status_url("0.0.0.0:9877") == "http://127.0.0.1:9877/status"
    assert status_url("[::]:9877") == "http://[::1]:9877/status"
    assert status_url("[::1]:9000") == "http://[::1]:9000/status"


def test_no_unit_and_no_config_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["status"], capsys)
    assert code == 64
    assert "name the UNIT, or give --config" in err


# -- without a daemon: the journal -------------------------------------------------------------


# -- exit statuses and --watch ------------------------------------------------------------------

def test_exit_status_without_an_invocation() -> None:
    assert exit_status({"unit": UNIT, "invocation": None}) == 3
    assert exit_status({"unit": UNIT, "invocation": None, "active_state": "activating"}) == 1


def test_progress_of_a_phase_the_rank_left_is_not_shown() -> None:
    doc = document("starting")
    doc["invocation"]["ranks"]["TP0"]["progress"]["phase"] = "weight_load"
    [row] = [line for line in render_table(doc).splitlines() if line.startswith("TP0 ")]
    assert "7/23" not in row


def test_watch_in_a_log_prints_a_block_per_change_and_a_line_per_progress_step() -> None:
    def step(phase: str, n: int | None, outcome: str = "starting") -> dict[str, Any]:
        doc = document(outcome, STALLED if outcome == "stalled" else [])
        for r in doc["invocation"]["ranks"].values():
            if r["phase"] != "launch":
                r["phase"] = phase
        doc["invocation"]["phase"] = phase
        progress = doc["invocation"]["ranks"]["TP0"]["progress"]
        if n is None:
            doc["invocation"]["ranks"]["TP0"]["progress"] = None
        else:
            progress.update(n=n, total=64, bs=None, phase=phase)
        return doc

    docs = iter([step("weight_load", 1), step("weight_load", 1), step("weight_load", 2), step("weight_load", 3),
                 step("kv_cache_alloc", None), step("kv_cache_alloc", None, "stalled")])

    def fetch() -> dict[str, Any]:
        try:
            return next(docs)
        except StopIteration:
            raise KeyboardInterrupt from None

    out = io.StringIO()
    sleeps: list[float] = []
    code = watch(fetch, out, tty=False, listen="127.0.0.1:9877", sleep=sleeps.append, clock=lambda: HOUR_AGO)
    text = out.getvalue()
    assert code == 2  # the last document's
    assert text.count("--- ") == 3  # weight_load, kv_cache_alloc, then the verdict
    progress = [line for line in text.splitlines() if line.endswith("/64")]
    assert [line.split()[1:] for line in progress] == [["TP0", "weight_load", "2/64"], ["TP0", "weight_load", "3/64"]]
    assert "\x1b" not in text
    assert sleeps == [1.0] * 6


def test_watch_on_a_terminal_redraws(capsys: pytest.CaptureFixture[str]) -> None:
    docs = iter([document("starting"), document("ready")])

    def fetch() -> dict[str, Any]:
        try:
            return next(docs)
        except StopIteration:
            raise KeyboardInterrupt from None

    out = io.StringIO()
    assert watch(fetch, out, tty=True, sleep=lambda _: None) == 0
    assert out.getvalue().count("\x1b[H\x1b[2J") == 2


def test_default_config_is_the_units() -> None:
    from phasewatch.sources.current import resolve_config

    assert resolve_config(UNIT, None) == Config(unit=UNIT)
