"""The daemon's catch-up at its start (sources/journal/catch_up.py) with a follower
whose catch-up reader hands over scripted batches: the loop is told of every change of start-up (as
a follower's read ending there would tell it), a reader that cannot open the journal leaves the
start-up to the follower, and the follower goes on after the last entry's cursor."""

from __future__ import annotations

from typing import Any, Generator

import pytest

from fastpath_compare import fields_by_name_only
from phasewatch.clock import FakeClock
from phasewatch.config.load import Config
from phasewatch.errors import JournalUnavailable
from phasewatch.pipeline import Pipeline
from phasewatch.records import JournalRecord, UnitLine, UnitRun
from phasewatch.sources.journal.catch_up import catch_up
from phasewatch.sources.journal.journal_feed import JournalFeedSource
from phasewatch.sources.journal.journal_reader import ReadEnd

UNIT = "sglang.service"
T0 = 1_780_000_000.0
OLD, NEW = "a" * 32, "b" * 32


def line(text: str, invocation: str, pid: int = 101, at: float = T0) -> UnitLine:
    return UnitLine(f"[2026-05-28 20:26:40 TP0] {text}".encode(), at, pid, invocation)


class CatchUpFollower:
    def __init__(self, batches: list[Any], cursor: str | None = "s=last", fail: bool = False) -> None:
        self.batches, self.end_cursor, self.fail = batches, cursor, fail
        self.rejected: dict[str, int] = {}
        self.cursor: str | None = None
        self.position: float | None = None  # (JournalFeedSource's: the last entry's time)
        self.sought: list[str] = []

    def catch_up_entries(self, since: float, runs: object, end: ReadEnd) -> Generator[list[Any], None, None]:
        if self.fail:
            raise JournalUnavailable("cannot open the journal: Permission denied")
        yield from self.batches
        end.cursor = self.end_cursor

    def seek_cursor(self, cursor: str) -> None:
        self.sought.append(cursor)


def feed_for(follower: CatchUpFollower) -> tuple[JournalFeedSource, list[str | None]]:
    pipeline = Pipeline(Config(unit=UNIT), default_year=2026)
    told: list[str | None] = []
    feed = JournalFeedSource(follower, pipeline, UNIT, FakeClock(wall=T0), lambda: told.append(pipeline.current_id()))  # type: ignore[arg-type]
    return feed, told


def test_the_loop_is_told_where_the_start_up_changes_inside_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    fields_by_name_only(monkeypatch)
    batch = [line("Load weight begin. avail mem=70.00 GB", OLD), line("Load weight end. mem usage=38.0 GB.", OLD),
             JournalRecord("[2026-05-28 20:26:41] Started", T0 + 1, pid=200, invocation_id=NEW),
             line("Load weight begin. avail mem=70.00 GB", NEW, pid=201, at=T0 + 2)]
    follower = CatchUpFollower([batch, [line("Load weight end. mem usage=38.0 GB.", NEW, pid=201, at=T0 + 3)]])
    feed, told = feed_for(follower)
    assert catch_up(feed, T0 - 5)
    assert told == [OLD, NEW, NEW]  # the change inside the first batch, then each batch's end
    assert feed.entries_by_invocation == {OLD: 2, NEW: 3}
    assert feed.pids == {101, 200, 201} and feed.read_since_release == 5
    assert follower.sought == ["s=last"] and follower.cursor == "s=last"


def test_a_run_counts_as_its_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    fields_by_name_only(monkeypatch)
    run = UnitRun([b"[2026-05-28 20:26:40 TP0] Decode batch, #token: 1"] * 3, [T0, T0 + 1, T0 + 2], 101, OLD, [], [])
    follower = CatchUpFollower([[line("Load weight begin. avail mem=70.00 GB", OLD, at=T0 - 1), run]])
    feed, _ = feed_for(follower)
    assert catch_up(feed, T0 - 5)
    assert feed.entries_by_invocation == {OLD: 4} and feed.read_since_release == 4
    assert feed.pipeline.entries == 4
    assert follower.position == T0 + 2  # the run's last line's time


def test_a_catch_up_reader_that_cannot_open_the_journal_leaves_it_to_the_follower() -> None:
    follower = CatchUpFollower([[line("x", OLD)]], fail=True)
    feed, told = feed_for(follower)
    assert not catch_up(feed, T0 - 5)
    assert told == [] and feed.entries_by_invocation == {} and follower.sought == []


def test_nothing_since_the_start_leaves_the_follower_where_it_is() -> None:
    follower = CatchUpFollower([], cursor=None)
    feed, told = feed_for(follower)
    assert catch_up(feed, T0 - 5)
    assert told == [] and follower.sought == [] and follower.cursor is None
