"""Edge: the journal file pages this process's readers have mapped, given back without closing them.

sd-journal reads a journal file through read-only shared mappings (`r--s`) that it keeps while the
reader lives; every page a read touched (and the kernel's fault-around neighbours) then counts in
the daemon's RSS until the mapping goes, whatever the file's size. `MADV_DONTNEED` on such a mapping
only unmaps its pages from this process: the file and its page cache are untouched, and the next
access maps the page again from it (madvise(2): "repopulating the memory contents from the
up-to-date contents of the underlying mapped file"). Only the mappings /proc/self/maps shows as
read-only and shared of a `*.journal` (or `*.journal~`) file, deleted or not, are advised, and only from the thread
that owns the journal readers (nothing maps or unmaps them meanwhile): the daemon's loop; the catch-up's
read-ahead thread (journal_source._ReadAhead) has ended before the loop begins.
"""

from __future__ import annotations

import ctypes
import logging
from typing import NamedTuple

logger = logging.getLogger(__name__)

MADV_DONTNEED = 4
MAPS = "/proc/self/maps"


class Mapping(NamedTuple):
    start: int
    end: int
    path: str


def journal_mappings(maps: str) -> list[Mapping]:
    """The read-only shared mappings of journal files in a /proc/PID/maps text."""
    found = []
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or fields[1] != "r--s":
            continue
        path = fields[5].removesuffix(" (deleted)")  # (a file vacuumed while mapped still counts)
        if not (path.endswith(".journal") or path.endswith(".journal~")):
            continue
        start, _, end = fields[0].partition("-")
        try:
            found.append(Mapping(int(start, 16), int(end, 16), path))
        except ValueError:
            continue
    return found


def drop_journal_pages(maps_path: str = MAPS) -> int:
    """Unmap the pages of this process's journal mappings (they stay mapped, and are read again from
    the page cache when needed); the bytes advised. Never raises: what cannot be advised stays."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            mappings = journal_mappings(maps.read())
    except OSError as exc:
        logger.debug("cannot read %s: %s", maps_path, exc)
        return 0
    if not mappings:
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):  # pragma: no cover - every Linux libc has it
        return 0
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    advised = 0
    for mapping in mappings:
        if madvise(mapping.start, mapping.end - mapping.start, MADV_DONTNEED) == 0:
            advised += mapping.end - mapping.start
        else:
            logger.debug("madvise of %s failed: errno %d", mapping.path, ctypes.get_errno())
    return advised
