"""Reading that survives the journal (PROBE-S3 H-2, H-4): a read that fails with EBADMSG, ENOENT or
ESTALE (a file archived or deleted under the reader) reopens at the cursor and reads that batch again;
a catch-up whose reader fails midway leaves the rest to the follower after its last whole batch; a
cursor the reopened journal no longer holds, while entries were unread, is lines lost; and while the
reading is behind, the start-up is judged at the last entry read, not now (sources/journal/journal_feed.py,
sources/journal/rebuild.py)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Generator

from test_daemon import STALL_CONFIG, daemon, line, load_begins
from test_daemon import T0 as DT0

from phasewatch.clock import FakeClock
from phasewatch.config.load import Config
from phasewatch.errors import JournalError
from phasewatch.pipeline import Pipeline
from phasewatch.records import JournalRecord, VerdictKind
from phasewatch.sources.base import Instant
from phasewatch.sources.journal import rebuild
from phasewatch.sources.journal.catch_up import catch_up
from phasewatch.sources.journal.follow import JournalFollower
from phasewatch.sources.journal.journal_feed import SAME_CURSOR_ERRORS, JournalFeedSource
from phasewatch.sources.journal.journal_reader import ReadEnd
from phasewatch.sources.journal.rebuild import JudgedClock, StartTelling

UNIT = "sglang.service"
T0 = 1_780_000_000.0
INV = "a" * 32


def record(n: int, at: float | None = None) -> JournalRecord:
    return JournalRecord(f"[2026-05-28 20:26:40 TP0] Decode batch, #token: {n}".encode(), T0 + n if at is None else at,
                         pid=101, invocation_id=INV)


class FailingFollower:
    """A follower over a list of entries whose reads fail as scripted (an OSError instead of a batch)."""

    def __init__(self, entries: list[JournalRecord], failures: list[OSError | None]) -> None:
        self.entries, self.failures = entries, failures
        self.at = 0  # index of the next entry
        self.cursor: str | None = None
        self.read_error: OSError | None = None
        self.behind, self.at_end, self.position = False, True, None
        self.rejected: dict[str, int] = {}
        self.reopened: list[str | None] = []
        self.found = True  # whether a reopen finds the cursor
        self.catch_up: list[Any] | None = None
        self.sought: list[str] = []

    def read(self, limit: int = 1000) -> list[JournalRecord]:
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            self.read_error, self.behind = failure, True
            return []
        out = self.entries[self.at:self.at + limit]
        self.at += len(out)
        if out:
            self.cursor, self.position = f"c{self.at}", out[-1].realtime
        self.behind = self.at_end = False
        self.at_end = self.at >= len(self.entries)
        return out

    def reopen(self) -> bool:
        self.reopened.append(self.cursor)
        self.read_error = None
        if self.cursor is None:
            self.at = len(self.entries)  # (at the tail)
        return self.found

    def fileno(self) -> int:
        return -1

    def catch_up_entries(self, since: float, runs: object, end: ReadEnd) -> Generator[list[Any], None, None] | None:
        if self.catch_up is None:
            return None
        return self._batches(end)

    def _batches(self, end: ReadEnd) -> Generator[list[Any], None, None]:
        assert self.catch_up is not None
        for n, batch in enumerate(self.catch_up):
            if isinstance(batch, BaseException):
                raise batch
            end.batch = f"b{n}"
            yield batch
        end.cursor = "end"

    def seek_cursor(self, cursor: str) -> bool:
        self.sought.append(cursor)
        return True


def feed_for(follower: FailingFollower) -> JournalFeedSource:
    return JournalFeedSource(follower, Pipeline(Config(unit=UNIT), default_year=2026), UNIT,  # type: ignore[arg-type]
                       FakeClock(wall=T0 + 100), lambda: None)


def test_a_read_that_fails_with_ebadmsg_reopens_at_the_cursor_and_reads_that_batch_again() -> None:
    entries = [record(n) for n in range(600)]
    follower = FailingFollower(entries, [None, OSError(errno.EBADMSG, "Bad message"), None,
                                         OSError(errno.ESTALE, "Stale file handle"), None])
    feed = feed_for(follower)
    while feed.read():
        pass
    assert feed.pipeline.entries == 600  # nothing lost, nothing read twice
    assert follower.reopened == ["c250", "c500"] and feed.reopens == {"read_error": 2}
    assert feed.lost_unread == 0


def test_an_entry_that_never_reads_sends_the_reader_to_the_end_and_counts_lines_lost() -> None:
    follower = FailingFollower([record(n) for n in range(300)],
                               [None, *[OSError(errno.EBADMSG, "Bad message")] * SAME_CURSOR_ERRORS])
    feed = feed_for(follower)
    for _ in range(10):
        if not feed.read():
            break
    assert feed.lost_unread == 1 and follower.reopened[-1] is None  # (None: at the journal's end)
    current = feed.pipeline.current()
    assert current is not None and current.lines_lost == 1 and current.lost_cause == "journal_vacuumed"


def test_a_cursor_vacuumed_while_entries_were_unread_is_lines_lost_alerted_as_such() -> None:
    follower = FailingFollower([record(n) for n in range(600)], [])
    feed = feed_for(follower)
    assert feed.read()  # 250 of 600: behind
    follower.found = False
    assert feed.reopen("changed")
    assert feed.lost_unread == 1 and feed.reopens == {"changed": 1}
    judgement = feed.pipeline.judge(T0 + 300)[-1]
    [lost] = [v for v in judgement.verdicts if v.kind == VerdictKind.LINES_LOST]
    assert lost.cause == "journal_vacuumed" and "before phasewatch read them" in lost.message


def test_a_cursor_vacuumed_after_everything_was_read_loses_nothing() -> None:
    follower = FailingFollower([record(n) for n in range(10)], [])
    feed = feed_for(follower)
    assert feed.read() and not feed.read()
    follower.found = False
    assert feed.reopen("changed") and feed.lost_unread == 0


def test_a_catch_up_that_fails_midway_hands_the_rest_to_the_follower_after_its_last_batch() -> None:
    follower = FailingFollower([], [])
    follower.catch_up = [[record(1)], [record(2)], OSError(errno.EBADMSG, "Bad message"), [record(3)]]
    feed = feed_for(follower)
    assert catch_up(feed, T0)
    assert feed.pipeline.entries == 2 and follower.sought == ["b1"] and follower.cursor == "b1"
    assert feed.reopens == {"catch_up_error": 1} and not follower.at_end


def test_a_catch_up_that_fails_at_once_leaves_the_start_up_to_the_follower() -> None:
    follower = FailingFollower([], [])
    follower.catch_up = [OSError(errno.ENOENT, "No such file or directory")]
    feed = feed_for(follower)
    assert not catch_up(feed, T0) and feed.pipeline.entries == 0


def test_the_judge_clock_is_the_last_entry_read_while_behind_and_at_most_max_judge_lag_late() -> None:
    class Feed:
        position: float | None = T0
        behind = 0.0

        def lag(self, wall: float) -> float:
            return self.behind

    clock, feed = FakeClock(wall=T0 + 60), Feed()
    judged = JudgedClock(clock, feed)
    assert judged.wall() == T0 + 60  # caught up: now
    feed.behind = 60.0
    assert judged.wall() == T0
    clock.jump(rebuild.MAX_JUDGE_LAG)
    assert judged.wall() == clock.wall() - rebuild.MAX_JUDGE_LAG
    assert judged.monotonic() == clock.monotonic()


def test_start_telling_extends_the_start_timeout_while_the_rebuild_reads() -> None:
    sent: list[str] = []
    clock = FakeClock()
    tell = StartTelling(sent.append, clock, watchdog=True)
    tell()
    assert sent == []
    clock.jump(rebuild.EXTEND_EVERY)
    tell()
    tell()
    assert sent == [f"EXTEND_TIMEOUT_USEC={int(rebuild.EXTEND_BY * 1e6)}\nWATCHDOG=1"]


def test_a_rank_silent_in_what_was_read_during_a_flood_is_not_late_and_its_deadline_is_judged_as_read(
        tmp_path: Path) -> None:
    app, journal, _, alerter, _, clock = daemon(tmp_path, STALL_CONFIG)  # weight_load: deadline 60 s
    load_begins(journal)
    app.start()
    # Another process of the unit floods: 40,000 lines over 120 s of journal time, read long after.
    journal.push(*(line(f"W1129 08:00:00.{k:06d} 999 noise.cc:12] NCCL_ASYNC warning {k:x}", DT0 + 120 * k / 40_000,
                        pid=999) for k in range(40_000)))
    clock.jump(200)
    app.step(max_wait=0)  # one bounded step: 10,000 entries, 30 s of journal time
    assert app.journal.lag(clock.wall()) > rebuild.BEHIND_SLACK
    assert alerter.sent == []  # the ranks are 30 s into weight_load in what was read, not 200 s
    app.step(max_wait=0)
    app.step(max_wait=0)  # 90 s read: past the deadline, still behind
    assert app.journal.lag(clock.wall()) > rebuild.BEHIND_SLACK
    [alert] = alerter.sent
    assert "weight_load" in alert["MESSAGE"]


def test_a_journal_that_cannot_be_reopened_is_tried_again_and_the_old_reader_stays_polled(tmp_path: Path) -> None:
    follower = JournalFollower(UNIT, str(tmp_path))  # (an empty journal directory)
    fd = follower.fileno()
    clock = FakeClock(wall=T0)
    feed = JournalFeedSource(follower, Pipeline(Config(unit=UNIT)), UNIT, clock, lambda: None)

    def refuse() -> None:
        raise JournalError("cannot open the journal: Permission denied")

    follower.open = refuse  # type: ignore[method-assign]
    assert not feed.reopen("changed")
    assert follower.fileno() == fd and feed.reopen_at is not None and feed.reopens == {}
    del follower.open  # (the class's again)
    clock.jump(2)
    list(feed.collect(Instant(T0 + 2, 0.0), []))
    assert feed.reopen_at is None and feed.reopens == {"retry": 1}
