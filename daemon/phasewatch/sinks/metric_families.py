"""The metric families of a published snapshot (docs/metrics.md), and the frozen records the
exporter publishes: built at scrape time, never kept in gauges."""
from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from .. import __version__
from ..config.load import VERDICT_KINDS, Config
from ..engines import ServerInfo
from ..pipeline import Judgement
from ..records import MAIN, UNIT_PHASES, Phase
from ..stages.s3_track.snapshot import LIVE_STATES, UP_STATES, InvocationView, UnitState
from ..stages.s4_judge.vitals import Vitals
from ..stages.s5_act.respond import BudgetState, Memory

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
    behind_seconds: float = 0.0  # how far the reading is behind the journal's newest entries
    reopens: Mapping[str, int] = field(default_factory=dict)  # why -> journal reopens at the cursor
    restarts_not_made: Mapping[str, int] = field(default_factory=dict)  # why -> decided restarts not made


@dataclass(frozen=True)
class Probes:
    seconds: Histogram = Histogram(PROBE_BUCKETS)
    failures: int = 0



def _rank_waits(inv: InvocationView, rank_label: str, phase: Phase, ended: bool) -> bool:
    """Not held to its phase's deadline: done and waiting for others, or the main process waiting for
    the ranks (policy judges the main process only in the unit's own phases or before any rank)."""
    if ended:
        return True
    return rank_label == MAIN and phase not in UNIT_PHASES and any(r.seen for r in inv.scheduler_ranks)


class _Families:
    """The metric families made so far, in the order made; each labelled by the unit first."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self.out: list[Metric] = []

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["unit", *labels])
        self.out.append(family)
        return family

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["unit", *labels])
        self.out.append(family)
        return family

    def histogram(self, name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=["unit", *labels])
        self.out.append(family)
        return family


def families(published: Published, probes: Probes, now: float, config: Config) -> list[Metric]:
    """Every phasewatch metric family for `published`, ages measured at `now`. Pure."""
    f = _Families(config.unit)
    inv = published.invocation
    _rank_families(f, inv, now)
    _limit_families(f, published, config)
    _state_families(f, inv, now)
    _verdict_families(f, published)
    _journal_families(f, published)
    _duration_families(f, published, probes)
    server = published.server
    info = InfoMetricFamily("phasewatch", "phasewatch and the watched server (version: phasewatch's own; server "
                            "fields from SGLang's server_args, empty until seen)")
    info.add_metric([], {"unit": config.unit, "engine": config.engine, "version": __version__,
                         "tp": _text(server, "tp"), "dp": _text(server, "dp"), "pp": _text(server, "pp"),
                         "nnodes": _text(server, "nnodes"), "node_rank": _text(server, "node_rank"),
                         "speculative": "" if server is None else (server.speculative or "none"),
                         **({"group": config.group.name} if config.group is not None else {})})
    f.out.append(info)
    return f.out


def _rank_families(f: _Families, inv: InvocationView | None, now: float) -> None:
    """Each rank's phase, time in it, waiting, phases entered, last activity, progress."""
    unit = f.unit
    ranks = inv.ranks if inv is not None else ()
    live = inv is not None and inv.state in LIVE_STATES
    rank_phase = f.gauge("phasewatch_rank_phase", "1 for the phase each rank of the current start-up is in, "
                       "0 for the others (state set over the canonical phases)", ["rank", "phase"])
    for rank in ranks:
        for phase in Phase:
            rank_phase.add_metric([unit, rank.rank, phase.value], 1.0 if rank.phase is phase else 0.0)

    elapsed = f.gauge("phasewatch_phase_elapsed_seconds", "Seconds since the rank entered its current phase "
                    "(while the unit is starting, ready or serving)", ["rank"])
    waiting = f.gauge("phasewatch_rank_waiting", "1 when the rank is not held to its phase's deadline: it finished "
                    "the phase and waits for the others, or it is the main process waiting for the ranks", ["rank"])
    entered = f.gauge("phasewatch_rank_phases_entered", "Number of per-rank phases (launch to "
                    "draft_cuda_graph_capture) the scheduler rank has entered in this start-up", ["rank"])
    activity = f.gauge("phasewatch_last_activity_timestamp_seconds", "When the rank last printed a line or moved "
                     "a progress bar (Unix time)", ["rank"])
    progress = f.gauge("phasewatch_phase_progress_ratio", "A rank's progress bar in its phase, n/total (0 to 1)",
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


def _limit_families(f: _Families, published: Published, config: Config) -> None:
    """The limits in force per phase, learned or configured, and the ETA."""
    unit = f.unit
    deadline = f.gauge("phasewatch_phase_deadline_seconds", "Longest a rank may stay in the phase (config; "
                     "absent: no limit)", ["phase"])
    stall = f.gauge("phasewatch_phase_stall_seconds", "Longest a rank may stay silent in the phase (config; "
                  "absent: no limit)", ["phase"])
    learned = f.gauge("phasewatch_phase_deadline_learned", "1 when the phase's limits in force were learned from "
                    "past start-ups (adaptive), 0 when configured", ["phase"])
    for phase in Phase:
        limits = config.limits(phase)
        if limits.deadline is not None:
            deadline.add_metric([unit, phase.value], limits.deadline)
        if limits.stall is not None:
            stall.add_metric([unit, phase.value], limits.stall)
        why = published.limit_reasons.get(phase.value, "configured")
        learned.add_metric([unit, phase.value], 1.0 if why.startswith("learned") else 0.0)
    eta = f.gauge("phasewatch_startup_eta_seconds", "Estimated seconds until the current start-up is ready, from "
                "past start-ups (absent: no history, or not starting)", [])
    if published.eta is not None:
        eta.add_metric([unit], published.eta)


def _state_families(f: _Families, inv: InvocationView | None, now: float) -> None:
    """The current start-up's state, whether it is ready, the time since it began."""
    unit = f.unit
    state = f.gauge("phasewatch_unit_state", "1 for the state of the current start-up (starting, ready, serving, "
                  "stopping, stopped, failed), 0 for the others", ["state"])
    for value in UnitState:
        state.add_metric([unit, value.value], 1.0 if inv is not None and inv.state is value else 0.0)
    ready = f.gauge("phasewatch_unit_ready", "1 when the current start-up reached ready (ready or serving)", [])
    ready.add_metric([unit], 1.0 if inv is not None and inv.state in UP_STATES else 0.0)
    startup = f.gauge("phasewatch_startup_elapsed_seconds", "Seconds since the current start-up began (while it "
                    "is starting)", [])
    if inv is not None and inv.state is UnitState.STARTING and inv.started_at is not None:
        startup.add_metric([unit], max(now - inv.started_at, 0.0))


def _verdict_families(f: _Families, published: Published) -> None:
    """Verdicts held and seen, restarts made and not made, the restart budget."""
    unit = f.unit
    active = f.gauge("phasewatch_active_verdicts", "Verdicts the latest judgement of the current start-up holds",
                   ["kind"])
    held = [v.kind for v in published.judgement.verdicts] if published.judgement is not None else []
    for kind in VERDICT_KINDS:
        active.add_metric([unit, kind], float(held.count(kind)))
    verdicts = f.counter("phasewatch_verdicts", "Verdicts, each counted once when first seen", ["kind", "phase"])
    for (kind_name, phase_name), count in sorted(published.verdicts.items()):
        verdicts.add_metric([unit, kind_name, phase_name], float(count))
    seen = f.gauge("phasewatch_verdict_seen_timestamp_seconds", "Unix time a verdict of this kind for this rank "
                 "and phase was last seen (first judged, or still held)", ["kind", "rank", "phase"])
    for (kind_name, rank_label, phase_name), when in sorted(published.verdicts_seen.items()):
        seen.add_metric([unit, kind_name, rank_label, phase_name], when)
    restarts = f.counter("phasewatch_restarts", "Restarts of the unit phasewatch asked systemd for, by the verdict "
                       "that caused them", ["reason"])
    for reason, count in sorted(published.restarts.items()):
        restarts.add_metric([unit, reason], float(count))
    not_made = f.counter("phasewatch_restarts_not_made", "Restarts phasewatch decided and did not make, by why "
                       "(started_again: the unit was started again before the action worker got to it)", ["why"])
    for why, count in sorted(published.restarts_not_made.items()):
        not_made.add_metric([unit, why], float(count))
    remaining = f.gauge("phasewatch_restart_budget_remaining", "Failed start-ups the restart budget still allows "
                      "within its window (0 once given up)", [])
    gave_up = f.gauge("phasewatch_restart_budget_gave_up", "1 when the restart budget is spent and phasewatch no "
                    "longer restarts the unit (until a start-up reaches ready or an operator restarts it)", [])
    budget = published.budget
    if budget is not None:
        remaining.add_metric([unit], float(budget.remaining))
        gave_up.add_metric([unit], 1.0 if budget.state == BudgetState.GAVE_UP.value else 0.0)


def _journal_families(f: _Families, published: Published) -> None:
    """The state directory degraded; the journal's reading: entries, losses, lag, reopens, rejections."""
    unit = f.unit
    degraded = f.gauge("phasewatch_state_degraded", "1 when the state directory cannot keep it (full, read-only "
                     "or unwritable): history or state kept in memory only, lost when phasewatch restarts", ["what"])
    for what in DEGRADABLE:
        degraded.add_metric([unit, what], 1.0 if what in published.degraded else 0.0)

    f.counter("phasewatch_journal_entries", "Journal entries of the unit read", []).add_metric(
        [unit], float(published.entries))
    f.counter("phasewatch_journal_lines_lost", "Lines journald dropped (rate limit) or elided", []).add_metric(
        [unit], float(published.lines_lost))
    f.gauge("phasewatch_journal_behind_seconds", "How far the reading is behind the journal's newest entries "
          "(0: caught up); while over 2 s the start-up is judged at the last entry read", []).add_metric(
        [unit], float(published.behind_seconds))
    reopens = f.counter("phasewatch_journal_reopens", "Journal reopens at the cursor: its files changed (rotation, "
                      "vacuum), a read failed (EBADMSG, ENOENT, ESTALE), the catch-up reader failed", ["reason"])
    for reason, count in published.reopens.items():
        reopens.add_metric([unit, reason], float(count))
    rejected = f.counter("phasewatch_entries_rejected", "Journal entries that claimed the unit without the trusted "
                       "fields that vouch for it, ignored", ["reason"])
    for reason, count in published.rejected.items():
        rejected.add_metric([unit, reason], float(count))


def _duration_families(f: _Families, published: Published, probes: Probes) -> None:
    """Phase and start-up durations, health probe durations and failures."""
    unit = f.unit
    durations = f.histogram("phasewatch_phase_duration_seconds", "Durations of completed phases: each rank's own "
                          "phases per rank, http_server_start and warmup once per start-up", ["phase"])
    for phase_name, observed in published.phase_durations.items():
        durations.add_metric([unit, phase_name], observed.buckets(), observed.total)
    startups = f.histogram("phasewatch_startup_duration_seconds", "From the start of an invocation to ready, once "
                         "per start-up", [])
    startups.add_metric([unit], published.startup_durations.buckets(), published.startup_durations.total)
    probe = f.histogram("phasewatch_health_probe_seconds", "Duration of the health probes after ready", [])
    probe.add_metric([unit], probes.seconds.buckets(), probes.seconds.total)
    f.counter("phasewatch_health_probe_failures", "Health probes that failed (error, timeout, not 200)", []).add_metric(
        [unit], float(probes.failures))


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
    power = GaugeMetricFamily("phasewatch_rank_gpu_power_watts", "Mean power of the rank's GPU over the last "
                              "vitals period (NVML; per GPU: ranks sharing one show the same)", labels=["unit", "rank"])
    gpu_state = GaugeMetricFamily("phasewatch_rank_gpu_state", "1 for the state the rank's GPU was in over the last "
                                  "period: computing, transferring, allocating (signs of life), waiting (a kernel "
                                  "resident, power low and flat, no transfers: likely a collective), idle",
                                  labels=["unit", "rank", "state"])
    source = GaugeMetricFamily("phasewatch_gpu_source", "1 for the GPU source's state: ok, unavailable (no "
                               "nvidia-ml-py, driver, GPU or permission), stuck (NVML not answering), failed "
                               "(its worker ended: started again, at most 5 times an hour), off",
                               labels=["unit", "state"])
    if vitals is not None:
        source.add_metric([unit, vitals.gpu_source], 1.0)
    for rank in vitals.ranks if vitals is not None else ():
        if rank.gpu is not None:
            if rank.gpu.power_w is not None:
                power.add_metric([unit, rank.rank], rank.gpu.power_w)
            gpu_state.add_metric([unit, rank.rank, rank.gpu.state], 1.0)
        if rank.intake_bytes is not None:
            intake.add_metric([unit, rank.rank], float(rank.intake_bytes))
        faults.add_metric([unit, rank.rank], float(rank.faults))
        compilers.add_metric([unit, rank.rank], float(sum(n for _, n in rank.compilers)))
        alive.add_metric([unit, rank.rank], 1.0 if rank.alive else 0.0)
    return [intake, faults, compilers, alive, power, gpu_state, source]


def _text(server: ServerInfo | None, name: str) -> str:
    return "" if server is None else str(getattr(server, name))
