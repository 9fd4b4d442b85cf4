"""Source: the watched unit's journal, followed. What `collect` reads it returns (`JournalBatch`es,
and LINES_LOST events), one batch at a time as it reads: the loop feeds each through the pipeline's
line stages (`Pipeline.feed`) and looks for a new start-up before the next is read, so the step's
READ_TIME bound counts the feeding, as the reading's pace needs. The start-up's rebuild (`read`,
catch_up.py with the C reader) feeds the pipeline itself. The source counts entries per start-up
and reopens the journal at its cursor when it
changed under it (INVALIDATE) or a read failed (EBADMSG, ENOENT, ESTALE of a file archived or deleted
during the read), counted in `reopens`. A cursor the reopened journal no longer holds, while entries
were left unread, is lines lost (`lost_unread`: the tracker's LINES_LOST). `lag` says how far behind
the journal's newest entries the reading is."""

from __future__ import annotations

import ctypes
import logging
import math
from typing import Callable, Iterator, Sequence

from ...clock import Clock
from ...errors import JournalError
from ...pipeline import Pipeline
from ...records import Event, EventKind, JournalRecord
from ...stages.s4_judge.policy import LOST_UNREAD
from ..base import Instant, JournalBatch, Seen
from .follow import JournalFollower
from .journal_reader import INVALIDATE

logger = logging.getLogger(__name__)

READ_BATCH = 250
READS_PER_STEP = 40  # bounded, so the watchdog is fed during a flood
# A step reads for at most this long, then publishes what it read (the status shows a burst's entries
# as they come, not a whole backlog late) and the next step comes at once (`entries_left`).
READ_TIME = 0.025
KEPT_COUNTS = 16
# The memory the reading took is given back (`release_memory`) once caught up after this many entries
# (minutes of serving lines, or a burst while it goes on), and after RELEASE_QUIET seconds without
# entries when at least QUIET_RELEASE_AFTER were read (the end of a burst: one wake-up, a deadline).
RELEASE_AFTER = 10_000
QUIET_RELEASE_AFTER = 1_000
RELEASE_QUIET = 1.0
# A read that fails this many times in a row at one cursor is not a file changing under it: the
# reader goes on at the journal's end (what lay between is lines lost). A reopen that fails is tried
# again after REOPEN_RETRY seconds.
SAME_CURSOR_ERRORS = 3
REOPEN_RETRY = 1.0


class JournalFeedSource:
    def __init__(self, follower: JournalFollower, pipeline: Pipeline, unit: str, clock: Clock,
                 after_batch: Callable[[], None]) -> None:
        self.follower = follower
        self.pipeline = pipeline
        self.unit = unit
        self.clock = clock
        self.after_batch = after_batch  # the loop notices a new start-up between batches
        self.entries_by_invocation: dict[str, int] = {}
        self.last_entries_at = -math.inf  # monotonic: when the journal last gave entries
        self.read_any = False  # in the last collect
        self.entries_left = False  # the last collect stopped on its bound, not at the journal's end
        self.pids: set[int] = set()  # the `_PID`s of the entries read since the daemon last took them
        self.read_since_release = 0
        self.last_invocation: str | None = None  # of the catch-up's last entry
        self.reopens: dict[str, int] = {}  # why ("changed", "read_error") -> reopens
        self.lost_unread = 0  # times the journal dropped entries not yet read
        self.stopped = False  # the last catch-up ended on its `stop`
        self.reopen_at: float | None = None  # monotonic: a reopen that failed is tried again then
        self._errors_at: tuple[str | None, int] = (None, 0)  # (cursor, failed reads there in a row)
        self._news: list[Event] | None = None  # during a collect: the losses it returns (else applied)

    def fds(self) -> Sequence[int]:
        return (self.follower.fileno(),)

    def next_deadline(self, now: Instant) -> float | None:
        if self.reopen_at is not None:
            return self.reopen_at
        if self.follower.behind or self.entries_left:
            return now.monotonic
        if self.read_since_release >= QUIET_RELEASE_AFTER:
            return self.last_entries_at + RELEASE_QUIET
        return None

    def collect(self, now: Instant, readable: Sequence[int]) -> Iterator[Seen]:
        """What the journal gives, read as the caller takes it: a batch only once the one before it was
        fed (READ_TIME counts the feeding; a new start-up is noticed between batches)."""
        self.read_any = self.entries_left = False
        self._news = news = list[Event]()
        try:
            if self._reopened(readable):
                until = self.clock.monotonic() + READ_TIME
                for _ in range(READS_PER_STEP):
                    records = self._read()
                    yield from _taken(news)
                    if records is False:
                        return
                    if isinstance(records, list):
                        yield JournalBatch(records, self.clock.wall())
                    self.read_any = True
                    if self.clock.monotonic() >= until:
                        break
                self.entries_left = True
            yield from _taken(news)
        finally:
            self._news = None

    def _reopened(self, readable: Sequence[int]) -> bool:
        """Reopened if due (a retry, or the journal changed under the reader); False: cannot read now."""
        if self.reopen_at is not None:
            return self.clock.monotonic() >= self.reopen_at and self.reopen("retry")
        if self.follower.fileno() in readable and _changed(self.follower):
            logger.info("[%s] journal changed (rotation, vacuum or journald restart): reopening at the cursor",
                        self.unit)
            return self.reopen("changed")
        return True

    def take_pids(self) -> set[int]:
        pids, self.pids = self.pids, set()
        return pids

    def reopen(self, why: str) -> bool:
        """The follower reopened at its cursor (counted by `why`); a cursor that is gone while entries
        were left unread (the file vacuumed before it was read) is lines lost. False when the journal
        cannot be opened now: tried again after REOPEN_RETRY."""
        unread = not self.follower.at_end
        try:
            found = self.follower.reopen()
        except (OSError, JournalError) as exc:
            if self.reopen_at is None:
                logger.error("[%s] cannot reopen the journal (%s): trying again every %gs", self.unit, exc,
                             REOPEN_RETRY)
            self.reopen_at = self.clock.monotonic() + REOPEN_RETRY
            return False
        self.reopen_at = None
        self.reopens[why] = self.reopens.get(why, 0) + 1
        if not found and unread:
            self.lost(f"the journal no longer holds the entry after which phasewatch was reading "
                      f"({why}): entries it had not read were vacuumed")
        return True

    def lost(self, text: str) -> None:
        """The journal dropped entries of the unit before they were read: LINES_LOST for the
        current start-up (alerted once per start-up), logged."""
        self.lost_unread += 1
        logger.warning("[%s] lines lost: %s", self.unit, text)
        event = Event(EventKind.LINES_LOST, self.follower.position, count=1, cause=LOST_UNREAD, text=text)
        if self._news is not None:
            self._news.append(event)  # (returned by the collect under way)
        else:
            self.pipeline.apply(event, self.clock.wall())

    @property
    def position(self) -> float | None:
        """Wall seconds of the last entry looked at."""
        return self.follower.position

    def lag(self, wall: float) -> float:
        """Seconds the reading is behind: 0 when the last read reached the journal's end, else from
        the last entry looked at to `wall` (the newest entries are about that new)."""
        position = self.follower.position
        if (self.follower.at_end and not self.entries_left) or position is None:
            return 0.0
        return max(wall - position, 0.0)

    def document(self, wall: float) -> dict[str, object]:
        """How the reading stands, for the status file, `/status` and the metrics: seconds behind
        (whole seconds: the status file is written when it changes), reopens by why, losses."""
        return {"behind_seconds": math.floor(self.lag(wall)), "reopens": dict(self.reopens),
                "lost_unread": self.lost_unread}

    def read(self) -> bool:
        """One batch read and fed to the pipeline (the start-up's rebuild; the loop's `collect` returns
        its batches instead). False at the journal's end."""
        records = self._read()
        if isinstance(records, bool):
            return records
        wall, feed = self.clock.wall(), self.pipeline.feed
        for record in records:
            feed(record, wall)
        self.after_batch()
        return True

    def _read(self) -> list[JournalRecord] | bool:
        """One batch read and counted; True/False when none came: more to come, or the end (or a read
        that failed and could not go on)."""
        records = self.follower.read(READ_BATCH)
        if self.follower.read_error is not None:
            return self._read_failed()
        if not records:
            return self.follower.behind  # only forged entries in that read: more to come
        self.last_entries_at = self.clock.monotonic()
        counts = self.entries_by_invocation
        for record in records:
            if record.invocation_id is not None:
                counts[record.invocation_id] = counts.get(record.invocation_id, 0) + 1
        self.pids.update({record.pid for record in records if record.pid is not None})
        self.read_since_release += len(records)
        self.forget_old_counts()
        return records

    def _read_failed(self) -> bool:
        """A read failed (its batch not taken): reopen at the cursor and read on; the same cursor
        failing SAME_CURSOR_ERRORS times in a row is an entry that cannot be read: go on at the end."""
        error, cursor = self.follower.read_error, self.follower.cursor
        last, count = self._errors_at
        count = count + 1 if cursor == last else 1
        self._errors_at = (cursor, count)
        logger.warning("[%s] reading the journal failed (%s): reopening at the cursor", self.unit, error)
        if count >= SAME_CURSOR_ERRORS:
            self.follower.cursor, self.follower.at_end = None, False
            self._errors_at = (None, 0)
            if not self.reopen("read_error"):
                return False
            self.lost(f"the journal cannot be read after one entry ({error}): phasewatch went on at its end")
            return True
        return self.reopen("read_error")

    def forget_old_counts(self) -> None:
        counts = self.entries_by_invocation
        if len(counts) > KEPT_COUNTS:
            for stale in list(counts)[:-KEPT_COUNTS]:
                del counts[stale]

    def release_memory(self) -> bool:
        """Once caught up after RELEASE_AFTER entries, or quiet for RELEASE_QUIET after
        QUIET_RELEASE_AFTER: the journal file pages the reader mapped are given back (the reader
        stays where it is: nothing lost or read twice; journal_pages.py) and glibc's free heap is
        handed back to the kernel. True if it did. (Measured on a 50,000-line burst: the mapped
        journal pages were nearly all of the growth; gc.collect() gave nothing back,
        docs/performance.md.)"""
        read = self.read_since_release
        if read == 0 or self.entries_left or self.follower.behind:
            return False
        quiet = self.clock.monotonic() - self.last_entries_at >= RELEASE_QUIET
        if read < RELEASE_AFTER and not (quiet and read >= QUIET_RELEASE_AFTER):
            return False
        self.read_since_release = 0
        self.follower.drop_pages()
        _malloc_trim()
        return True


def _changed(follower: JournalFollower) -> bool:
    try:
        return follower.wait_result() == INVALIDATE
    except OSError:
        return True  # (its files changed while it looked at them)


def _taken(news: list[Event]) -> list[Event]:
    taken = news[:]
    news.clear()
    return taken


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        pass
