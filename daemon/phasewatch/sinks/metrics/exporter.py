"""Edge: Prometheus metrics and `/status`, served from what the daemon last published.

Thread model. The daemon's loop (the main thread) owns the `Exporter`'s counters and, after each
step, publishes one frozen `Published` by reference assignment. The HTTP server's threads only read
the latest reference (and the clock, for ages at scrape time): no lock, no half-updated state.
`observe_probe` may be called from any thread; it replaces its own frozen histogram under a lock.

The collector reads the published snapshot at scrape time (no gauges to keep in sync), registers on
an injected `CollectorRegistry` (never the global one), and every metric is documented in
docs/metrics.md. Label cardinality is bounded: ranks x phases of the current start-up.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    GaugeMetricFamily,
    Metric,
)

from ...clock import Clock, SystemClock
from ...config.load import VERDICT_KINDS, Config
from ...engines import ServerInfo
from ...judge import Step
from ...output.render import iso, status_document, without_quote
from ...records import MAIN, PHASE_NAMES, Phase
from ...sources.journal import trust
from ...stages.s3_track.snapshot import InvocationView, Snapshot
from ...stages.s4_judge.ras_culprit import RasFinding
from ...stages.s4_judge.timerlint import TimerWarning
from ...stages.s4_judge.verdict import Verdict
from ...stages.s4_judge.vitals import Vitals
from ...stages.s4_judge.vitals import document as vitals_document
from ...stages.s5_act.respond import Memory
from ..group_metrics import ended_failures, group_document, group_families
from ..metric_families import (
    PHASE_BUCKETS,
    RANK_PHASES,
    STARTUP_BUCKETS,
    TIMED_PHASES,
    BudgetView,
    Histogram,
    Probes,
    Published,
    families,
    vitals_families,
)
from ..ras_metrics import ras_families

logger = logging.getLogger(__name__)
REOPEN_REASONS = ("changed", "read_error", "retry", "catch_up_error")  # sources/journal/journal_feed.py

class Exporter:
    """Counters fed by the daemon, a snapshot published by it, metrics and /status read from them."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock or SystemClock()
        # main-thread state
        self._verdicts: dict[tuple[str, str], int] = {
            (kind, phase): 0 for kind in VERDICT_KINDS for phase in (("",) if kind == "lines_lost" else PHASE_NAMES)}
        self._verdict_keys: dict[tuple[Any, ...], str] = {}  # key -> invocation: each counted once
        self._verdicts_seen: dict[tuple[str, str, str], float] = {}  # (kind, rank, phase) -> last seen
        self._restarts: dict[str, int] = dict.fromkeys(VERDICT_KINDS, 0)
        self._restarts_not_made: dict[str, int] = {"started_again": 0, "gpu_fault": 0, "same_failure": 0}
        self._phase_durations = {p.value: Histogram(PHASE_BUCKETS) for p in TIMED_PHASES}
        self._startup_durations = Histogram(STARTUP_BUCKETS)
        self._observed: dict[tuple[str, str, str], None] = {}  # (invocation, rank, phase), in order
        self._startups: dict[str, None] = {}
        self._lost: dict[str, int] = {}
        self._lines_lost = 0
        self._rejected: dict[str, int] = dict.fromkeys(trust.REASONS, 0)
        self._behind = 0.0
        self._reopens: dict[str, int] = dict.fromkeys(REOPEN_REASONS, 0)
        self._server: ServerInfo | None = None
        self._known: frozenset[str] = frozenset()
        self._degraded: dict[str, str] = {}
        self._why: dict[str, Any] = {}  # hold, previous start-up, evidence (Step.why)
        # read by the server threads
        self._published = self._freeze(Published())
        self._probes = Probes()
        self._probe_lock = threading.Lock()
        self._vitals: Vitals | None = None  # replaced whole by the daemon, read by the server threads
        self._timer_warnings: list[str] = []  # replaced whole, like _vitals
        self._ras: RasFinding | None = None  # NCCL RAS's last finding, replaced whole, like _vitals
        # the group's counts (webhook refusals by reason, decisions by act): read from their owner
        self.group_counts: Callable[[], Mapping[str, Mapping[str, int]]] = lambda: {}
        self._group_ended: tuple[tuple[str, str, str], ...] = ()  # group_metrics.ended_failures
        self.registry.register(_Collector(self))

    # -- fed by the daemon (main thread) -------------------------------------------------------
    def reconfigure(self, config: Config) -> None:
        """A reloaded config (the exporter is carried over a reload: its HTTP server and registry stay)."""
        self.config = config

    def saw_verdicts(self, verdicts: Iterable[Verdict]) -> None:
        """Counts each verdict once, when its key is first seen."""
        for verdict in verdicts:
            self._saw_verdict(verdict, verdict.at)
            if verdict.key in self._verdict_keys:
                continue
            self._verdict_keys[verdict.key] = verdict.invocation_id
            label = (verdict.kind, verdict.phase or "")
            self._verdicts[label] = self._verdicts.get(label, 0) + 1

    def saw_timer_warnings(self, warnings: Sequence[TimerWarning]) -> None:
        """The current start-up's timer warnings (timerlint.py), shown in `/status`."""
        self._timer_warnings = [w.message for w in warnings]

    def _saw_verdict(self, verdict: Verdict, when: float) -> None:
        label = (verdict.kind, verdict.rank or "", verdict.phase or "")
        self._verdicts_seen[label] = max(self._verdicts_seen.get(label, when), when)

    def saw_vitals(self, vitals: Vitals | None) -> None:
        """The latest signs of life of the ranks (None: not sampling, the start-up is over)."""
        self._vitals = vitals

    def saw_ras(self, finding: RasFinding) -> None:
        """NCCL RAS's last answer, judged (sources/ras.py): the lag per rank and collective."""
        self._ras = finding

    def restarted(self, reason: str) -> None:
        """phasewatch restarted the unit (the D-Bus call succeeded) because of a `reason` verdict."""
        self._restarts[reason] = self._restarts.get(reason, 0) + 1

    def restart_not_made(self, why: str) -> None:
        """A restart decided and not made on purpose (sinks/acting/runner.py: `started_again`)."""
        self._restarts_not_made[why] = self._restarts_not_made.get(why, 0) + 1

    def saw_rejected(self, rejected: Mapping[str, int]) -> None:
        """The journal reader's running totals of entries that claimed the unit untrusted, by reason."""
        self._rejected.update(rejected)

    def set_why(self, why: Mapping[str, Any]) -> None:
        self._why = dict(why)
        journal = why.get("journal")
        if isinstance(journal, Mapping):  # (the journal feed's document: behind, reopens)
            self._behind = float(journal.get("behind_seconds") or 0)
            self._reopens.update(journal.get("reopens") or {})

    def set_degraded(self, degraded: Mapping[str, str]) -> None:
        """What of the state directory is kept in memory only ("history", "state"), and why."""
        self._degraded = dict(degraded)

    def observe_probe(self, seconds: float, ok: bool) -> None:
        """One health probe after ready took `seconds` (any thread)."""
        with self._probe_lock:
            probes = self._probes
            self._probes = Probes(probes.seconds.observe(max(seconds, 0.0)), probes.failures + (0 if ok else 1))

    def publish(self, step: Step, memory: Memory) -> None:
        """After a loop step: observe what completed, then replace the published reference. `step`:
        the step's judgement (judge.py), read here, never made again."""
        now, snapshot = step.at, step.snapshot
        self._observe(snapshot)
        current = snapshot.current
        judgement = step.current
        for verdict in judgement.verdicts if judgement is not None else ():
            self._saw_verdict(verdict, now)  # a standing verdict stays recent
        if self.config.group is not None:
            self._group_ended = ended_failures(snapshot, memory, now, lambda inv: _verdicts_of(step, inv))
        self._published = self._freeze(Published(now, current, judgement, BudgetView.of(memory, now, self.config),
                                                 self._server, step.journal.read, judged_with=step.limits,
                                                 limit_reasons=dict(step.limit_reasons), eta=step.eta))

    def _freeze(self, published: Published) -> Published:
        return Published(published.now, published.invocation, published.judgement, published.budget,
                         published.server, published.entries, self._lines_lost, dict(self._verdicts),
                         dict(self._verdicts_seen),
                         dict(self._restarts), dict(self._phase_durations), self._startup_durations,
                         published.judged_with, published.limit_reasons, published.eta, dict(self._rejected),
                         dict(self._degraded), self._behind, dict(self._reopens),
                         restarts_not_made=dict(self._restarts_not_made))

    def _observe(self, snapshot: Snapshot) -> None:
        for inv in snapshot.invocations:
            if inv.server is not None:
                self._server = inv.server
            lost = inv.lines_lost - self._lost.get(inv.invocation_id, 0)
            if lost > 0:
                self._lines_lost += lost
                self._lost[inv.invocation_id] = inv.lines_lost
            for rank in inv.ranks:
                wanted = (Phase.HTTP_SERVER_START, Phase.WARMUP) if rank.rank == MAIN else RANK_PHASES
                for span in rank.spans[:-1]:  # a rank's last span may still be reopened
                    key = (inv.invocation_id, rank.rank, span.phase.value)
                    if span.phase not in wanted or span.start is None or span.end is None or key in self._observed:
                        continue
                    self._observed[key] = None
                    self._phase_durations[span.phase.value] = self._phase_durations[span.phase.value].observe(
                        max(span.end - span.start, 0.0))
            ready_at = _ready_at(inv)
            if ready_at is not None and inv.started_at is not None and inv.invocation_id not in self._startups:
                self._startups[inv.invocation_id] = None
                self._startup_durations = self._startup_durations.observe(max(ready_at - inv.started_at, 0.0))
        known = frozenset(inv.invocation_id for inv in snapshot.invocations)
        if known != self._known:  # the tracker forgot an invocation: so can we
            self._known = known
            self._observed = {k: None for k in self._observed if k[0] in known}
            self._startups = {k: None for k in self._startups if k in known}
            self._lost = {k: v for k, v in self._lost.items() if k in known}
            self._verdict_keys = {k: v for k, v in self._verdict_keys.items() if v in known}

    # -- read by the server threads -----------------------------------------------------------
    @property
    def published(self) -> Published:
        return self._published

    def status(self, quotes: bool = True) -> dict[str, Any]:
        """The `/status` document: render.status_document over the published judgement, aged to now;
        without `quotes` (for a reader who may not read the unit's journal: sinks/peers.py), without the
        log text it holds, the quoted lines of the verdicts and of the previous start-up's included."""
        published = self._published
        budget = published.budget.document() if published.budget is not None else None
        config = published.judged_with or self.config
        limits = {phase.value: {"deadline_seconds": config.limits(phase).deadline,
                                "stall_seconds": config.limits(phase).stall,
                                "why": published.limit_reasons.get(phase.value, "configured")} for phase in Phase}
        now = self.clock.wall()
        document = status_document(published.judgement, now, config, budget,
                                   {"published_at": iso(published.now), "eta_seconds": published.eta,
                                    "limits": limits, "degraded": dict(published.degraded),
                                    "daemon": daemon_identity()}, quotes)
        document["vitals"] = vitals_document(self._vitals, now)
        document.update(self._why)
        previous = self._why.get("previous_startup")
        if isinstance(previous, Mapping):
            quote, message = previous.get("quote"), previous.get("message")
            shown = message if quotes or not isinstance(message, str) else \
                without_quote(message, quote if isinstance(quote, str) else None)
            document["previous_startup"] = {**{k: v for k, v in previous.items() if k != "quote"}, "message": shown}
        document["timer_warnings"] = list(self._timer_warnings)
        document["group"] = group_document(published, self.config)
        return document

    def collect(self) -> Iterator[Metric]:
        with self._probe_lock:
            probes = self._probes
        yield from families(self._published, probes, self.clock.wall(), self._published.judged_with or self.config)
        yield from vitals_families(self._vitals, self.config.unit)
        yield from ras_families(self._ras, self.config.unit)
        yield from group_families(self._published, self.config, self.group_counts(), self._group_ended)
        hold = self._why.get("hold")
        held = GaugeMetricFamily("phasewatch_hold_until_seconds", "When the operator's hold ends (Unix time; "
                                 "0: not held). While held, verdicts are alerted but nothing is restarted.",
                                 labels=["unit"])
        held.add_metric([self.config.unit], float(hold["until_seconds"]) if hold else 0.0)
        yield held


def daemon_identity() -> dict[str, Any]:
    """Who serves this /status: `phasewatch status` checks it against systemd's phasewatch@UNIT."""
    return {"invocation_id": os.environ.get("INVOCATION_ID") or None, "pid": os.getpid()}


class _Collector:
    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        return self.exporter.collect()

    def describe(self) -> Iterator[Metric]:
        """The names, for the registry's duplicate check (no values)."""
        for family in [*families(Published(), Probes(), 0.0, self.exporter.config),
                       *vitals_families(None, self.exporter.config.unit)]:
            family.samples = []
            yield family


def _ready_at(inv: InvocationView) -> float | None:
    main = inv.rank(MAIN)
    if main is None:
        return None
    return next((s.start for s in main.spans if s.phase is Phase.READY), None)


def _verdicts_of(judged: Step, inv: InvocationView) -> tuple[Verdict, ...]:
    judgement = judged.of(inv)
    return judgement.verdicts if judgement is not None else ()
