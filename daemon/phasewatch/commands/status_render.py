"""`phasewatch status`'s text: the header, one row per rank, the verdicts with their remedies, the
signs of life, and why the start-up is as it is (hold, evidence, group, RAS, the previous start-up),
from the `/status` document (render.status_document) whether the daemon or the journal made it."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from ..durations import format_duration
from ..output.render import clock_text, terminal_safe
from ..output.verdict_lines import VerdictLine, grouped
from ..records import MAIN
from ..stages.s4_judge.remedies import naming_evidence
from .daemon_answer import LIVE_STATES


def _epoch(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def local_time(ts: float | None, with_date: bool = True) -> str:
    return "?" if ts is None else clock_text(ts, with_date=with_date)


def _duration(seconds: object) -> str:
    return format_duration(max(float(seconds), 0.0)) if isinstance(seconds, (int, float)) else "-"


def _progress(rank: dict[str, Any]) -> str:
    progress = rank.get("progress")
    if not progress or progress.get("phase", rank.get("phase")) != rank.get("phase"):
        return ""  # no bar, or the bar of a phase the rank has left
    text = f"{progress['n']}/{progress['total']}" if progress.get("total") is not None else str(progress["n"])
    return text + (f" bs={progress['bs']}" if progress.get("bs") is not None else "")


def _main_line(main: dict[str, Any], ranks: int, now: float | None) -> str:
    """The main process above the rank rows: it waits for them, it is not "in launch for 40m"."""
    spent = main.get("elapsed_seconds")
    since = local_time(now - spent, with_date=False) if now is not None and isinstance(spent, (int, float)) else "?"
    if main.get("phase") == "launch":
        return f"main process: waiting for {ranks} rank{'s' if ranks != 1 else ''} since {since}"
    return f"main process: {main.get('phase')}{' (done)' if main.get('phase_ended') else ''} since {since}"


def _phase_text(label: str, rank: dict[str, Any], schedulers: bool) -> str:
    phase = str(rank.get("phase"))
    if label == "main" and phase == "launch" and schedulers:
        return "launch (waiting for the ranks)"
    if not rank.get("seen", True):
        return f"{phase} (silent)"
    jit = rank.get("jit_compile")
    if isinstance(jit, dict) and jit.get("compiling"):
        return f"{phase} + jit_compile"
    return phase + (" (done)" if rank.get("phase_ended") else "")


def _in_phase(label: str, rank: dict[str, Any], schedulers: bool) -> str:
    if label == "main" and rank.get("phase") == "launch" and schedulers:
        return "-"
    spent = _duration(rank.get("elapsed_seconds"))
    limit = rank.get("deadline_seconds")
    if spent == "-" or limit is None or rank.get("phase_ended"):
        return spent
    return f"{spent}/{_duration(limit)}"


def _ago(seconds: object) -> str:
    return "-" if not isinstance(seconds, (int, float)) else f"{_duration(seconds)} ago"


def header(document: dict[str, Any], listen: str | None = None) -> list[str]:
    unit = document.get("unit")
    inv = document.get("invocation")
    source = document.get("source")
    where = (f"from the phasewatch daemon ({listen})" if source == "daemon" and listen
             else "from the phasewatch daemon" if source == "daemon"
             else "from the journal" + (f" (no phasewatch daemon answered on {listen})" if listen else ""))
    if not inv:
        state = document.get("active_state")
        if state in LIVE_STATES:
            return [f"{unit}: {state}, no line of this start-up in the journal yet", where]
        return [f"{unit}: no start-up in the journal", where]
    outcome = inv.get("outcome")
    slowest = " (the slowest rank's)" if outcome in ("starting", "stalled") else ""
    lines = [f"{unit}: {outcome}, phase {inv.get('phase') or 'none seen yet'}{slowest}, "
             f"{_duration(inv.get('elapsed_seconds'))} since start"]
    detail = f"invocation {inv.get('invocation_id')}, started {local_time(_epoch(inv.get('started_at')))}"
    now, last = _epoch(document.get("now")), _epoch(inv.get("last_line_at"))
    if now is not None and last is not None:
        detail += f", last line {_duration(now - last)} ago"
    if inv.get("lines_lost"):
        detail += f", {inv['lines_lost']} line(s) lost"
    if inv.get("cold"):
        detail += ", cold start (JIT compiling)"
    lines.append(f"{detail}; {where}")
    return lines


def _vitals_lines(document: dict[str, Any]) -> list[str]:
    """Signs of life beyond log lines (the daemon's /proc samples): `TP3: reading 1.2 GB/s`."""
    vitals = document.get("vitals")
    if not isinstance(vitals, dict) or not vitals.get("ranks"):
        return []
    out = ["", f"signs of life (sampled {_duration(vitals.get('sampled_seconds_ago'))} ago):"]
    out.extend(f"  {label}: {rank.get('text')}" for label, rank in vitals["ranks"].items() if isinstance(rank, dict))
    if vitals.get("unit"):
        out.append(f"  unit: {vitals['unit']}")
    source = vitals.get("gpu_source")
    if isinstance(source, dict) and source.get("state") in ("unavailable", "stuck", "failed"):
        out.append(f"  GPU: {source.get('problem')} (the GPU phases' long stall windows are in force)")
    return out


def render_table(document: dict[str, Any], listen: str | None = None) -> str:
    out = header(document, listen)
    inv = document.get("invocation")
    if inv:
        ranks: dict[str, dict[str, Any]] = inv.get("ranks") or {}
        schedulers = any(label != "main" for label in ranks)
        verdicts: list[dict[str, Any]] = inv.get("verdicts") or []
        rows = [["RANK", "PHASE", "PROGRESS", "IN PHASE", "LAST ACTIVITY", "VERDICT"]]
        for label, rank in ranks.items():
            if schedulers and label == MAIN:
                continue
            mine = [f"{v['kind']} ({v['cause']})" if v.get("cause") else str(v["kind"])
                    for v in verdicts if v.get("rank") == label]
            rows.append([label, _phase_text(label, rank, schedulers), _progress(rank),
                         _in_phase(label, rank, schedulers), _ago(rank.get("quiet_seconds")), ", ".join(mine)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        out.append("")
        if schedulers and MAIN in ranks:
            out.append(_main_line(ranks[MAIN], len(ranks) - 1, _epoch(document.get("now"))))
        out.extend("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
        out.extend(_vitals_lines(document))
        out.append("")
        out.append("verdicts:" if verdicts else "verdicts: none")
        out.extend(f"  {line}" for line in grouped(
            VerdictLine(str(v.get("kind")), v.get("rank") if isinstance(v.get("rank"), str) else None,
                        str(v.get("message"))) for v in verdicts))
        remedies = [r.get("text") for v in verdicts if isinstance(r := v.get("remedy"), dict)]
        texts = dict.fromkeys(t for t in remedies if isinstance(t, str))
        out.extend(f"  remedy: {naming_evidence(t, document.get('evidence'))}" for t in texts)
    warnings = document.get("timer_warnings")
    if isinstance(warnings, list) and warnings:
        out.append("timer warnings (an engine or systemd timer ends a phase before phasewatch's limit):")
        out.extend(f"  {w}" for w in warnings)
    budget = document.get("restart_budget")
    if isinstance(budget, dict) and budget:
        out.append("restart budget: " + ", ".join(
            f"{k.removesuffix('_seconds')} {_duration(v)}" if k.endswith("_seconds") else f"{k} {v}"
            for k, v in budget.items()))
    out.extend(_why_lines(document))
    return "\n".join(terminal_safe(line) for line in out) + "\n"


def _why_lines(document: dict[str, Any]) -> list[str]:
    """The operator's hold, this start-up's evidence, and why phasewatch started it (issue 12)."""
    out = []
    group = document.get("group")
    if isinstance(group, dict):
        node = group.get("node")
        where = f"node {node} of {group.get('nodes')}" if node is not None else f"one of {group.get('nodes')} nodes"
        out.append(f"group {group.get('name')}: {where}" + (f" (node rank from {group['node_from']})"
                   if group.get("node_from") else "") + (", restarts decided by the group (Alertmanager webhook "
                   f"on {group['receiver']})" if group.get("receiver") else ""))
        if group.get("waiting"):
            out[-1] += "; waiting for another node"
    hold = document.get("hold")
    if isinstance(hold, dict):
        out.append(f"held until {local_time(_epoch(hold.get('until')))}: {hold.get('reason')} "
                   "(verdicts alerted, nothing restarted)")
    out.extend(f"{key.replace('_', ' ')}: {document[key]}" for key in ("restart_refused", "evidence")
               if document.get(key))
    ras = document.get("ras")
    out += [f"NCCL RAS ({ras.get('address')}): {ras.get('words')}"] if isinstance(ras, dict) else []
    previous = document.get("previous_startup")
    if isinstance(previous, dict):
        out.append(f"started by phasewatch: the previous start-up {previous.get('invocation_id')} was "
                   f"{previous.get('verdict')}: {previous.get('message')}")
        if previous.get("evidence"):
            out.append(f"  evidence: {previous['evidence']}")
    return out


# A duration (`4s`, `1m12s`, `3m12s/20m`), a clock time or a date: what changes every second.
_TIMES = re.compile(r"\d+(?:\.\d+)?(?:d|h|ms|m|s)(?:\d+(?:h|m|s))*|\d\d:\d\d(?::\d\d)?|\d{4}-\d\d-\d\d")


def _unchanged_key(line: str) -> str:
    return " ".join(_TIMES.sub("T", line).split())


def changed_lines(previous: str, current: str) -> str:
    """`status --watch` in a log: `current`'s text less the lines `previous` said already (times
    aside): the outcome line, then the rows and lines that changed, under the table's head."""
    said = {_unchanged_key(line) for line in previous.splitlines()}
    lines = current.splitlines()
    out = lines[:1]
    for line in lines[1:]:
        if line.startswith("RANK "):
            out.append(line)  # the head of the rows below it (dropped again if none changed)
        elif line.strip() and _unchanged_key(line) not in said:
            out.append(line)
    while out and out[-1].startswith("RANK "):
        out.pop()
    return "\n".join(out) + "\n"
