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
import signal
import sys
import time
from typing import Any, Callable, TextIO

from ..config.load import Config
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
from ..output.fit import fitted, output_width
from ..output.render import json_text, status_document, terminal_safe
from ..records import FAILING
from ..sources.journal.access import preflight
from ..sources.journal.current import CurrentStartup, StartPoint, find_start, unit_timers
from ..sources.journal.follow import JournalFollower
from ..stages.s4_judge.timerlint import UnitTimers, lint
from .daemon_answer import LIVE_STATES, ask_daemon
from .status_line import oneline
from .status_render import _progress, changed_lines, local_time, render_table
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
                    said = type(exc)(f"{exc} (no phasewatch daemon answered on {self.config.metrics_listen})")
                    said.hint = exc.hint
                    raise said from None
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
    outcome or a verdict changes (the whole table first, then only what changed since the last
    block), and one line when only a progress bar moved. Ends on ^C/SIGTERM with the exit status
    of the last document."""
    last_block: object = None
    last_text, last_startup = "", None  # a new start-up gets the whole table again
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
                    text = render_table(document, listen)
                    startup = (document.get("unit"), (document.get("invocation") or {}).get("invocation_id"))
                    shown = changed_lines(last_text, text) if startup == last_startup else text
                    out.write(f"--- {local_time(clock())}\n" + fitted(shown, width) + "\n")
                    last_text, last_startup = text, startup
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
    width = None if args.plain or args.wide else output_width(sys.stdout)
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
        if exc.hint:
            print(f"  {terminal_safe(exc.hint)}", file=sys.stderr)
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
