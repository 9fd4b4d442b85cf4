"""The tracker's frozen views: what every later stage, sink and command reads of a start-up.

`Snapshot` holds one `InvocationView` per start of the unit; each has its ranks (`RankView`),
fatal records (`FatalView`), server facts (`ServerInfo`) and phase spans. `UnitState` is the unit's
lifecycle state machine's state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping

from ...engines import ServerInfo
from ...records import MAIN, Phase, Progress
from ..s2_interpret.phaseorder import Anomaly


class UnitState(enum.StrEnum):
    """The unit's lifecycle: starting -> ready -> serving; any live state -> stopping -> stopped; -> failed."""

    STARTING = "starting"
    READY = "ready"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


# Named groups (tuples: membership by identity, not Enum's Python-level __hash__).
UP_STATES = (UnitState.READY, UnitState.SERVING)  # reached ready
LIVE_STATES = (UnitState.STARTING, *UP_STATES)
ENDED_STATES = (UnitState.FAILED, UnitState.STOPPED, UnitState.STOPPING)


UNIT_PHASE_ORDER = (Phase.HTTP_SERVER_START, Phase.WARMUP, Phase.READY, Phase.SERVING)
LOADING_PHASES = frozenset({Phase.WEIGHT_LOAD, Phase.DRAFT_WEIGHT_LOAD})
CAPTURE_PHASES = frozenset({Phase.CUDA_GRAPH_CAPTURE, Phase.DRAFT_CUDA_GRAPH_CAPTURE})


@dataclass(frozen=True)
class Transition:
    invocation_id: str
    subject: str  # a rank label, or "unit"
    source: str | None
    target: str
    ts: float | None
    rule: str | None = None
    confidence: str = "exact"  # "family": the line was read by a family rule, not an exact one


@dataclass(frozen=True)
class PhaseSpan:
    phase: Phase
    start: float | None
    end: float | None
    confidence: str = "exact"


@dataclass(frozen=True)
class JitSpan:
    """The jit_compile sub-phase of a rank: `first` its first JIT line, `start` the current session's
    (a new JIT line after the session ended opens another), `end` None while compiling."""

    first: float | None
    start: float | None
    end: float | None
    parent: Phase

    def went_on(self, phase: Phase, ts: float | None) -> JitSpan:
        """Another JIT line: the session goes on, or a new one starts in `phase`."""
        return self if self.end is None else JitSpan(self.first, ts, None, phase)

    def ended(self, ts: float | None) -> JitSpan:
        return self if self.end is not None else replace(self, end=ts if ts is not None else self.start)


@dataclass(frozen=True)
class GpuSeen:
    """The rank's GPU as last observed (vitals.py, gpu_vitals.py): at `seen`, in `state` since `since`."""

    seen: float
    state: str  # computing | transferring | allocating | waiting | idle | unknown
    since: float
    text: str


@dataclass(frozen=True)
class RankView:
    rank: str
    phase: Phase
    phase_start: float | None
    phase_ended: bool
    progress: Progress | None
    progress_phase: Phase | None
    last_activity: float | None
    spans: tuple[PhaseSpan, ...]
    seen: bool = True
    died_at: float | None = None  # its process vanished (seen in the unit's cgroup)
    died_pid: int | None = None
    progress_totals: Mapping[Phase, int] = field(default_factory=dict)  # the bar's total, per phase
    last_vital: float | None = None  # last sign of life outside the log (vitals.py): data taken in, a compiler ran
    jit: JitSpan | None = None  # JIT compilation inside the current phase (the jit_compile sub-phase)
    gpu: GpuSeen | None = None  # its GPU as last observed (None: not observed in this start-up)

    @property
    def compiling(self) -> bool:
        """In the jit_compile sub-phase now (judged with its limits, not the phase's)."""
        return self.jit is not None and self.jit.end is None


@dataclass(frozen=True)
class FatalView:
    rank: str | None
    rule: str | None
    cause: str | None
    ts: float | None
    echo: bool
    texts: tuple[str, ...]
    prefixed: bool = False


@dataclass(frozen=True)
class PhaseIndex:
    """Per phase: the earliest exit of a scheduler, the latest activity of any rank in it, how many
    schedulers are in it, and how many of those have not finished it."""

    first_exit: dict[Phase, float]
    activity: dict[Phase, float]
    schedulers: dict[Phase, int]
    unfinished: dict[Phase, int]


@dataclass(frozen=True)
class InvocationView:
    invocation_id: str
    started_at: float | None
    last_ts: float | None
    state: UnitState
    ranks: tuple[RankView, ...]
    fatals: tuple[FatalView, ...]
    lines_lost: int
    server: ServerInfo | None
    unit_result: str | None
    exit_status: str | None
    restart_scheduled: bool
    stop_job: str | None
    stopped_at: float | None = None
    before_stop: InvocationView | None = None  # how it stood when systemd began stopping it
    health_failures: int = 0  # health probes failed in a row since ready
    health_episode: int = 0  # how many runs of failed probes there were
    health_error: str | None = None
    proof_of_life: float | None = None  # the last batch line after ready
    phase_silence: Mapping[Phase, float] = field(default_factory=dict)  # longest quiet spell per phase
    ranks_ignored: int = 0  # events of ranks past MAX_RANKS (an anomaly)
    anomalies: tuple[Anomaly, ...] = ()  # lines that would have moved a rank backwards
    anomalies_dropped: int = 0  # past MAX_ANOMALIES
    cold: bool = False  # a JIT compiler ran during this start-up (DeepGEMM, FlashInfer, torch.compile)
    lost_cause: str | None = None  # of the last lines lost (tracker_state.InvocationState)
    lines_hidden: int = 0  # entries journalctl did not print ("[N blob data]"), each a sign of life
    server_args: Mapping[str, str] = field(default_factory=dict)  # every launch argument read (remedies.py)
    heartbeat: str | None = None  # the rule of the last heartbeat line seen

    # Judging asks these for every rank: each is computed once per view, in one pass over the ranks
    # (judging stays linear in ranks). The view is immutable, so the cached values stay true.
    def rank(self, label: str) -> RankView | None:
        return self._by_label.get(label)

    @property
    def ended_at(self) -> float | None:
        """When this start-up ended (systemd began stopping it, or it failed); None while it lives.
        Its durations are frozen there: a phase a rank was stuck in did not go on after the stop."""
        if self.state not in ENDED_STATES:
            return None
        return self.stopped_at if self.stopped_at is not None else self.last_ts

    def as_of(self, now: float) -> float:
        """The time its durations are measured at: `now`, or its end when it ended before."""
        end = self.ended_at
        return now if end is None else min(now, end)

    @cached_property
    def _by_label(self) -> dict[str, RankView]:
        by_label: dict[str, RankView] = {}
        for r in self.ranks:
            by_label.setdefault(r.rank, r)
        return by_label

    @cached_property
    def scheduler_ranks(self) -> tuple[RankView, ...]:
        return tuple(r for r in self.ranks if r.rank != MAIN)

    def first_exit(self, phase: Phase) -> float | None:
        """When the first rank left `phase` (finished it, or moved on)."""
        return self._phases.first_exit.get(phase)

    def phase_activity(self, phase: Phase) -> float | None:
        """Latest sign of life of any rank now in `phase`: ranks in a collective move together."""
        return self._phases.activity.get(phase)

    def schedulers_in(self, phase: Phase) -> int:
        """How many scheduler ranks are in `phase` now."""
        return self._phases.schedulers.get(phase, 0)

    def unfinished_in(self, phase: Phase) -> int:
        """How many scheduler ranks are in `phase` now and have not finished it."""
        return self._phases.unfinished.get(phase, 0)

    @cached_property
    def _phases(self) -> PhaseIndex:
        index = PhaseIndex({}, {}, {}, {})
        for r in self.ranks:
            if r.last_activity is not None:
                latest = index.activity.get(r.phase)
                if latest is None or r.last_activity > latest:
                    index.activity[r.phase] = r.last_activity
            if r.rank == MAIN:
                continue
            index.schedulers[r.phase] = index.schedulers.get(r.phase, 0) + 1
            if not r.phase_ended:
                index.unfinished[r.phase] = index.unfinished.get(r.phase, 0) + 1
            for s in r.spans:
                if s.end is not None:
                    first = index.first_exit.get(s.phase)
                    if first is None or s.end < first:
                        index.first_exit[s.phase] = s.end
        return index


@dataclass(frozen=True)
class Snapshot:
    invocations: tuple[InvocationView, ...]

    @property
    def current(self) -> InvocationView | None:
        return self.invocations[-1] if self.invocations else None
