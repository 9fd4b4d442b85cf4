"""Past start-ups of a unit: a table, JSON, and an SVG timeline (ranks x time on one shared axis,
phases as coloured bars, verdicts as labelled marks). Pure: history records in, text out. The SVG is
written by hand: one small file, no plotting stack."""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import math
import os
import re
import sqlite3
import sys
from html import escape
from pathlib import Path
from typing import Any, Sequence

from ..durations import format_duration
from ..errors import EX_OK, HistoryUnreadable, NoHistory, NoPermission, UsageError
from ..output.render import PHASE_SHORT, terminal_safe
from ..output.verdict_lines import rank_ranges
from ..records import PHASE_NAMES
from ..sinks.history import History, StartupRecord
from ..stages.s1_read.timestamps import is_dated
from .target import resolve

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


def evidence_for(records: Sequence[StartupRecord], unit: str, files: Sequence[str]) -> dict[str, list[str]]:
    """The evidence files (sinks/evidence.py: `<unit>-<invocation>-<verdict>.txt`) of each start-up."""
    out: dict[str, list[str]] = {}
    for record in records:
        prefix = f"{unit}-{record.invocation_id}-"
        found = sorted(f for f in files if f.rsplit("/", 1)[-1].startswith(prefix) and f.endswith(".txt"))
        if found:
            out[record.invocation_id] = found
    return out


def startup_lines(title: str, rows: Sequence[tuple[StartupRecord, str]], wide: bool = False) -> str:
    """Below the table, under `title`: each start-up's time and id, then what is said of it; on a
    line of its own, indented, where the row would be wider than FITS (it then wraps as prose)."""
    lines = []
    for record, text in rows:
        head = f"  {_when(record.started_at)}  {record.invocation_id[:12]}"
        row = f"{head}  {terminal_safe(text)}"
        lines.extend([row] if wide or len(row) <= FITS else [head, f"    {terminal_safe(text)}"])
    return f"\n{title}\n" + "\n".join(lines) + "\n" if lines else ""


def evidence_lines(records: Sequence[StartupRecord], evidence: dict[str, list[str]], wide: bool = False) -> str:
    """Below the table: where each start-up's evidence is (nothing when none has any)."""
    return startup_lines("evidence captured before phasewatch acted:",
                         [(r, path) for r in records for path in evidence.get(r.invocation_id, ())], wide)


def ended_by_lines(records: Sequence[StartupRecord], wide: bool = False) -> str:
    """Below the table: the start-ups ended from outside (the group's restart decision)."""
    return startup_lines("ended from outside:", [(r, r.ended_by) for r in records if r.ended_by], wide)


def remedy_lines(records: Sequence[StartupRecord], wide: bool = False) -> str:
    """Below the table: what to do about each start-up that failed with a known remedy."""
    return startup_lines("remedies:", [(r, r.remedy) for r in records if r.remedy], wide)


def failure_lines(records: Sequence[StartupRecord], wide: bool = False) -> str:
    """Below the table: each failed start-up's fingerprint, and how many in a row failed alike (what
    `restart_budget.same_failure` counts)."""
    rows, alike = [], 0
    for before, record in zip((None, *records[:-1]), records, strict=True):
        alike = alike + 1 if before is not None and record.failure and before.failure == record.failure else 1
        if record.failure:
            rows.append((record, record.failure + (f"  ({alike} in a row)" if alike > 1 else "")))
    return startup_lines("failures:", rows, wide)


def to_json(records: Sequence[StartupRecord], evidence: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"startups": [{
        "invocation_id": r.invocation_id, "started_at": _when(r.started_at) + "Z", "duration_seconds": r.duration,
        "outcome": r.outcome, "cause": r.cause, "fingerprint": r.fingerprint, "cold": r.cold,
        "slowest_rank": slowest_rank(r),
        "phases": [{"name": p.phase, "duration_seconds": p.duration, "spread_seconds": p.spread,
                    "progress_total": p.progress_total, "max_silence_seconds": p.max_silence,
                    "slowest_rank": p.slowest_rank} for p in r.phases],
        "verdicts": [{"kind": k, "rank": rank, "phase": phase, "at": _when(at) + "Z"}
                     for k, rank, phase, at in r.verdicts],
        "evidence": (evidence or {}).get(r.invocation_id, []),
        "ended_by": r.ended_by,
        "remedy": r.remedy,
        "failure": r.failure,
    } for r in records]}


# Short column names for the default table (it fits 100 columns); `--wide` uses the full names.
SHORT = PHASE_SHORT
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


def stuck_in(record: StartupRecord) -> tuple[str, str, float] | None:
    """The phase that was the reason for the row: (phase, rank, seconds) of a verdict's rank that was
    still in the verdict's phase when the start-up ended, timed to that end (the ranks that finished
    the phase do not say how long it lasted)."""
    for _, rank, phase, _ in record.verdicts:
        for name, start, end in record.spans.get(rank or "", []):
            if rank and name == phase and start is not None and end is None:
                return phase, rank, max(record.ended_at - start, 0.0)
    return None


def _phase_cell(record: StartupRecord, name: str, stuck: tuple[str, str, float] | None) -> str:
    if stuck is not None and stuck[0] == name:
        return format_duration(stuck[2]) + "+"
    return format_duration(p.duration) if (p := record.phase(name)) else "-"


def _slowest(record: StartupRecord, stuck: tuple[str, str, float] | None) -> str:
    return stuck[1] if stuck is not None else slowest_rank(record) or "-"


def _longest(record: StartupRecord, stuck: tuple[str, str, float] | None) -> str:
    if stuck is not None:
        return f"{stuck[0]} {format_duration(stuck[2])}+ ({stuck[1]})"
    p = max(record.phases, key=lambda p: p.duration, default=None)
    return f"{p.phase} {format_duration(p.duration)}" if p else "-"


def to_table(records: Sequence[StartupRecord], wide: bool = False) -> str:
    """One row per start-up with each phase's wall time. Default: short phase names and a legend,
    within 100 columns; when even that is wider, one line per start-up with its slowest phase.
    `wide`: every phase under its full name, however wide."""
    if not records:
        return "no start-ups recorded yet\n"
    stuck = {r.invocation_id: stuck_in(r) for r in records}
    phases = [p for p in PHASE_NAMES if any(r.phase(p) or (stuck[r.invocation_id] or ("",))[0] == p for r in records)
              and p not in ("ready", "serving")]
    head = ["STARTED (UTC)", "TOOK", "OUTCOME", "SLOWEST"]
    rows = [[_when(r.started_at), format_duration(r.duration), _outcome(r), _slowest(r, stuck[r.invocation_id]),
             *(_phase_cell(r, name, stuck[r.invocation_id]) for name in phases)] for r in records]
    if wide:
        return "".join(line.rstrip() + "\n" for line in _grid([[*head, *phases], *rows]))
    short = [[_when(r.started_at)[5:16], *row[1:]] for r, row in zip(records, rows, strict=True)]
    compact = [(left + "  " + right).rstrip() for left, right in zip(
        _grid([["STARTED UTC", "TOOK", "OUTCOME", "SLOW"], *(row[:4] for row in short)]),
        _grid([[SHORT.get(p, p) for p in phases], *(row[4:] for row in short)], gap=" "), strict=True)]
    if max(len(line) for line in compact) <= FITS:
        return "\n".join([*compact, "", "SLOW: the rank that finished last; " + "durations: each phase's wall time",
                          *(["'+': the verdict's rank (SLOW) was still in that phase when the start-up ended"]
                            if any(stuck.values()) else []),
                          *_legend(phases)]) + "\n"
    longest = [_longest(r, stuck[r.invocation_id]) for r in records]
    lines = [line.rstrip() for line in _grid([[*head, "LONGEST PHASE"], *(
        [*row[:4], text] for row, text in zip(rows, longest, strict=True))])]
    return "\n".join([*lines, "", "every phase: phasewatch report --wide"]) + "\n"


# Tick steps a reader can add up at a glance.
ROUND_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 8
# Layout of the picture, in pixels.
WIDTH, LEFT, RIGHT, ROW, TITLE_Y, FIRST_TOP, PANEL_GAP = 1100, 90, 20, 16, 24, 64, 48
LABEL_CHAR = 6.2  # average advance of a 10 px DejaVu Sans character, to keep labels inside the picture


def time_axis(longest: float) -> tuple[float, list[float]]:
    """The axis shared by every panel: its length and round ticks (0, 1m, 2m, ...), at most MAX_TICKS
    steps, covering `longest` seconds."""
    longest = max(longest, 1.0)
    step = next((s for s in ROUND_STEPS if longest / s <= MAX_TICKS), None)
    if step is None:  # longer than MAX_TICKS days: whole days
        step = ROUND_STEPS[-1] * math.ceil(longest / ROUND_STEPS[-1] / MAX_TICKS)
    steps = math.ceil(longest / step - 1e-9)
    return steps * step, [float(n * step) for n in range(steps + 1)]


def _rank_order(rank: str) -> tuple[bool, list[int]]:
    return rank != "main", [int(n) for n in re.findall(r"\d+", rank)]


def _verdict_label(kind: str, phase: str | None) -> str:
    return f"{kind} in {phase}" if phase else kind


def to_svg(records: Sequence[StartupRecord], title: str) -> str:
    """One panel per start-up, all on one time axis (seconds since each start-up began, round ticks):
    a row per rank, phases as bars, verdicts as labelled marks."""
    end, ticks = time_axis(max((r.duration for r in records), default=1.0))
    scale = (WIDTH - LEFT - RIGHT) / end
    panels = []
    top = FIRST_TOP
    for record in records:
        ranks = sorted(record.spans, key=_rank_order) or ["main"]
        bottom = top + len(ranks) * ROW
        parts = [f'<text x="{LEFT}" y="{top - 10}" class="panel">{escape(_when(record.started_at))} UTC: '
                 f'{escape(record.outcome)}{" (" + escape(record.cause) + ")" if record.cause else ""}, '
                 f'took {escape(format_duration(record.duration))}</text>']
        for tick in ticks:
            x = LEFT + tick * scale
            parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom + 4}" class="grid"/>')
            parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" class="tick">'
                         f'{escape(format_duration(tick) if tick else "0")}</text>')
        parts.extend(_phase_bars(record, ranks, top, scale))
        parts.extend(_verdict_marks(record, ranks, top, scale))
        panels.append("\n".join(parts))
        top = bottom + 20 + PANEL_GAP
    if not records:
        panels.append(f'<text x="{LEFT}" y="{FIRST_TOP}" class="panel">no start-ups recorded yet</text>')
        top = FIRST_TOP + PANEL_GAP
    legend, height = _svg_legend(top - PANEL_GAP + 14)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, sans-serif">\n'
            "<style>.panel{font-size:13px;fill:#222}.rank{font-size:11px;text-anchor:end;fill:#333}"
            ".tick{font-size:10px;text-anchor:middle;fill:#444}.legend{font-size:11px;fill:#333}"
            ".title{font-size:15px;font-weight:bold}.grid{stroke:#ddd;stroke-width:1}"
            ".verdict{fill:#d62728;stroke:white;stroke-width:0.8}"
            ".mark{font-size:10px;fill:#a00;font-weight:bold;paint-order:stroke;stroke:white;stroke-width:3px}"
            "</style>\n"
            f'<rect width="100%" height="100%" fill="white"/>\n<text x="{LEFT}" y="{TITLE_Y}" class="title">'
            f"{escape(title)}</text>\n" + "\n".join(panels) + "\n" + "\n".join(legend) + "\n</svg>\n")


def _phase_bars(record: StartupRecord, ranks: list[str], top: float, scale: float) -> list[str]:
    """A row per rank: its name and its phases as bars."""
    parts = []
    for index, rank in enumerate(ranks):
        row_top = top + index * ROW
        parts.append(f'<text x="{LEFT - 6}" y="{row_top + ROW - 4}" class="rank">{escape(rank)}</text>')
        for phase, start, stop in record.spans.get(rank, []):
            if start is None:
                continue
            stop = stop if stop is not None else record.ended_at
            x = LEFT + (start - record.started_at) * scale
            w = max((stop - start) * scale, 1.0)
            parts.append(f'<rect x="{x:.1f}" y="{row_top + 2}" width="{w:.1f}" height="{ROW - 4}" '
                         f'fill="{COLOURS.get(phase, "#999")}"><title>{escape(rank)} {escape(phase)}: '
                         f'{escape(format_duration(stop - start))}</title></rect>')
    return parts


def _verdict_marks(record: StartupRecord, ranks: list[str], top: float, scale: float) -> list[str]:
    """A mark per verdict on its rank's row; ranks marked alike at the same moment (8 ranks stalled
    in one phase) share one label."""
    parts = []
    marks: dict[tuple[str, int], tuple[float, list[tuple[int, str]]]] = {}
    for kind, who, where, at in record.verdicts:
        index = ranks.index(who) if who in ranks else 0
        x = LEFT + (at - record.started_at) * scale
        _, rows = marks.setdefault((_verdict_label(kind, where), round(x / 3)), (x, []))
        if index not in (i for i, _ in rows):
            rows.append((index, who or ""))
    for (label, _), (x, rows) in marks.items():
        for index, who in rows:
            middle = top + index * ROW + ROW / 2
            parts.append(f'<path d="M{x:.1f},{middle:.1f} l6,-6 l0,12 z" class="verdict">'
                         f'<title>{escape(label)} ({escape(who)})</title></path>')
        indexes = sorted(i for i, _ in rows)
        if len(rows) > 1:
            label = f"{rank_ranges([ranks[i] for i in indexes])}: {label}"
        middle = top + (indexes[0] + indexes[-1] + 1) * ROW / 2
        # The label goes right of the marks, or left of them where it would leave the picture.
        fits = x + 10 + len(label) * LABEL_CHAR <= WIDTH - 2
        lx, anchor = (x + 9, "start") if fits else (x - 3, "end")
        parts.append(f'<text x="{lx:.1f}" y="{middle + 3.5:.1f}" text-anchor="{anchor}" class="mark">'
                     f'{escape(label)}</text>')
    return parts


def _svg_legend(axis_y: float) -> tuple[list[str], float]:
    """The legend below the panels (the axis' caption, the phases' colours, the verdict mark) and the
    picture's height."""
    legend = [f'<text x="{LEFT}" y="{axis_y}" class="legend">time since each start-up began; bars: phases of each '
              "rank; marks: verdicts</text>"]
    legend_y = axis_y + 12
    for index, phase in enumerate(p for p in PHASE_NAMES if p not in ("serving",)):
        x = LEFT + (index % 5) * 200
        ly = legend_y + (index // 5) * 16
        legend.append(f'<rect x="{x}" y="{ly}" width="12" height="10" fill="{COLOURS[phase]}"/>'
                      f'<text x="{x + 16}" y="{ly + 9}" class="legend">{phase}</text>')
    vx, vy = LEFT + 2 * 200, legend_y + 2 * 16
    legend.append(f'<path d="M{vx},{vy + 5} l6,-6 l0,12 z" class="verdict"/>'
                  f'<text x="{vx + 16}" y="{vy + 9}" class="legend">verdict</text>')
    return legend, legend_y + 3 * 16 + 8


# -- the command ------------------------------------------------------------------------------------

def cmd_report(args: argparse.Namespace) -> int:
    if args.last < 1:
        raise UsageError(f"--last: expected 1 or more start-ups, got {args.last}")
    unit = resolve(args.unit, args.config, known=None).unit  # (a typo: no history, the units with one)
    state_dir = Path(args.state_dir or os.environ.get("STATE_DIRECTORY", "").split(":")[0] or "/var/lib/phasewatch")
    path = state_dir / f"{unit}.history.sqlite3"
    if state_dir.is_dir() and not os.access(state_dir, os.R_OK | os.X_OK):
        raise NoPermission(f"{state_dir} is not readable by this user (it is the phasewatch user's): run "
                           f"as root (sudo phasewatch report {unit})")
    if not path.exists():
        others = sorted(p.name.removesuffix(".history.sqlite3") for p in state_dir.glob("*.history.sqlite3"))
        close = difflib.get_close_matches(unit, others, n=3, cutoff=0.5)
        error = NoHistory(f"no history for {unit} in {state_dir} (phasewatch run records start-ups there)")
        error.hint = (f"units with a history like it: {', '.join(close)}" if close
                      else f"units with a history: {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}"
                      if others else None)
        raise error
    history = History(path, read_only=True)  # report changes nothing on disk, even a broken file
    try:
        records = history.startups(unit, last=args.last)
    except sqlite3.Error as exc:
        raise HistoryUnreadable(f"{path}: cannot read the history: {exc}") from None
    evidence = evidence_for(records, unit, [str(p) for p in sorted((state_dir / "evidence").glob("*.txt"))])
    if args.plot:
        Path(args.plot).write_text(to_svg(records, f"{unit}: the last {len(records)} start-up(s)"))
    if args.json:
        json.dump(to_json(records, evidence), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        wide = args.wide or args.plain
        sys.stdout.write(to_table(records, wide=wide) + evidence_lines(records, evidence, wide)
                         + ended_by_lines(records, wide) + failure_lines(records, wide) + remedy_lines(records, wide))
    return EX_OK


def add_parser(sub: Any) -> None:
    report = sub.add_parser("report", help="past start-ups of a unit: table, JSON, SVG timeline")
    report.add_argument("unit", nargs="?", help="the watched unit (default: the config's)")
    report.add_argument("--config", help="phasewatch YAML config")
    report.add_argument("--state-dir", help="phasewatch's state directory (default /var/lib/phasewatch)")
    report.add_argument("--last", type=int, default=10, help="how many start-ups (default 10)")
    report.add_argument("--json", action="store_true")
    report.add_argument("--wide", action="store_true", help="every phase under its full name (default: short "
                        "names with a legend, within 100 columns)")
    report.add_argument("--plain", action="store_true", help="for scripts: every phase under its full name, "
                        "no legend (as --wide)")
    report.add_argument("--plot", metavar="FILE", help="write an SVG timeline of them")
    report.set_defaults(func=cmd_report)
