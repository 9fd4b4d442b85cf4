"""The daemon's catch-up at its start (rebuild.py): the unit's entries from a time to the
journal's end, read by `replay --unit`'s C reader (`JournalFollower.catch_up_entries`: runs, a
read-ahead thread) and fed to the pipeline and counted as the feed's `read` feeds and counts a batch,
the loop told of each change of start-up (`after_batch`); the follower then reads on after the last."""

from __future__ import annotations

import logging
from typing import Callable

from ...errors import JournalUnavailable
from ...records import Entry, UnitRun
from .journal_feed import JournalFeedSource
from .journal_reader import ReadEnd

logger = logging.getLogger(__name__)


def catch_up(feed: JournalFeedSource, since: float, stop: Callable[[], bool] | None = None,
             between: Callable[[], None] | None = None) -> bool:
    """The unit's entries from `since` (wall seconds) to the journal's end, fed and counted. `stop`, asked after each
    batch, ends it early (True: the feed's `stopped` is set, and the follower is left where the caller puts it);
    `between` runs after each batch (the daemon tells systemd it is still starting). False, having read nothing,
    without the C reader or when it cannot open the journal: the follower reads them. An OSError of the journal
    midway (a file archived or vacuumed under it) leaves the rest to the follower, after the last batch taken."""
    end, failed = ReadEnd(), False
    feed.stopped = False
    batches = feed.follower.catch_up_entries(since, feed.pipeline.run_shape(), end)
    if batches is None:
        return False
    try:
        try:
            first = next(batches, None)
        except (JournalUnavailable, OSError) as exc:
            logger.warning("[%s] the catch-up reader failed (%s): the follower reads the start-up", feed.unit, exc)
            return False
        batch = first
        while batch is not None:
            _take(feed, batch)
            if between is not None:
                between()
            if stop is not None and stop():
                feed.stopped = True
                return True
            try:
                batch = next(batches, None)
            except OSError as exc:
                feed.reopens["catch_up_error"] = feed.reopens.get("catch_up_error", 0) + 1
                logger.warning("[%s] the catch-up reader failed (%s): the follower reads on after the last "
                               "entry taken", feed.unit, exc)
                end.cursor, failed = end.batch, True
                break
    finally:
        batches.close()  # (the read-ahead thread ends with it)
    if end.cursor is not None:
        if not feed.follower.seek_cursor(end.cursor) and failed:
            feed.lost("the journal no longer holds the last entry the catch-up read: entries after it "
                      "were vacuumed before they were read")
        feed.follower.cursor = end.cursor
    feed.follower.at_end = not failed
    return True


def _take(feed: JournalFeedSource, batch: list[Entry]) -> None:
    """A catch-up batch through the pipeline, counted; `after_batch` at its end and wherever the
    start-up changes in it (as if a follower's read had ended there)."""
    counts, start, last = feed.entries_by_invocation, 0, feed.last_invocation
    final = batch[-1] if batch else None
    if isinstance(final, UnitRun):
        feed.follower.position = final.realtimes[-1]
    elif final is not None:
        feed.follower.position = final.realtime
    for index, entry in enumerate(batch):
        # (a line, a run and a record name their writer alike)
        invocation, pid = entry.invocation_id, entry.pid
        many = len(entry.messages) if isinstance(entry, UnitRun) else 1
        if invocation is not None:
            if invocation != last and last is not None and index > start:
                _feed_part(feed, batch[start:index])
                start = index
            last = invocation
            counts[invocation] = counts.get(invocation, 0) + many
        if pid is not None:
            feed.pids.add(pid)
        feed.read_since_release += many
    feed.last_invocation = last
    _feed_part(feed, batch[start:])


def _feed_part(feed: JournalFeedSource, entries: list[Entry]) -> None:
    feed.pipeline.feed_entries(entries, feed.clock.wall())
    feed.last_entries_at = feed.clock.monotonic()
    feed.forget_old_counts()
    feed.after_batch()
