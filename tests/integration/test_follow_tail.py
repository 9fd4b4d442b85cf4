"""`JournalFollower.seek_tail` over real journal files: the daemon starts at the journal's end when the
unit is not running, and must then read every entry the unit writes from then on, including the case
where no entry of the unit exists yet (a new unit, a fresh or vacuumed journal). There, a reader left at
the tail jumped to the last entry when entries came and skipped the ones before it (systemd 252), so a
quick start-up's first lines, all written before the daemon's first wake-up, were lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from journal_dirs import write_journal
from phasewatch.sources.journal.follow import JournalFollower

UNIT = "sglang-kimi.service"
INVOCATION = "5" * 32


def entry(n: int, unit: str = UNIT) -> dict[str, Any]:
    return {"__REALTIME_TIMESTAMP": str(1796025600_000000 + n * 1000), "_PID": "4711", "_SYSTEMD_UNIT": unit,
            "_SYSTEMD_INVOCATION_ID": INVOCATION, "MESSAGE": f"line {n}"}


def follow_from_tail(directory: Path) -> JournalFollower:
    follower = JournalFollower(UNIT, str(directory))
    follower.fileno()  # as the daemon: watching the directory before it seeks (new files are noticed)
    follower.seek_tail()
    assert follower.read(10) == []
    return follower


def new_lines(follower: JournalFollower, directory: Path, name: str, numbers: range) -> list[bytes]:
    write_journal(directory, [entry(n) for n in numbers], name=name)
    follower.wait_result()
    return [r.message for r in follower.read(100)]  # type: ignore[misc]


def test_with_no_entry_of_the_unit_yet_every_new_entry_is_read(tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", [entry(0, unit="other.service")], name="a")
    follower = follow_from_tail(directory)
    assert new_lines(follower, directory, "b", range(1, 6)) == [f"line {n}".encode() for n in range(1, 6)]
    assert new_lines(follower, directory, "c", range(6, 9)) == [f"line {n}".encode() for n in range(6, 9)]


def test_with_earlier_entries_of_the_unit_only_the_new_ones_are_read(tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", [entry(0), entry(1, unit="other.service")], name="a")
    follower = follow_from_tail(directory)
    assert new_lines(follower, directory, "b", range(2, 6)) == [f"line {n}".encode() for n in range(2, 6)]


def test_a_reopened_reader_goes_on_after_the_last_entry_read(tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", [entry(0)], name="a")
    follower = follow_from_tail(directory)
    assert new_lines(follower, directory, "b", range(1, 4)) == [b"line 1", b"line 2", b"line 3"]
    follower.reopen()  # caught up: the cursor is the journal's last entry (found from the tail)
    follower.fileno()  # (the daemon's next wait asks for it)
    assert follower.read(10) == []
    assert new_lines(follower, directory, "c", range(4, 6)) == [b"line 4", b"line 5"]
    write_journal(directory, [entry(n) for n in range(6, 9)], name="d")
    follower.reopen()  # entries came after the cursor: found by the cursor
    assert [r.message for r in follower.read(10)] == [b"line 6", b"line 7", b"line 8"]
