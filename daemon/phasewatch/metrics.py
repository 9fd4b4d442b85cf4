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

import bisect
import json
import logging
import math
import os
import socket
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from . import __version__, trust
from .clock import Clock, SystemClock
from .config import VERDICT_KINDS, Config
from .pipeline import Judgement, Pipeline
from .policy import Verdict
from .records import MAIN, PHASE_NAMES, UNIT_PHASES, Phase
from .render import iso, status_document
from .respond import BudgetState, Memory
from .tracker import InvocationView, ServerInfo, Snapshot, UnitState
from .vitals import Vitals
from .vitals import document as vitals_document

logger = logging.getLogger(__name__)

# Buckets in seconds. Phases: a few seconds (dist init) to an hour (weight loading of a 1 TB model).
PHASE_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0)
STARTUP_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1500.0, 1800.0, 2400.0, 3000.0, 3600.0,
                   5400.0, 7200.0)
# SGLang's /health_generate answers within a second when idle, 503 after 20 s without a scheduler.
PROBE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
# Phases whose completed spans are observed: a scheduler rank's own phases, and the main process's
# http_server_start and warmup (once per start-up, not once per rank). ready/serving never complete.
RANK_PHASES = tuple(p for p in Phase if p not in UNIT_PHASES)
TIMED_PHASES = (*RANK_PHASES, Phase.HTTP_SERVER_START, Phase.WARMUP)
LIVE_STATES = (UnitState.STARTING, UnitState.READY, UnitState.SERVING)
DEGRADABLE = ("history", "state")  # what the daemon keeps in its state directory


@dataclass(frozen=True)
class Histogram:
    """A frozen cumulative histogram: `observe()` returns a new one."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...] = ()  # per bucket, +Inf last; () = nothing observed yet
    total: float = 0.0

    def observe(self, value: float) -> Histogram:
        counts = list(self.counts or (0,) * (len(self.bounds) + 1))
        counts[bisect.bisect_left(self.bounds, value)] += 1  # the first bucket with value <= le
        return Histogram(self.bounds, tuple(counts), self.total + value)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        counts = self.counts or (0,) * (len(self.bounds) + 1)
        out, cumulative = [], 0
        for bound, n in zip((*self.bounds, math.inf), counts, strict=True):
            cumulative += n
            out.append(("+Inf" if math.isinf(bound) else repr(bound), float(cumulative)))
        return out


@dataclass(frozen=True)
class BudgetView:
    state: str
    remaining: int
    max: int
    window_seconds: float
    backoff_seconds: float
    restarts: int

    @staticmethod
    def of(memory: Memory, now: float, config: Config) -> BudgetView:
        limits = config.restart_budget
        return BudgetView(memory.budget.state.value, memory.budget.remaining(now, config), limits.max,
                          limits.window, limits.backoff, memory.budget.restarts)

    def document(self) -> dict[str, Any]:
        return {"state": self.state, "remaining": self.remaining, "max": self.max,
                "window_seconds": self.window_seconds, "backoff_seconds": self.backoff_seconds,
                "restarts": self.restarts}


@dataclass(frozen=True)
class Published:
    """What the daemon knew after its last step. Frozen; replaced whole, never changed."""

    now: float | None = None  # when it was published (None: nothing yet)
    invocation: InvocationView | None = None  # the current start-up
    judgement: Judgement | None = None
    budget: BudgetView | None = None
    server: ServerInfo | None = None  # the last server_args seen
    entries: int = 0
    lines_lost: int = 0
    verdicts: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (kind, phase) -> count
    verdicts_seen: Mapping[tuple[str, str, str], float] = field(default_factory=dict)  # (kind, rank, phase) -> when
    restarts: Mapping[str, int] = field(default_factory=dict)  # reason (verdict kind) -> count
    phase_durations: Mapping[str, Histogram] = field(default_factory=dict)
    startup_durations: Histogram = Histogram(STARTUP_BUCKETS)
    judged_with: Config | None = None  # the limits in force (learned ones with `adaptive`)
    limit_reasons: Mapping[str, str] = field(default_factory=dict)  # phase -> why that limit
    eta: float | None = None  # seconds to ready, from past start-ups
    rejected: Mapping[str, int] = field(default_factory=dict)  # reason -> untrusted entries ignored (trust.py)
    degraded: Mapping[str, str] = field(default_factory=dict)  # "history"/"state" -> why kept in memory only


@dataclass(frozen=True)
class Probes:
    seconds: Histogram = Histogram(PROBE_BUCKETS)
    failures: int = 0


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
        self._phase_durations = {p.value: Histogram(PHASE_BUCKETS) for p in TIMED_PHASES}
        self._startup_durations = Histogram(STARTUP_BUCKETS)
        self._observed: dict[tuple[str, str, str], None] = {}  # (invocation, rank, phase), in order
        self._startups: dict[str, None] = {}
        self._lost: dict[str, int] = {}
        self._lines_lost = 0
        self._rejected: dict[str, int] = dict.fromkeys(trust.REASONS, 0)
        self._server: ServerInfo | None = None
        self._known: frozenset[str] = frozenset()
        self._degraded: dict[str, str] = {}
        # read by the server threads
        self._published = self._freeze(Published())
        self._probes = Probes()
        self._probe_lock = threading.Lock()
        self._vitals: Vitals | None = None  # replaced whole by the daemon, read by the server threads
        self.registry.register(_Collector(self))

    # -- fed by the daemon (main thread) -------------------------------------------------------
    def saw_verdicts(self, verdicts: Iterable[Verdict]) -> None:
        """Counts each verdict once, when its key is first seen."""
        for verdict in verdicts:
            self._saw_verdict(verdict, verdict.at)
            if verdict.key in self._verdict_keys:
                continue
            self._verdict_keys[verdict.key] = verdict.invocation_id
            label = (verdict.kind, verdict.phase or "")
            self._verdicts[label] = self._verdicts.get(label, 0) + 1

    def _saw_verdict(self, verdict: Verdict, when: float) -> None:
        label = (verdict.kind, verdict.rank or "", verdict.phase or "")
        self._verdicts_seen[label] = max(self._verdicts_seen.get(label, when), when)

    def saw_vitals(self, vitals: Vitals | None) -> None:
        """The latest signs of life of the ranks (None: not sampling, the start-up is over)."""
        self._vitals = vitals

    def restarted(self, reason: str) -> None:
        """phasewatch restarted the unit (the D-Bus call succeeded) because of a `reason` verdict."""
        self._restarts[reason] = self._restarts.get(reason, 0) + 1

    def saw_rejected(self, rejected: Mapping[str, int]) -> None:
        """The journal reader's running totals of entries that claimed the unit untrusted, by reason."""
        self._rejected.update(rejected)

    def set_degraded(self, degraded: Mapping[str, str]) -> None:
        """What of the state directory is kept in memory only ("history", "state"), and why."""
        self._degraded = dict(degraded)

    def observe_probe(self, seconds: float, ok: bool) -> None:
        """One health probe after ready took `seconds` (any thread)."""
        with self._probe_lock:
            probes = self._probes
            self._probes = Probes(probes.seconds.observe(max(seconds, 0.0)), probes.failures + (0 if ok else 1))

    def publish(self, pipeline: Pipeline, memory: Memory, now: float, eta: float | None = None,
                limit_reasons: Mapping[str, str] | None = None) -> None:
        """After each loop step: observe what completed, then replace the published reference."""
        snapshot = pipeline.snapshot()
        self._observe(snapshot)
        current = snapshot.current
        judgement = pipeline.judge(now, Snapshot((current,)))[0] if current is not None else None
        for verdict in judgement.verdicts if judgement is not None else ():
            self._saw_verdict(verdict, now)  # a standing verdict stays recent
        self._published = self._freeze(Published(now, current, judgement, BudgetView.of(memory, now, self.config),
                                                 self._server, pipeline.entries, judged_with=pipeline.config,
                                                 limit_reasons=dict(limit_reasons or {}), eta=eta))

    def _freeze(self, published: Published) -> Published:
        return Published(published.now, published.invocation, published.judgement, published.budget,
                         published.server, published.entries, self._lines_lost, dict(self._verdicts),
                         dict(self._verdicts_seen),
                         dict(self._restarts), dict(self._phase_durations), self._startup_durations,
                         published.judged_with, published.limit_reasons, published.eta, dict(self._rejected),
                         dict(self._degraded))

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

    def status(self) -> dict[str, Any]:
        """The `/status` document: render.status_document over the published judgement, aged to now."""
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
                                    "daemon": daemon_identity()})
        document["vitals"] = vitals_document(self._vitals, now)
        return document

    def collect(self) -> Iterator[Metric]:
        with self._probe_lock:
            probes = self._probes
        yield from families(self._published, probes, self.clock.wall(), self._published.judged_with or self.config)
        yield from vitals_families(self._vitals, self.config.unit)


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


def _rank_waits(inv: InvocationView, rank_label: str, phase: Phase, ended: bool) -> bool:
    """Not held to its phase's deadline: done and waiting for others, or the main process waiting for
    the ranks (policy judges the main process only in the unit's own phases or before any rank)."""
    if ended:
        return True
    return rank_label == MAIN and phase not in UNIT_PHASES and any(r.seen for r in inv.scheduler_ranks)


def families(published: Published, probes: Probes, now: float, config: Config) -> list[Metric]:
    """Every phasewatch metric family for `published`, ages measured at `now`. Pure."""
    unit = config.unit
    inv = published.invocation
    ranks = inv.ranks if inv is not None else ()
    live = inv is not None and inv.state in LIVE_STATES
    out: list[Metric] = []

    def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["unit", *labels])
        out.append(family)
        return family

    def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["unit", *labels])
        out.append(family)
        return family

    def histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=["unit", *labels])
        out.append(family)
        return family

    rank_phase = gauge("phasewatch_rank_phase", "1 for the phase each rank of the current start-up is in, "
                       "0 for the others (state set over the canonical phases)", ["rank", "phase"])
    for rank in ranks:
        for phase in Phase:
            rank_phase.add_metric([unit, rank.rank, phase.value], 1.0 if rank.phase is phase else 0.0)

    elapsed = gauge("phasewatch_phase_elapsed_seconds", "Seconds since the rank entered its current phase "
                    "(while the unit is starting, ready or serving)", ["rank"])
    waiting = gauge("phasewatch_rank_waiting", "1 when the rank is not held to its phase's deadline: it finished "
                    "the phase and waits for the others, or it is the main process waiting for the ranks", ["rank"])
    entered = gauge("phasewatch_rank_phases_entered", "Number of per-rank phases (launch to "
                    "draft_cuda_graph_capture) the scheduler rank has entered in this start-up", ["rank"])
    activity = gauge("phasewatch_last_activity_timestamp_seconds", "When the rank last printed a line or moved "
                     "a progress bar (Unix time)", ["rank"])
    progress = gauge("phasewatch_phase_progress_ratio", "A rank's progress bar in its phase, n/total (0 to 1)",
                     ["rank", "phase"])
    for rank in ranks:
        if live and rank.phase_start is not None:
            elapsed.add_metric([unit, rank.rank], max(now - rank.phase_start, 0.0))
        if inv is not None:
            waiting.add_metric([unit, rank.rank], float(_rank_waits(inv, rank.rank, rank.phase, rank.phase_ended)))
        if rank.rank != MAIN:
            phases = {s.phase for s in rank.spans if s.phase not in UNIT_PHASES}
            entered.add_metric([unit, rank.rank], float(len(phases)))
        if rank.last_activity is not None:
            activity.add_metric([unit, rank.rank], rank.last_activity)
        bar = rank.progress
        if bar is not None and bar.total and rank.progress_phase is not None:
            progress.add_metric([unit, rank.rank, rank.progress_phase.value], min(max(bar.n / bar.total, 0.0), 1.0))

    deadline = gauge("phasewatch_phase_deadline_seconds", "Longest a rank may stay in the phase (config; "
                     "absent: no limit)", ["phase"])
    stall = gauge("phasewatch_phase_stall_seconds", "Longest a rank may stay silent in the phase (config; "
                  "absent: no limit)", ["phase"])
    learned = gauge("phasewatch_phase_deadline_learned", "1 when the phase's limits in force were learned from "
                    "past start-ups (adaptive), 0 when configured", ["phase"])
    for phase in Phase:
        limits = config.limits(phase)
        if limits.deadline is not None:
            deadline.add_metric([unit, phase.value], limits.deadline)
        if limits.stall is not None:
            stall.add_metric([unit, phase.value], limits.stall)
        why = published.limit_reasons.get(phase.value, "configured")
        learned.add_metric([unit, phase.value], 1.0 if why.startswith("learned") else 0.0)
    eta = gauge("phasewatch_startup_eta_seconds", "Estimated seconds until the current start-up is ready, from "
                "past start-ups (absent: no history, or not starting)", [])
    if published.eta is not None:
        eta.add_metric([unit], published.eta)

    state = gauge("phasewatch_unit_state", "1 for the state of the current start-up (starting, ready, serving, "
                  "stopping, stopped, failed), 0 for the others", ["state"])
    for value in UnitState:
        state.add_metric([unit, value.value], 1.0 if inv is not None and inv.state is value else 0.0)
    ready = gauge("phasewatch_unit_ready", "1 when the current start-up reached ready (ready or serving)", [])
    ready.add_metric([unit], 1.0 if inv is not None and inv.state in (UnitState.READY, UnitState.SERVING) else 0.0)
    startup = gauge("phasewatch_startup_elapsed_seconds", "Seconds since the current start-up began (while it "
                    "is starting)", [])
    if inv is not None and inv.state is UnitState.STARTING and inv.started_at is not None:
        startup.add_metric([unit], max(now - inv.started_at, 0.0))

    active = gauge("phasewatch_active_verdicts", "Verdicts the latest judgement of the current start-up holds",
                   ["kind"])
    held = [v.kind for v in published.judgement.verdicts] if published.judgement is not None else []
    for kind in VERDICT_KINDS:
        active.add_metric([unit, kind], float(held.count(kind)))
    verdicts = counter("phasewatch_verdicts", "Verdicts, each counted once when first seen", ["kind", "phase"])
    for (kind, phase_name), count in sorted(published.verdicts.items()):
        verdicts.add_metric([unit, kind, phase_name], float(count))
    seen = gauge("phasewatch_verdict_seen_timestamp_seconds", "Unix time a verdict of this kind for this rank "
                 "and phase was last seen (first judged, or still held)", ["kind", "rank", "phase"])
    for (kind, rank_label, phase_name), when in sorted(published.verdicts_seen.items()):
        seen.add_metric([unit, kind, rank_label, phase_name], when)
    restarts = counter("phasewatch_restarts", "Restarts of the unit phasewatch asked systemd for, by the verdict "
                       "that caused them", ["reason"])
    for reason, count in sorted(published.restarts.items()):
        restarts.add_metric([unit, reason], float(count))
    remaining = gauge("phasewatch_restart_budget_remaining", "Failed start-ups the restart budget still allows "
                      "within its window (0 once given up)", [])
    gave_up = gauge("phasewatch_restart_budget_gave_up", "1 when the restart budget is spent and phasewatch no "
                    "longer restarts the unit (until a start-up reaches ready or an operator restarts it)", [])
    budget = published.budget
    if budget is not None:
        remaining.add_metric([unit], float(budget.remaining))
        gave_up.add_metric([unit], 1.0 if budget.state == BudgetState.GAVE_UP.value else 0.0)

    degraded = gauge("phasewatch_state_degraded", "1 when the state directory cannot keep it (full, read-only "
                     "or unwritable): history or state kept in memory only, lost when phasewatch restarts", ["what"])
    for what in DEGRADABLE:
        degraded.add_metric([unit, what], 1.0 if what in published.degraded else 0.0)

    counter("phasewatch_journal_entries", "Journal entries of the unit read", []).add_metric(
        [unit], float(published.entries))
    counter("phasewatch_journal_lines_lost", "Lines journald dropped (rate limit) or elided", []).add_metric(
        [unit], float(published.lines_lost))
    rejected = counter("phasewatch_entries_rejected", "Journal entries that claimed the unit without the trusted "
                       "fields that vouch for it, ignored", ["reason"])
    for reason, count in published.rejected.items():
        rejected.add_metric([unit, reason], float(count))

    durations = histogram("phasewatch_phase_duration_seconds", "Durations of completed phases: each rank's own "
                          "phases per rank, http_server_start and warmup once per start-up", ["phase"])
    for phase_name, observed in published.phase_durations.items():
        durations.add_metric([unit, phase_name], observed.buckets(), observed.total)
    startups = histogram("phasewatch_startup_duration_seconds", "From the start of an invocation to ready, once "
                         "per start-up", [])
    startups.add_metric([unit], published.startup_durations.buckets(), published.startup_durations.total)
    probe = histogram("phasewatch_health_probe_seconds", "Duration of the health probes after ready", [])
    probe.add_metric([unit], probes.seconds.buckets(), probes.seconds.total)
    counter("phasewatch_health_probe_failures", "Health probes that failed (error, timeout, not 200)", []).add_metric(
        [unit], float(probes.failures))

    server = published.server
    info = InfoMetricFamily("phasewatch", "phasewatch and the watched server (version: phasewatch's own; server "
                            "fields from SGLang's server_args, empty until seen)")
    info.add_metric([], {"unit": unit, "engine": config.engine, "version": __version__,
                         "tp": _text(server, "tp"), "dp": _text(server, "dp"), "pp": _text(server, "pp"),
                         "nnodes": _text(server, "nnodes"), "node_rank": _text(server, "node_rank"),
                         "speculative": "" if server is None else (server.speculative or "none")})
    out.append(info)
    return out


def vitals_families(vitals: Vitals | None, unit: str) -> list[Metric]:
    """Signs of life beyond log lines, per rank of the current start-up (while it starts). Pure."""
    intake = CounterMetricFamily("phasewatch_rank_intake_bytes", "Bytes the rank's process has read so far (the "
                                 "larger of rchar and read_bytes of /proc/PID/io; absent where not permitted)",
                                 labels=["unit", "rank"])
    faults = CounterMetricFamily("phasewatch_rank_page_faults", "Page faults (minor and major) of the rank's "
                                 "process so far", labels=["unit", "rank"])
    compilers = GaugeMetricFamily("phasewatch_rank_compilers", "Compiler processes (nvcc, ptxas, cicc, c++...) "
                                  "running under the rank at the last sample", labels=["unit", "rank"])
    alive = GaugeMetricFamily("phasewatch_rank_progress", "1 when the last sample showed the rank taking in data "
                              "or compiling (a sign of life without a log line), 0 when not", labels=["unit", "rank"])
    for rank in vitals.ranks if vitals is not None else ():
        if rank.intake_bytes is not None:
            intake.add_metric([unit, rank.rank], float(rank.intake_bytes))
        faults.add_metric([unit, rank.rank], float(rank.faults))
        compilers.add_metric([unit, rank.rank], float(sum(n for _, n in rank.compilers)))
        alive.add_metric([unit, rank.rank], 1.0 if rank.alive else 0.0)
    return [intake, faults, compilers, alive]


def _text(server: ServerInfo | None, name: str) -> str:
    return "" if server is None else str(getattr(server, name))


# -- the HTTP server ---------------------------------------------------------------------------------


# A scrape or a `phasewatch status` takes milliseconds; a client that has not sent its request within
# READ_TIMEOUT of a read, or is not done within CONNECTION_DEADLINE, is cut off. At most
# MAX_CONNECTIONS are served at once; more are closed at once (counted as `busy`).
READ_TIMEOUT = 5.0
CONNECTION_DEADLINE = 15.0
MAX_CONNECTIONS = 16
CONNECTION_REASONS = ("reset", "timeout", "busy", "error")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, exporter: Exporter) -> None:
        self.address_family = family
        self.exporter = exporter
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._counts_lock = threading.Lock()
        self.connection_errors: dict[str, int] = {}
        super().__init__(address, _Handler)

    def count(self, reason: str) -> None:
        with self._counts_lock:
            self.connection_errors = {**self.connection_errors, reason: self.connection_errors.get(reason, 0) + 1}

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.count("busy")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # a thread, which releases the slot
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(CONNECTION_DEADLINE, _cut_off, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is a counter, not a traceback in the journal."""
        error = sys.exc_info()[1]
        if isinstance(error, TimeoutError):
            self.count("timeout")
        elif isinstance(error, OSError):  # reset, broken pipe, cut off at the deadline
            self.count("reset")
        else:
            self.count("error")
            logger.error("metrics: a request failed: %s", error, exc_info=logger.isEnabledFor(logging.DEBUG))


def _cut_off(request: socket.socket) -> None:
    try:
        request.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _ServerCollector:
    """`phasewatch_http_connection_errors_total{reason}`: the listener's own troubles."""

    def __init__(self, httpd: _Server) -> None:
        self.httpd = httpd

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("phasewatch_http_connection_errors", "Connections to /metrics and /status "
                                     "that ended badly: reset by the client, timed out, refused as busy (more than "
                                     f"{MAX_CONNECTIONS} at once), or failed", labels=["unit", "reason"])
        counts = self.httpd.connection_errors
        for reason in CONNECTION_REASONS:
            family.add_metric([self.httpd.exporter.config.unit, reason], counts.get(reason, 0))
        yield family


class _Handler(BaseHTTPRequestHandler):
    server_version = f"phasewatch/{__version__}"
    timeout = READ_TIMEOUT  # per read; http.server sets it on the connection

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        exporter = self.server.exporter if isinstance(self.server, _Server) else None
        path = urlsplit(self.path).path
        if exporter is None:
            self._answer(500, "text/plain; charset=utf-8", b"no exporter\n")
        elif path == "/metrics":
            try:
                body = generate_latest(exporter.registry)
            except Exception:  # a bug must not kill the daemon's listener
                logger.exception("metrics: collecting failed")
                self._answer(500, "text/plain; charset=utf-8", b"collecting the metrics failed\n")
                return
            self._answer(200, CONTENT_TYPE_LATEST, body)
        elif path == "/status":
            try:
                body = json.dumps(exporter.status(), indent=1).encode() + b"\n"
            except Exception:
                logger.exception("metrics: /status failed")
                self._answer(500, "text/plain; charset=utf-8", b"building the status failed\n")
                return
            self._answer(200, "application/json", body)
        elif path == "/":
            self._answer(200, "text/html; charset=utf-8",
                         b'<html><body><h1>phasewatch</h1><p><a href="/metrics">/metrics</a> '
                         b'<a href="/status">/status</a></p></body></html>\n')
        else:
            self._answer(404, "text/plain; charset=utf-8", b"not found: try /metrics or /status\n")

    def _answer(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug("metrics: " + format, *args)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        if args and isinstance(args[-1], TimeoutError) and isinstance(self.server, _Server):
            self.server.count("timeout")  # http.server caught it: the client sent nothing in time
        self.log_message(format, *args)


class MetricsServer:
    """The listener thread; `close()` stops it (tests, and the daemon on exit)."""

    def __init__(self, httpd: _Server) -> None:
        self._httpd = httpd
        self._collector = _ServerCollector(httpd)
        httpd.exporter.registry.register(self._collector)
        # serve_forever wakes every poll_interval only to notice shutdown(); close() wakes it with a
        # connection instead, so an idle daemon does not tick twice a second here.
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 3600},
                                        name="phasewatch-metrics", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        stopper = threading.Thread(target=self._httpd.shutdown, daemon=True)
        stopper.start()
        host, port = self.address
        while stopper.is_alive():
            try:
                with socket.create_connection((host if host not in ("0.0.0.0", "::") else "127.0.0.1", port),
                                              timeout=1):
                    pass
            except OSError:
                pass
            stopper.join(timeout=0.05)
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._httpd.exporter.registry.unregister(self._collector)


def parse_listen(listen: str) -> tuple[str, int]:
    """`127.0.0.1:9877`, `[::1]:9877`, `localhost:9877` -> (host, port)."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT like 127.0.0.1:9877, got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def serve(listen: str, exporter: Exporter) -> MetricsServer | None:
    """Serve /metrics and /status on `listen`; None (logged) when that fails: the daemon runs on."""
    try:
        host, port = parse_listen(listen)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        httpd = _Server((host, port), family, exporter)
    except (OSError, ValueError) as exc:
        logger.error("[%s] metrics: cannot listen on %s (%s); running without /metrics and /status",
                     exporter.config.unit, listen, exc)
        return None
    server = MetricsServer(httpd)
    logger.info("[%s] metrics and status on http://%s/metrics, /status", exporter.config.unit, listen)
    return server


def start_metrics(config: Config, clock: Clock | None = None) -> tuple[Exporter, MetricsServer | None]:
    """The daemon's exporter on its own registry (with the process and platform collectors), served at
    `config.metrics_listen`."""
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    exporter = Exporter(config, registry, clock)
    return exporter, serve(config.metrics_listen, exporter)
