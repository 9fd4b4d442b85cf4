"""Immutable records passed between pipeline stages.

source -> JournalRecord -> lines -> Line -> events -> Event -> tracker -> Snapshot -> policy -> Verdict
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping, NamedTuple, TypeVar, Union

R = TypeVar("R")

# MESSAGE_IDs that PID 1 and journald use for the unit's lifecycle (see docs/architecture.md).
MID_STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"  # "Starting <unit>..." (the start job began)
MID_STARTED = "39f53479d3a045ac8e11786248231fbf"
MID_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
MID_STOPPED = "9d1aaa27d60140bd96365438aad20286"
MID_DEACTIVATED = "7ad2d189f7e94e70a38c781354912448"
MID_MAIN_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
MID_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"
MID_RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
MID_SUPPRESSED = "a596d6fe7bfa4994828e72309e95d61e"


class Phase(enum.Enum):
    """Canonical start-up phases: the public vocabulary of metrics, JSON and docs."""

    LAUNCH = "launch"
    DIST_INIT = "dist_init"
    WEIGHT_LOAD = "weight_load"
    KV_CACHE_ALLOC = "kv_cache_alloc"
    CUDA_GRAPH_CAPTURE = "cuda_graph_capture"
    DRAFT_WEIGHT_LOAD = "draft_weight_load"
    DRAFT_CUDA_GRAPH_CAPTURE = "draft_cuda_graph_capture"
    HTTP_SERVER_START = "http_server_start"
    WARMUP = "warmup"
    # A sub-phase inside a rank's phase (DeepGEMM, FlashInfer, torch.compile JIT): it has its own
    # limits, and a start-up that went through it is cold. A rank's `phase` is never jit_compile.
    JIT_COMPILE = "jit_compile"
    READY = "ready"
    SERVING = "serving"

    # Members are singletons: hashing by identity (in C) instead of Enum's hash of the name (in
    # Python), on every line the tracker dates (its per-phase dicts).
    __hash__ = object.__hash__


PHASE_NAMES: tuple[str, ...] = tuple(p.value for p in Phase)
# Phases the main process (HTTP server) drives for the whole unit, after every rank is done.
UNIT_PHASES = frozenset({Phase.HTTP_SERVER_START, Phase.WARMUP, Phase.READY, Phase.SERVING})
# Phases without a deadline: the start-up is over.
FINAL_PHASES = frozenset({Phase.READY, Phase.SERVING})

MAIN = "main"


class VerdictKind(enum.StrEnum):
    """What the policy says about a start-up (stages/s4_judge/policy.py); a config's `actions:` is keyed by these."""

    STALLED = "stalled"
    STRAGGLER = "straggler"
    RANK_DIED = "rank_died"
    CRASHED = "crashed"
    UNHEALTHY = "unhealthy"
    LINES_LOST = "lines_lost"
    # One node of a group (config `group:`): every local rank waits in lock-step while none is the
    # culprit; another node holds them up (stages/s4_judge/group_wait.py). Never restarts the node alone.
    WAITING_FOR_NODE = "waiting_for_node"
    # A GPU of the unit reported a fault: a kernel XID line or NVML's health (stages/s4_judge/gpu_fault.py).
    GPU_FAULT = "gpu_fault"


# Named groups of verdict kinds.
STUCK = frozenset({VerdictKind.STALLED, VerdictKind.STRAGGLER})  # a rank held up in its phase
FAILED_STARTUP = STUCK | {VerdictKind.RANK_DIED, VerdictKind.CRASHED}  # counted in the restart budget
WRONG_WHEN_STOPPED = STUCK | {VerdictKind.RANK_DIED}  # what a stop (a restart) was about
NEWS_AFTER_THE_END = frozenset({VerdictKind.CRASHED, VerdictKind.RANK_DIED, VerdictKind.LINES_LOST})
# `phasewatch status` exits non-zero for these
FAILING = FAILED_STARTUP | {VerdictKind.UNHEALTHY, VerdictKind.GPU_FAULT}


class Outcome(enum.StrEnum):
    """How a start-up went, as `replay` and the history say."""

    STARTING = "starting"
    READY = "ready"
    SERVING = "serving"
    STALLED = "stalled"
    CRASHED = "crashed"
    STOPPED = "stopped"


ENDED_BADLY = frozenset({Outcome.STALLED, Outcome.CRASHED, Outcome.STOPPED})


class AlertKind(enum.StrEnum):
    """Alerts that are no verdict: about phasewatch's own acting."""

    GAVE_UP = "gave_up"  # the restart budget is spent
    RESTART_FAILED = "restart_failed"
    STATE_DEGRADED = "state_degraded"  # the state directory cannot be written
    TIMER_LINT = "timer_lint"  # an engine or systemd timer ends a phase before a limit can (s4_judge/timerlint.py)
    RESTART_BLOCKED = "restart_blocked"  # processes of the stopped start-up survived (sinks/leftovers.py)
    METRICS_UNBOUND = "metrics_unbound"  # metrics.listen cannot be bound: no /metrics, /status (sinks/http.py)
    RECEIVER_UNBOUND = "receiver_unbound"  # group.receiver cannot be bound: no group restart (alert_receiver.py)
    GROUP_RESTART = "group_restart"  # the group decided a restart (PhasewatchGroupRestart), done or not here
    RESTART_REFUSED = "restart_refused"  # a restart refused: a broken GPU, or the same failure again (restart_gate.py)


class MessageId(enum.StrEnum):
    """The journal MESSAGE_ID of each alert phasewatch writes (units/phasewatch.catalog documents them)."""

    STALLED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d60"
    STRAGGLER = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d61"
    RANK_DIED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d62"
    CRASHED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d63"
    UNHEALTHY = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d64"
    LINES_LOST = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d65"
    GAVE_UP = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d66"
    RESTART_FAILED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d67"
    STATE_DEGRADED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7a"  # not a verdict: the state directory failed
    TIMER_LINT = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7b"  # not a verdict: a timer pre-empts a limit
    RESTART_BLOCKED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7c"
    METRICS_UNBOUND = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7d"  # not a verdict: metrics.listen is taken
    WAITING_FOR_NODE = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d90"
    GROUP_RESTART = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d91"
    RECEIVER_UNBOUND = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d92"  # not a verdict: group.receiver is taken
    GPU_FAULT = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d93"
    RESTART_REFUSED = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d94"  # not a verdict: the restart gate said no


def direct_init(cls: type[R]) -> type[R]:
    """A frozen dataclass whose __init__ writes its fields into the instance's __dict__ at once
    instead of through `object.__setattr__` one call per field: the same signature, defaults and
    factories, 2.5 times as fast (for the records built once per line on the full path). Frozen
    still: assigning an attribute afterwards raises as before. The dataclass's own __init__ is kept
    as the new one's `__wrapped__`."""
    params, fill = [], []
    env: dict[str, Any] = {"_MISSING": MISSING}
    for f in fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only is True:
            raise TypeError(f"direct_init: {cls.__name__}.{f.name} is not a plain positional field")
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            fill.append(f"values['{f.name}'] = _factory_{f.name}() if {f.name} is _MISSING else {f.name}")
            continue
        else:
            params.append(f.name)
        fill.append(f"values['{f.name}'] = {f.name}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"direct_init: {cls.__name__} has a __post_init__")
    source = f"def __init__(self, {', '.join(params)}):\n    values = self.__dict__\n    " + "\n    ".join(fill)
    namespace: dict[str, Any] = {}
    exec(source, env, namespace)  # noqa: S102 - built from the dataclass's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__wrapped__ = cls.__init__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@direct_init
@dataclass(frozen=True)
class JournalRecord:
    """One journal entry, reduced to the fields phasewatch reads.

    `message` is the raw MESSAGE (bytes or str; None when a journal export elided it).
    `realtime` is seconds since the epoch (from __REALTIME_TIMESTAMP), or None when unknown.
    """

    message: bytes | str | None
    realtime: float | None = None
    pid: int | None = None
    invocation_id: str | None = None
    line_break: str | None = None
    message_id: str | None = None
    unit: str | None = None
    object_unit: str | None = None
    n_dropped: int | None = None
    cursor: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


class UnitLine(NamedTuple):
    """What journal_source.unit_entries reads (the catch-up) for a whole line of the unit's own
    processes: no `_LINE_BREAK`, no other field a JournalRecord would have. Named as JournalRecord's
    fields are (`Pipeline.feed_line`). Read by name: the C reader (_journal_lines.c) builds it as
    the tuple it is underneath, and a run (`UnitRun`) is told from a line by its type."""

    message: bytes
    realtime: float  # seconds since the epoch
    pid: int | None
    invocation_id: str | None


class UnitRun(NamedTuple):
    """Consecutive whole lines of one writer (pid and invocation) the same but for digits and ids, as
    one entry: the C reader's, when asked for runs (`Pipeline.feed_run`, `Pipeline.run_shape`)."""

    messages: list[bytes]
    realtimes: list[float]  # one each, in the same order
    pid: int | None
    invocation_id: str | None
    # The indexes of the lines whose runs of digits are not all as wide as the line's before, in
    # order: where a line's digit-masked text can differ from the one before (and its plan with it).
    shifts: list[int]
    # The indexes of the lines whose digit-masked text is not the line's before, but is once the hex
    # characters of their ids are masked too (`pattern_needles.mask_ids`), each run of digits as wide.
    ids: list[int]


# What a catch-up batch holds: lines, runs, and the rest as JournalRecords.
Entry = Union[UnitLine, UnitRun, JournalRecord]


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return _text(value[0]) if value else None
    return str(value)


def _id_text(value: object) -> str | None:
    """A 128-bit id as 32 hex digits (python-systemd gives uuid.UUID; text gives hex or UUID form)."""
    if isinstance(value, uuid.UUID):
        return value.hex
    text = _text(value)
    return text.replace("-", "").lower() if text else None


def _int(value: object) -> int | None:
    text = _text(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


_EXTRA_FIELDS = ("UNIT_RESULT", "JOB_TYPE", "JOB_RESULT", "EXIT_CODE", "EXIT_STATUS",
                 "INVOCATION_ID", "_SYSTEMD_UNIT", "SYSLOG_IDENTIFIER", "_COMM", "N_RESTARTS", "_UID",
                 "_TRANSPORT")


def record_from_fields(fields: Mapping[str, object]) -> JournalRecord:
    """Build a record from a journal field mapping (python-systemd, JSON or export format).

    Values may be str, bytes, ints, or lists of them (repeated fields: the first one counts).
    """
    message = fields.get("MESSAGE")
    if isinstance(message, (list, tuple)) and message and all(isinstance(b, int) for b in message):
        message = bytes(message)  # journalctl -o json: a field with control characters, as byte values
    elif isinstance(message, (list, tuple)):
        message = message[0] if message else None  # a repeated field: the first value
        if isinstance(message, list):
            message = bytes(message)
    if message is not None and not isinstance(message, (bytes, str)):
        message = str(message)
    realtime: float | None = None
    raw_rt = fields.get("__REALTIME_TIMESTAMP")
    if isinstance(raw_rt, dt.datetime):
        realtime = raw_rt.timestamp()  # python-systemd converts it to datetime
    else:
        microseconds = _int(raw_rt)
        if microseconds is not None and 0 <= microseconds < 2**63:
            realtime = microseconds / 1e6
    extra = {k: t for k in _EXTRA_FIELDS if (t := _text(fields.get(k))) is not None}
    invocation = _id_text(fields.get("_SYSTEMD_INVOCATION_ID"))
    message_id_text = _id_text(fields.get("MESSAGE_ID"))
    return JournalRecord(
        message=message,
        realtime=realtime,
        pid=_int(fields.get("_PID")),
        invocation_id=invocation,
        line_break=_text(fields.get("_LINE_BREAK")),
        message_id=message_id_text,
        unit=_text(fields.get("UNIT")),
        object_unit=_text(fields.get("OBJECT_SYSTEMD_UNIT")),
        n_dropped=_int(fields.get("N_DROPPED")),
        cursor=_text(fields.get("__CURSOR")),
        extra=extra,
    )


@dataclass(frozen=True)
class Progress:
    """One tqdm frame: `desc: pct%|bar| n/total [elapsed<remaining, rate]`."""

    desc: str
    n: int
    total: int | None
    percent: int | None = None
    bs: int | None = None
    avail_mem_gb: float | None = None


class LineKind(enum.Enum):
    RECORD = "record"  # starts with an SGLang record prefix, or a plain line of its own
    CONTINUATION = "continuation"  # traceback or other text that belongs to the previous record
    PROGRESS = "progress"  # a tqdm frame


@direct_init
@dataclass(frozen=True)
class Line:
    """One logical log line: a record, a continuation of one, or a progress frame.

    `text` is the whole line as written (ANSI stripped); `message` is the text after the rank prefix.
    `rank` is the canonical rank label, `main`, or None when not yet known.
    """

    text: str
    message: str
    kind: LineKind
    rank: str | None
    ts: float | None
    pid: int | None = None
    invocation_id: str | None = None
    has_prefix: bool = False
    progress: Progress | None = None
    record_id: int = 0  # lines of one multi-line record share it
    # The rank this line's process is when the log shows no rank tag at all (a vLLM engine core
    # holds the one GPU itself), `main` for a known front end; None: not said by the prefix.
    untagged_rank: str | None = None
    # `rank` names a process, not a rank number (vLLM V0 workers, Ray actors): such tags do not
    # make the untagged lines of the log a coordinator's.
    anonymous_rank: bool = False
    # The prefix names an engine core (vLLM's EngineCore): any worker tag in the log, numbered or
    # not, makes it a coordinator. (An untagged line yields to numbered tags only: V0's driver.)
    engine_core: bool = False
    process_pid: int | None = None  # the PID in the process tag that gave `rank` (prefixes.Prefix)


class EventKind(enum.Enum):
    PHASE_BEGIN = "phase_begin"
    PHASE_END = "phase_end"
    PHASE_HINT = "phase_hint"
    PROGRESS = "progress"
    FATAL = "fatal"
    ACTIVITY = "activity"
    SERVER_ARGS = "server_args"
    LINES_LOST = "lines_lost"
    HIDDEN_LINE = "hidden_line"  # an entry journalctl did not print ("[87B blob data]"): a frame of a bar
    INVOCATION_START = "invocation_start"
    UNIT_STOPPING = "unit_stopping"
    UNIT_STOPPED = "unit_stopped"
    UNIT_FAILED = "unit_failed"
    UNIT_EXITED = "unit_exited"
    RESTART_SCHEDULED = "restart_scheduled"
    RANK_DIED = "rank_died"  # from the process table, not from the journal
    PROBE_OK = "probe_ok"  # from the health probe after ready
    PROBE_FAILED = "probe_failed"
    HEARTBEAT = "heartbeat"  # a line a process prints on a timer while it waits: no sign that anything moved
    RANK_PROGRESS = "rank_progress"  # a sign of life from /proc (vitals.py): data taken in, a compiler ran
    RANK_NAMED = "rank_named"  # the process of rank `text` (vLLM's `Worker pid=N`) is rank `rank` (Worker_TP0)
    RANK_GPU = "rank_gpu"  # the rank's GPU was observed over a vitals period (cause: its state; text: what it did)


@direct_init
@dataclass(frozen=True)
class Event:
    """What a line or a systemd entry means to the tracker."""

    kind: EventKind
    ts: float | None
    rank: str | None = None
    phase: Phase | None = None
    rule: str | None = None
    progress: Progress | None = None
    cause: str | None = None
    text: str = ""
    invocation_id: str | None = None
    pid: int | None = None
    count: int = 0
    echo: bool = False  # a fatal line that is a parent's reaction to a child's failure
    record_id: int = 0
    prefixed: bool = False
    args: Mapping[str, str] = field(default_factory=dict)
    confidence: str = "exact"  # "family": matched by the profile's fallback vocabulary, not a rule


@dataclass(frozen=True)
class ProbeAnswered:
    """A health probe answered after `seconds` (sources/host/health.py): the metrics' histogram."""

    seconds: float
    ok: bool


@dataclass(frozen=True)
class GroupRestartRequest:
    """A firing PhasewatchGroupRestart alert from Alertmanager's webhook (sources/receiver/alert_receiver.py):
    the group decided that its nodes restart, because of `culprit_node`'s `reason` (stalled, crashed,
    rank_died, unit_failed, lagging). `starts_at` (Unix time) is when Prometheus began firing it: one
    decision is one (fingerprint, starts_at)."""

    group: str
    culprit_node: str
    reason: str
    starts_at: float
    fingerprint: str
    culprit_rank: str | None = None
    phase: str | None = None
    held_nodes: str | None = None  # the nodes held by their operator, as the alert says

    @property
    def key(self) -> tuple[str, float]:
        return (self.fingerprint, self.starts_at)

    @property
    def why(self) -> str:
        """`node 1 TP12 stalled in cuda_graph_capture`."""
        rank = f" {self.culprit_rank}" if self.culprit_rank else ""
        phase = f" in {self.phase}" if self.phase else ""
        return f"node {self.culprit_node}{rank} {self.reason.replace('_', ' ')}{phase}"
