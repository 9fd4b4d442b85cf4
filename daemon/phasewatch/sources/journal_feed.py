"""Source: the watched unit's journal, followed. Its entries go through the pipeline's line stages
(`Pipeline.feed`); the source counts them per start-up and reopens the journal when it changed under it."""

from __future__ import annotations

import ctypes
import logging
import math
from typing import Callable, Sequence

from ..clock import Clock
from ..errors import JournalUnavailable
from ..pipeline import Pipeline
from ..records import Entry, Event, JournalRecord
from .base import Instant
from .follow import INVALIDATE, JournalFollower, ReadEnd

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


class JournalFeed:
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
        self._last_invocation: str | None = None  # of the catch-up's last entry

    def fds(self) -> Sequence[int]:
        return (self.follower.fileno(),)

    def next_deadline(self, now: Instant) -> float | None:
        if self.follower.behind or self.entries_left:
            return now.monotonic
        if self.read_since_release >= QUIET_RELEASE_AFTER:
            return self.last_entries_at + RELEASE_QUIET
        return None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        if self.follower.fileno() in readable and self.follower.wait_result() == INVALIDATE:
            logger.info("[%s] journal changed (rotation, vacuum or journald restart): reopening at the cursor",
                        self.unit)
            self.follower.reopen()
        self.read_any = self.entries_left = False
        until = self.clock.monotonic() + READ_TIME
        for _ in range(READS_PER_STEP):
            if not self.read():
                return []
            self.read_any = True
            if self.clock.monotonic() >= until:
                break
        self.entries_left = True
        return []

    def take_pids(self) -> set[int]:
        pids, self.pids = self.pids, set()
        return pids

    def read(self) -> bool:
        records = self.follower.read(READ_BATCH)
        if not records:
            return self.follower.behind  # only forged entries in that read: more to come
        wall, self.last_entries_at = self.clock.wall(), self.clock.monotonic()
        counts = self.entries_by_invocation
        for record in records:
            self.pipeline.feed(record, wall)
            if record.invocation_id is not None:
                counts[record.invocation_id] = counts.get(record.invocation_id, 0) + 1
        self.pids.update({record.pid for record in records if record.pid is not None})
        self.read_since_release += len(records)
        self._forget_old_counts()
        self.after_batch()
        return True

    def catch_up(self, since: float) -> bool:
        """The unit's entries from `since` (wall seconds) to the journal's end, read by `replay --unit`'s
        C reader (`JournalFollower.catch_up_entries`: runs, a read-ahead thread) and fed and counted as
        `read` feeds and counts them, the loop told of each change of start-up (`after_batch`); the
        follower then reads on after the last. False, having read nothing, without the C reader or
        when it cannot open the journal: the follower reads them."""
        end = ReadEnd()
        batches = self.follower.catch_up_entries(since, self.pipeline.run_shape(), end)
        if batches is None:
            return False
        try:
            try:
                first = next(batches, None)
            except JournalUnavailable as exc:
                logger.warning("[%s] the catch-up reader failed (%s): the follower reads the start-up", self.unit, exc)
                return False
            batch = first
            while batch is not None:
                self._take(batch)
                batch = next(batches, None)
        finally:
            batches.close()  # (the read-ahead thread ends with it)
        if end.cursor is not None:
            self.follower.seek_cursor(end.cursor)
            self.follower.cursor = end.cursor
        return True

    def _take(self, batch: list[Entry]) -> None:
        """A catch-up batch through the pipeline, counted; `after_batch` at its end and wherever the
        start-up changes in it (as if a follower's read had ended there)."""
        counts, start, last = self.entries_by_invocation, 0, self._last_invocation
        for index, entry in enumerate(batch):
            if isinstance(entry, JournalRecord):
                invocation, pid, many = entry.invocation_id, entry.pid, 1
            else:
                invocation, pid = entry[3], entry[2]
                many = len(entry[0]) if isinstance(entry[0], list) else 1
            if invocation is not None:
                if invocation != last and last is not None and index > start:
                    self._feed_part(batch[start:index])
                    start = index
                last = invocation
                counts[invocation] = counts.get(invocation, 0) + many
            if pid is not None:
                self.pids.add(pid)
            self.read_since_release += many
        self._last_invocation = last
        self._feed_part(batch[start:])

    def _feed_part(self, entries: list[Entry]) -> None:
        self.pipeline.feed_entries(entries, self.clock.wall())
        self.last_entries_at = self.clock.monotonic()
        self._forget_old_counts()
        self.after_batch()

    def _forget_old_counts(self) -> None:
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


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        pass
