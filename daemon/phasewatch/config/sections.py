"""The frozen records of the config's sections (phase limits, restart budget, health probe, signs of
life, learned limits, evidence, hooks, leftovers): what `load.py` validates into, and what the rest reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..records import Phase


@dataclass(frozen=True)
class PhaseLimits:
    """`deadline`: longest a rank may stay in the phase; `stall`: longest it may stay silent in it."""

    deadline: float | None
    stall: float | None
    # With a learned deadline: a phase whose progress bar keeps moving may run past it, at its own
    # pace, up to this cap (the configured ceiling). None: the deadline is firm.
    cap: float | None = None
    # The stall window in force while the rank's GPU is observed (NVML: vitals.gpu): a GPU that
    # computes or moves data is a sign of life, so silence with an observed GPU means much more.
    # None: the phase has no GPU work to see; `stall` applies.
    gpu_stall: float | None = None


# Sized for Kimi-K2.5 INT4 (547 GB) on 8 GPUs with an EAGLE-3 draft; see config/phasewatch.yaml.
DEFAULT_LIMITS: Mapping[Phase, PhaseLimits] = {
    Phase.LAUNCH: PhaseLimits(600, 600),
    Phase.DIST_INIT: PhaseLimits(600, 300),
    Phase.WEIGHT_LOAD: PhaseLimits(2700, 900),
    Phase.KV_CACHE_ALLOC: PhaseLimits(600, 600),
    Phase.CUDA_GRAPH_CAPTURE: PhaseLimits(1800, 1200, gpu_stall=180),
    Phase.DRAFT_WEIGHT_LOAD: PhaseLimits(600, 300),
    Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(1200, 1200, gpu_stall=180),
    Phase.HTTP_SERVER_START: PhaseLimits(300, 300),
    Phase.WARMUP: PhaseLimits(600, 540, gpu_stall=180),
    Phase.READY: PhaseLimits(None, None),
    Phase.SERVING: PhaseLimits(None, None),
    # DeepGEMM's pre-compile "typically 10-20 mins"; compiler child processes are signs of life (vitals.py).
    Phase.JIT_COMPILE: PhaseLimits(2400, 1200),
}


@dataclass(frozen=True)
class RestartBudget:
    """At most `max` restarts (or failed start-ups) within `window`, restarts at least `backoff` apart;
    a start-up that reached ready frees the budget only after it stayed healthy for `stable`."""

    max: int = 3
    window: float = 6 * 3600.0
    backoff: float = 300.0
    stable: float = 600.0
    same_failure: int = 2  # a restart after this many start-ups in a row failed alike is refused (restart_gate.py)


# The most `restart_budget.max` may be. The budget exists to end a restart loop (`window: none` is
# refused for that reason); a start-up of a large model takes minutes, so 100 failed start-ups in one
# window is a loop of hours to days (over 8 h at the default 5 min backoff), and a larger max, like a
# 20-digit one, is no limit at all.
MAX_RESTARTS = 100


@dataclass(frozen=True)
class Leftovers:
    """`leftovers: {check: true, wait: 10m}`: restart as stop, check that nothing of the old start-up
    survives, then start (waiting at most `wait` for survivors to end); sinks/leftovers.py.
    `after_any_stop` (default on): a start-up that ended before ready by a stop phasewatch did not
    guard (the operator's, systemd's Restart=, an unguarded restart) is checked too, alert only
    (sinks/unguarded_stops.py)."""

    check: bool = False
    wait: float = 600.0
    after_any_stop: bool = True


@dataclass(frozen=True)
class Hook:
    """`hooks: {name: {exec: [...], timeout: 30s}}`: a command run by the `hook:name` action."""

    argv: tuple[str, ...]
    timeout: float = 30.0


@dataclass(frozen=True)
class EvidenceCapture:
    """The `evidence` action: stacks and process state of the named ranks, at most `timeout` in all."""

    timeout: float = 15.0
    peers: int = 8  # at most this many other ranks in the same phase
    keep: int = 20  # evidence files kept in the state directory (oldest removed first)
    max_bytes: int = 512 * 1024  # one file's size cap


@dataclass(frozen=True)
class HealthCheck:
    """After ready: probe `url` every `interval` (skipped while batch lines prove life); `failures`
    probes in a row that fail or exceed `timeout` make the verdict `unhealthy`. `url` None: the
    server's /health_generate on the port from its server_args."""

    url: str | None = None
    interval: float = 30.0
    timeout: float = 30.0  # more than SGLang's own 20 s generation timeout (SGLANG_HEALTH_CHECK_TIMEOUT)
    failures: int = 3
    enabled: bool = True


@dataclass(frozen=True)
class VitalsSampling:
    """While a start-up runs: sample the rank processes every `period` for signs of life that are not
    log lines (data intake, compilers; vitals.py). They end a silence, never a phase's deadline."""

    period: float = 5.0
    enabled: bool = True
    # Each rank's GPU through NVML (sources/host/gpu.py) where it is there: a GPU that computes or moves
    # data is a sign of life, and the GPU phases' `gpu_stall` windows are in force while it is observed.
    gpu: bool = True
    # Ask NCCL's RAS who a collective hang waits for (sources/host/ras.py): advice in the stall verdict.
    ras: bool = True


@dataclass(frozen=True)
class Adaptive:
    """Limits learned from past start-ups (learn.py): deadline = clamp(k x p95, floor x configured,
    ceiling x configured) once a phase has `min_samples` past durations."""

    enabled: bool = False
    k: float = 1.5
    min_samples: int = 5
    floor: float = 0.25
    ceiling: float = 2.0


# The action chain of one verdict runs off the loop, in the action worker (sinks/acting/runner.py): the
# watchdog never waits on it. What it delays is the restart: a hung start-up waits for its evidence
# and its hooks. CHAIN_LIMIT bounds that wait; each child may also take CHILD_REAP to be killed and
# reaped (then it is abandoned), and one D-Bus call DBUS_CALL (sd-bus's default call timeout).
CHAIN_LIMIT = 300.0
CHILD_REAP = 1.0  # a killed child is waited on this long, then abandoned (sinks/children.py)
DBUS_CALL = 25.0  # sd-bus's default method-call timeout: one RestartUnit
EVIDENCE_TOOLS = 3  # py-spy --native, py-spy, nvidia-smi: each may need its reap past the deadline


def chain_bound(actions: tuple[str, ...], evidence_timeout: float, hook_timeouts: dict[str, float]) -> float:
    """Seconds a verdict's actions may take before its restart is asked for, and the restart's call."""
    bound = evidence_timeout + EVIDENCE_TOOLS * CHILD_REAP if "evidence" in actions else 0.0
    bound += sum(hook_timeouts.get(a.removeprefix("hook:"), 0.0) + CHILD_REAP for a in dict.fromkeys(actions)
                 if a.startswith("hook:"))
    return bound + (DBUS_CALL if "restart" in actions else 0.0)


@dataclass(frozen=True)
class GroupReceiver:
    """`group.receiver`: the Alertmanager webhook listener (sources/receiver/alert_receiver.py); off unless
    `listen` is set. The bearer token is read from `token_file` at start; TLS when both `tls_cert` and
    `tls_key` are given."""

    listen: str
    token_file: str
    tls_cert: str | None = None
    tls_key: str | None = None
    # Each setting's line in the config (listen, token_file, tls_cert, tls_key): the checks on the host
    # (config/host.py) name it.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Group:
    """`group: {name, nodes}`: this unit is one node of a server spread over `nodes` hosts. The node's
    rank comes from `node_rank` when set, else from the server's own arguments (SGLang's
    `--node-rank` in server_args). With a receiver, restarts are the group's decision
    (PhasewatchGroupRestart); a node never restarts alone."""

    name: str
    nodes: int
    node_rank: int | None = None
    receiver: GroupReceiver | None = None
