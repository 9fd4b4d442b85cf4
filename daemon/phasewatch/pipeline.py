"""The chain of pure stages, as the daemon and `replay` both run it.

JournalRecord -> LineSplitter -> EventMapper -> Tracker -> (snapshot) -> policy.evaluate
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from .config.load import Config
from .records import (
    WRONG_WHEN_STOPPED,
    Entry,
    Event,
    EventKind,
    JournalRecord,
    Line,
    Outcome,
    UnitLine,
    UnitRun,
    VerdictKind,
)
from .stages.s1_read.lines import LineSplitter
from .stages.s2_interpret.events import EventMapper, is_lifecycle_record, lifecycle_event
from .stages.s2_interpret.ruletally import RuleTally
from .stages.s3_track.fastpath import FastPath
from .stages.s3_track.snapshot import InvocationView, Snapshot, Transition
from .stages.s3_track.tracker import Tracker
from .stages.s4_judge import policy
from .stages.s4_judge.gpu_fault import GpuFault, with_gpu_faults
from .stages.s4_judge.ras_culprit import RasFinding, with_culprit
from .stages.s4_judge.remedies import NO_UNIT, UnitSettings, remedy_for

logger = logging.getLogger(__name__)
# Quarantined records logged one by one, at most; past it only counted (a flood of bad lines must
# not become a flood of warnings).
QUARANTINE_LOG_LIMIT = 20


@dataclass(frozen=True)
class Judgement:
    """One start-up judged: `verdicts` are what was wrong when it was stopped and what is wrong now
    (what the metrics, the history and replay tell); `live` only what is wrong now (what the actor
    acts on)."""

    invocation: InvocationView
    verdicts: tuple[policy.Verdict, ...]
    outcome: str
    live: tuple[policy.Verdict, ...] = ()


@dataclass(frozen=True)
class LineFed:
    """A line as the stages took it (`Pipeline.feed_lines`): the events the mapper read in it, the
    moves they made in the tracker, and the line after it in the same entry (a bar's newer frame)."""

    line: Line
    events: list[Event]
    moves: list[Transition]
    following: Line | None


TellLine = Callable[[LineFed], None]


class Pipeline:
    def __init__(self, config: Config, tally: RuleTally | None = None, default_year: int | None = None,
                 fast: bool = True) -> None:
        """`default_year`: the year of log prefixes that show none (vLLM's), for a pasted log; the
        journal dates every entry itself. `fast`: lines that change nothing but last activity skip
        the stages (stages/s3_track/fastpath.py; the same outputs, only sooner)."""
        self.config = config
        self.tally = tally  # replay --rules: which rule matched which line (an observer only)
        self.profile = config.engine_profile()
        self.splitter = LineSplitter(self.profile.engine_module.find_prefixes, default_year)
        self.mapper = EventMapper(self.profile)
        self.tracker = Tracker(self.profile.proof_of_life_rules, self.profile.lockstep, self.profile.draft_phases)
        self.entries = 0
        # Entries the stages took one by one: those that may change more than a rank's last activity
        # (the fast path takes the rest), so the daemon shows them at once (app.py `_publish`).
        self.full_entries = 0
        self.quarantined = 0  # records that raised in a stage: skipped, the rest goes on
        self._fast_wanted = fast
        self.fast = self._fast_path()

    def _fast_path(self) -> FastPath | None:
        engine = self.profile.engine_module
        if not self._fast_wanted or engine.fast_prefix is None or self.tally is not None:
            return None
        return FastPath(engine.fast_prefix, engine.prefix_marks, self.splitter, self.mapper, self.tracker)

    def run_shape(self) -> tuple[int, int] | None:
        """The runs `feed_run` can take (journal_source.RunShape): None without the fast path."""
        if self.fast is None:
            return None
        return self.profile.engine_module.run_time_digits or (0, 0)

    def feed_line(self, line: UnitLine, now: float | None) -> list[Transition]:
        """One entry the unit's own process wrote, whole (no `_LINE_BREAK`), as the journal reader has
        its fields: no JournalRecord is built unless the fast path declines it."""
        message, realtime, pid, invocation = line.message, line.realtime, line.pid, line.invocation_id
        fast = self.fast
        if fast is None:
            return self.feed(JournalRecord(message=message, realtime=realtime, pid=pid, invocation_id=invocation), now)
        self.entries += 1
        try:
            if fast.apply(message, realtime, pid, invocation):
                return []
            return self._full(JournalRecord(message=message, realtime=realtime, pid=pid, invocation_id=invocation),
                              now)
        except Exception as exc:  # noqa: BLE001 - as in feed()
            self._quarantine(None, exc)
            return []

    def feed_run(self, run: UnitRun, now: float | None) -> list[Transition]:
        """Consecutive whole lines of one writer, the same but for digits (a run the C journal reader
        found: `FastPath.apply`'s `repeats`), as `feed_line` takes them one by one: the lines alike
        at once, a line the fast path declines by the full path, the rest as a run again."""
        messages, stamps, pid, invocation = run.messages, run.realtimes, run.pid, run.invocation_id
        fast = self.fast
        if fast is None:
            return [t for message, ts in zip(messages, stamps, strict=True)
                    for t in self.feed_line(UnitLine(message, ts, pid, invocation), now)]
        out: list[Transition] = []
        done = 0
        while done < len(messages):
            self.entries += 1
            try:
                taken = fast.apply(messages[done], stamps[done], pid, invocation, run, done + 1)
                if taken:
                    self.entries += taken - 1
                    done += taken
                    continue
                out.extend(self._full(JournalRecord(message=messages[done], realtime=stamps[done], pid=pid,
                                                    invocation_id=invocation), now))
            except Exception as exc:  # noqa: BLE001 - as in feed()
                self._quarantine(None, exc)
            done += 1
        return out

    def feed_entries(self, batch: Iterable[Entry], now: float | None) -> None:
        """A batch as journal_source.unit_entries reads it: whole lines (`feed_line`), runs of them
        (`feed_run`) and records (`feed`)."""
        feed_line, feed_run, feed = self.feed_line, self.feed_run, self.feed
        for entry in batch:
            if isinstance(entry, UnitLine):
                feed_line(entry, now)
            elif isinstance(entry, UnitRun):
                feed_run(entry, now)
            else:
                feed(entry, now)

    def feed(self, record: JournalRecord, now: float | None) -> list[Transition]:
        """A record through every stage. Never raises on content: a record a stage cannot take is
        quarantined (counted, logged once with its cursor) and the next one is read."""
        self.entries += 1
        try:
            return self._feed(record, now)
        except Exception as exc:  # noqa: BLE001 - one hostile line must not stop the watchdog
            self._quarantine(record.cursor, exc)
            return []

    def _quarantine(self, cursor: str | None, exc: Exception) -> None:
        self.quarantined += 1
        if self.quarantined <= QUARANTINE_LOG_LIMIT:
            logger.warning("[%s] journal entry %s quarantined (%s: %.200s); going on", self.config.unit,
                           cursor or f"#{self.entries}", type(exc).__name__, str(exc))
        elif self.quarantined == QUARANTINE_LOG_LIMIT + 1:
            logger.warning("[%s] more entries quarantined: counting them only", self.config.unit)

    def _feed(self, record: JournalRecord, now: float | None) -> list[Transition]:
        fast = self.fast
        if (fast is not None and record.line_break is None and record.unit is None and record.realtime is not None
                and record.message_id is None and record.object_unit is None):
            message = record.message
            if isinstance(message, str) and message.isascii():
                message = message.encode("ascii")
            if isinstance(message, bytes) and fast.apply(message, record.realtime, record.pid, record.invocation_id):
                return []
        return self._full(record, now)

    def feed_lines(self, record: JournalRecord, now: float | None, tell: TellLine) -> list[Transition]:
        """A record as `feed` takes it (the engine's rewrite, the quarantine) but not by the fast path, which
        makes no lines: each line it completes is told once its events are applied (`phasewatch logs`)."""
        self.entries += 1
        try:
            return self._full(record, now, tell)
        except Exception as exc:  # noqa: BLE001 - as in feed()
            self._quarantine(record.cursor, exc)
            return []

    def flush_lines(self, now: float | None, tell: TellLine) -> list[Transition]:
        """`flush`, each line it completes told as `feed_lines` tells them."""
        try:
            return self._lines(self.splitter.flush(), now, tell)
        except Exception as exc:  # noqa: BLE001 - as in feed()
            self._quarantine(None, exc)
            return []

    def _full(self, record: JournalRecord, now: float | None, tell: TellLine | None = None) -> list[Transition]:
        self.full_entries += 1
        if is_lifecycle_record(record):
            event = lifecycle_event(record)
            return self.tracker.apply(event, now) if event is not None else []
        if record.unit is not None:
            return []  # PID 1's other words about the unit ("Failed to migrate controller cgroups")
        if record.message is None:
            # journalctl did not print it ("[N blob data]": control characters, a progress frame; or a
            # field of 4096 bytes or more without --all): written, not lost.
            return self.tracker.apply(Event(EventKind.HIDDEN_LINE, record.realtime, pid=record.pid,
                                            invocation_id=record.invocation_id), now)
        rewrite = self.profile.engine_module.rewrite
        message = record.message
        if rewrite is not None and message[:1] in (b"{", "{"):
            text = rewrite(message if isinstance(message, str) else message.decode("utf-8", "replace"))
            record = record if text is None else replace(record, message=text)
        return self._lines(self.splitter.feed(record), now, tell)

    def feed_all(self, records: Iterable[JournalRecord], now: float | None) -> list[Transition]:
        out: list[Transition] = []
        for record in records:
            out.extend(self.feed(record, now))
        out.extend(self.flush(now))
        return out

    def flush(self, now: float | None) -> list[Transition]:
        try:
            return self._lines(self.splitter.flush(), now)
        except Exception as exc:  # noqa: BLE001 - as in feed()
            self._quarantine(None, exc)
            return []

    def _lines(self, lines: list[Line], now: float | None, tell: TellLine | None = None) -> list[Transition]:
        if tell is not None:
            return self._told_lines(lines, now, tell)
        out: list[Transition] = []
        for line in lines:
            events = self.mapper.map_line(line)
            if self.tally is not None:
                self.tally.add(line, events)
            for event in events:
                out.extend(self.tracker.apply(event, now))
        return out

    def _told_lines(self, lines: list[Line], now: float | None, tell: TellLine) -> list[Transition]:
        out: list[Transition] = []
        for line, following in zip(lines, [*lines[1:], None], strict=True):  # (no tally: `logs` keeps none)
            events = self.mapper.map_line(line)
            moves = [move for event in events for move in self.tracker.apply(event, now)]
            tell(LineFed(line, events, moves, following))
            out.extend(moves)
        return out

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: its limits, and its profile for the lines still to come; what was
        already read stays as it was tracked."""
        self.config = config
        self.profile = config.engine_profile()
        self.mapper = EventMapper(self.profile)
        self.tracker.proof_of_life_rules = self.profile.proof_of_life_rules
        self.fast = self._fast_path()

    def apply(self, event: Event, now: float | None) -> list[Transition]:
        """An event that does not come from the journal (a rank's death, a probe, a sign of life)."""
        return self.tracker.apply(event, now)

    def snapshot(self) -> Snapshot:
        return self.tracker.snapshot()

    def current(self) -> InvocationView | None:
        return self.tracker.snapshot().current

    def current_id(self) -> str | None:
        return self.tracker.current_id()

    def with_remedies(self, verdicts: Iterable[policy.Verdict], inv: InvocationView,
                      unit: UnitSettings = NO_UNIT) -> list[policy.Verdict]:
        """Each verdict with what to do about it, when the profile's remedies and the facts (the unit's
        settings: judge.py reads them) say."""
        out = []
        for verdict in verdicts:
            found = remedy_for(verdict.kind, verdict.cause, verdict.phase, verdict.rank, inv,
                               self.profile.remedies, unit)
            out.append(verdict if found is None else replace(verdict, remedy=found))
        return out

    def judge(self, now: float, snapshot: Snapshot | None = None, unit: UnitSettings = NO_UNIT) -> list[Judgement]:
        """Every start-up of `snapshot` (the whole snapshot by default) judged at `now` with this
        pipeline's limits (replay, status; the daemon judges through judge.Judge)."""
        return [self.judge_one(inv, now, unit=unit) for inv in (snapshot or self.snapshot()).invocations]

    def judge_one(self, inv: InvocationView, now: float, config: Config | None = None,
                  unit: UnitSettings = NO_UNIT, gpu_faults: Sequence[GpuFault] = (),
                  ras: RasFinding | None = None) -> Judgement:
        """One start-up judged with `config`'s limits (this pipeline's by default), the GPUs' faults
        and NCCL RAS's last finding for it (the daemon's judge.Judge has them)."""
        config = config or self.config
        live = self.with_remedies(policy.evaluate(inv, now, config, self.profile), inv, unit)
        if gpu_faults:
            live = with_gpu_faults(live, inv, gpu_faults, config.unit)
        live = with_culprit(live, ras, now)
        verdicts = live
        outcome = policy.outcome(inv, live)
        if inv.before_stop is not None and inv.stopped_at is not None:
            # What was wrong when it was stopped (phasewatch's own restart, or an operator's).
            wrong = policy.evaluate(inv.before_stop, inv.stopped_at, config, self.profile)
            before = self.with_remedies([v for v in wrong if v.kind in WRONG_WHEN_STOPPED], inv, unit)
            verdicts = before + verdicts
            if before and outcome in (Outcome.STOPPED, Outcome.CRASHED) and not any(
                    v.kind == VerdictKind.CRASHED for v in verdicts):
                outcome = Outcome.STALLED
        return Judgement(inv, tuple(verdicts), outcome, tuple(live))
