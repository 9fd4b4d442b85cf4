"""Edge: read one unit's entries from a journal (the local one, or a directory copied from a host).

The same low-level reader as the daemon's (`follow.JournalFollower`): `_Reader._next()` and
`_get()` of the few fields phasewatch reads, MESSAGE always as bytes (decoded later, U+FFFD for
bad UTF-8), data threshold 0. python-systemd's iterating `journal.Reader` converts every field
of every entry and was the slowest stage of `replay --unit` (docs/performance.md).
"""

from __future__ import annotations

from typing import Iterator

from ..errors import JournalError, JournalUnavailable
from ..records import JournalRecord
from .follow import JournalFollower

BATCH = 4096




def read_unit(unit: str, directory: str | None = None, since: float | None = None,
              rejected: dict[str, int] | None = None) -> Iterator[JournalRecord]:
    """Entries the unit's processes wrote, PID 1 wrote about it, and journald's notices about it.
    Entries that only claim to be (trust.py) are left out and, with `rejected`, counted there by reason."""
    try:
        follower = JournalFollower(unit, directory)
    except JournalError as exc:
        where = f" in {directory}" if directory else ""
        raise JournalUnavailable(str(exc).replace("the journal", f"the journal{where}", 1)) from None
    try:
        if since is not None:
            follower.seek_realtime(since)
        else:
            follower.seek_head()
        while (batch := follower.read(BATCH)) or follower.behind:
            yield from batch
    finally:
        follower.close()
        if rejected is not None:
            for reason, count in follower.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count


class UnitRecords:
    """`read_unit` that can be iterated more than once (each pass reads the journal again), so a
    replay streams the journal instead of holding every record in memory."""

    def __init__(self, unit: str, directory: str | None = None, since: float | None = None) -> None:
        self.unit, self.directory, self.since = unit, directory, since
        self.rejected: dict[str, int] = {}  # of the last whole pass

    def __iter__(self) -> Iterator[JournalRecord]:
        self.rejected = {}
        return read_unit(self.unit, self.directory, self.since, self.rejected)
