"""Presentation of judgements: the `replay --json` document and the per-rank timeline table.

Everything phasewatch writes to a terminal from log content goes through `terminal_safe` (text) or
`json_text` (JSON): a line of the server's output cannot ring the bell, move the cursor, retitle
the window or hide text with backspaces. Times outside years 1970..9999 are clamped, never raised.
A time that is not a date (timestamps.is_dated: a time of day from a log that never names its date)
is written without one: null in JSON, `HH:MM:SS (no date)` in tables; never as 1970.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

from ..config.load import Config
from ..durations import format_duration
from ..pipeline import Judgement
from ..records import FINAL_PHASES, MAIN, UNIT_PHASES, Phase, Progress
from ..stages.s1_read.timestamps import is_dated
from ..stages.s3_track.snapshot import InvocationView, RankView
from ..stages.s4_judge.redact import redact
from ..stages.s4_judge.remedies import naming_evidence
from ..stages.s4_judge.verdict import Verdict
from .fit import fit_text
from .verdict_lines import VerdictLine, grouped

# C0 controls except tab (ESC, BEL, backspace, CR, ...), DEL and C1 (CSI U+009B, OSC U+009D, ...).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_JSON_RAW_CONTROL_RE = re.compile(r"[\x7f-\x9f]")  # json.dumps(ensure_ascii=False) escapes only C0
MAX_TS = 253402300799.999  # 9999-12-31T23:59:59.999Z
# In place of a quoted log line, for a reader who may not read the unit's journal (sinks/peers.py).
WITHHELD = "(log line withheld: ask as root or a member of systemd-journal or adm, or read the journal)"


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
    """ISO 8601 UTC; None for no time, or for a time that is not a date."""
    if ts is None or not is_dated(clamp_ts(ts)):
        return None
    when = dt.datetime.fromtimestamp(clamp_ts(ts), dt.timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock_text(ts: float, utc: bool = False, with_date: bool = True) -> str:
    """`2026-11-30 08:05:01` (local time unless `utc`), of a clamped time."""
    fmt = "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S"
    clamped = clamp_ts(ts)
    if with_date and not is_dated(clamped):
        fmt = "????-??-?? %H:%M:%S"  # a time of day without its date; same width
        utc = True
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


def when_text(ts: float | None) -> str:
    """A time for a table header: ISO when dated, the time of day when not, else 'unknown'."""
    if ts is None:
        return "unknown"
    if is_dated(clamp_ts(ts)):
        return iso(ts) or "unknown"
    return time.strftime("%H:%M:%S", time.gmtime(clamp_ts(ts))) + " (no date)"


def confidence(rank: RankView) -> str:
    """How the rank's current phase was read: "exact" (a rule) or "family" (the fallback vocabulary)."""
    return rank.spans[-1].confidence if rank.spans else "exact"


def _rank_json(rank: RankView, quotes: bool = True) -> dict[str, Any]:
    progress = None
    if rank.progress is not None:
        progress = {"n": rank.progress.n, "total": rank.progress.total, "percent": rank.progress.percent,
                    "desc": redact(rank.progress.desc) if quotes else None,
                    "bs": rank.progress.bs, "avail_mem_gb": rank.progress.avail_mem_gb,
                    # the phase the bar was drawn in: a rank that moved on still shows its last bar
                    "phase": rank.progress_phase.value if rank.progress_phase is not None else None}
    out = {
        "phase": rank.phase.value,
        "phase_ended": rank.phase_ended,
        "confidence": confidence(rank),
        "seen": rank.seen,
        "progress": progress,
        "last_activity": iso(rank.last_activity),
        "phases": [{"name": s.phase.value, "start": iso(s.start), "end": iso(s.end), "confidence": s.confidence}
                   for s in rank.spans],
    }
    if rank.jit is not None:
        # The jit_compile sub-phase: from the first JIT line; `start` is the current session's.
        out["jit_compile"] = {"in": rank.jit.parent.value, "first": iso(rank.jit.first), "start": iso(rank.jit.start),
                              "end": iso(rank.jit.end), "compiling": rank.compiling}
    return out


def to_json(judgements: list[Judgement], now: float) -> dict[str, Any]:
    return {"invocations": [invocation_json(j, now) for j in judgements]}


def invocation_json(judgement: Judgement, now: float, quotes: bool = True) -> dict[str, Any]:
    """`quotes`: with the log text it holds (verdicts' quoted lines, bars' descriptions); without, the
    quoted lines are WITHHELD and the descriptions null."""
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
        "cold": inv.cold,
        "server": None if server is None else {
            "tp": server.tp, "dp": server.dp, "pp": server.pp, "ep": server.ep, "nnodes": server.nnodes,
            "node_rank": server.node_rank, "dp_attention": server.dp_attention,
            "speculative": server.speculative,
            "model_path": redact(server.model_path) if server.model_path is not None else None,
            **({"role": server.role} if server.role is not None else {})},  # PD disaggregation only
        "ranks": {r.rank: _rank_json(r, quotes) for r in inv.ranks},
        "verdicts": [verdict_json(v, quotes) for v in judgement.verdicts],
        "anomalies": [{"rank": a.rank, "from": a.source, "to": a.target, "rule": a.rule, "at": iso(a.ts),
                       "confidence": a.confidence} for a in inv.anomalies],
    }


def verdict_json(v: Verdict, quotes: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": v.kind, "phase": v.phase, "rank": v.rank, "cause": v.cause,
                           "message": v.message if quotes else without_quote(v.message, v.quote), "at": iso(v.at)}
    if v.facts is not None:
        # Ranks the failure lines name: the culprits (and how they were found), the healthy ones, and
        # those that timed out waiting on the others.
        out["ranks"] = {"culprits": list(v.facts.culprits), "found_by": v.facts.found_by or None,
                        "remote": v.facts.remote, "healthy": list(v.facts.healthy),
                        "waiting": list(v.facts.waiting)}
    if v.remedy is not None:
        out["remedy"] = {"text": v.remedy.text, "arguments": dict(v.remedy.arguments)}
    return out


def without_quote(message: str, quote: str | None) -> str:
    """`message` with the log line it quotes (every time it does) replaced by WITHHELD."""
    return message.replace(quote, WITHHELD) if quote else message


def status_document(judgement: Judgement | None, now: float, config: Config,
                    budget: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                    quotes: bool = True) -> dict[str, Any]:
    """The daemon's `/status` (and `phasewatch status --json`): the current start-up as in
    `replay --json`, plus time in phase against the limits and the restart budget. Without `quotes`
    (a reader who may not read the journal), its log text is left out (invocation_json) and
    `log_text_withheld` says so."""
    document: dict[str, Any] = {"unit": config.unit, "now": iso(now), "invocation": None,
                                "restart_budget": budget, "log_text_withheld": not quotes, **(extra or {})}
    if judgement is None:
        return document
    inv = judgement.invocation
    body = invocation_json(judgement, now, quotes)
    now = inv.as_of(now)  # an ended start-up's durations stop at its end
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


def _cell(rank: RankView, phase: str, now: float, timeless: bool = False) -> str:
    spans = [s for s in rank.spans if s.phase.value == phase]
    if not spans:
        return "-"
    mark = "~" if any(s.confidence != "exact" for s in spans) else ""
    start = spans[0].start
    end = spans[-1].end
    if start is None or timeless:
        return "?" + mark
    if end is None:
        return format_duration(max(now - start, 0.0)) + "+" + mark
    return format_duration(max(end - start, 0.0)) + mark


def main_process_line(inv: InvocationView, now: float, timeless: bool = False) -> str | None:
    """The main (HTTP server) process as one line above the ranks: it waits for them through the
    whole load, so as a rank row it would read "launch for 40 minutes". None without ranks."""
    main = inv.rank(MAIN)
    if main is None or not inv.scheduler_ranks:
        return None
    since = "?" if main.phase_start is None or timeless else clock_text(main.phase_start, utc=True, with_date=False)
    if main.phase is Phase.LAUNCH:
        expected = inv.server.expected_rank_count if inv.server is not None and inv.server.plausible else None
        count = expected or len(inv.scheduler_ranks)
        text = f"main process: waiting for {count} rank{'s' if count != 1 else ''} since {since}"
    else:
        text = f"main process: {main.phase.value}{' (done)' if main.phase_ended else ''} since {since}"
    ran = [f"{span.phase.value} {_cell(main, span.phase.value, now, timeless)}" for span in main.spans
           if span.phase in UNIT_PHASES and span.phase not in FINAL_PHASES]
    return text + (f" ({', '.join(ran)})" if ran else "")


def _jit_cell(rank: RankView, now: float) -> str:
    jit = rank.jit
    if jit is None or jit.first is None:
        return "-" if jit is None else "?"
    if jit.end is None:
        return format_duration(max(now - jit.first, 0.0)) + "+"
    return format_duration(max(jit.end - jit.first, 0.0))


# Short phase names for tables that must fit (report's default, replay's within the width).
PHASE_SHORT = {"launch": "launch", "dist_init": "dist", "weight_load": "load", "kv_cache_alloc": "kv",
               "cuda_graph_capture": "graphs", "draft_weight_load": "dload",
               "draft_cuda_graph_capture": "dgraphs", "http_server_start": "http", "warmup": "warmup"}


def _grid(rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def fit_columns(columns: list[str], rows: list[list[str]], fixed: int, width: int | None
                ) -> tuple[list[str], list[str], int]:
    """The table's lines within `width` (None: as wide as it is): the columns after the first
    `fixed` are phases, named in full, else short (PHASE_SHORT), else the earliest left out.
    Returns the lines, the phases shown short, and how many phase columns were left out."""
    lines = _grid([columns, *rows])
    if width is None or max(len(line) for line in lines) <= width:
        return lines, [], 0
    short = [*columns[:fixed], *(PHASE_SHORT.get(name, name) for name in columns[fixed:])]
    renamed = [name for name in columns[fixed:] if PHASE_SHORT.get(name, name) != name]
    for cut in range(len(columns) - fixed + 1):
        keep = list(range(fixed)) + list(range(fixed + cut, len(columns)))
        lines = _grid([[short[i] for i in keep], *([row[i] for i in keep] for row in rows)])
        if max(len(line) for line in lines) <= width:
            break
    return lines, [name for name in renamed if name in columns[fixed + cut:]], cut


def legend_lines(names: list[str], width: int) -> list[str]:
    """`phases: dist = dist_init, load = weight_load, ...` within `width`."""
    pairs = [f"{PHASE_SHORT.get(name, name)} = {name}" for name in names]
    lines, line = [], "phases:"
    for pair in pairs:
        if len(line) + len(pair) + 2 > width and line.strip() != "phases:":
            lines.append(line.rstrip(","))
            line = "       "
        line += f" {pair},"
    return [*lines, line.rstrip(",")] if pairs else []


def to_table(judgements: list[Judgement], now: float, timeless: bool = False, width: int | None = None,
             plain: bool = False) -> str:
    """`timeless`: the log has no time stamp at all; phases are shown without durations. `width`:
    the table fits it (short phase names, then the earliest phases left out) and other long lines
    wrap; `plain`: no legend, nothing shortened nor wrapped (for scripts)."""
    if not judgements:
        return "no invocations found\n"
    if plain:
        width = None
    out: list[str] = []
    short_names: list[str] = []
    left_out = 0
    for judgement in judgements:
        inv = judgement.invocation
        out.append(_invocation_header(judgement, timeless))
        main_line = main_process_line(inv, inv.as_of(now), timeless)
        if main_line is not None:
            out.append(main_line)
        columns, rows = _rank_rows(inv, now, timeless, main_line is not None)
        lines, shortened, cut = fit_columns(columns, rows, 3, width)
        out.extend(lines)
        short_names += [name for name in shortened if name not in short_names]
        left_out = max(left_out, cut)
        out.extend(_verdicts_and_anomalies(judgement))
        out.append("")
    if not plain:
        out.extend(_legend(judgements, short_names, left_out, width))
    text = "\n".join(terminal_safe(line) for line in out) + "\n"
    return fit_text(text, width) if width is not None else text


def _invocation_header(judgement: Judgement, timeless: bool) -> str:
    inv = judgement.invocation
    if timeless:
        times = "no time stamps in the log (no durations)"
    else:
        times = f"started {when_text(inv.started_at)}, last line {when_text(inv.last_ts)}"
    phase = current_phase(inv) or "none seen yet"
    header = f"invocation {inv.invocation_id}: {judgement.outcome}, phase {phase}, {times}"

    if inv.lines_lost:
        header += f", {inv.lines_lost} line(s) lost"
    if inv.lines_hidden:
        header += f", {inv.lines_hidden} line(s) journalctl did not print (journalctl -a shows them)"
    if inv.cold:
        header += ", cold (JIT compiled)"
    return header


def _rank_rows(inv: InvocationView, now: float, timeless: bool,
               main_shown: bool) -> tuple[list[str], list[list[str]]]:
    """The table's columns and a row per rank (the main process has its own line when `main_shown`)."""
    shown = [r for r in inv.ranks if not main_shown or r.rank != MAIN]
    phases = [p.value for p in Phase if p not in FINAL_PHASES  # a final phase has no duration
              and any(s.phase is p for r in shown for s in r.spans)]
    jit = any(r.jit is not None for r in shown)
    columns = ["RANK", "NOW", "PROGRESS", *phases, *(["jit_compile"] if jit else [])]
    rows = []
    for rank in shown:
        now_text = rank.phase.value + (" (done)" if rank.phase_ended else "") + ("" if rank.seen else " (silent)")
        if confidence(rank) != "exact":
            now_text += f" ({confidence(rank)})"
        if rank.compiling:
            now_text += " + jit_compile"
        rows.append([rank.rank, now_text, progress_text(rank.progress),
                     *(_cell(rank, p, inv.as_of(now), timeless) for p in phases),
                     *([_jit_cell(rank, inv.as_of(now))] if jit else [])])
    return columns, rows


def _verdicts_and_anomalies(judgement: Judgement) -> list[str]:
    out: list[str] = []
    inv = judgement.invocation
    if judgement.verdicts:
        out.append("verdicts:")
        out.extend(f"  {line}" for line in grouped(VerdictLine(v.kind, v.rank, v.message)
                                                   for v in judgement.verdicts))
        remedies: dict[str, str] = {}  # one line per remedy, not one per rank stuck alike
        for v in judgement.verdicts:
            if v.remedy is not None:
                remedies.setdefault(v.remedy.id, v.remedy.text)
        out.extend(f"  remedy: {naming_evidence(text, None)}" for text in remedies.values())
    else:
        out.append("verdicts: none")
    if inv.anomalies:
        out.append(f"anomalies: {len(inv.anomalies) + inv.anomalies_dropped} line(s) would have moved a rank "
                   "backwards (phase kept):")
        out.extend(f"  {a.rank}: {a.source} -> {a.target} refused (rule {a.rule}, {when_text(a.ts)})"
                   for a in inv.anomalies[:10])
    return out


def _legend(judgements: list[Judgement], short_names: list[str], left_out: int, width: int | None) -> list[str]:
    legend = "(durations: finished phases; '+' = still running at the judged time, or when the start-up ended"
    if any(s.confidence != "exact" for j in judgements for r in j.invocation.ranks for s in r.spans):
        legend += "; '~' = read by a family rule, not an exact one"
    out = [legend + ")"]
    if short_names and width is not None:
        out.extend(legend_lines(short_names, width))
    if left_out:
        out.append(f"(the earliest {left_out} phase column(s) left out to fit {width} columns: --plain or --json "
                   "for all)")
    return out
