"""`replay --unit`'s C reader reads a batch ahead in a thread (journal_source._ReadAhead): whatever the
caller does with the batches (takes them all, stops early, meets an error), the thread ends and the
journal is closed, by the thread that opened and read it (an sd_journal is one thread's), and the
caller sees the reader's error as its own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from journal_dirs import write_journal
from phasewatch.sources.journal import journal_source
from phasewatch.sources.journal.journal_source import _ReadAhead, reader_name, unit_entries

UNIT = "sglang-kimi.service"


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "phasewatch-read-ahead"]


class ScriptedLines:
    """A C reader's stand-in: hands out the given batches (an exception is raised instead)."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches
        self.reads = 0
        self.closed = 0

    def cursor(self) -> str:
        return "s=end"

    def close(self) -> None:
        self.closed += 1

    def read(self, *args: object) -> tuple[list[Any], int]:
        self.reads += 1
        item = self.batches.pop(0) if self.batches else []
        if isinstance(item, BaseException):
            raise item
        return item, 0


def test_the_readers_error_reaches_the_caller_after_the_batches_before_it() -> None:
    lines = ScriptedLines([[("a",)], OSError(5, "Input/output error"), [("never",)]])
    ahead = _ReadAhead(lambda: lines, None)
    assert ahead.next() == ([("a",)], 0)
    with pytest.raises(OSError, match="Input/output error"):
        ahead.next()
    ahead.stop()
    assert not read_ahead_threads() and lines.closed == 1 and ahead.cursor is None


def test_a_journal_that_cannot_be_opened_is_the_callers_error() -> None:
    def refuse() -> None:
        raise OSError(13, "Permission denied")

    ahead = _ReadAhead(refuse, None)
    with pytest.raises(OSError, match="Permission denied"):
        ahead.next()
    ahead.stop()
    assert not read_ahead_threads()


def test_the_end_hands_over_the_last_cursor() -> None:
    lines = ScriptedLines([[("a",)]])
    ahead = _ReadAhead(lambda: lines, None)
    assert ahead.next() == ([("a",)], 0) and ahead.next() == ([], 0)
    assert ahead.cursor == "s=end"
    ahead.stop()
    assert lines.closed == 1


def test_a_caller_that_stops_early_stops_the_thread_while_it_waits_to_hand_a_batch_over() -> None:
    lines = ScriptedLines([[(n,)] for n in range(100)])
    ahead = _ReadAhead(lambda: lines, (12, 20))
    assert ahead.next() == ([(0,)], 0)
    ahead.stop()
    assert not read_ahead_threads() and lines.closed == 1
    assert lines.reads <= 1 + _ReadAhead.AHEAD + 1  # it read no further than its queue holds


@pytest.mark.skipif(reader_name() != "C", reason="the package was built without its C reader")
def test_unit_entries_left_after_one_batch_ends_the_thread_and_closes_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_source, "BATCH", 16)
    entries = [{"__REALTIME_TIMESTAMP": str(1796025600_000000 + n), "_PID": "4711", "_SYSTEMD_UNIT": UNIT,
                "_SYSTEMD_INVOCATION_ID": "a" * 32, "MESSAGE": f"line {n}"} for n in range(400)]
    directory = write_journal(tmp_path / "journal", entries)
    used_by: list[tuple[str, threading.Thread]] = []
    real_open = journal_source.c_lines.open

    class Watched:
        def __init__(self, *args: object) -> None:
            used_by.append(("open", threading.current_thread()))
            self.lines = real_open(*args)

        def read(self, *args: object) -> object:
            used_by.append(("read", threading.current_thread()))
            return self.lines.read(*args)

        def cursor(self) -> object:
            used_by.append(("cursor", threading.current_thread()))
            return self.lines.cursor()

        def close(self) -> None:
            used_by.append(("close", threading.current_thread()))
            self.lines.close()

    monkeypatch.setattr(journal_source.c_lines, "open", Watched)
    batches = unit_entries(UNIT, str(directory), runs=(12, 20))
    first = next(batches)
    assert len(first) == 16
    batches.close()
    assert not read_ahead_threads()
    assert [what for what, _ in used_by][0] == "open" and [what for what, _ in used_by][-1] == "close"
    assert len({thread for _, thread in used_by}) == 1 and used_by[0][1] is not threading.current_thread()
    every = [entry for batch in unit_entries(UNIT, str(directory)) for entry in batch]
    assert [e.message for e in every] == [f"line {n}".encode() for n in range(400)]


@pytest.mark.skipif(reader_name() != "C", reason="the package was built without its C reader")
def test_a_batch_of_long_lines_ends_early_so_what_is_read_ahead_stays_bounded(tmp_path: Path) -> None:
    long = "x" * 40_000
    entries = [{"__REALTIME_TIMESTAMP": str(1796025600_000000 + n), "_PID": "4711", "_SYSTEMD_UNIT": UNIT,
                "_SYSTEMD_INVOCATION_ID": "a" * 32, "MESSAGE": f"{n:05d} {long}"} for n in range(400)]
    directory = write_journal(tmp_path / "journal", entries)
    sizes = [len(batch) for batch in unit_entries(UNIT, str(directory))]
    per_batch = journal_source.c_lines.BATCH_BYTES // 40_000 + 1
    assert sum(sizes) == 400 and max(sizes) <= per_batch < journal_source.BATCH
