#!/usr/bin/env python3
"""Runs inside the bench sandbox (bench/run.py --only pages): how many pages of the journal file a
fresh reader with the daemon's match maps, by the way it is positioned at the journal's end.

    journal_pages.py write N          a unit writes N lines; prints the cursor of its last entry
    journal_pages.py cursor|tail|readall CURSOR   one fresh reader: RSS by kind (KiB) it added

What section 5 of docs/performance.md needs: after a burst the daemon reopens its reader at its
cursor; the file pages that reader maps are counted in the daemon's RSS (RssShmem on this tmpfs,
RssFile on a disk).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from phasewatch.sources.journal.follow import JournalFollower

UNIT = "bench-pages.service"
LINE = ("[2026-11-30 08:00:00 TP{rank}] Decode batch, #running-req: {n40}, #token: {n}, token usage: 0.{n90}, "
        "gen throughput (token/s): 1234.{n99}, #queue-req: 0")


def rss() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(("RssAnon", "RssFile", "RssShmem")):
                key, value, _ = line.split()
                out[key.rstrip(":")] = int(value)
    return out


def reader():  # type: ignore[no-untyped-def]
    """The daemon's own reader (sources/journal_reader.py: its match, its data threshold), watching the journal."""
    follower = JournalFollower(UNIT)
    follower.fileno()
    return follower._reader


def write(lines: int) -> None:
    code = (f"for n in range({lines}):\n"
            f"    print({LINE!r}.format(rank=n % 8, n40=n % 40, n=n, n90=n % 90, n99=n % 99))\n")
    subprocess.run(["systemd-run", "--quiet", "--wait", "--collect", f"--unit={UNIT}", sys.executable, "-c", code],
                   check=True)
    time.sleep(2)  # journald has stored them
    r = reader()
    r.seek_tail()
    r._previous()
    print(r._get_cursor())


def measure(how: str, cursor: str) -> None:
    before = rss()
    r = reader()
    opened = rss()
    if how == "cursor":  # what JournalFollower.seek_cursor does
        r.seek_cursor(cursor)
        r._next()
        found: object = r.test_cursor(cursor)
    elif how == "tail":  # what JournalFollower.reopen tries first
        r.seek_tail()
        found = r._previous() and r.test_cursor(cursor)
    else:  # every entry read (what a burst's reading maps)
        r.seek_head()
        found = 0
        while r._next():
            r._get("MESSAGE")
            found += 1
    after = rss()
    print(json.dumps({"how": how, "found": found, "open_kib": {k: opened[k] - before[k] for k in before},
                      "seek_kib": {k: after[k] - opened[k] for k in before}}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(int(sys.argv[2]))
    else:
        measure(sys.argv[1], sys.argv[2])
