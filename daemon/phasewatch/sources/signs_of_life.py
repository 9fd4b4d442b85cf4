"""Source: signs of life beyond log lines. While the unit starts and its cgroup is known, every
`vitals.period` its processes are sampled (procstat.py); what moved since the last sample becomes
RANK_PROGRESS events (stages/vitals.py)."""

from __future__ import annotations

import logging
import math
from typing import Callable, Sequence

from ..config import Config
from ..records import Event
from ..stages.snapshot import InvocationView, UnitState
from ..stages.vitals import Sample, Vitals, compare, progress_events
from .base import Current, Instant
from .procstat import ProcSampler
from .unit_processes import UnitFactsReader

logger = logging.getLogger(__name__)


class SignsOfLife:
    def __init__(self, config: Config, sampler: ProcSampler, facts: UnitFactsReader, current: Current,
                 saw: Callable[[Vitals | None], None] | None = None) -> None:
        self.config = config
        self.sampler = sampler
        self.facts = facts
        self.current = current
        self.saw = saw  # the metrics sink's vitals view
        self.sample: Sample | None = None
        self.vitals: Vitals | None = None
        self.last_sample = -math.inf  # monotonic

    def new_startup(self) -> None:
        self.sample, self.vitals, self.last_sample = None, None, -math.inf

    def fds(self) -> Sequence[int]:
        return ()

    def sampling(self, inv: InvocationView | None) -> bool:
        """While the unit starts and its cgroup is known: every `vitals.period`."""
        return (self.config.vitals.enabled and inv is not None and inv.state is UnitState.STARTING
                and inv is not None and self.facts.control_group_of(inv) is not None)

    def next_deadline(self, now: Instant) -> float | None:
        return self.last_sample + self.config.vitals.period if self.sampling(self.current()) else None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        inv = self.current()
        if not self.sampling(inv):
            if self.vitals is not None and (inv is None or inv.state is not UnitState.STARTING):
                self.sample, self.vitals = None, None
                if self.saw is not None:
                    self.saw(None)
            return []
        if inv is None or now.monotonic - self.last_sample < self.config.vitals.period - 0.05:
            return []
        self.last_sample = now.monotonic
        try:
            sample = self.sampler.sample(self.facts.control_group_of(inv) or "", now.wall)
        except OSError as exc:  # a cgroup or /proc oddity: no sign of life this time, the loop goes on
            logger.warning("[%s] cannot sample the unit's processes: %s", self.config.unit, exc)
            return []
        self.vitals = compare(self.sample, sample)
        self.sample = sample
        if self.saw is not None:
            self.saw(self.vitals)
        return list(progress_events(self.vitals, inv.invocation_id))
