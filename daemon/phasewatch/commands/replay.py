"""`phasewatch replay`: the pipeline over a saved log (a file, standard input) or a unit's journal,
judged as of its last line (or --now); --rules tallies what each rule of the profile matched."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..config.load import Config, load_config
from ..durations import parse_duration
from ..engines import detect_engine
from ..errors import EX_OK, InputError, UsageError
from ..output.fit import output_width
from ..output.render import MAX_TS, clamp_ts, json_text, terminal_safe, to_json, to_table, ts_in_range
from ..pipeline import Pipeline
from ..profile.load import builtin_engines
from ..records import Entry, JournalRecord, UnitLine, UnitRun
from ..sources.journal import journal_source
from ..sources.journal.formats import parse_source
from ..sources.journal.journal_source import UnitRecords
from ..sources.journal.pastes import unit_named
from ..stages.s2_interpret.ruletally import RuleTally
from ..stages.s3_track.snapshot import Snapshot
from .target import resolve


def _parse_when(text: str, last_line: float | None) -> float:
    """`+2h` (after the last line) or an ISO time (naive = UTC, like log prefixes)."""
    if text.startswith("+"):
        seconds = parse_duration(text[1:])
        return (last_line or 0.0) + (seconds or 0.0)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


def _records_from_file(source: str) -> tuple[list[JournalRecord], list[str]]:
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    try:
        parsed = parse_source(data, default_year=dt.datetime.now(dt.timezone.utc).year)
    except InputError as exc:
        raise InputError(str(exc), source) from None
    return list(parsed.records), list(parsed.warnings)


class TimeClamp:
    """Journal times outside 1970..9999 (a forged or corrupt __REALTIME_TIMESTAMP) clamped into
    that range before the pipeline sees them, and counted for one warning. Iterable again, like
    the records it wraps (replay may feed them twice)."""

    def __init__(self, records: Iterable[JournalRecord]) -> None:
        self._records = records
        self._clamped_records = 0
        self._clamped_stamps = 0

    def __iter__(self) -> Iterator[JournalRecord]:
        self._clamped_records = 0
        for record in self._records:
            if record.realtime is not None and not ts_in_range(record.realtime):
                self._clamped_records += 1
                record = replace(record, realtime=clamp_ts(record.realtime))
            yield record

    def feed(self, pipeline: Pipeline, now: float | None) -> None:
        """Every record through `pipeline`; a journal's unit read in batches, its whole lines without
        a JournalRecord each (`Pipeline.feed_entries`, the catch-up fast path)."""
        source = self._records
        if not isinstance(source, journal_source.UnitRecords):
            pipeline.feed_all(self, now)
            return
        self._clamped_records = 0
        for batch in source.batches(runs=pipeline.run_shape()):
            pipeline.feed_entries(self._clamped(batch), now)
        pipeline.flush(now)

    def _clamped(self, batch: list[Entry]) -> Iterator[Entry]:
        for entry in batch:
            if isinstance(entry, UnitLine):
                if not 0.0 <= entry.realtime <= MAX_TS:
                    self._clamped_records += 1
                    entry = UnitLine(entry.message, clamp_ts(entry.realtime), entry.pid, entry.invocation_id)
            elif isinstance(entry, UnitRun):
                stamps = entry.realtimes
                if not (0.0 <= min(stamps) and max(stamps) <= MAX_TS):
                    self._clamped_records += sum(1 for ts in stamps if not 0.0 <= ts <= MAX_TS)
                    entry = UnitRun(entry.messages, [clamp_ts(ts) for ts in stamps], entry.pid, entry.invocation_id,
                                    entry.shifts, entry.ids)
            elif entry.realtime is not None and not ts_in_range(entry.realtime):
                self._clamped_records += 1
                entry = replace(entry, realtime=clamp_ts(entry.realtime))
            yield entry

    def saw(self, stamps: Iterable[float | None]) -> None:
        """Times from line prefixes (year 0001 is before 1970): counted here, shown clamped."""
        self._clamped_stamps += sum(1 for ts in stamps if ts is not None and not ts_in_range(ts))

    @property
    def count(self) -> int:
        return self._clamped_records + self._clamped_stamps


def _messages(records: Iterable[JournalRecord]) -> Iterator[str]:
    for record in records:
        if isinstance(record.message, str):
            yield record.message
        elif isinstance(record.message, bytes):
            yield record.message.decode("utf-8", "replace")


CLOCK_TIME = re.compile(r"\d\d:\d\d:\d\d")  # what every log line's prefix has, in one form or another


def cmd_replay(args: argparse.Namespace) -> int:
    # --unit: the unit and its config as every command reads them (commands/target.py); a file: --config
    target = resolve(args.unit, args.config, directory=args.directory) if args.unit else None
    config = target.config if target else load_config(args.config) if args.config else Config()
    config_file = target.config_file if target else args.config
    records, unit_records = _read(args, config)
    records = clamped = TimeClamp(records)
    config = _replay_config(args, config, config_file, records)
    year = dt.datetime.now(dt.timezone.utc).year  # for prefixes without a year (vLLM), as for syslog's
    tally = RuleTally() if args.rules else None
    pipeline = Pipeline(config, tally, default_year=year)
    clamped.feed(pipeline, now=None)
    snapshot = pipeline.snapshot()
    last_line = max((inv.last_ts for inv in snapshot.invocations if inv.last_ts is not None), default=None)
    if last_line is None and snapshot.invocations:
        # A log without a single time stamp: judged as if every line was written at time 0.
        tally = RuleTally() if args.rules else None
        pipeline = Pipeline(config, tally, default_year=year)
        clamped.feed(pipeline, now=0.0)
        snapshot = pipeline.snapshot()
    if tally is not None:
        tally.add_anomalies(a for inv in snapshot.invocations for a in inv.anomalies)
        if args.json:
            sys.stdout.write(json_text(tally.to_json(pipeline.profile)) + "\n")
        else:
            sys.stdout.writelines(terminal_safe(line) + "\n" for line in tally.to_table(pipeline.profile).splitlines())
        return EX_OK
    now = _parse_when(args.now, last_line) if args.now else (last_line or 0.0)
    judgements = pipeline.judge(now, snapshot)
    if not args.unit and last_line is None and judgements and not any(
            j.verdicts or j.invocation.ranks or j.invocation.server for j in judgements) and not any(
            CLOCK_TIME.search(message) for message in _messages(records)):  # no time of day, no rank: prose
        raise InputError("no line of a start-up phasewatch knows (SGLang, vLLM) in it: not the server's log? "
                         "(phasewatch replay --rules FILE shows what each rule matched)", args.source)
    _warn_after_reading(unit_records, config, clamped, snapshot)
    if args.json:
        sys.stdout.write(json_text(to_json(judgements, now)) + "\n")
    else:
        width = None if args.wide else output_width(sys.stdout)
        sys.stdout.write(to_table(judgements, now, timeless=last_line is None, width=width,
                                  plain=args.plain))
    return EX_OK


def _read(args: argparse.Namespace, config: Config) -> tuple[Iterable[JournalRecord], UnitRecords | None]:
    """The records to replay (the unit's journal, streamed, or the file's) and the unit's reader, if any;
    what is wrong with the input said on stderr."""
    since = None
    if args.since:
        from .logs import parse_since  # (when asked: logs' imports are a tenth of replay's start)

        since = parse_since(args.since, time.time())  # as logs reads it: ISO or 30m ago
    if args.unit:
        unit_records = UnitRecords(config.unit, args.directory, since)  # streamed: memory does not grow
        return unit_records, unit_records
    records, warnings = _records_from_file(args.source)
    if since is not None:
        timed = [r for r in records if r.realtime is not None]
        if not timed:
            warnings.append(f"--since: {args.source} has no journal times (a text log): every line read")
        records = [r for r in records if r.realtime is None or r.realtime >= since]
    for warning in warnings:
        print(f"phasewatch: warning: {terminal_safe(warning)}", file=sys.stderr)
    return records, None


def _replay_config(args: argparse.Namespace, config: Config, config_file: str | None,
                   records: Iterable[JournalRecord]) -> Config:
    """The config a replay judges by: the unit and the engine the log names where no config file
    does, and no wait for a crash's cause (a saved log is complete)."""
    if not config_file and not args.unit:
        named = unit_named(records)
        config = Config(unit=named) if named else config
    if args.engine:
        config = replace(config, engine=args.engine, profile=None)
    elif not config_file:
        config = replace(config, engine=detect_engine(_messages(records)))  # the log's own lines say
    return replace(config, crash_cause_wait=0.0)


def _warn_after_reading(unit_records: UnitRecords | None, config: Config, clamped: TimeClamp,
                        snapshot: Snapshot) -> None:
    if unit_records is not None and unit_records.rejected:
        counts = ", ".join(f"{count} {reason}" for reason, count in sorted(unit_records.rejected.items()))
        print(f"phasewatch: warning: ignored entries that claim {terminal_safe(config.unit)} without journald's "
              "trusted fields "
              f"({counts}); see the threat model in docs/operations.md", file=sys.stderr)
    clamped.saw(ts for inv in snapshot.invocations for ts in (inv.started_at, inv.last_ts))
    if clamped.count:
        print(f"phasewatch: warning: {clamped.count} time stamp(s) outside years 1970..9999 clamped into that range",
              file=sys.stderr)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the parser alone cannot say about replay's arguments: a usage error (exit 64) from `parser`."""
    if bool(args.unit) == bool(args.source):
        parser.error("replay needs exactly one SOURCE: a file, '-', or --unit UNIT")
    if args.directory and not args.unit:
        parser.error("--directory needs --unit")
    if args.now and not re.match(r"^(\+.+|\d{4}-\d\d-\d\d.*)$", args.now):
        parser.error(f"--now: expected +DURATION or an ISO time, got {args.now!r}")


def add_parser(sub: Any) -> None:
    replay = sub.add_parser("replay", help="run the pipeline over a saved log or the journal and judge it")
    replay.add_argument("source", nargs="?", help="a log file (journalctl -o json/export/short/cat, or a pasted "
                        "log), or - for standard input")
    replay.add_argument("--unit", help="read this unit's entries from the journal instead of a file")
    replay.add_argument("--directory", help="with --unit: a journal directory copied from another host")
    replay.add_argument("--since", help="from this time (ISO, local unless it has a zone) or DURATION ago (30m); "
                        "a file's lines without a journal time are all read")
    replay.add_argument("--config", help="phasewatch YAML config (limits, patterns)")
    replay.add_argument("--engine", choices=builtin_engines(),
                        help="the engine whose profile reads the log (default: the config's, else told by the log)")
    replay.add_argument("--json", action="store_true", help="print the JSON document")
    replay.add_argument("--plain", action="store_true", help="for scripts: no legend, full names, no line "
                        "shortened or wrapped to fit the terminal")
    replay.add_argument("--rules", action="store_true",
                        help="print how many lines each rule of the profile matched, and the lines none matched")
    replay.add_argument("--now", help="judge at this time: +DURATION after the last line, or an ISO time")
    replay.set_defaults(func=cmd_replay, check_args=check_args)
