"""Edge: the daemon's follower of one unit's journal: the live reader (journal_reader.py) that also
catches up, after a start or a reopen, through the C reader's batches (journal_source.py).
"""

from __future__ import annotations

from typing import Generator

from ...records import Entry
from . import journal_source
from .journal_reader import ReadEnd, UnitJournalReader


class JournalFollower(UnitJournalReader):
    def catch_up_entries(self, since: float, runs: tuple[int, int] | None,
                         end: ReadEnd) -> Generator[list[Entry], None, None] | None:
        """The unit's entries from `since` to the end, read by the C reader in batches
        (journal_source.unit_entries; trust rejections counted in `rejected`); `end` then names the
        last. None without the C reader."""
        if journal_source.reader_name() != "C":
            return None
        return journal_source.unit_entries(self.unit, self.directory, since, self.rejected, runs, end)
