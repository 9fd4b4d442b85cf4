"""Presentation of judgements: the `replay --json` document and the per-rank timeline table.

Everything phasewatch writes to a terminal from log content goes through `terminal_safe` (text) or
`json_text` (JSON): a line of the server's output cannot ring the bell, move the cursor, retitle
the window or hide text with backspaces. Times outside years 1970..9999 are clamped, never raised.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any, Callable

from .config import Config
from .durations import format_duration
from .pipeline import Judgement
from .records import MAIN, PHASE_NAMES, Progress
from .stages.snapshot import InvocationView, RankView

# C0 controls except tab (ESC, BEL, backspace, CR, ...), DEL and C1 (CSI U+009B, OSC U+009D, ...).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_JSON_RAW_CONTROL_RE = re.compile(r"[\x7f-\x9f]")  # json.dumps(ensure_ascii=False) escapes only C0
MAX_TS = 253402300799.999  # 9999-12-31T23:59:59.999Z


def terminal_safe(text: str) -> str:
    """`text` with every control character but tab written as `\\xNN`: one terminal line, inert."""
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def json_text(document: Any) -> str:
    """A JSON document for a terminal: UTF-8 as is, control characters (C0, DEL, C1) as \\u escapes."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    return _JSON_RAW_CONTROL_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def ts_in_range(ts: float) -> bool:
    return 0.0 <= ts <= MAX_TS


def clamp_ts(ts: float) -> float:
    """Into 1970-01-01 .. 9999-12-31 (NaN: 0): what datetime and localtime can show."""
    return min(max(ts, 0.0), MAX_TS) if ts == ts else 0.0


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    when = dt.datetime.fromtimestamp(clamp_ts(ts), dt.timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_iso = iso


def clock_text(ts: float, utc: bool = False, with_date: bool = True) -> str:
    """`2026-11-30 08:05:01` (local time unless `utc`), of a clamped time."""
    fmt = "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S"
    clamped = clamp_ts(ts)
    try:
        return time.strftime(fmt, time.gmtime(clamped) if utc else time.localtime(clamped))
    except (OverflowError, OSError, ValueError):  # local time past the platform's range near the ends
        return time.strftime(fmt, time.gmtime(clamped))


def current_phase(inv: InvocationView) -> str | None:
    """The phase of the rank that has been in its phase the longest (the slowest one)."""
    main = inv.rank(MAIN)
    if main is not None and main.phase.value in ("http_server_start", "warmup", "ready", "serving"):
        return main.phase.value
    schedulers = [r for r in inv.scheduler_ranks if not r.phase_ended] or list(inv.scheduler_ranks)
    if not schedulers:
        return main.phase.value if main is not None else None
    slowest = min(schedulers, key=lambda r: (r.phase_start is None, r.phase_start or 0.0))
    return slowest.phase.value


def progress_text(progress: Progress | None) -> str:
    if progress is None:
        return ""
    text = f"{progress.n}/{progress.total}" if progress.total is not None else str(progress.n)
    if progress.bs is not None:
        text += f" bs={progress.bs}"
    return text


def _undated(ts: float | None) -> None:
    return None


def _rank_json(rank: RankView, iso: Callable[[float | None], str | None] = iso) -> dict[str, Any]:
    progress = None
    if rank.progress is not None:
        progress = {"n": rank.progress.n, "total": rank.progress.total, "percent": rank.progress.percent,
                    "desc": rank.progress.desc, "bs": rank.progress.bs, "avail_mem_gb": rank.progress.avail_mem_gb,
                    # the phase the bar was drawn in: a rank that moved on still shows its last bar
                    "phase": rank.progress_phase.value if rank.progress_phase is not None else None}
    return {
        "phase": rank.phase.value,
        "phase_ended": rank.phase_ended,
        "seen": rank.seen,
        "progress": progress,
        "last_activity": iso(rank.last_activity),
        "phases": [{"name": s.phase.value, "start": iso(s.start), "end": iso(s.end)} for s in rank.spans],
    }


def to_json(judgements: list[Judgement], now: float, dated: bool = True) -> dict[str, Any]:
    """`dated=False`: a log without a single time stamp (judged as if written at one instant): no
    time is shown, rather than 1970."""
    return {"invocations": [invocation_json(j, now, dated) for j in judgements]}


def invocation_json(judgement: Judgement, now: float, dated: bool = True) -> dict[str, Any]:
    iso = _iso if dated else _undated
    inv = judgement.invocation
    server = inv.server
    return {
        "invocation_id": inv.invocation_id,
        "outcome": judgement.outcome,
        "phase": current_phase(inv),
        "started_at": iso(inv.started_at),
        "last_line_at": iso(inv.last_ts),
        "judged_at": iso(now),
        "unit_state": inv.state.value,
        "lines_lost": inv.lines_lost,
        "server": None if server is None else {
            "tp": server.tp, "dp": server.dp, "pp": server.pp, "ep": server.ep, "nnodes": server.nnodes,
            "node_rank": server.node_rank, "dp_attention": server.dp_attention,
            "speculative": server.speculative, "model_path": server.model_path},
        "ranks": {r.rank: _rank_json(r, iso) for r in inv.ranks},
        "verdicts": [{"kind": v.kind, "phase": v.phase, "rank": v.rank, "cause": v.cause,
                      "message": v.message, "at": iso(v.at)} for v in judgement.verdicts],
    }


def status_document(judgement: Judgement | None, now: float, config: Config,
                    budget: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The daemon's `/status` (and `phasewatch status --json`): the current start-up as in
    `replay --json`, plus time in phase against the limits and the restart budget."""
    document: dict[str, Any] = {"unit": config.unit, "now": iso(now), "invocation": None,
                                "restart_budget": budget, **(extra or {})}
    if judgement is None:
        return document
    inv = judgement.invocation
    body = invocation_json(judgement, now)
    body["elapsed_seconds"] = round(now - inv.started_at, 3) if inv.started_at is not None else None
    for rank in inv.ranks:
        limits = config.limits(rank.phase)
        entry = body["ranks"][rank.rank]
        entry["elapsed_seconds"] = round(now - rank.phase_start, 3) if rank.phase_start is not None else None
        entry["deadline_seconds"] = limits.deadline
        entry["stall_seconds"] = limits.stall
        entry["quiet_seconds"] = round(now - rank.last_activity, 3) if rank.last_activity is not None else None
    document["invocation"] = body
    return document


def _cell(rank: RankView, phase: str, now: float, dated: bool = True) -> str:
    spans = [s for s in rank.spans if s.phase.value == phase]
    if not spans:
        return "-"
    start = spans[0].start
    end = spans[-1].end
    if start is None or not dated:
        return "?"
    if end is None:
        return format_duration(max(now - start, 0.0)) + "+"
    return format_duration(max(end - start, 0.0))


def to_table(judgements: list[Judgement], now: float, dated: bool = True) -> str:
    if not judgements:
        return "no invocations found\n"
    out: list[str] = []
    for judgement in judgements:
        inv = judgement.invocation
        times = (f"started {iso(inv.started_at)}, last line {iso(inv.last_ts)}" if dated
                 else "no time stamps in the log: durations unknown")
        header = f"invocation {inv.invocation_id}: {judgement.outcome}, phase {current_phase(inv)}, {times}"
        if inv.lines_lost:
            header += f", {inv.lines_lost} line(s) lost"
        out.append(header)
        phases = [p for p in PHASE_NAMES if any(s.phase.value == p for r in inv.ranks for s in r.spans)]
        columns = ["RANK", "NOW", "PROGRESS", *phases]
        rows = []
        for rank in inv.ranks:
            now_text = rank.phase.value + (" (done)" if rank.phase_ended else "") + ("" if rank.seen else " (silent)")
            if rank.rank == MAIN and rank.phase.value == "launch" and inv.scheduler_ranks:
                now_text = "launch (waiting for the ranks)"
            cells = [_cell(rank, p, now, dated) for p in phases]
            rows.append([rank.rank, now_text, progress_text(rank.progress), *cells])
        widths = [max(len(str(row[i])) for row in [columns, *rows]) for i in range(len(columns))]
        for row in [columns, *rows]:
            out.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if judgement.verdicts:
            out.append("verdicts:")
            out.extend(f"  {v.kind}: {v.message}" for v in judgement.verdicts)
        else:
            out.append("verdicts: none")
        out.append("")
    out.append("(durations: finished phases; '+' = still running at the judged time)")
    return "\n".join(terminal_safe(line) for line in out) + "\n"
