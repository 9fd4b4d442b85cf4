"""Source: the health probe after ready. Never during start-up; after ready every `health.interval`,
unless batch lines proved life since; its answer (in a background thread, told through a pipe) becomes
a PROBE_OK or PROBE_FAILED event, returned with the probe's time (`ProbeAnswered`: the metrics')."""

from __future__ import annotations

import logging
import math
from typing import Sequence

from ...clock import Clock
from ...config.load import Config
from ...records import MAIN, Event, EventKind, Phase, ProbeAnswered
from ...stages.s3_track.snapshot import UP_STATES, InvocationView
from ..base import Current, Instant
from .probe import BackgroundProbe, default_url

logger = logging.getLogger(__name__)


class HealthProbeSource:
    def __init__(self, config: Config, probe: BackgroundProbe, current: Current, clock: Clock) -> None:
        self.config = config
        self.probe = probe
        self.current = current
        self.clock = clock
        self.last_probe = -math.inf  # wall clock: compared with the journal's proof of life

    def carrying(self, old: HealthProbeSource | None) -> HealthProbeSource:
        """These probes (a reloaded config's) from when `old` probed last (its probe: the same one)."""
        if old is not None:
            self.last_probe = old.last_probe
        return self

    def fds(self) -> Sequence[int]:
        return (self.probe.fileno(),)

    def url(self, inv: InvocationView) -> str | None:
        if self.config.health.url:
            return self.config.health.url
        server = inv.server
        return default_url(server.host, server.port) if server is not None else None

    def due_at(self, inv: InvocationView | None) -> float | None:
        """Wall-clock time of the next probe, or None."""
        health = self.config.health
        if inv is None or not health.enabled or inv.state not in UP_STATES:
            return None
        if self.probe.busy or self.url(inv) is None:
            return None
        ready = next((s.start for r in inv.ranks if r.rank == MAIN for s in r.spans
                      if s.phase is Phase.READY and s.start is not None), None)
        last = max(t for t in (self.last_probe, inv.proof_of_life, ready) if t is not None)
        return last + health.interval

    def next_deadline(self, now: Instant) -> float | None:
        due = self.due_at(self.current())
        return None if due is None else now.monotonic + (due - now.wall)

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event | ProbeAnswered]:
        events = self._result() if self.probe.fileno() in readable else []
        self._start_if_due(now.wall)
        return events

    def _start_if_due(self, now: float) -> None:
        inv = self.current()
        due = self.due_at(inv)
        if inv is None or due is None or now < due:
            return
        url = self.url(inv)
        if url is not None:
            self.last_probe = now
            self.probe.start(url, self.config.health.timeout)

    def _result(self) -> list[Event | ProbeAnswered]:
        result = self.probe.take()
        inv = self.current()
        if result is None:
            return []
        answered = ProbeAnswered(result.seconds, result.ok)
        if inv is None:
            return [answered]
        self.last_probe = self.clock.wall()
        kind = EventKind.PROBE_OK if result.ok else EventKind.PROBE_FAILED
        if not result.ok:
            logger.info("[%s] health probe %s failed: %s", self.config.unit, result.url, result.error)
        return [answered, Event(kind, self.last_probe, text=result.error or "", invocation_id=inv.invocation_id)]
