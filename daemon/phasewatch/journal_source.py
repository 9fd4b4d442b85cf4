"""Edge: read one unit's entries from a journal (the local one, or a directory copied from a host)."""

from __future__ import annotations

import datetime as dt
from typing import Iterator

from .records import JournalRecord, record_from_fields


class JournalUnavailable(RuntimeError):
    """The journal could not be opened or read."""


def read_unit(unit: str, directory: str | None = None, since: float | None = None) -> Iterator[JournalRecord]:
    """Entries the unit's processes wrote, PID 1 wrote about it, and journald's notices about it."""
    try:
        from systemd import journal  # pragma: systemd no cover
    except ImportError as exc:  # pragma: no cover - dependency is declared
        raise JournalUnavailable(f"python-systemd is not installed: {exc}") from None
    try:
        reader = journal.Reader(path=directory) if directory else journal.Reader()
    except OSError as exc:
        raise JournalUnavailable(f"cannot open the journal{' in ' + directory if directory else ''}: "
                                 f"{exc.strerror or exc}") from None
    with reader:
        reader.data_threshold = 0  # whole fields, however long
        reader.add_match(_SYSTEMD_UNIT=unit)
        reader.add_disjunction()
        reader.add_match(UNIT=unit, _PID="1")
        reader.add_disjunction()
        reader.add_match(OBJECT_SYSTEMD_UNIT=unit)
        if since is not None:
            reader.seek_realtime(dt.datetime.fromtimestamp(since, dt.timezone.utc))
        else:
            reader.seek_head()
        for entry in reader:
            yield record_from_fields(entry)
