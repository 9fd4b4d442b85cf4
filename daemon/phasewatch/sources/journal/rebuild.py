"""Edge: how the daemon rebuilds the current start-up at its start, and the clock it judges by while
it reads behind the journal.

A start-up that has served for weeks has millions of entries, and a rebuild that reads them all does
not end within the unit's start timeout (docs/operations.md). What a judgement needs is the start-up's
beginning up to ready (its phases, ranks, ready time) and its recent entries (its state now), so the
rebuild reads from the start to ready (at most START_ENTRIES, or START_SECONDS: entries forged in the
unit's name before ready cost at most that, PROBE-S3 L-4), then skips to the recent window: the
last RECENT_ENTRIES entries (one to two seconds of reading; at 10 lines/s half an hour of serving).
While it reads it tells systemd to wait (EXTEND_TIMEOUT_USEC, and WATCHDOG=1). A start the journal
no longer holds (its oldest entry is younger than the start-up) is lines lost.

While the reading is more than BEHIND_SLACK behind the journal's newest entries (a flood), the
start-up is judged at the time of the last entry read (`JudgedClock`), not now: a rank that is
silent in what was read is not silent; at most MAX_JUDGE_LAG behind now, so a flood that never ends
(forged entries included) delays a verdict by that much at most.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from ...clock import Clock
from ...durations import format_duration
from ...records import Event, EventKind
from ...stages.s3_track.snapshot import UP_STATES
from .catch_up import catch_up
from .journal_feed import JournalFeedSource

logger = logging.getLogger(__name__)

RECENT_ENTRIES = 20_000
START_ENTRIES = 1_000_000
START_SECONDS = 30.0
EXTEND_EVERY = 5.0  # seconds between EXTEND_TIMEOUT_USEC while reading
EXTEND_BY = 30.0
FOLLOW_AT_START = 2.0  # seconds the follower reads on before READY=1 (then the loop reads on)
BEHIND_SLACK = 2.0
MAX_JUDGE_LAG = 300.0
HEAD_SLACK = 1.0  # PID 1's "Starting" entry follows the unit's start by milliseconds


class Lagging(Protocol):
    def lag(self, wall: float) -> float: ...

    @property
    def position(self) -> float | None: ...


class Backward(Protocol):
    def realtime_back(self, entries: int) -> float | None: ...


def recent_since(follower: Backward) -> float | None:
    """The start of the recent window: the RECENT_ENTRIES-th entry before the journal's end (None:
    the journal holds no more of the unit, nothing to skip). `follower` is left anywhere: seek it."""
    return follower.realtime_back(RECENT_ENTRIES)


class StartTelling:
    """Tells systemd, while the rebuild reads, that the start goes on (at most every EXTEND_EVERY)."""

    def __init__(self, send: Callable[[str], None], clock: Clock, watchdog: bool) -> None:
        self.send, self.clock, self.watchdog = send, clock, watchdog
        self.last = clock.monotonic()

    def __call__(self) -> None:
        now = self.clock.monotonic()
        if now - self.last < EXTEND_EVERY:
            return
        self.last = now
        message = f"EXTEND_TIMEOUT_USEC={int(EXTEND_BY * 1e6)}"
        self.send(message + "\nWATCHDOG=1" if self.watchdog else message)


class JudgedClock:
    """The judging clock (judge.py, the actor): wall time, or the last entry read while the reading is behind."""

    def __init__(self, clock: Clock, feed: Lagging) -> None:
        self.clock, self.feed = clock, feed

    def monotonic(self) -> float:
        return self.clock.monotonic()

    def wall(self) -> float:
        wall = self.clock.wall()
        position = self.feed.position
        if position is None or self.feed.lag(wall) <= BEHIND_SLACK:
            return wall
        return min(wall, max(position, wall - MAX_JUDGE_LAG))


def rebuild_startup(journal: JournalFeedSource, since: float, started_at: float, invocation: str | None,
                    telling: Callable[[], None]) -> None:
    """The start-up's entries from `since` up to ready, then from the recent window on (read in C;
    weeks of serving between are skipped). A start the journal no longer holds is lines lost."""
    follower, pipeline, wall = journal.follower, journal.pipeline, journal.clock.wall()
    head = follower.head_realtime()
    forgotten = head is not None and head > started_at + HEAD_SLACK
    if forgotten and invocation:
        pipeline.apply(Event(EventKind.INVOCATION_START, started_at, invocation_id=invocation), wall)
    recent = recent_since(follower)
    skip_to = since if recent is None else recent  # (nothing to skip: enough() never ends the read)
    follower.seek_realtime(since)
    until = journal.clock.monotonic() + START_SECONDS

    def enough() -> bool:  # of the start-up's beginning: ready (or very long), and more after it
        position, current = follower.position, pipeline.current()
        return position is not None and position < skip_to and (
            (current is not None and current.state in UP_STATES) or pipeline.entries >= START_ENTRIES
            or journal.clock.monotonic() >= until)

    if not catch_up(journal, since, enough, telling):
        while journal.read() and not enough():
            telling()
        journal.stopped = enough()
    if journal.stopped:
        current = pipeline.current()
        logger.info("[%s] read the start-up up to %s; skipping to its last %d entries", journal.unit,
                    current.state.value if current is not None else "?", RECENT_ENTRIES)
        follower.seek_realtime(skip_to)
        if not catch_up(journal, skip_to, between=telling):
            follower.cursor = None  # (a reopen goes on from here, not from before the skip)
    if forgotten and head is not None:
        journal.lost(f"the journal's oldest entry is {format_duration(head - started_at)} younger than the "
                     "start-up: its beginning was vacuumed before phasewatch read it")
