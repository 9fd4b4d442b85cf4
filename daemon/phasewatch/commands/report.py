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
from ..stages.timestamps import is_dated

COLOURS = {
    "launch": "#c7c7c7", "dist_init": "#9467bd", "weight_load": "#1f77b4", "kv_cache_alloc": "#17becf",
    "cuda_graph_capture": "#ff7f0e", "draft_weight_load": "#aec7e8", "draft_cuda_graph_capture": "#ffbb78",
    "http_server_start": "#8c564b", "warmup": "#e377c2", "ready": "#2ca02c", "serving": "#98df8a",
    "jit_compile": "#bcbd22",
}


def _when(ts: float) -> str:
    if not is_dated(ts):
        return "no date"  # a start-up learned from an undated log: never shown as 1970
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
        "outcome": r.outcome, "cause": r.cause, "fingerprint": r.fingerprint, "cold": r.cold,
        "slowest_rank": slowest_rank(r),
        "phases": [{"name": p.phase, "duration_seconds": p.duration, "spread_seconds": p.spread,
                    "progress_total": p.progress_total, "max_silence_seconds": p.max_silence,
                    "slowest_rank": p.slowest_rank} for p in r.phases],
        "verdicts": [{"kind": k, "rank": rank, "phase": phase, "at": _when(at) + "Z"}
                     for k, rank, phase, at in r.verdicts],
    } for r in records]}


# Short column names for the default table (it fits 100 columns); `--wide` uses the full names.
SHORT = {"launch": "launch", "dist_init": "dist", "weight_load": "load", "kv_cache_alloc": "kv",
         "cuda_graph_capture": "graphs", "draft_weight_load": "dload", "draft_cuda_graph_capture": "dgraphs",
         "http_server_start": "http", "warmup": "warmup"}
FITS = 100


def _grid(rows: Sequence[Sequence[str]], gap: str = "  ") -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return [gap.join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]


def _outcome(record: StartupRecord) -> str:
    return record.outcome + (f" ({record.cause})" if record.cause else "")


def _legend(names: Sequence[str]) -> list[str]:
    """`phases: dist = dist_init, load = weight_load, ...` wrapped at FITS columns."""
    pairs = [f"{SHORT[name]} = {name}" for name in names if SHORT.get(name, name) != name]
    lines, line = [], "phases:"
    for pair in pairs:
        if len(line) + len(pair) + 2 > FITS:
            lines.append(line.rstrip(","))
            line = "       "
        line += f" {pair},"
    return [*lines, line.rstrip(",")] if pairs else []


def to_table(records: Sequence[StartupRecord], wide: bool = False) -> str:
    """One row per start-up with each phase's wall time. Default: short phase names and a legend,
    within 100 columns; when even that is wider, one line per start-up with its slowest phase.
    `wide`: every phase under its full name, however wide."""
    if not records:
        return "no start-ups recorded yet\n"
    phases = [p for p in PHASE_NAMES if any(r.phase(p) for r in records) and p not in ("ready", "serving")]
    head = ["STARTED (UTC)", "TOOK", "OUTCOME", "SLOWEST"]
    rows = [[_when(r.started_at), format_duration(r.duration), _outcome(r), slowest_rank(r) or "-",
             *(format_duration(p.duration) if (p := r.phase(name)) else "-" for name in phases)] for r in records]
    if wide:
        return "".join(line.rstrip() + "\n" for line in _grid([[*head, *phases], *rows]))
    short = [[_when(r.started_at)[5:16], *row[1:]] for r, row in zip(records, rows, strict=True)]
    compact = [(left + "  " + right).rstrip() for left, right in zip(
        _grid([["STARTED UTC", "TOOK", "OUTCOME", "SLOW"], *(row[:4] for row in short)]),
        _grid([[SHORT.get(p, p) for p in phases], *(row[4:] for row in short)], gap=" "), strict=True)]
    if max(len(line) for line in compact) <= FITS:
        return "\n".join([*compact, "", "SLOW: the rank that finished last; " + "durations: each phase's wall time",
                          *_legend(phases)]) + "\n"
    longest = [max(r.phases, key=lambda p: p.duration, default=None) for r in records]
    lines = [line.rstrip() for line in _grid([[*head, "LONGEST PHASE"], *(
        [*row[:4], f"{p.phase} {format_duration(p.duration)}" if p else "-"] for row, p in zip(rows, longest,
                                                                                               strict=True))])]
    return "\n".join([*lines, "", "every phase: phasewatch report --wide"]) + "\n"


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
