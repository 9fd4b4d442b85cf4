"""Edge: follow one unit's journal entries live, with systemd-python's low-level reader.

Matches `_SYSTEMD_UNIT=<unit>` (its processes), `UNIT=<unit>` + `_PID=1` + `_UID=0` (PID 1 about
it) and `OBJECT_SYSTEMD_UNIT=<unit>` (journald's suppression notices; any local user can send that
field too, so such entries pass `trust.rejection` or are dropped and counted in `rejected`).
Data threshold 0: whole fields.
The fd is for poll(); `wait_result()` after it is readable tells APPEND or INVALIDATE (rotation,
vacuum, journald restart), on which the caller calls `reopen()`: the reader is reopened at the
last cursor read, so nothing is lost or read twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator

from ..errors import JournalError
from ..records import Entry, JournalRecord, record_from_fields
from ..trust import TRUSTED_FIELDS, rejection
from .journal_pages import drop_journal_pages

NOP, APPEND, INVALIDATE = 0, 1, 2
# Entries looked at in one `read`, per entry it may return: a flood of forged entries costs a
# bounded step; past it the read stops with `behind` set, and the caller reads on.
REJECTED_SLACK = 16
_LIFECYCLE_FIELDS = ("MESSAGE", "MESSAGE_ID", "UNIT", "OBJECT_SYSTEMD_UNIT", "N_DROPPED", "INVOCATION_ID",
                     "_SYSTEMD_INVOCATION_ID", "UNIT_RESULT", "JOB_TYPE", "JOB_RESULT", "EXIT_CODE", "EXIT_STATUS",
                     "N_RESTARTS", "SYSLOG_IDENTIFIER", "_COMM", *TRUSTED_FIELDS)




@dataclass
class ReadEnd:
    """Where a whole pass of journal_source.unit_entries ended: the cursor of the last entry it read
    (None: none)."""
    cursor: str | None = None


class JournalFollower:
    def __init__(self, unit: str, directory: str | None = None) -> None:
        self.unit = unit
        self.directory = directory
        self.cursor: str | None = None
        self.rejected: dict[str, int] = {}  # reason -> entries that claimed the unit untrusted (trust.py)
        self.behind = False  # the last read stopped on its bound of rejected entries, not at the end
        self._unit_bytes = unit.encode()
        self._reader: Any = None
        self.open()

    def open(self) -> None:
        try:
            from systemd import _reader  # pragma: systemd no cover
        except ImportError as exc:  # pragma: no cover
            raise JournalError(f"python-systemd is not installed: {exc}") from None
        try:
            reader = _reader._Reader(0, self.directory) if self.directory else _reader._Reader()
        except OSError as exc:
            raise JournalError(f"cannot open the journal: {exc.strerror or exc}") from None
        reader.data_threshold = 0
        reader.add_match(f"_SYSTEMD_UNIT={self.unit}")
        reader.add_disjunction()
        reader.add_match(f"UNIT={self.unit}")
        reader.add_match("_PID=1")
        reader.add_match("_UID=0")
        reader.add_disjunction()
        reader.add_match(f"OBJECT_SYSTEMD_UNIT={self.unit}")
        self._reader = reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def reopen(self) -> None:
        """After INVALIDATE: a fresh reader, positioned after the last entry read."""
        self.close()
        self.open()
        if self.cursor is None:
            self.seek_tail()
            return
        # Mostly the cursor is the last entry (caught up): found from the tail, a fresh reader maps
        # about 1.7 MB of a 56 MB journal file instead of 2.5 MB for a seek by cursor (measured).
        self._reader.seek_tail()
        if not (self._reader._previous() and self._reader.test_cursor(self.cursor)):
            self.seek_cursor(self.cursor)

    def catch_up_entries(self, since: float, runs: tuple[int, int] | None,
                         end: ReadEnd) -> Generator[list[Entry], None, None] | None:
        """The unit's entries from `since` to the end, read by the C reader in batches
        (journal_source.unit_entries; trust rejections counted in `rejected`); `end` then names the
        last. None without the C reader."""
        from . import journal_source  # (it reads with this module's match and fields)

        if journal_source.reader_name() != "C":
            return None
        return journal_source.unit_entries(self.unit, self.directory, since, self.rejected, runs, end)

    def drop_pages(self) -> int:
        """The journal file pages the reader mapped given back (journal_pages.py); it reads on
        from where it is. The bytes advised."""
        return drop_journal_pages()

    def seek_realtime(self, seconds: float) -> None:
        self._reader.seek_realtime(int(seconds * 1_000_000))

    def seek_head(self) -> None:
        self._reader.seek_head()

    def seek_tail(self) -> None:
        """Position after the last entry: only new entries will be read."""
        self._reader.seek_tail()
        if self._reader._previous():
            self.cursor = self._reader._get_cursor()
        else:
            # No entry matches yet (a new unit, a fresh or vacuumed journal). A reader left at the tail
            # then jumps to the last entry there is when entries come (systemd 252: a quick start-up's
            # first lines, all written before the first wake-up, were skipped). With nothing
            # matching, the head is the same place without that jump.
            self._reader.seek_head()

    def seek_cursor(self, cursor: str) -> None:
        """Position after the entry `cursor` names (if it still exists)."""
        self._reader.seek_cursor(cursor)
        if self._reader._next() and not self._reader.test_cursor(cursor):
            self._reader._previous()  # the entry is gone (vacuumed): start at the next one

    def fileno(self) -> int:
        fd: int = self._reader.fileno()
        return fd

    def wait_result(self) -> int:
        """NOP, APPEND or INVALIDATE, once the fd was readable (also resets its readability)."""
        result: int = self._reader.process()
        return result

    def read(self, limit: int = 1000) -> list[JournalRecord]:
        """Up to `limit` new entries the unit's own (an empty list with `behind` false: caught up).
        Entries `trust.rejection` refuses are read past, counted in `rejected`, and not returned; at
        most `limit * REJECTED_SLACK` entries are looked at, and `behind` says when that bound ended it."""
        out: list[JournalRecord] = []
        reader = self._reader
        get, next_entry, realtime = reader._get, reader._next, reader._get_realtime
        unit_bytes, unit_text = self._unit_bytes, self.unit
        append = out.append
        read_any = False
        self.behind = True
        for _ in range(limit * REJECTED_SLACK):
            if len(out) >= limit:
                break
            if not next_entry():
                self.behind = False
                break
            read_any = True
            try:
                unit = get("_SYSTEMD_UNIT")
            except KeyError:
                unit = None
            if unit == unit_bytes or unit == unit_text:
                # The hot path (every line of the unit): the five fields a line needs, inline.
                try:
                    message = get("MESSAGE")
                except KeyError:
                    message = None
                try:
                    pid = get("_PID")
                except KeyError:
                    pid = None
                try:
                    invocation = get("_SYSTEMD_INVOCATION_ID")
                except KeyError:
                    invocation = None
                try:
                    line_break = get("_LINE_BREAK")
                except KeyError:
                    line_break = None
                append(JournalRecord(
                    message=message,
                    realtime=realtime() / 1e6,
                    pid=int(pid) if pid else None,
                    invocation_id=invocation.decode() if isinstance(invocation, bytes) else invocation,
                    line_break=line_break.decode() if isinstance(line_break, bytes) else line_break,
                ))
            else:
                fields: dict[str, object] = {}
                for name in _LIFECYCLE_FIELDS:
                    try:
                        fields[name] = get(name)
                    except KeyError:
                        pass
                fields["__REALTIME_TIMESTAMP"] = realtime()
                record = record_from_fields(fields)
                reason = rejection(record, unit_text)
                if reason is None:
                    append(record)
                else:
                    self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if read_any:
            self.cursor = reader._get_cursor()  # the last entry read: where a reopen goes on
        return out
