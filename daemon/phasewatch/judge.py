"""The judge: one `Step` per loop turn, which every sink reads (the actor, systemd, the metrics, the
history, the group's restarts). It owns what judging needs beyond the pipeline's snapshot: the limits
learned from past start-ups (per fingerprint), the once-per-start-up timer check and the unit's
settings that the verdicts' remedies read. The history and the unit are read through injected
readers; the judge alerts nothing and writes nothing (what is new is a field of the `Step`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from .config.load import Config
from .engines import ServerInfo
from .errors import UnitError
from .pipeline import Judgement, Pipeline
from .records import GroupRestartRequest, Phase, ProbeAnswered
from .stages.s3_track.snapshot import InvocationView, Snapshot, UnitState
from .stages.s4_judge.gpu_fault import GpuFault
from .stages.s4_judge.learn import LimitInForce, adapted, eta_seconds, limits_in_force, typical_durations
from .stages.s4_judge.ras_culprit import RasFinding
from .stages.s4_judge.remedies import NO_UNIT, UnitSettings
from .stages.s4_judge.timerlint import TimerWarning, UnitTimers, lint
from .stages.s4_judge.timerlint import summary as lint_summary
from .stages.s4_judge.verdict import Verdict
from .stages.s4_judge.vitals import Vitals
from .stages.s5_act.respond import Memory

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JournalState:
    """How the journal's reading stands at a step (sources/journal/journal_feed.py), for status and metrics."""

    entries: int = 0  # entries of the current start-up
    rejected: Mapping[str, int] = field(default_factory=dict)  # entries that only claimed the unit, by reason
    document: Mapping[str, object] = field(default_factory=dict)  # behind, reopens (JournalFeedSource.document)
    read: int = 0  # entries read in all (Pipeline.entries)
    read_whole: int = 0  # of them, those the stages took one by one, not the fast path (Pipeline.full_entries)


@dataclass(frozen=True)
class TimerLint:
    """The timer check made at this step (once per start-up): what an alert says of it."""

    invocation_id: str
    message: str
    codes: str


@dataclass(frozen=True)
class Acted:
    """What the actor (sinks/acting/actor.py) reports after a step: how the memory stands, and what it
    did since its last report; read by the sinks after it (systemd's status, the metrics)."""

    memory: Memory = field(default_factory=Memory)
    degraded: Mapping[str, str] = field(default_factory=dict)  # "history"/"state" -> why kept in memory only
    why: Mapping[str, object] = field(default_factory=dict)  # hold, previous start-up, refused, evidence
    verdicts: tuple[Verdict, ...] = ()  # the verdicts it decided about (the metrics count each key once)
    restarts: tuple[str, ...] = ()  # restarts made (systemd has the job), by the verdict's kind
    not_made: tuple[str, ...] = ()  # restarts decided and not made, why ("started_again", "same_failure"...)


@dataclass(frozen=True)
class Step:
    """A loop turn's one judgement: the start-ups of `snapshot` that can still have news (the current
    one and the two before it), each judged once at `at` with the limits in force for it; the current
    one's limits, ETA and timer warnings; how the journal's reading stands."""

    at: float  # wall clock (the journal's time while the reading is behind: sources/journal/rebuild.JudgedClock)
    snapshot: Snapshot
    judgements: Mapping[str, Judgement]  # by invocation id
    limits: Config  # with the limits in force for the current start-up
    limit_reasons: Mapping[str, str] = field(default_factory=dict)  # phase -> why its limit is what it is
    eta: float | None = None
    timer_warnings: tuple[TimerWarning, ...] = ()
    timer_lint: TimerLint | None = None  # the check made at this step found something (to alert)
    journal: JournalState = field(default_factory=JournalState)
    vitals: Vitals | None = None  # the ranks' signs of life (sources/signs_of_life.py)
    ras: RasFinding | None = None  # NCCL RAS's last finding for the current start-up (sources/ras.py)
    requests: tuple[GroupRestartRequest, ...] = ()  # the group's restart requests taken in at this step
    ras_found: tuple[RasFinding, ...] = ()  # NCCL RAS's findings taken in since the last step (any start-up)
    probes: tuple[ProbeAnswered, ...] = ()  # the health probes answered, taken in at this step
    shown_vitals: Vitals | None = None  # the vitals last sampled, kept over a new start-up until its first sample
    acted: Acted = field(default_factory=Acted)  # (filled in after the actor: app.py)

    def of(self, inv: InvocationView | None) -> Judgement | None:
        return self.judgements.get(inv.invocation_id) if inv is not None else None

    @property
    def current(self) -> Judgement | None:
        return self.of(self.snapshot.current)

    @property
    def why(self) -> dict[str, object]:
        """For status: the actor's hold, previous start-up, refusal and evidence, the journal's reading
        and NCCL RAS's finding."""
        return {**self.acted.why, "journal": self.journal.document,
                "ras": self.ras.document() if self.ras is not None else None}


class PastStartups(Protocol):
    """The history as the judge reads it (sinks/history.History)."""

    def durations(self, unit: str, fingerprint: str, phase: str) -> list[float]: ...

    def silences(self, unit: str, fingerprint: str, phase: str) -> list[float]: ...


@dataclass(frozen=True)
class UnitReaders:
    """What the judge reads of the unit and the host, once per start-up (the timer check)."""

    timers: Callable[[], UnitTimers]  # raises UnitError
    control_group: Callable[[], str | None]
    port_holders: Callable[[list[int]], dict[int, str]]  # sources/listeners.port_holders
    ras_holder: Callable[[Mapping[str, str], str | None], str | None]  # sources/ras_client.ras_port_holder


@dataclass(frozen=True)
class HistoryReaders:
    past: PastStartups | None  # None: no history (nothing learned, no ETA)
    fingerprint: Callable[[ServerInfo, bool], str]  # sinks/history.fingerprint


@dataclass(frozen=True)
class Learned:
    config: Config  # with the limits in force
    limits: dict[Phase, LimitInForce]
    typical: dict[Phase, float]


NO_HISTORY = HistoryReaders(None, lambda server, cold: "")


class Judge:
    def __init__(self, config: Config, pipeline: Pipeline, history: HistoryReaders = NO_HISTORY,
                 unit: UnitReaders | None = None) -> None:
        self.config = config
        self.pipeline = pipeline
        self.history = history
        self.unit = unit  # None: no timer check (tests, replay)
        self.limits = config  # in force for the current start-up, as last judged
        self.unit_settings: UnitSettings = NO_UNIT  # the unit's ExecStart=, Environment=... (the timer check's)
        self.learned: dict[str, Learned] = {}  # by fingerprint
        self._fingerprinted: tuple[ServerInfo, bool, str] | None = None  # asked every step: the last one kept
        self.linted: set[str] = set()  # start-ups whose timers were checked (once each)
        self.timer_warnings: tuple[TimerWarning, ...] = ()
        self.ras_advice: dict[str, RasFinding] = {}  # invocation -> NCCL RAS's last finding (the last few)
        self.gpu_faults: tuple[GpuFault, ...] = ()  # the GPUs' reports as last taken
        self.ras_found: list[RasFinding] = []  # since the last step (its Step's)

    def saw_ras(self, finding: RasFinding) -> None:
        """A finding of NCCL RAS (sources/host/ras.py): advice for its start-up's stall verdicts (the
        last few start-ups kept)."""
        advice = self.ras_advice
        advice.pop(finding.invocation_id, None)
        advice[finding.invocation_id] = finding
        for old in list(advice)[:-3]:
            del advice[old]
        self.ras_found.append(finding)

    def saw_gpu_faults(self, faults: tuple[GpuFault, ...]) -> None:
        """The GPUs' reports as they stand (sources/host/gpu_health.py), replacing the last."""
        self.gpu_faults = faults

    def judge(self, now: float, journal: JournalState | None = None, vitals: Vitals | None = None,
              requests: tuple[GroupRestartRequest, ...] = (), probes: tuple[ProbeAnswered, ...] = (),
              shown_vitals: Vitals | None = None) -> Step:
        """The current start-up and the two before it (the one that just ended, a crash then systemd's
        Restart=, may have news too), each judged once with the limits in force for it. The current
        one's limits, ETA and timer check come first: its verdicts' remedies read the unit's settings."""
        snapshot = self.pipeline.snapshot()
        judgements: dict[str, Judgement] = {}
        for earlier in snapshot.invocations[-3:-1]:
            judgements[earlier.invocation_id] = self._judge_one(earlier, now, self.learned_for(earlier).config)
        current, eta, linted = snapshot.current, None, None
        reasons: dict[str, str] = {}
        if current is not None:
            learned = self.learned_for(current)
            self.limits = learned.config
            eta = eta_seconds(current, now, learned.typical)
            linted = self._lint_timers(current, learned)
            judgements[current.invocation_id] = self._judge_one(current, now, learned.config)
            reasons = {p.value: item.reason for p, item in learned.limits.items()}
        ras = self.ras_advice.get(current.invocation_id) if current is not None else None
        found, self.ras_found = tuple(self.ras_found), []
        return Step(now, snapshot, judgements, self.limits, reasons, eta, self.timer_warnings, linted,
                    journal or JournalState(read=self.pipeline.entries), vitals, ras, requests, found, probes,
                    shown_vitals)

    def _judge_one(self, inv: InvocationView, now: float, config: Config) -> Judgement:
        return self.pipeline.judge_one(inv, now, config, self.unit_settings, self.gpu_faults,
                                       self.ras_advice.get(inv.invocation_id))

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: the learned limits are derived from the config's, learned again."""
        self.config = self.limits = config
        self.learned.clear()

    def forget(self, fingerprint: str) -> None:
        """A start-up of this fingerprint went into the history: its limits are learned again."""
        self.learned.pop(fingerprint, None)

    def learned_for(self, inv: InvocationView) -> Learned:
        past = self.history.past
        if past is None or inv.server is None:
            return Learned(self.config, {}, {})
        last = self._fingerprinted
        if last is not None and last[0] is inv.server and last[1] == inv.cold:
            key = last[2]
        else:
            key = self.history.fingerprint(inv.server, inv.cold)  # cold and warm start-ups learn apart
            self._fingerprinted = (inv.server, inv.cold, key)
        if key not in self.learned:
            unit = self.config.unit
            durations = {p: past.durations(unit, key, p.value) for p in Phase}
            silences = {p: past.silences(unit, key, p.value) for p in Phase}
            limits = limits_in_force(self.config, self.config.adaptive, durations, silences)
            self.learned[key] = Learned(adapted(self.config, limits), limits, typical_durations(durations))
        return self.learned[key]

    def _lint_timers(self, inv: InvocationView, learned: Learned) -> TimerLint | None:
        """Once per start-up, when its server_args are known: the engine and systemd timers that end a
        phase before phasewatch's limit does, and limits below the learned healthy duration."""
        unit = self.unit
        if unit is None or inv.server is None or inv.invocation_id in self.linted or \
                inv.state is not UnitState.STARTING:
            return None
        self.linted.add(inv.invocation_id)
        try:
            timers = unit.timers()
        except UnitError as exc:
            logger.warning("[%s] timer check without the unit's settings: %s", self.config.unit, exc)
            timers = UnitTimers()
        port = inv.server.port or 0  # who holds the server's port now (a leftover server, another service)
        self.unit_settings = UnitSettings(timers.exec_start, timers.environment, timers.devices,
                                          unit.port_holders([port]) if port else {})
        # (the RAS port's holder is told from the unit's own ranks by its cgroup)
        holder = unit.ras_holder(timers.environment, unit.control_group())
        self.timer_warnings = tuple(lint(learned.config, inv.server.timer_args, timers, learned.typical, holder))
        if not self.timer_warnings:
            return None
        message = (f"{self.config.unit}: {len(self.timer_warnings)} limit(s) will not fire as configured: "
                   f"{lint_summary(self.timer_warnings)}")
        logger.warning("[%s] %s", self.config.unit, message)
        return TimerLint(inv.invocation_id, message, ",".join(w.code for w in self.timer_warnings))
