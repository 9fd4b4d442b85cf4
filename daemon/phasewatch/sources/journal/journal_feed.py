"""Source: the watched unit's journal, followed. Its entries go through the pipeline's line stages
(`Pipeline.feed`); the source counts them per start-up and reopens the journal at its cursor when it
changed under it (INVALIDATE) or a read failed (EBADMSG, ENOENT, ESTALE of a file archived or deleted
during the read), counted in `reopens`. A cursor the reopened journal no longer holds, while entries
were left unread, is lines lost (`lost_unread`: the tracker's LINES_LOST). `lag` says how far behind
the journal's newest entries the reading is."""

from __future__ import annotations

import ctypes
import logging
import math
from typing import Callable, Sequence

from ...clock import Clock
from ...errors import JournalError, JournalUnavailable
from ...pipeline import Pipeline
from ...records import Entry, Event, EventKind, UnitRun
from ...stages.s4_judge.policy import LOST_UNREAD
from ..base import Instant
from .follow import JournalFollower
from .journal_reader import INVALIDATE, ReadEnd

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
        self.reopens: dict[str, int] = {}  # why ("changed", "read_error") -> reopens
        self.lost_unread = 0  # times the journal dropped entries not yet read
        self.stopped = False  # the last catch-up ended on its `stop`
        self.reopen_at: float | None = None  # monotonic: a reopen that failed is tried again then
        self._errors_at: tuple[str | None, int] = (None, 0)  # (cursor, failed reads there in a row)

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

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        self.read_any = self.entries_left = False
        if self.reopen_at is not None:
            if self.clock.monotonic() < self.reopen_at or not self.reopen("retry"):
                return []
        elif self.follower.fileno() in readable and self._changed():
            logger.info("[%s] journal changed (rotation, vacuum or journald restart): reopening at the cursor",
                        self.unit)
            if not self.reopen("changed"):
                return []
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

    def _changed(self) -> bool:
        try:
            return self.follower.wait_result() == INVALIDATE
        except OSError:
            return True  # (its files changed while it looked at them)

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
        self.pipeline.apply(Event(EventKind.LINES_LOST, self.follower.position, count=1, cause=LOST_UNREAD,
                                  text=text), self.clock.wall())

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
        records = self.follower.read(READ_BATCH)
        if self.follower.read_error is not None:
            return self._read_failed()
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

    def catch_up(self, since: float, stop: Callable[[], bool] | None = None,
                 between: Callable[[], None] | None = None) -> bool:
        """The unit's entries from `since` (wall seconds) to the journal's end, read by `replay --unit`'s
        C reader (`JournalFollower.catch_up_entries`: runs, a read-ahead thread) and fed and counted as
        `read` feeds and counts them, the loop told of each change of start-up (`after_batch`); the
        follower then reads on after the last. `stop`, asked after each batch, ends it early (True:
        `stopped` is set, and the follower is left where the caller puts it); `between` runs after
        each batch (the daemon tells systemd it is still starting). False, having read nothing,
        without the C reader or when it cannot open the journal: the follower reads them. An OSError
        of the journal midway (a file archived or vacuumed under it) leaves the rest to the follower,
        after the last batch taken."""
        end, failed = ReadEnd(), False
        self.stopped = False
        batches = self.follower.catch_up_entries(since, self.pipeline.run_shape(), end)
        if batches is None:
            return False
        try:
            try:
                first = next(batches, None)
            except (JournalUnavailable, OSError) as exc:
                logger.warning("[%s] the catch-up reader failed (%s): the follower reads the start-up", self.unit, exc)
                return False
            batch = first
            while batch is not None:
                self._take(batch)
                if between is not None:
                    between()
                if stop is not None and stop():
                    self.stopped = True
                    return True
                try:
                    batch = next(batches, None)
                except OSError as exc:
                    self.reopens["catch_up_error"] = self.reopens.get("catch_up_error", 0) + 1
                    logger.warning("[%s] the catch-up reader failed (%s): the follower reads on after the last "
                                   "entry taken", self.unit, exc)
                    end.cursor, failed = end.batch, True
                    break
        finally:
            batches.close()  # (the read-ahead thread ends with it)
        if end.cursor is not None:
            if not self.follower.seek_cursor(end.cursor) and failed:
                self.lost("the journal no longer holds the last entry the catch-up read: entries after it "
                          "were vacuumed before they were read")
            self.follower.cursor = end.cursor
        self.follower.at_end = not failed
        return True

    def _take(self, batch: list[Entry]) -> None:
        """A catch-up batch through the pipeline, counted; `after_batch` at its end and wherever the
        start-up changes in it (as if a follower's read had ended there)."""
        counts, start, last = self.entries_by_invocation, 0, self._last_invocation
        final = batch[-1] if batch else None
        if isinstance(final, UnitRun):
            self.follower.position = final.realtimes[-1]
        elif final is not None:
            self.follower.position = final.realtime
        for index, entry in enumerate(batch):
            # (a line, a run and a record name their writer alike)
            invocation, pid = entry.invocation_id, entry.pid
            many = len(entry.messages) if isinstance(entry, UnitRun) else 1
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
