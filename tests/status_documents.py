"""The daemon's `/status` document as a stub daemon serves it: shared by the unit and integration
tests of `phasewatch status` (one copy, so a new field is added once)."""

from __future__ import annotations

from typing import Any

UNIT = "sglang-kimi.service"
DAEMON_INVOCATION = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def rank(phase: str, **more: Any) -> dict[str, Any]:
    return {"phase": phase, "phase_ended": False, "confidence": "exact", "seen": True, "progress": None,
            "last_activity": None,
            "phases": [], "elapsed_seconds": 192.0, "deadline_seconds": 1200.0, "stall_seconds": 1200.0,
            "quiet_seconds": 2.0, **more}


def document(outcome: str, verdicts: list[dict[str, Any]] | None = None, unit: str = UNIT) -> dict[str, Any]:
    phase = {"ready": "ready", "serving": "serving"}.get(outcome, "draft_cuda_graph_capture")
    ranks = {"main": rank("launch"), **{f"TP{n}": rank(phase) for n in range(8)}}
    ranks["TP0"]["progress"] = {"n": 7, "total": 23, "percent": 30, "desc": "Capturing batches (bs=64)", "bs": 64,
                                "avail_mem_gb": 20.1, "phase": phase}
    budget = {"state": "armed", "remaining": 3, "window_seconds": 21600.0}
    return {"unit": unit, "now": "2026-11-30T08:20:00.000Z", "restart_budget": budget, "timer_warnings": [],
            "log_text_withheld": False,
            "daemon": {"invocation_id": DAEMON_INVOCATION, "pid": 4242},
            "invocation": {"invocation_id": "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d", "outcome": outcome, "phase": phase,
                           "started_at": "2026-11-30T08:00:00.000Z", "last_line_at": "2026-11-30T08:19:58.000Z",
                           "judged_at": "2026-11-30T08:20:00.000Z", "unit_state": "starting", "lines_lost": 0,
                           "cold": False,
                           "server": None, "ranks": ranks, "verdicts": verdicts or [], "anomalies": [],
                           "elapsed_seconds": 1200.0}}


STALLED = [{"kind": "stalled", "phase": "draft_cuda_graph_capture", "rank": "TP3", "cause": "deadline",
            "message": f"{UNIT}: TP3 stalled in draft_cuda_graph_capture for 20m1s (limit 20m)", "at": None}]
