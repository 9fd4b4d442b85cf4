"""Edge: read one unit's journal entries live, with systemd-python's low-level reader.

Matches `_SYSTEMD_UNIT=<unit>` (its processes), `UNIT=<unit>` + `_PID=1` + `_UID=0` (PID 1 about
it) and `OBJECT_SYSTEMD_UNIT=<unit>` (journald's suppression notices; any local user can send that
field too, so such entries pass `trust.rejection` or are dropped and counted in `rejected`).
Data threshold 0: whole fields.
The fd is for poll(); `wait_result()` after it is readable tells APPEND or INVALIDATE (rotation,
vacuum, journald restart), on which the caller calls `reopen()`: the reader is reopened at the
last cursor read, so nothing is lost or read twice. A read that fails (EBADMSG, ENOENT, ESTALE: any
OSError of a file being archived or deleted under it) returns nothing, keeps the cursor and sets
`read_error`: the caller reopens at the cursor and reads that batch again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...errors import JournalError
from ...records import JournalRecord, record_from_fields
from .journal_pages import drop_journal_pages
from .trust import TRUSTED_FIELDS, rejection

NOP, APPEND, INVALIDATE = 0, 1, 2
# Entries looked at in one `read`, per entry it may return: a flood of forged entries costs a
# bounded step; past it the read stops with `behind` set, and the caller reads on.
REJECTED_SLACK = 16
LIFECYCLE_FIELDS = ("MESSAGE", "MESSAGE_ID", "UNIT", "OBJECT_SYSTEMD_UNIT", "N_DROPPED", "INVOCATION_ID",
                     "_SYSTEMD_INVOCATION_ID", "UNIT_RESULT", "JOB_TYPE", "JOB_RESULT", "EXIT_CODE", "EXIT_STATUS",
                     "N_RESTARTS", "SYSLOG_IDENTIFIER", "_COMM", *TRUSTED_FIELDS)




@dataclass
class ReadEnd:
    """Where a whole pass of journal_source.unit_entries ended: the cursor of the last entry it read
    (None: none); `batch`: the cursor of the last entry of the batches handed over so far (where a
    reader goes on when the pass fails midway)."""
    cursor: str | None = None
    batch: str | None = None


def _open_reader(directory: str | None) -> Any:
    try:
        from systemd import _reader  # pragma: systemd no cover
    except ImportError as exc:  # pragma: no cover
        raise JournalError(f"python-systemd is not installed: {exc}") from None
    try:
        return _reader._Reader(0, directory) if directory else _reader._Reader()
    except OSError as exc:
        raise JournalError(f"cannot open the journal: {exc.strerror or exc}") from None


class UnitJournalReader:
    def __init__(self, unit: str, directory: str | None = None) -> None:
        self.unit = unit
        self.directory = directory
        self.cursor: str | None = None
        self.rejected: dict[str, int] = {}  # reason -> entries that claimed the unit untrusted (trust.py)
        self.behind = False  # the last read stopped on its bound of rejected entries, not at the end
        self.read_error: OSError | None = None  # the last read failed: reopen at the cursor
        self.position: float | None = None  # wall seconds of the last entry looked at (trusted or not)
        self.at_end = True  # the last read ended at the journal's end (nothing was left unread then)
        self._unit_bytes = unit.encode()
        self._reader: Any = None
        self.open()

    def open(self) -> None:
        reader = _open_reader(self.directory)
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

    def reopen(self) -> bool:
        """After INVALIDATE or a failed read: a fresh reader, positioned after the last entry read.
        False when that entry is no longer in the journal (its file was vacuumed): the reader then
        goes on at the next entry there is. Raises OSError or JournalError when it cannot reopen."""
        old = self._reader
        self.open()  # (a journal that cannot be opened leaves the old reader: its fd stays polled)
        if old is not None:
            old.close()
        self.read_error = None
        if self.cursor is None:
            self.seek_tail()
            return True
        # Mostly the cursor is the last entry (caught up): found from the tail, a fresh reader maps
        # about 1.7 MB of a 56 MB journal file instead of 2.5 MB for a seek by cursor (measured).
        self._reader.seek_tail()
        if self._reader._previous() and self._reader.test_cursor(self.cursor):
            return True
        return self.seek_cursor(self.cursor)

    def drop_pages(self) -> int:
        """The journal file pages the reader mapped given back (journal_pages.py); it reads on
        from where it is. The bytes advised."""
        return drop_journal_pages()

    def realtime_back(self, entries: int) -> float | None:
        """Wall seconds of the entry `entries` before the journal's end; None when fewer match. It
        moves the reader: seek after."""
        reader = self._reader
        reader.seek_tail()
        if not reader._previous(entries):
            return None
        stamp = float(reader._get_realtime()) / 1e6
        return stamp if reader._previous() else None  # (at the head: there were no more than that)

    def head_realtime(self) -> float | None:
        """Wall seconds of the journal's oldest entry (any unit's); None when empty or unreadable."""
        try:
            reader = _open_reader(self.directory)
        except JournalError:
            return None
        try:
            reader.seek_head()
            return float(reader._get_realtime()) / 1e6 if reader._next() else None
        except OSError:
            return None
        finally:
            reader.close()

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

    def seek_cursor(self, cursor: str) -> bool:
        """Position after the entry `cursor` names; False when it no longer exists (vacuumed): then
        at the next entry there is."""
        self._reader.seek_cursor(cursor)
        if self._reader._next():
            if self._reader.test_cursor(cursor):
                return True
            # The entry is gone (vacuumed): start at this next one. (Not `_previous()`: at the
            # journal's head that does not move, and this entry would be skipped.)
            self._reader.seek_cursor(self._reader._get_cursor())
            return False
        return False  # (nothing at or after it: the cursor names no entry left)

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
        most `limit * REJECTED_SLACK` entries are looked at, and `behind` says when that bound ended it.
        An OSError of the journal's files returns [] with `read_error` set and the cursor unchanged:
        nothing of the failed read is given, so a reopen at the cursor reads it again."""
        try:
            return self._read(limit)
        except OSError as exc:
            self.read_error, self.behind = exc, True
            return []

    def _read(self, limit: int) -> list[JournalRecord]:
        out: list[JournalRecord] = []
        reader = self._reader
        get, next_entry, realtime = reader._get, reader._next, reader._get_realtime
        unit_bytes, unit_text = self._unit_bytes, self.unit
        append = out.append
        read_any = False
        stamp = 0
        self.behind = True
        for _ in range(limit * REJECTED_SLACK):
            if len(out) >= limit:
                break
            if not next_entry():
                self.behind = False
                break
            read_any = True
            stamp = realtime()
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
                    realtime=stamp / 1e6,
                    pid=int(pid) if pid else None,
                    invocation_id=invocation.decode() if isinstance(invocation, bytes) else invocation,
                    line_break=line_break.decode() if isinstance(line_break, bytes) else line_break,
                ))
            else:
                record = self._lifecycle_record(get, stamp)
                if record is not None:
                    append(record)
        if read_any:
            self.cursor = reader._get_cursor()  # the last entry read: where a reopen goes on
            self.position = stamp / 1e6
        self.at_end = not self.behind
        return out

    def _lifecycle_record(self, get: Callable[[str], Any], stamp: int) -> JournalRecord | None:
        """An entry not written by the unit's processes that is to be believed (PID 1's or journald's
        about the unit: trust.py), else None, counted in `rejected` by why."""
        fields: dict[str, object] = {}
        for name in LIFECYCLE_FIELDS:
            try:
                fields[name] = get(name)
            except KeyError:
                pass
        fields["__REALTIME_TIMESTAMP"] = stamp
        record = record_from_fields(fields)
        reason = rejection(record, self.unit)
        if reason is None:
            return record
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        return None
