"""`phasewatch wait-ready UNIT`: block until the current start-up is ready, or will not be.

Follows the unit's journal from the start of its current invocation (`current.find_start`: D-Bus
InactiveExitTimestamp/InvocationID, else $INVOCATION_ID inside the unit, else PID 1's last
"Starting"/"Started" entry) and judges it with the policy at every wake-up: when the journal moves,
when a phase deadline or stall window can expire (`policy.next_deadline`), at the timeout.

    TP0..TP7: dist_init (6s)
    TP0..TP7: weight_load (9s)
    ...
    sglang-kimi.service is ready, 21m3s after its start

Exit status: 0 ready (or serving); 1 it will not be: a verdict (stalled, straggler, crashed,
rank_died), the start-up stopped or failed, or --timeout passed; 3 unknown unit; 64 usage;
69 journal unavailable; 78 bad configuration.

As `ExecStartPost=phasewatch wait-ready %n` in the server's own unit, the unit stays
"activating" until ready, so `After=` works for the units that need the model; systemd kills
ExecStartPost= after TimeoutStartSec=, which must then exceed the longest start-up.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..clock import Clock, SystemClock
from ..config.load import Config
from ..durations import format_duration, parse_duration
from ..errors import (
    EXIT_INTERRUPTED,
    EXIT_READY,
    EXIT_STARTING,
    EXIT_WILL_NOT_BE_READY,
    NoSuchUnit,
    UsageError,
)
from ..output.render import current_phase, json_text
from ..ranks import rank_sort_key
from ..records import FAILED_STARTUP, MAIN, UNIT_PHASES, Phase
from ..sources.journal.access import unknown_unit
from ..sources.journal.current import CurrentStartup, find_start
from ..sources.journal.follow import JournalFollower
from ..stages.s3_track.snapshot import UP_STATES, InvocationView, Transition, UnitState
from ..stages.s4_judge import policy
from .target import resolve

ENDING_VERDICTS = FAILED_STARTUP
SETTLE = 2.0  # ranks that enter a phase within this long of the first one are reported together
MAX_SLEEP = 5.0
DEADLINE_MARGIN = 0.05


def rank_list(labels: list[str]) -> str:
    """["main", "TP0", ..., "TP7"] -> "main, TP0..TP7"; runs of 3 or more TPn are shortened."""
    ordered = sorted(set(labels), key=rank_sort_key)
    out: list[str] = []
    run: list[int] = []

    def close() -> None:
        if len(run) >= 3:
            out.append(f"TP{run[0]}..TP{run[-1]}")
        else:
            out.extend(f"TP{n}" for n in run)
        run.clear()

    for label in ordered:
        if label.startswith("TP") and label[2:].isdigit():
            number = int(label[2:])
            if run and number != run[-1] + 1:
                close()
            run.append(number)
            continue
        close()
        out.append(label)
    close()
    return ", ".join(out)


@dataclass
class PhaseReporter:
    """Turns rank transitions into one line per phase and group of ranks that entered it together."""

    settle: float = SETTLE
    pending: dict[str, list[tuple[str, float | None]]] = field(default_factory=dict)

    def add(self, transitions: list[Transition], invocation_id: str) -> None:
        for move in transitions:
            if move.invocation_id != invocation_id or move.subject == "unit":
                continue
            if move.target in (Phase.READY.value, Phase.SERVING.value):
                continue  # the closing line says it
            entered = self.pending.setdefault(move.target, [])
            if all(rank != move.subject for rank, _ in entered):
                entered.append((move.subject, move.ts))

    def _first(self, phase: str) -> float | None:
        times = [ts for _, ts in self.pending[phase] if ts is not None]
        return min(times) if times else None

    def due(self, inv: InvocationView, now: float, force: bool = False) -> list[str]:
        lines: list[tuple[float, str]] = []
        for phase in list(self.pending):
            first = self._first(phase)
            ranks = [rank for rank, _ in self.pending[phase]]
            everyone = {r.rank for r in inv.ranks if r.rank != MAIN or Phase(phase) in UNIT_PHASES}
            entered = {r.rank for r in inv.ranks if any(s.phase.value == phase for s in r.spans)}
            if not (force or everyone <= entered or first is None or now - first >= self.settle):
                continue
            del self.pending[phase]
            after = f" ({format_duration(first - inv.started_at)})" if first is not None and \
                inv.started_at is not None else ""
            lines.append((first or 0.0, f"{rank_list(ranks)}: {phase}{after}"))
        return [text for _, text in sorted(lines)]

    def next_due(self) -> float:
        firsts = [t for phase in self.pending if (t := self._first(phase)) is not None]
        return min(firsts) + self.settle if firsts else math.inf


class ReadyWaiter:
    """The loop, with its edges injected: a `CurrentStartup` over a journal (a directory in
    tests), a clock, and how to wait (poll the journal's fd; in tests, move a fake clock)."""

    def __init__(self, config: Config, startup: CurrentStartup, clock: Clock, out: TextIO,
                 timeout: float | None = None, wait: Callable[[float], None] | None = None) -> None:
        self.config = config
        self.startup = startup
        self.clock = clock
        self.out = out
        self.timeout = timeout
        self.wait = wait or startup.wait
        self.reporter = PhaseReporter()
        self.warned_lost = False
        self.said: list[str] = []

    def say(self, text: str) -> None:
        self.said.append(text)
        self.out.write(text + "\n")
        self.out.flush()  # under systemd stdout is a pipe to the journal: no block buffering

    def run(self) -> int:
        unit = self.config.unit
        began = self.clock.monotonic()
        target = self.startup.target
        limit = f", at most {format_duration(self.timeout)}" if self.timeout is not None else ""
        self.say(f"phasewatch: waiting for {unit} to be ready (invocation {target or 'the last one'}{limit})")
        while True:
            now = self.clock.wall()
            transitions = self.startup.read(now)
            inv = self.startup.invocation()
            wake = math.inf
            if inv is not None:
                self.reporter.add(transitions, inv.invocation_id)
                code = self._judge(inv, now)
                if code is not None:
                    return code
                # A hair after the deadline: at it, `spent > limit` is not true yet.
                wake = min(policy.next_deadline(inv, now, self.config) + DEADLINE_MARGIN, self.reporter.next_due())
            if self.timeout is not None:
                waited = self.clock.monotonic() - began
                if waited >= self.timeout:
                    where = self._where(inv, now)
                    self._flush(inv, now)
                    self.say(f"phasewatch: {unit} is not ready after {format_duration(waited)} (--timeout): {where}")
                    return EXIT_STARTING
                wake = min(wake, now + self.timeout - waited)
            self.wait(min(max(wake - now, 0.0), MAX_SLEEP))

    def _judge(self, inv: InvocationView, now: float) -> int | None:
        unit = self.config.unit
        for line in self.reporter.due(inv, now):
            self.say(line)
        judgement = self.startup.judgement(now)
        verdicts = list(judgement.verdicts) if judgement is not None else []
        ready_at = next((s.start for r in inv.ranks for s in r.spans if s.phase is Phase.READY), None)
        after = f", {format_duration(ready_at - inv.started_at)} after its start" \
            if ready_at is not None and inv.started_at is not None else ""
        if inv.state in UP_STATES:
            self._flush(inv, now)
            self.say(f"phasewatch: {unit} is ready{after}")
            return EXIT_READY
        ending = [v for v in verdicts if v.kind in ENDING_VERDICTS]
        if ending:
            self._flush(inv, now)
            for verdict in ending:
                self.say(f"phasewatch: {verdict.kind}: {verdict.message}")
            return EXIT_WILL_NOT_BE_READY
        if inv.state in (UnitState.STOPPING, UnitState.STOPPED, UnitState.FAILED):
            self._flush(inv, now)
            how = {UnitState.FAILED: f"failed ({inv.unit_result or 'failed'})"}.get(
                inv.state, f"was stopped ({inv.stop_job or 'stop'} job)")
            if ready_at is not None:  # what happened: it was ready, and is no longer
                end = inv.ended_at
                later = f" {format_duration(end - ready_at)} later" if end is not None else ""
                self.say(f"phasewatch: {unit} was ready{after}, then {how.removeprefix('was ')}{later}: "
                         "not serving now")
                return EXIT_WILL_NOT_BE_READY
            self.say(f"phasewatch: {unit} {how} in {current_phase(inv) or 'launch'} before it was ready")
            return EXIT_WILL_NOT_BE_READY
        if not self.warned_lost and any(v.kind == "lines_lost" for v in verdicts):
            self.warned_lost = True
            self.say(f"phasewatch: warning: {next(v.message for v in verdicts if v.kind == 'lines_lost')}")
        return None

    def _flush(self, inv: InvocationView | None, now: float) -> None:
        if inv is not None:
            for line in self.reporter.due(inv, now, force=True):
                self.say(line)

    @staticmethod
    def _where(inv: InvocationView | None, now: float) -> str:
        if inv is None:
            return "no line of this start-up in the journal yet"
        phase = current_phase(inv) or "launch"
        in_phase = [r for r in inv.ranks if r.phase.value == phase]
        starts = [r.phase_start for r in in_phase if r.phase_start is not None]
        spent = f" for {format_duration(inv.as_of(now) - min(starts))}" if starts else ""
        return f"{rank_list([r.rank for r in in_phase])} in {phase}{spent}"


ANSWERS = {EXIT_READY: "ready", EXIT_STARTING: "timeout", EXIT_WILL_NOT_BE_READY: "will_not_be_ready"}


def answer_document(waiter: ReadyWaiter, code: int) -> dict[str, Any]:
    """`wait-ready --json`: the answer, the start-up it is about, and what was said on the way."""
    inv = waiter.startup.invocation()
    return {"unit": waiter.config.unit, "answer": ANSWERS.get(code, "unknown"), "exit_status": code,
            "invocation_id": inv.invocation_id if inv is not None else None, "messages": waiter.said}


def cmd_wait_ready(args: argparse.Namespace) -> int:
    config = resolve(args.unit, args.config, directory=args.directory).config
    unit = config.unit
    try:
        timeout = parse_duration(args.timeout) if args.timeout else None
    except ValueError as exc:
        raise UsageError(f"--timeout: {exc}") from None
    try:
        start = find_start(unit, args.directory)
    except NoSuchUnit:
        raise unknown_unit(unit) from None
    follower = JournalFollower(unit, args.directory)
    try:
        # Inside the unit (ExecStartPost=), this process's own output is in the unit's journal too.
        startup = CurrentStartup(config, follower, start, skip_pid=os.getpid())
        # With --json the progress goes to stderr and stdout holds one document.
        waiter = ReadyWaiter(config, startup, SystemClock(), sys.stderr if args.json else sys.stdout, timeout)
        code = waiter.run()
        if args.json:
            sys.stdout.write(json_text(answer_document(waiter, code)) + "\n")
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        follower.close()


def add_parser(sub: Any) -> None:
    wait = sub.add_parser("wait-ready", help="block until the unit's current start-up is ready (exit 0) or "
                          "will not be (exit 2; 1 --timeout passed first)")
    wait.add_argument("unit", metavar="UNIT", help="the server's unit (in ExecStartPost=: %%n)")
    wait.add_argument("--timeout", help="give up after this long (45m, 1h30m; default: no limit but the phases')")
    wait.add_argument("--config", help="phasewatch YAML config (default /etc/phasewatch/UNIT.yaml if readable)")
    wait.add_argument("--json", action="store_true", help="print one JSON document at the end (answer, exit_status, "
                      "invocation_id, messages); the progress goes to stderr")
    wait.add_argument("--directory", help=argparse.SUPPRESS)
    wait.set_defaults(func=cmd_wait_ready)
