"""Sink: the metrics exporter (sinks/metrics/exporter.py) told each step. Its counters take what the
step and the actor's report say at every step; the published view is rebuilt at most every
PUBLISH_SPACING seconds while entries stream in (a step every 50 ms at 100 lines/s would otherwise
rebuild it 20 times a second for a scrape every 15 s), unless the step read a line the fast path did
not take (one that may change more than a rank's last activity: a progress step, a phase), which
/status shows at once; one put off has a deadline."""

from __future__ import annotations

import math

from ...clock import Clock
from ...judge import Step
from ...sources.base import Instant
from .exporter import Exporter

PUBLISH_SPACING = 0.25


class MetricsSink:
    def __init__(self, exporter: Exporter, clock: Clock) -> None:
        self.exporter = exporter
        self.clock = clock  # the loop's (monotonic: the spacing)
        self.last_publish = -math.inf  # monotonic
        self.publish_due = False  # a publish was put off by PUBLISH_SPACING: it has a deadline
        self.published_whole = 0  # the step's journal.read_whole at the last publish

    def next_deadline(self, now: Instant) -> float | None:
        return self.last_publish + PUBLISH_SPACING if self.publish_due else None

    def tell(self, step: Step) -> None:
        exporter, acted = self.exporter, step.acted
        exporter.saw_verdicts(acted.verdicts)
        for reason in acted.restarts:
            exporter.restarted(reason)
        for why in acted.not_made:
            exporter.restart_not_made(why)
        exporter.set_degraded(acted.degraded)
        exporter.set_why(step.why)
        exporter.saw_timer_warnings(step.timer_warnings)
        for finding in step.ras_found:
            exporter.saw_ras(finding)
        for probe in step.probes:
            exporter.observe_probe(probe.seconds, probe.ok)
        exporter.saw_vitals(step.shown_vitals)
        monotonic = self.clock.monotonic()
        news = step.journal.read_whole
        if monotonic - self.last_publish < PUBLISH_SPACING and news == self.published_whole:
            self.publish_due = True
            return
        self.last_publish, self.publish_due, self.published_whole = monotonic, False, news
        exporter.saw_rejected(step.journal.rejected)
        exporter.publish(step, acted.memory)
