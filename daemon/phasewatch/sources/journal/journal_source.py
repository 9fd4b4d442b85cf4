"""Edge: read one unit's entries from a journal (the local one, or a directory copied from a host).

The same low-level reader as the daemon's (`journal_reader.UnitJournalReader`): `_Reader._next()` and
`_get()` of the few fields phasewatch reads, MESSAGE always as bytes (decoded later, U+FFFD for
bad UTF-8), data threshold 0. python-systemd's iterating `journal.Reader` converts every field
of every entry and was the slowest stage of `replay --unit` (docs/performance.md). `unit_entries`,
the catch-up's reader, reads in C when the package was built with `_journal_lines.c` (setup.py):
the same entries, and runs of lines alike but for digits when asked for.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable, Generator, Iterator, Union

from ...errors import JournalError, JournalUnavailable
from ...records import Entry, JournalRecord, UnitLine, UnitRun, record_from_fields
from .journal_reader import LIFECYCLE_FIELDS, ReadEnd, UnitJournalReader
from .trust import rejection

try:  # the same reader in C (_journal_lines.c), when the package was built with it (setup.py)
    from ... import _journal_lines as c_lines  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a pure-Python build
    c_lines = None

BATCH = 4096
# What the C reader returns for an entry that is no whole line: first values, in `_entry`'s order.
_LINE_FIELDS = ("_SYSTEMD_UNIT", "MESSAGE", "_PID", "_SYSTEMD_INVOCATION_ID", "_LINE_BREAK")
_C_FIELDS = (*_LINE_FIELDS, *(name for name in LIFECYCLE_FIELDS if name not in _LINE_FIELDS))


def reader_name() -> str:
    """Which reader `replay --unit` uses: "C" (the extension) or "Python" (systemd-python's)."""
    return "C" if c_lines is not None and not os.environ.get("PHASEWATCH_PURE_PYTHON") else "Python"


def _open(unit: str, directory: str | None, since: float | None) -> UnitJournalReader:
    try:
        follower = UnitJournalReader(unit, directory)
    except JournalError as exc:
        where = f" in {directory}" if directory else ""
        raise JournalUnavailable(str(exc).replace("the journal", f"the journal{where}", 1)) from None
    if since is not None:
        follower.seek_realtime(since)
    else:
        follower.seek_head()
    return follower


# Runs asked for: where their lines' heads may differ in digits, (start, end) (Engine.run_time_digits;
# (0, 0): nowhere); None: no runs.
RunShape = Union[tuple[int, int], None]


def unit_entries(unit: str, directory: str | None = None, since: float | None = None,
                 rejected: dict[str, int] | None = None, runs: RunShape = None,
                 end: ReadEnd | None = None) -> Generator[list[Entry], None, None]:
    """`read_unit`'s entries in batches, the unit's whole lines as `UnitLine`s (no record
    built: `Pipeline.feed_line`), the rest as JournalRecords, exactly as `UnitJournalReader.read`
    makes them. An entry's fields are read in one call (`_get_all`): on a journald entry of some 25
    fields that is cheaper than the four `_get`s a line needs, each a walk over the entry's fields
    (and a `KeyError` for the `_LINE_BREAK` most entries lack). With the C reader (`reader_name()`),
    the same entries, read in C, and with `runs` some consecutive lines as one `UnitRun`
    (`Pipeline.feed_run`, `Pipeline.run_shape`). Read to its end, `end` has the last entry's cursor."""
    if reader_name() == "C":
        return _c_unit_entries(unit, directory, since, rejected, runs, end)
    return _python_unit_entries(unit, directory, since, rejected, end)


def _c_unit_entries(unit: str, directory: str | None, since: float | None,
                    rejected: dict[str, int] | None, runs: RunShape = None,
                    end: ReadEnd | None = None) -> Generator[list[Entry], None, None]:
    assert c_lines is not None
    # (the C reader builds the lines and runs as these very types)
    open_args = (unit, directory, None if since is None else int(since * 1_000_000), _C_FIELDS, UnitLine, UnitRun)

    def open_lines() -> Any:
        try:
            return c_lines.open(*open_args)
        except OSError as exc:
            where = f" in {directory}" if directory else ""
            raise JournalUnavailable(f"cannot open the journal{where}: {exc.strerror or exc}") from None

    unit_bytes = unit.encode()
    counted: dict[str, int] = {}
    ahead = _ReadAhead(open_lines, runs)
    try:
        while True:
            batch, others = ahead.next()
            if not batch:
                if end is not None:
                    end.cursor = ahead.cursor
                break
            if end is not None:
                end.batch = ahead.batch_cursor
            if others:
                entries: list[Entry] = []
                append = entries.append
                for entry in batch:
                    if type(entry) is dict:
                        _entry(entry.get, entry["__REALTIME_TIMESTAMP"], unit, unit_bytes, append, counted)
                    else:
                        append(entry)
                batch = entries
            yield batch
    finally:
        ahead.stop()
        if rejected is not None:
            for reason, count in counted.items():
                rejected[reason] = rejected.get(reason, 0) + count


class _ReadAhead:
    """The C reader's batches, read AHEAD batches ahead in a thread of its own: it walks the journal
    without the GIL (_journal_lines.c `collect`) while the caller's Python takes the batch before (on
    two cores a catch-up then costs about the slower of the two, not their sum;
    docs/performance.md). The thread opens, reads and closes the journal: an sd_journal is used by
    one thread in its whole life (sd-journal(3)). At the end it hands over the last entry's cursor."""

    AHEAD = 2

    def __init__(self, open_lines: Callable[[], Any], runs: RunShape) -> None:
        self._open_lines = open_lines
        self._args = (BATCH, runs is not None, *(runs or (0, 0)))
        self._queue: queue.Queue[tuple[list[Any], int, str | None, BaseException | None]] = queue.Queue(self.AHEAD)
        self._stopping = threading.Event()
        self.cursor: str | None = None  # the last entry's, once the end was handed over
        self.batch_cursor: str | None = None  # the last entry's of the batches handed over
        self._thread = threading.Thread(target=self._read, name="phasewatch-read-ahead", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            lines = self._open_lines()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            self._put(([], 0, None, exc))
            return
        try:
            while not self._stopping.is_set():
                batch, others = lines.read(*self._args)
                # (a batch that fails is not handed over: the reader stays after the last whole one)
                cursor = lines.cursor() if batch else None
                if not batch:
                    self.cursor = lines.cursor()
                self._put((batch, others, cursor, None))
                if not batch:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            self._put(([], 0, None, exc))
        finally:
            lines.close()

    def _put(self, item: tuple[list[Any], int, str | None, BaseException | None]) -> None:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def next(self) -> tuple[list[Any], int]:
        """The next batch and how many of its entries are dicts; an empty batch at the end (then
        `cursor` is set); `batch_cursor` names the batch's last entry."""
        batch, others, cursor, error = self._queue.get()
        if error is not None:
            raise error
        if batch:
            self.batch_cursor = cursor
        return batch, others

    def stop(self) -> None:
        """The thread ended (the journal is closed once this returns)."""
        self._stopping.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(0.05)


def _python_unit_entries(unit: str, directory: str | None, since: float | None,
                         rejected: dict[str, int] | None,
                         end: ReadEnd | None = None) -> Generator[list[Entry], None, None]:
    follower = _open(unit, directory, since)
    reader = follower._reader
    try:
        get, get_all, next_entry, realtime = reader._get, reader._get_all, reader._next, reader._get_realtime
        new = tuple.__new__  # a UnitLine built without the Python call its class's __new__ is (the same object)
        unit_bytes = unit.encode()
        pids: dict[bytes, int | None] = {}  # field bytes -> value: a unit has few of each
        invocations: dict[bytes, str] = {}
        more, any_read = True, False
        while more:
            batch: list[Entry] = []
            append = batch.append
            for _ in range(BATCH):
                if not next_entry():
                    more = False
                    if end is not None and any_read:
                        end.cursor = reader._get_cursor()
                    break
                any_read = True
                fields = get_all()
                stamp = realtime()
                message = fields.get("MESSAGE")
                pid_field = fields.get("_PID")
                invocation_field = fields.get("_SYSTEMD_INVOCATION_ID")
                if (fields.get("_SYSTEMD_UNIT") != unit_bytes or type(message) is not bytes
                        or type(pid_field) is not bytes or type(invocation_field) is not bytes
                        or "_LINE_BREAK" in fields):
                    # Not a whole line of the unit's (or a field twice: `_get` takes the first): the
                    # general way.
                    _entry(get, stamp, unit, unit_bytes, append, follower.rejected)
                    continue
                pid = pids.get(pid_field, -1)
                if pid == -1:
                    pid = pids[pid_field] = int(pid_field) if pid_field else None
                    if len(pids) > 4096:
                        pids.clear()
                invocation = invocations.get(invocation_field)
                if invocation is None:
                    invocation = invocations[invocation_field] = invocation_field.decode()
                    if len(invocations) > 4096:
                        invocations.clear()
                append(new(UnitLine, (message, stamp / 1e6, pid, invocation)))
            if end is not None and batch:
                end.batch = reader._get_cursor()
            yield batch
    finally:
        follower.close()
        if rejected is not None:
            for reason, count in follower.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count


def _entry(get: Any, stamp: int, unit: str, unit_bytes: bytes, append: Any, rejected: dict[str, int]) -> None:
    """One entry as `UnitJournalReader.read` takes it. `get`: a field's first value (KeyError or None
    if it has none)."""
    def field(name: str) -> Any:
        try:
            return get(name)
        except KeyError:
            return None

    if field("_SYSTEMD_UNIT") == unit_bytes:
        pid, invocation, line_break = field("_PID"), field("_SYSTEMD_INVOCATION_ID"), field("_LINE_BREAK")
        append(JournalRecord(message=field("MESSAGE"), realtime=stamp / 1e6, pid=int(pid) if pid else None,
                             invocation_id=invocation.decode() if isinstance(invocation, bytes) else invocation,
                             line_break=line_break.decode() if isinstance(line_break, bytes) else line_break))
        return
    fields: dict[str, object] = {}
    for name in LIFECYCLE_FIELDS:
        value = field(name)
        if value is not None:
            fields[name] = value
    fields["__REALTIME_TIMESTAMP"] = stamp
    record = record_from_fields(fields)
    reason = rejection(record, unit)
    if reason is None:
        append(record)
    else:
        rejected[reason] = rejected.get(reason, 0) + 1


def read_unit(unit: str, directory: str | None = None, since: float | None = None,
              rejected: dict[str, int] | None = None) -> Iterator[JournalRecord]:
    """Entries the unit's processes wrote, PID 1 wrote about it, and journald's notices about it.
    Entries that only claim to be (sources/journal/trust.py) are left out and, with `rejected`, counted
    there by reason."""
    follower = _open(unit, directory, since)
    size = 64  # growing to BATCH: a reader that wants the first lines only (engine detection) reads few
    try:
        while (batch := follower.read(size)) or follower.behind:
            yield from batch
            size = min(size * 2, BATCH)
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

    def batches(self, runs: RunShape = None) -> Iterator[list[Entry]]:
        """The same entries as `unit_entries` gives them (one pass)."""
        self.rejected = {}
        return unit_entries(self.unit, self.directory, self.since, self.rejected, runs)
