"""After a burst the daemon gives back the journal pages its reader mapped without closing it
(sources/journal/journal_pages.py): over real journal files, the reader's mapped pages leave this process's
RSS, and it reads on from where it was (nothing lost or read twice)."""

from __future__ import annotations

from pathlib import Path

from journal_dirs import write_journal
from phasewatch.sources.journal.follow import JournalFollower
from phasewatch.sources.journal.journal_pages import journal_mappings

UNIT = "sglang-kimi.service"


def journal_rss_kib() -> int:
    """This process's RSS in journal file mappings (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = line.rstrip().endswith(".journal")
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


def entry(n: int) -> dict[str, str]:
    return {"__REALTIME_TIMESTAMP": str(1796025600_000000 + n * 1000), "_PID": "4711", "_SYSTEMD_UNIT": UNIT,
            "_SYSTEMD_INVOCATION_ID": "a" * 32, "MESSAGE": f"[2026-11-30 08:00:00 TP0] Decode batch {n} " + "x" * 200}


def test_a_reader_gives_back_its_journal_pages_and_reads_on(tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", [entry(n) for n in range(20_000)])
    follower = JournalFollower(UNIT, str(directory))
    try:
        follower.seek_head()
        first = []
        while len(first) < 15_000:
            first += follower.read(1000)
        mapped = journal_rss_kib()
        assert mapped > 2_000  # the entries read, mapped
        advised = follower.drop_pages()
        assert advised > 0
        assert journal_rss_kib() < 100
        rest = []
        while batch := follower.read(1000):
            rest += batch
        assert [r.message for r in first + rest] == [entry(n)["MESSAGE"].encode() for n in range(20_000)]
    finally:
        follower.close()


def test_only_read_only_shared_journal_mappings_are_advised() -> None:
    maps = "\n".join([
        "7f0000000000-7f0000800000 r--s 00000000 00:2a 17 /var/log/journal/m/system.journal",
        "7f0000800000-7f0001000000 r--s 00800000 00:2a 18 /var/log/journal/m/system@x-1-2.journal~",
        "7f0001000000-7f0001800000 rw-s 00000000 00:2a 17 /var/log/journal/m/system.journal",  # a writer's
        "7f0001800000-7f0002000000 r--p 00000000 00:2a 19 /var/log/journal/m/user-1000.journal",  # private
        "7f0002000000-7f0002800000 r--s 00000000 00:2a 20 /var/log/journal/m/system.journal (deleted)",
        "7f0002800000-7f0003000000 r--s 00000000 00:2a 21 /tmp/notes.journal.txt",
        "7f0003000000-7f0003001000 rw-p 00000000 00:00 0 ",
        "garbage",
    ])
    assert [(m.start, m.end) for m in journal_mappings(maps)] == [
        (0x7f0000000000, 0x7f0000800000), (0x7f0000800000, 0x7f0001000000), (0x7f0002000000, 0x7f0002800000)]
