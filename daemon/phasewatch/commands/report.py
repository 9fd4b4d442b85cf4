"""Past start-ups of a unit: a table, JSON, and an SVG timeline (ranks x time, phases as coloured
bars, verdicts marked). Pure: history records in, text out. The SVG is written by hand: one small
file, no plotting stack."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any, Sequence

from ..durations import format_duration
from ..records import PHASE_NAMES
from ..sinks.history import StartupRecord

COLOURS = {
    "launch": "#c7c7c7", "dist_init": "#9467bd", "weight_load": "#1f77b4", "jit_compile": "#bcbd22",
    "kv_cache_alloc": "#17becf",
    "cuda_graph_capture": "#ff7f0e", "draft_weight_load": "#aec7e8", "draft_cuda_graph_capture": "#ffbb78",
    "http_server_start": "#8c564b", "warmup": "#e377c2", "ready": "#2ca02c", "serving": "#98df8a",
}


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def slowest_rank(record: StartupRecord) -> str | None:
    """The rank that finished its last scheduler phase last."""
    ends: dict[str, float] = {}
    for rank, spans in record.spans.items():
        if rank == "main":
            continue
        # A phase it never finished lasted, for this purpose, until the start-up ended.
        done = [end if end is not None else record.ended_at for phase, start, end in spans
                if start is not None and phase not in ("ready", "serving", "http_server_start", "warmup")]
        if done:
            ends[rank] = max(done)
    return max(ends, key=lambda r: ends[r]) if ends else None


def to_json(records: Sequence[StartupRecord]) -> dict[str, Any]:
    return {"startups": [{
        "invocation_id": r.invocation_id, "started_at": _when(r.started_at) + "Z", "duration_seconds": r.duration,
        "outcome": r.outcome, "cause": r.cause, "fingerprint": r.fingerprint, "slowest_rank": slowest_rank(r),
        "phases": [{"name": p.phase, "duration_seconds": p.duration, "spread_seconds": p.spread,
                    "progress_total": p.progress_total, "max_silence_seconds": p.max_silence,
                    "slowest_rank": p.slowest_rank} for p in r.phases],
        "verdicts": [{"kind": k, "rank": rank, "phase": phase, "at": _when(at) + "Z"}
                     for k, rank, phase, at in r.verdicts],
    } for r in records]}


def to_table(records: Sequence[StartupRecord]) -> str:
    if not records:
        return "no start-ups recorded yet\n"
    phases = [p for p in PHASE_NAMES if any(r.phase(p) for r in records) and p not in ("ready", "serving")]
    header = ["STARTED (UTC)", "TOOK", "OUTCOME", "SLOWEST", *phases]
    rows = []
    for r in records:
        outcome = r.outcome + (f" ({r.cause})" if r.cause else "")
        cells = [format_duration(p.duration) if (p := r.phase(name)) else "-" for name in phases]
        rows.append([_when(r.started_at), format_duration(r.duration), outcome, slowest_rank(r) or "-", *cells])
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    return "\n".join(lines) + "\n"


def to_svg(records: Sequence[StartupRecord], title: str) -> str:
    """One panel per start-up: a row per rank, time left to right, phases as bars, verdicts as marks."""
    width, left, right, row, gap = 1100, 90, 20, 16, 46
    panels = []
    y = 40
    for record in records:
        ranks = sorted(record.spans, key=lambda r: (r != "main", int("".join(c for c in r if c.isdigit()) or 0)))
        span = max(record.duration, 1.0)
        scale = (width - left - right) / span
        parts = [f'<text x="{left}" y="{y - 8}" class="panel">{escape(_when(record.started_at))} UTC: '
                 f'{escape(record.outcome)}{" (" + escape(record.cause) + ")" if record.cause else ""}, '
                 f'{escape(format_duration(record.duration))}</text>']
        for index, rank in enumerate(ranks):
            top = y + index * row
            parts.append(f'<text x="{left - 6}" y="{top + row - 4}" class="rank">{escape(rank)}</text>')
            for phase, start, end in record.spans[rank]:
                if start is None:
                    continue
                stop = end if end is not None else record.ended_at
                x = left + (start - record.started_at) * scale
                w = max((stop - start) * scale, 1.0)
                parts.append(f'<rect x="{x:.1f}" y="{top + 2}" width="{w:.1f}" height="{row - 4}" '
                             f'fill="{COLOURS.get(phase, "#999")}"><title>{escape(rank)} {escape(phase)}: '
                             f'{escape(format_duration(stop - start))}</title></rect>')
        for kind, who, _phase, at in record.verdicts:
            index = ranks.index(who) if who in ranks else 0
            x = left + (at - record.started_at) * scale
            top = y + index * row
            parts.append(f'<path d="M{x:.1f},{top + row / 2:.1f} l6,-6 l0,12 z" fill="#d62728">'
                         f'<title>{escape(kind)} {escape(who or "")}</title></path>')
        axis_y = y + len(ranks) * row + 4
        for tick in range(0, 6):
            seconds = span * tick / 5
            x = left + seconds * scale
            parts.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#444"/>')
            parts.append(f'<text x="{x:.1f}" y="{axis_y + 15}" class="tick">{escape(format_duration(seconds))}</text>')
        panels.append("\n".join(parts))
        y = axis_y + 20 + gap
    legend_y = y - gap + 10
    legend = []
    for index, phase in enumerate(p for p in PHASE_NAMES if p not in ("serving",)):
        x = left + (index % 5) * 200
        ly = legend_y + (index // 5) * 16
        legend.append(f'<rect x="{x}" y="{ly}" width="12" height="10" fill="{COLOURS[phase]}"/>'
                      f'<text x="{x + 16}" y="{ly + 9}" class="legend">{phase}</text>')
    legend.append(f'<path d="M{left + 1000 - 200},{legend_y + 37} l6,-6 l0,12 z" fill="#d62728"/>'
                  f'<text x="{left + 1000 - 188}" y="{legend_y + 41}" class="legend">verdict</text>')
    height = legend_y + 60
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif">\n'
            "<style>.panel{font-size:13px;fill:#222}.rank{font-size:11px;text-anchor:end;fill:#333}"
            ".tick{font-size:10px;text-anchor:middle;fill:#444}.legend{font-size:11px;fill:#333}"
            ".title{font-size:15px;font-weight:bold}</style>\n"
            f'<rect width="100%" height="100%" fill="white"/>\n<text x="{left}" y="20" class="title">'
            f"{escape(title)}</text>\n" + "\n".join(panels) + "\n" + "\n".join(legend) + "\n</svg>\n")
