"""`phasewatch logs`: the unit's journal as whole, decoded lines, each tagged with its rank and phase.

    2026-11-30 08:05:01 TP3   weight_load              | Load weight begin. avail mem=137.95 GB

- MESSAGE is read as bytes with data threshold 0: no `[N blob data]`, no truncation; bad UTF-8
  becomes U+FFFD, ANSI colours are dropped, journald's LineMax/PID-change fragments are rejoined.
- The tag is the rank's phase at that moment: every line goes through lines -> events -> tracker,
  as in the daemon, and is tagged after its own events (a "Load weight begin." is weight_load).
- tqdm bars: of the frames in one journal entry only the last is printed; a bar continued in later
  entries prints a line only when its count moves (64 shards: at most 65 lines, one per step, so
  the log shows when each step came and where a bar stopped).
- A record's continuation lines (tracebacks) are printed right after it with the same tag, even
  when other processes wrote in between.
- PID 1's entries about the unit ("Started", "Failed with result ...") are printed as `systemd`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, TextIO

from ..config.load import Config
from ..durations import parse_duration
from ..errors import NoInputError, NoSuchUnit, UsageError
from ..output.render import clock_text, current_phase, terminal_safe
from ..output.verdict_lines import rank_ranges
from ..pipeline import LineFed, Pipeline
from ..ranks import rank_sort_key
from ..records import MAIN, PHASE_NAMES, EventKind, JournalRecord, Line, LineKind
from ..sources.journal.access import unknown_unit
from ..sources.journal.current import StartPoint, find_start, journal_start, wait_for_journal
from ..sources.journal.follow import JournalFollower
from ..stages.s1_read.lines import decode, strip_ansi
from ..stages.s2_interpret.events import is_lifecycle_record
from ..stages.s3_track.snapshot import InvocationView
from .target import resolve

RANK_WIDTH = 7  # "systemd", "DP0 TP3"
PHASE_WIDTH = max(len(p) for p in PHASE_NAMES)
GROUP_WINDOW = 1.0  # seconds (journal time) a record waits for its continuation lines
MAX_HELD = 10_000


@dataclass(frozen=True)
class TaggedLine:
    ts: float | None
    rank: str  # a rank label, "main", "systemd", "journald", or "-" (a process not yet known)
    phase: str
    text: str
    group: int  # a record and its continuation lines share it
    continuation: bool = False

    def format(self, utc: bool = False) -> str:
        stamp = "-" * 19 if self.ts is None else clock_text(self.ts, utc)
        return terminal_safe(f"{stamp} {self.rank:<{RANK_WIDTH}} {self.phase:<{PHASE_WIDTH}} | {self.text}")

    def to_json(self) -> str:
        """One JSON object per line (`logs --json`): the text as decoded, escaped by JSON."""
        return json.dumps({"ts": self.ts, "rank": self.rank, "phase": self.phase, "text": self.text,
                           "continuation": self.continuation}, ensure_ascii=True)


class LogTagger:
    """Journal records -> tagged lines, through the daemon's own stages."""

    def __init__(self, config: Config) -> None:
        self.pipeline = Pipeline(config)
        self._views: dict[str | None, InvocationView] = {}
        self._dirty = True
        self._record_tags: dict[int, tuple[str, str]] = {}
        self._last_frame: dict[tuple[str | None, int | None], tuple[int | None, int]] = {}  # printed
        self._last_seen: dict[tuple[str | None, int | None], tuple[int | None, int]] = {}
        self._lifecycle_group = 0

    def feed(self, record: JournalRecord, now: float | None) -> list[TaggedLine]:
        if is_lifecycle_record(record) or record.unit is not None or record.message is None:
            transitions = self.pipeline.feed(record, now)
            self._dirty = self._dirty or bool(transitions)
            if record.message is None:
                return []
            self._lifecycle_group -= 1
            who = "journald" if record.object_unit is not None and record.unit is None else "systemd"
            text = strip_ansi(decode(record.message)).rstrip("\n")
            invocation = record.extra.get("INVOCATION_ID") or record.invocation_id
            return [TaggedLine(record.realtime, who, self._unit_phase(invocation), text, self._lifecycle_group)]
        out: list[TaggedLine] = []
        self.pipeline.feed_lines(record, now, lambda fed: self._tag(fed, out))
        return out

    def flush(self, now: float | None) -> list[TaggedLine]:
        out: list[TaggedLine] = []
        self.pipeline.flush_lines(now, lambda fed: self._tag(fed, out))
        return out

    def _tag(self, fed: LineFed, out: list[TaggedLine]) -> None:
        """A line the stages took (its events applied): tagged into `out`, unless it is a bar's frame
        that a newer one in the same entry follows, or a bar that did not move."""
        line, events = fed.line, fed.events
        if fed.moves or any(event.kind is EventKind.PROGRESS for event in events):
            self._dirty = True
        if line.kind is LineKind.PROGRESS:
            self._new_bar(line)
            following = fed.following
            if following is not None and following.kind is LineKind.PROGRESS and following.pid == line.pid \
                    and _total(following) == _total(line):
                return  # an older frame of the same bar in the same entry
            key = (line.invocation_id, line.pid)
            frame = (_total(line), line.progress.n if line.progress else -1)
            printed = self._last_frame.get(key)
            if printed == frame:
                return  # the bar did not move
            self._last_frame[key] = frame
            rank = events[0].rank if events and events[0].rank else self._bar_owner(line)
        else:
            rank = next((e.rank for e in events if e.rank), None) or line.rank
        if line.kind is LineKind.CONTINUATION and line.record_id in self._record_tags:
            rank, phase = self._record_tags[line.record_id]
        else:
            rank = rank or "-"
            phase = self._rank_phase(line.invocation_id, rank)
            if line.kind is LineKind.RECORD:
                if len(self._record_tags) > 4096:
                    self._record_tags.clear()
                self._record_tags[line.record_id] = (rank, phase)
        text = line.message if line.kind is not LineKind.PROGRESS and line.has_prefix else line.text
        if line.kind is LineKind.CONTINUATION:
            text = line.message
        out.append(TaggedLine(line.ts, rank, phase, text.rstrip(), line.record_id,
                              continuation=line.kind is LineKind.CONTINUATION))

    def _new_bar(self, line: Line) -> None:
        """A count that goes down, or another total, is a new bar: its frames are never "unmoved"."""
        key = (line.invocation_id, line.pid)
        frame = (_total(line), line.progress.n if line.progress else -1)
        seen = self._last_seen.get(key)
        if seen is not None and (seen[0] != frame[0] or frame[1] < seen[1]):
            self._last_frame.pop(key, None)
        self._last_seen[key] = frame

    def view(self, invocation_id: str | None) -> InvocationView | None:
        if self._dirty:
            snapshot = self.pipeline.snapshot()
            self._views = {inv.invocation_id: inv for inv in snapshot.invocations}
            if snapshot.current is not None:
                self._views[None] = snapshot.current
            self._dirty = False
        return self._views.get(invocation_id) or self._views.get(None)

    def _rank_phase(self, invocation_id: str | None, rank: str) -> str:
        view = self.view(invocation_id)
        if view is None:
            return "-"
        found = view.rank(rank)
        if found is not None:
            return found.phase.value
        return (current_phase(view) or "launch") if rank in ("-", MAIN) else "launch"

    def _unit_phase(self, invocation_id: str | None) -> str:
        view = self.view(invocation_id)
        return (current_phase(view) or "launch") if view is not None else "-"

    def _bar_owner(self, line: Line) -> str | None:
        self._dirty = True
        view = self.view(line.invocation_id)
        if view is None or line.progress is None:
            return None
        owner = next((r for r in view.ranks if r.progress is line.progress), None)
        return owner.rank if owner is not None else None


def _total(line: Line) -> int | None:
    return line.progress.total if line.progress is not None else None


class Regrouper:
    """Holds lines for up to GROUP_WINDOW (journal time) so that a record's continuation lines
    that arrive after other processes' lines are printed right after the record."""

    def __init__(self, window: float = GROUP_WINDOW, max_held: int = MAX_HELD) -> None:
        self.window = window
        self.max_held = max_held
        self._groups: OrderedDict[int, list[TaggedLine]] = OrderedDict()
        self._held = 0
        self._newest: float | None = None

    def add(self, lines: Iterable[TaggedLine]) -> list[TaggedLine]:
        for line in lines:
            if line.ts is not None:
                self._newest = line.ts if self._newest is None else max(self._newest, line.ts)
            group = self._groups.get(line.group) if line.continuation else None
            if group is not None:
                group.append(line)
            else:
                key = line.group
                while key in self._groups:  # a continuation whose record was printed already
                    key = -abs(key) - 10**12
                self._groups[key] = [line]
            self._held += 1
        return self._release(force=False)

    def flush(self) -> list[TaggedLine]:
        return self._release(force=True)

    def __len__(self) -> int:
        return self._held

    def _release(self, force: bool) -> list[TaggedLine]:
        out: list[TaggedLine] = []
        while self._groups:
            key, group = next(iter(self._groups.items()))
            last = group[-1].ts
            if not (force or self._held > self.max_held or last is None or self._newest is None
                    or self._newest - last > self.window):
                break
            del self._groups[key]
            self._held -= len(group)
            out.extend(group)
        return out


@dataclass(frozen=True)
class LineFilter:
    """The lines printed: of a rank, of a phase, from a time on (earlier ones feed the tracker only)."""

    rank: str | None = None
    phase: str | None = None
    since: float | None = None

    def __call__(self, line: TaggedLine) -> bool:
        return (self.takes_rank(line.rank) and (self.phase is None or line.phase == self.phase)
                and (self.since is None or line.ts is None or line.ts >= self.since))

    def takes_rank(self, rank: str) -> bool:
        """`TP3` takes `DP0 TP3` too."""
        return self.rank is None or rank == self.rank or set(self.rank.split()) <= set(rank.split())


def normal_rank(text: str) -> str:
    """`tp3` -> `TP3`, `MAIN` -> `main`, `tp3 dp0` -> `DP0 TP3`."""
    if text.lower() == "main":
        return MAIN
    from ..prefixes import canonical_rank

    canonical = canonical_rank(" " + text.upper())
    if canonical is None:
        raise UsageError(f"--rank: expected a rank like TP3, DP0 TP3 or main, got {text!r}")
    return canonical


def parse_since(text: str, now: float) -> float:
    """An ISO time (without a zone: local time, as journalctl reads it) or a DURATION ago (`30m`)."""
    try:
        seconds = parse_duration(text.lstrip("-"))
    except ValueError:
        seconds = None
    if seconds is not None:
        return now - seconds
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since: expected an ISO time or a duration like 30m, got {text!r}") from None
    return when.timestamp()  # naive: local time


@dataclass(frozen=True)
class Printer:
    """Where lines are printed, and how: times in UTC or local time, text or JSON (`--json`)."""

    out: TextIO
    utc: bool = False
    as_json: bool = False

    def print(self, lines: Iterable[TaggedLine], keep: LineFilter) -> int:
        """Print the lines `keep` keeps; how many it printed."""
        printed = 0
        for line in lines:
            if keep(line):
                self.out.write((line.to_json() if self.as_json else line.format(self.utc)) + "\n")
                printed += 1
        return printed


def nothing_to_show(unit: str, keep: LineFilter, view: InvocationView | None) -> NoInputError:
    """Why `logs` printed no line (exit 66): a rank the start-up does not have, a phase its rank
    never reached, or a start-up with no line yet."""
    if view is None:
        return NoInputError(f"{unit}: no line of its start-up in the journal yet")
    ranks = sorted((r.rank for r in view.ranks), key=rank_sort_key)
    if not any(keep.takes_rank(r.rank) for r in view.ranks):
        error = NoInputError(f"{unit}: no rank {keep.rank} in this start-up")
        error.hint = f"its ranks: {rank_ranges(ranks)}"
        return error
    asked = " ".join(part for part in (f"--rank {keep.rank}" if keep.rank else "",
                                       f"--phase {keep.phase}" if keep.phase else "") if part)
    error = NoInputError(f"{unit}: no line of this start-up matches {asked}" if asked
                         else f"{unit}: no line of this start-up to show")
    if keep.phase is not None:
        reached = sorted({s.phase.value for r in view.ranks if keep.takes_rank(r.rank) for s in r.spans},
                         key=PHASE_NAMES.index)
        error.hint = f"{keep.rank or 'its ranks'} reached: {', '.join(reached) or 'no phase'}"
    return error


def show_logs(config: Config, follower: JournalFollower, start: StartPoint, keep: LineFilter, printer: Printer, *,
              follow: bool = False, clock: Callable[[], float] = time.time,
              wait: Callable[[float], None] | None = None) -> int:
    """Print the unit's lines from `start` on that `keep` keeps; with `follow`, keep printing new
    ones until interrupted."""
    tagger = LogTagger(config)
    regroup = Regrouper()
    if start.since is not None:
        follower.seek_realtime(start.since)
    else:
        follower.seek_head()
    pause = wait or (lambda seconds: wait_for_journal(follower, seconds))

    printed = 0

    def emit(lines: list[TaggedLine]) -> None:
        nonlocal printed
        printed += printer.print(lines, keep)

    try:
        while True:
            records = follower.read(1000)
            if records or follower.behind:
                now = clock()
                for record in records:
                    if (keep.since is None and start.invocation_id is not None and record.invocation_id is not None
                            and record.invocation_id != start.invocation_id and not follow):
                        continue  # the tail of the start-up before this one, read from the margin
                    emit(regroup.add(tagger.feed(record, now)))
                continue
            if not follow:
                emit(regroup.add(tagger.flush(clock())))
                emit(regroup.flush())
                if not printed:
                    raise nothing_to_show(config.unit, keep, tagger.view(start.invocation_id))
                return 0
            emit(regroup.flush())  # caught up: nothing is waiting for a continuation any more
            printer.out.flush()
            pause(GROUP_WINDOW if len(regroup) else 60.0)
    except KeyboardInterrupt:
        emit(regroup.flush())
        return 0


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_logs(args: argparse.Namespace) -> int:
    config = resolve(args.unit, args.config, directory=args.directory).config
    unit = config.unit
    rank = normal_rank(args.rank) if args.rank else None
    if args.phase is not None and args.phase not in PHASE_NAMES:
        raise UsageError(f"--phase: expected one of {', '.join(PHASE_NAMES)}, got {args.phase!r}")
    since = parse_since(args.since, time.time()) if args.since else None
    try:
        if since is not None:
            # The tracker starts with the start-up running at --since, so that the first lines
            # printed carry their real phase.
            start = journal_start(unit, args.directory, before=since) or StartPoint(since, None, "since")
            start = replace(start, invocation_id=None)
        else:
            start = find_start(unit, args.directory)
    except NoSuchUnit:
        raise unknown_unit(unit) from None
    keep = LineFilter(rank, args.phase, since)
    follower = JournalFollower(unit, args.directory)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return show_logs(config, follower, start, keep, Printer(sys.stdout, args.utc, args.json), follow=args.follow)
    finally:
        follower.close()


def add_parser(sub: Any) -> None:
    logs = sub.add_parser("logs", help="the unit's journal as whole lines, tagged with rank and phase")
    logs.add_argument("unit", metavar="UNIT", help="the server's unit")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until interrupted")
    logs.add_argument("--rank", help="only this rank's lines (TP3, 'DP0 TP3', main)")
    logs.add_argument("--phase", help="only lines written in this phase (weight_load, ...)")
    logs.add_argument("--since", help="from this time (ISO, local unless it has a zone) or DURATION ago (30m); "
                      "default: the current start-up")
    logs.add_argument("--utc", action="store_true", help="print times in UTC (default: local time)")
    logs.add_argument("--json", action="store_true", help="one JSON object per line: ts (seconds since the "
                      "epoch), rank, phase, text, continuation")
    logs.add_argument("--config", help="phasewatch YAML config (its patterns; default /etc/phasewatch/UNIT.yaml)")
    logs.add_argument("--directory", help="read this journal directory (copied from another host)")
    logs.set_defaults(func=cmd_logs)


__all__ = ["LineFilter", "LogTagger", "Printer", "Regrouper", "TaggedLine", "show_logs"]
