"""Fakes shared by tests: things that stand in for the daemon's edges."""

from __future__ import annotations

import os

from phasewatch.records import JournalRecord
from phasewatch.sources.follow import APPEND


class ScriptedJournal:
    """Stands in for JournalFollower: entries are pushed by the test; the fd is a real pipe."""

    def __init__(self) -> None:
        self.pending: list[JournalRecord] = []
        self.cursor: str | None = None
        self.rejected: dict[str, int] = {}
        self.behind = False
        self._read, self._write = os.pipe()

    def push(self, *records: JournalRecord) -> None:
        self.pending.extend(records)
        os.write(self._write, b"!")

    def read(self, limit: int = 1000) -> list[JournalRecord]:
        out, self.pending = self.pending[:limit], self.pending[limit:]
        if out:
            self.cursor = f"c{len(out)}"
        return out

    def fileno(self) -> int:
        return self._read

    def wait_result(self) -> int:
        os.read(self._read, 1024)
        return APPEND

    def seek_realtime(self, seconds: float) -> None: ...

    def seek_tail(self) -> None: ...

    def reopen(self) -> None: ...
