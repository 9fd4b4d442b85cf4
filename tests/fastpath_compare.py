"""The catch-up fast path against the full path: the same records through a pipeline with the fast
path and one without, and everything they produce or hold compared (stages/s3_track/fastpath.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, NoReturn

import pytest

from phasewatch.config.load import Config
from phasewatch.engines.sglang import TIME_DIGITS
from phasewatch.output.render import json_text, to_json
from phasewatch.pipeline import Pipeline
from phasewatch.profile.load import Profile
from phasewatch.records import JournalRecord, UnitLine, UnitRun
from phasewatch.stages.s2_interpret.pattern_needles import mask_ids

TAG_RE = re.compile(r"^\[[^\]]*?((?: (?:DP|PP|TP|EP)\d+)+)\]")


def fields_by_name_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """UnitLines and UnitRuns that fail when read by position (`entry[0]`, unpacking, `_replace`): what
    reads them by name (their fields' descriptors, the C reader, `==`) is left working, so a consumer
    that reads a field by position or tells a run by `isinstance(entry[0], list)` fails."""
    def by_position(self: object, *args: object) -> NoReturn:
        raise AssertionError(f"a {type(self).__name__} read by position: read its fields by name")

    for kind in (UnitLine, UnitRun):
        monkeypatch.setattr(kind, "__getitem__", by_position)
        monkeypatch.setattr(kind, "__iter__", by_position)


@dataclass
class Run:
    transitions: list[Any]
    document: str  # replay --json of the judged snapshot
    snapshot: Any
    state: dict[str, Any]  # the stages' own bookkeeping
    taken: int


def run(records: Iterable[JournalRecord], fast: bool, engine: str = "sglang", profile: Profile | None = None) -> Run:
    pipeline = Pipeline(replace(Config(unit="sglang.service"), engine=engine, profile=profile), fast=fast,
                        default_year=2026)
    transitions = [pipeline.feed(record, None) for record in records]
    transitions.append(pipeline.flush(None))
    return _outcome(pipeline, transitions)


def _outcome(pipeline: Pipeline, transitions: list[Any]) -> Run:
    snapshot = pipeline.snapshot()
    last = max((inv.last_ts for inv in snapshot.invocations if inv.last_ts is not None), default=0.0)
    document = json_text(to_json(pipeline.judge(last + 30.0, snapshot), last + 30.0))
    splitter, mapper = pipeline.splitter, pipeline.mapper
    state = {
        "entries": pipeline.entries, "quarantined": pipeline.quarantined,
        "streams": list(splitter._streams.items()),  # order too: the least recently fed is forgotten first
        "splitter": {k: v for k, v in vars(splitter).items() if k not in ("_streams", "_find")},
        "mapper": {k: v for k, v in vars(mapper).items()
                   if k not in ("profile", "_engine", "_memo", "_family_memo", "_line_rules", "blind_rules",
                                "other_rules", "_position", "ids")},
        # the tracker's own bookkeeping behind the views (a run's lines' gaps: each phase's silence)
        "phases": [(inv.phase_seen, inv.phase_silence, inv.proof_of_life, inv.last_ts, inv.started_at)
                   for inv in pipeline.tracker._invocations.values()],
    }
    return Run(transitions, document, snapshot, state, pipeline.fast.taken if pipeline.fast else 0)


def assert_same(records: list[JournalRecord], engine: str = "sglang") -> int:
    """Both paths agree on every output and every piece of state; how many lines took the fast path."""
    fast, full = run(records, True, engine), run(records, False, engine)
    assert fast.document == full.document
    assert fast.transitions == full.transitions
    assert fast.snapshot == full.snapshot
    assert fast.state == full.state
    return fast.taken


def as_journal(messages: Iterable[str], start: float = 1_780_000_000.0,
               invocation: str = "inv-1") -> list[JournalRecord]:
    """A pasted log as journal entries: one per line, a PID per rank tag (the main process 100), the
    journal's time 10 ms apart, so that the fast path can take them (it needs the journal's fields)."""
    pids: dict[str, int] = {}
    out = []
    for index, message in enumerate(messages):
        tag = TAG_RE.match(message)
        pid = pids.setdefault(tag.group(1), 101 + len(pids)) if tag else 100
        out.append(JournalRecord(message=message.encode("utf-8", "surrogateescape"), realtime=start + index * 0.01,
                                 pid=pid, invocation_id=invocation))
    return out


def continues(previous: bytes, message: bytes, shape: tuple[int, int] = TIME_DIGITS) -> int:
    """Whether the C reader joins `message` to a run ending with `previous` (_journal_lines.c), and how:
    the same bytes up to the first ']' and two more but for digits in `shape`'s span (the engine's
    `run_time_digits`; a line without ']', or that ends there, is all head: the same length too), and
    after that, 1: the same digit-masked bytes; 2: the same but for runs of digits, each of any width,
    as they are or once the hex characters of their ids are masked (`mask_ids`) too; 3: the same
    once their ids are masked, each run of digits as wide; 0: not joined."""
    bracket = message.find(b"]")
    head = len(message) if bracket < 0 else min(len(message), bracket + 3)
    if len(previous) < head or (head == len(message) and len(previous) != len(message)):
        return 0
    start, end = min(shape[0], head), min(shape[1], head)
    if not (previous[:start] == message[:start] and previous[end:head] == message[end:head]
            and previous[start:end].translate(_DIGITS) == message[start:end].translate(_DIGITS)):
        return 0
    a, b = previous[head:].translate(_DIGITS), message[head:].translate(_DIGITS)
    if a == b:
        return 1
    if _DIGIT_RUNS.sub(b"0", a) == _DIGIT_RUNS.sub(b"0", b):
        return 2
    a, b = mask_ids(a), mask_ids(b)
    if a == b:
        return 3
    return 2 if _DIGIT_RUNS.sub(b"0", a) == _DIGIT_RUNS.sub(b"0", b) else 0


_DIGIT_RUNS = re.compile(rb"[0-9]+")
_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def shifts_of(messages: list[bytes], shape: tuple[int, int] = TIME_DIGITS) -> tuple[list[int], list[int]]:
    """A run's `shifts` and `ids` as the C reader gives them: the indexes of its lines whose digit-masked
    text is not the line's before: where some run of digits (or of an id's) has another width; where
    it is the same once the ids are masked too."""
    kinds = [continues(messages[i - 1], messages[i], shape) for i in range(1, len(messages))]
    return ([i for i, kind in enumerate(kinds, 1) if kind == 2], [i for i, kind in enumerate(kinds, 1) if kind == 3])


def whole_line(record: JournalRecord) -> bool:
    """An entry `journal_source.unit_entries` gives as a line tuple (the unit's, in one piece)."""
    return (isinstance(record.message, bytes) and record.line_break is None and record.unit is None
            and record.message_id is None and record.object_unit is None and record.realtime is not None
            and not record.extra)


def runs_of(records: list[JournalRecord], shape: tuple[int, int] = TIME_DIGITS
            ) -> list[JournalRecord | list[JournalRecord]]:
    """The records as the C reader gives them with `runs=shape`: consecutive whole lines of one writer
    that `continues` joins, as one list."""
    out: list[JournalRecord | list[JournalRecord]] = []
    for record in records:
        last = out[-1] if out else None
        previous = last[-1] if isinstance(last, list) else last
        if (previous is not None and whole_line(record) and whole_line(previous)
                and (previous.pid, previous.invocation_id) == (record.pid, record.invocation_id)
                and continues(previous.message, record.message, shape)):  # type: ignore[arg-type]
            if isinstance(last, list):
                last.append(record)
            else:
                out[-1] = [previous, record]
        else:
            out.append(record)
    return out


def run_in_runs(records: list[JournalRecord], profile: Profile | None = None) -> Run:
    """`run(records, True)`, with the runs `runs_of` finds fed by `Pipeline.feed_run`."""
    pipeline = Pipeline(replace(Config(unit="sglang.service"), engine="sglang", profile=profile), default_year=2026)
    transitions = []
    for entry in runs_of(records):
        if isinstance(entry, list):
            messages = [r.message for r in entry]
            transitions.append(pipeline.feed_run(UnitRun(messages, [r.realtime for r in entry],  # type: ignore[misc]
                                                         entry[0].pid, entry[0].invocation_id,
                                                         *shifts_of(messages)), None))  # type: ignore[arg-type]
        else:
            transitions.append(pipeline.feed(entry, None))
    transitions.append(pipeline.flush(None))
    return _outcome(pipeline, transitions)


def assert_runs_agree(records: list[JournalRecord], profile: Profile | None = None) -> tuple[Run, int]:
    """Fed in runs, fed line by line (both with the fast path) and by the full path: the same."""
    grouped = run_in_runs(records, profile)
    single, full = run(records, True, profile=profile), run(records, False, profile=profile)
    for other in (single, full):
        assert grouped.document == other.document
        assert grouped.snapshot == other.snapshot
        assert grouped.state == other.state
        assert [t for ts in grouped.transitions for t in ts] == [t for ts in other.transitions for t in ts]
    assert grouped.taken == single.taken
    return grouped, sum(len(entry) for entry in runs_of(records) if isinstance(entry, list))
