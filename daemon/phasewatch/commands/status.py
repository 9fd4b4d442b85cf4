"""`phasewatch status`: the unit's current start-up, one row per rank.

The document is the daemon's `/status` (`render.status_document`) when a phasewatch daemon for the
unit answers on `metrics.listen`; otherwise it is computed the same way from the journal (so it
works on any host with the unit, and on a journal directory copied from one).

Exit status: 0 ready or serving; 1 starting (no verdict yet); 2 it will not become ready by itself
(stalled, straggler, crashed, rank_died, unhealthy, or the start-up was stopped); 3 unknown unit,
or no start-up of it in the journal; 4 something other than this unit's phasewatch daemon answers on
`metrics.listen` (another unit's daemon, or a process that took the port first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
import time
from typing import Any, Callable, TextIO

from ..config import Config
from ..durations import format_duration
from ..errors import (
    EXIT_FOREIGN,
    EXIT_READY,
    EXIT_STARTING,
    EXIT_UNKNOWN_UNIT,
    EXIT_WILL_NOT_BE_READY,
    DataError,
    ForeignDaemon,
    NoPermission,
    NoSuchUnit,
    UnavailableError,
    UsageError,
)
from ..fit import fitted, output_width
from ..records import FAILING, MAIN
from ..render import clock_text, json_text, status_document, terminal_safe
from ..sources.access import preflight
from ..sources.current import CurrentStartup, StartPoint, find_start, unit_timers
from ..sources.follow import JournalFollower
from ..stages.s4_judge.remedies import naming_evidence
from ..stages.s4_judge.timerlint import UnitTimers, lint
from ..stages.s5_act.verdict_lines import VerdictLine, grouped
from .daemon_answer import LIVE_STATES, ask_daemon
from .status_line import oneline
from .target import resolve

EXIT_FAILING, EXIT_UNKNOWN = EXIT_WILL_NOT_BE_READY, EXIT_UNKNOWN_UNIT
FAILING_VERDICTS = FAILING
CLEAR = "\x1b[H\x1b[2J"


class StatusSource:
    """Where documents come from: the daemon while it answers, else the journal (followed
    incrementally, and across restarts, when asked again and again by --watch)."""

    def __init__(self, config: Config, directory: str | None = None, ask: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.directory = directory
        self.ask = ask and directory is None
        self.clock = clock
        self.start: StartPoint | None = None
        self.startup: CurrentStartup | None = None
        self.follower: JournalFollower | None = None
        self.linted: tuple[str, list[str]] | None = None  # (invocation, timer warnings): D-Bus asked once

    def document(self) -> dict[str, Any]:
        if self.ask:
            document = ask_daemon(self.config)
            if document is not None and document.get("invocation") is not None:
                return document
            self.ask = False  # no daemon (or one that saw no start-up): the journal from now on
        return self._from_journal(self.clock())

    def _from_journal(self, now: float) -> dict[str, Any]:
        if self.startup is None:
            try:
                preflight(self.config.unit, self.directory)  # no daemon answered: can the journal say?
            except (NoPermission, NoSuchUnit, UnavailableError, DataError) as exc:
                if self.directory is None:
                    raise type(exc)(f"{exc} (no phasewatch daemon answered on {self.config.metrics_listen})") from None
                raise
            self.start = find_start(self.config.unit, self.directory)
            self.follower = JournalFollower(self.config.unit, self.directory)
            self.startup = CurrentStartup(self.config, self.follower, self.start, follow_restarts=True)
        self.startup.read(now)
        judgement = self.startup.judgement(now)
        extra: dict[str, Any] = {"source": "journal",
                                 "active_state": self.start.active_state if self.start else None, "daemon": None,
                                 "timer_warnings": []}
        inv = judgement.invocation if judgement is not None else None
        if inv is not None and inv.server is not None:
            if self.linted is None or self.linted[0] != inv.invocation_id:
                self.linted = (inv.invocation_id, [w.message for w in lint(
                    self.config, inv.server.timer_args, unit_timers(self.config.unit) if self.directory is None
                    else UnitTimers())])
            extra["timer_warnings"] = self.linted[1]
        return status_document(judgement, now, self.config, None, extra)

    def close(self) -> None:
        if self.follower is not None:
            self.follower.close()


def exit_status(document: dict[str, Any]) -> int:
    inv = document.get("invocation")
    if not inv:
        return EXIT_STARTING if document.get("active_state") in LIVE_STATES else EXIT_UNKNOWN
    kinds = {v.get("kind") for v in inv.get("verdicts") or []}
    outcome = inv.get("outcome")
    if "unhealthy" in kinds:
        return EXIT_FAILING
    if outcome in ("ready", "serving"):
        return EXIT_READY
    if outcome in ("stalled", "crashed", "stopped") or kinds & FAILING_VERDICTS:
        return EXIT_FAILING
    return EXIT_STARTING


# -- the table ---------------------------------------------------------------------------------

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


# -- --watch ---------------------------------------------------------------------------------------

def _signatures(document: dict[str, Any]) -> tuple[object, dict[str, str]]:
    """What makes a new block (phases, outcome, verdicts) and what makes a progress line."""
    inv = document.get("invocation") or {}
    ranks: dict[str, dict[str, Any]] = inv.get("ranks") or {}
    block = (document.get("unit"), inv.get("invocation_id"), inv.get("outcome"), inv.get("phase"),
             tuple((label, r.get("phase"), r.get("phase_ended"), r.get("seen")) for label, r in ranks.items()),
             tuple((v.get("kind"), v.get("rank"), v.get("phase")) for v in inv.get("verdicts") or []))
    progress = {label: text for label, r in ranks.items() if (text := _progress(r))}
    return block, progress


def watch(fetch: Callable[[], dict[str, Any]], out: TextIO, tty: bool, listen: str | None = None,
          interval: float = 1.0, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.time, width: int | None = None) -> int:
    """Redraw every `interval` on a terminal; elsewhere (a log) print a block when a phase, the
    outcome or a verdict changes, and one line when only a progress bar moved. Ends on ^C/SIGTERM
    with the exit status of the last document."""
    last_block: object = None
    last_progress: dict[str, str] = {}
    code = EXIT_UNKNOWN
    try:
        while True:
            document = fetch()
            code = exit_status(document)
            if tty:
                out.write(CLEAR + f"{local_time(clock())}  (every {interval:g}s, ^C to stop)\n" +
                          fitted(render_table(document, listen), width))
            else:
                block, progress = _signatures(document)
                if block != last_block:
                    out.write(f"--- {local_time(clock())}\n" + fitted(render_table(document, listen), width) + "\n")
                else:
                    phases = {label: r.get("phase") for label, r in
                              ((document.get("invocation") or {}).get("ranks") or {}).items()}
                    for label, text in progress.items():
                        if last_progress.get(label) != text:
                            out.write(terminal_safe(f"{local_time(clock(), with_date=False)}  {label} "
                                                    f"{phases.get(label)} {text}") + "\n")
                last_block, last_progress = block, progress
            out.flush()
            sleep(interval)
    except KeyboardInterrupt:
        return code


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_status(args: argparse.Namespace) -> int:
    config = resolve(args.unit, args.config, directory=args.directory).config
    if sum((args.json, args.watch, args.oneline)) > 1:
        raise UsageError("--json, --oneline and --watch do not go together")
    source = StatusSource(config, args.directory)
    listen = None if args.directory else config.metrics_listen
    width = None if args.plain else output_width(sys.stdout)
    try:
        if args.watch:
            signal.signal(signal.SIGTERM, _terminate)
            return watch(source.document, sys.stdout, sys.stdout.isatty(), listen, width=width)
        document = source.document()
        if args.json:
            sys.stdout.write(json_text(document) + "\n")
        elif args.oneline:
            sys.stdout.write(oneline(document) + "\n")
        else:
            sys.stdout.write(fitted(render_table(document, listen), width))
        return exit_status(document)
    except NoSuchUnit as exc:
        said = str(exc) if str(exc) != config.unit else (f"{config.unit}: no such unit (systemd does not know it, "
                                                          "and the journal has nothing of it)")
        print(f"phasewatch: {terminal_safe(said)}", file=sys.stderr)
        return EXIT_UNKNOWN
    except ForeignDaemon as exc:
        print(f"phasewatch: {terminal_safe(str(exc))}: not showing it as {config.unit}'s state "
              "(is another process on metrics.listen? check the config)", file=sys.stderr)
        return EXIT_FOREIGN
    finally:
        source.close()


def add_parser(sub: Any) -> None:
    status = sub.add_parser("status", help="the unit's current start-up, per rank (exit 0 ready, 1 starting, "
                            "2 stalled/crashed/stopped, 3 unknown, 4 a foreign daemon on metrics.listen)")
    status.add_argument("unit", nargs="?", metavar="UNIT", help="the server's unit (default: the config's unit)")
    status.add_argument("--config", help="phasewatch YAML config (default /etc/phasewatch/UNIT.yaml if readable)")
    status.add_argument("--json", action="store_true", help="print the /status JSON document")
    status.add_argument("--oneline", action="store_true", help="one line: phase, ranks in it, time in it "
                        "against its deadline, ETA (for a prompt or a status bar); same exit status")
    status.add_argument("--watch", action="store_true", help="redraw every second until interrupted")
    status.add_argument("--plain", action="store_true", help="for scripts: no line wrapped to fit the terminal")
    status.add_argument("--directory", help="read this journal directory (copied from another host); "
                        "no daemon is asked")
    status.set_defaults(func=cmd_status)
