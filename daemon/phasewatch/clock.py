"""The one place that reads the time."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to, and never backwards."""

    def __init__(self, wall: float = 1_700_000_000.0, monotonic: float = 1000.0) -> None:
        self._wall = wall
        self._monotonic = monotonic

    def monotonic(self) -> float:
        return self._monotonic

    def wall(self) -> float:
        return self._wall

    def jump(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time can't go backwards")
        self._wall += seconds
        self._monotonic += seconds
