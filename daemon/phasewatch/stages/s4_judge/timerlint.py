"""Engine and systemd timers that end a start-up before phasewatch's limits would. Pure: inputs -> warnings.

A phasewatch limit longer than an engine timer never fires: the engine kills the start-up first, and
phasewatch reports a crash where it should have named a stall. A limit shorter than the healthy
duration learned from history kills healthy start-ups. The timers (SGLANG-LOGS.md §10.1):

- the post-load barrier (hard-coded 480 s from the first rank's end of loading): ranks that finished
  loading wait for the others; a skew above it kills the start-up;
- torch.distributed's timeout (`--dist-timeout`; unset: 600 s for NCCL collectives, 1800 s for the
  store rendezvous of dist init): a rank silent in a collective makes its peers abort;
- the warm-up request (`SGLANG_WARMUP_TIMEOUT`, -1 or unset: 600 s, 1800 s for PD disaggregation);
- the scheduler watchdog (`--watchdog-timeout`, 300 s; hard unless `--soft-watchdog-timeout`), armed
  after model init: a silent warm-up batch;
- systemd's `TimeoutStartSec=` when the start-up is part of the start job (Type=notify/forking/
  oneshot, or an ExecStartPost= such as `phasewatch wait-ready`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...config.load import Config
from ...durations import format_duration
from ...records import FINAL_PHASES, UNIT_PHASES, Phase
from .ras_report import ras_address

POST_LOAD_BARRIER = 480.0
NCCL_DEFAULT = 600.0
STORE_DEFAULT = 1800.0
WARMUP_DEFAULT = 600.0
WARMUP_DEFAULT_PD = 1800.0
WATCHDOG_DEFAULT = 300.0
# Phases where ranks meet in collectives: a rank hung there leaves its peers waiting in NCCL.
COLLECTIVE_PHASES = (Phase.KV_CACHE_ALLOC, Phase.CUDA_GRAPH_CAPTURE, Phase.DRAFT_WEIGHT_LOAD,
                     Phase.DRAFT_CUDA_GRAPH_CAPTURE)
# After loading, the ranks that finished wait in the barrier (480 s) and in the first collective.
SKEW_PHASES = (Phase.WEIGHT_LOAD,)
START_JOB_TYPES = frozenset({"notify", "notify-reload", "forking", "oneshot", "dbus"})


@dataclass(frozen=True)
class UnitTimers:
    """What the unit's D-Bus properties say (None: not read)."""

    timeout_start: float | None = None  # TimeoutStartUSec in seconds; inf for infinity
    service_type: str | None = None
    has_exec_start_post: bool = False
    environment: Mapping[str, str] = field(default_factory=dict)
    exec_start: tuple[str, ...] = ()  # the first ExecStart= command's argv (for remedies.py)
    devices: Mapping[str, str] = field(default_factory=dict)  # PrivateDevices=, DevicePolicy=, DeviceAllow=


@dataclass(frozen=True)
class TimerWarning:
    """One limit that will not do what the operator expects. `code` is stable (tests, JSON)."""

    code: str
    phase: str | None
    timer: str
    timer_seconds: float
    limit: str
    limit_seconds: float
    message: str


def _seconds(text: str | None) -> float | None:
    if text is None or text in ("None", "", "null"):
        return None
    try:
        value = float(text.strip("'\""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def engine_timers(server_args: Mapping[str, str], environment: Mapping[str, str]) -> dict[str, float]:
    """The engine's timers in seconds, from server_args and the unit's Environment=."""
    dist = _seconds(server_args.get("dist_timeout"))
    timers = {"post_load_barrier": POST_LOAD_BARRIER,
              "nccl_collective": dist if dist is not None and dist > 0 else NCCL_DEFAULT,
              "dist_rendezvous": dist if dist is not None and dist > 0 else STORE_DEFAULT}
    pd = server_args.get("disaggregation_mode", "null").strip("'\"") not in ("null", "None", "")
    warmup = _seconds(environment.get("SGLANG_WARMUP_TIMEOUT"))
    timers["warmup"] = warmup if warmup is not None and warmup > 0 else (WARMUP_DEFAULT_PD if pd else WARMUP_DEFAULT)
    soft = _seconds(server_args.get("soft_watchdog_timeout"))
    watchdog = _seconds(server_args.get("watchdog_timeout"))
    if soft is None:  # a soft watchdog only dumps stacks; the hard one kills
        timers["scheduler_watchdog"] = watchdog if watchdog is not None and watchdog > 0 else WATCHDOG_DEFAULT
    return timers


def lint(config: Config, server_args: Mapping[str, str], unit: UnitTimers,
         learned_healthy: Mapping[Phase, float] | None = None, ras_holder: str | None = None) -> list[TimerWarning]:
    """Every limit of `config` that an engine or systemd timer pre-empts, or that is below the
    healthy duration learned from history (`learned_healthy`: the longest healthy duration per phase);
    and NCCL RAS turned off, or its port held by a process outside the unit (`ras_holder`)."""
    timers = engine_timers(server_args, unit.environment)
    out: list[TimerWarning] = []

    def warn(code: str, phase: Phase | None, timer: str, limit: str, limit_seconds: float, why: str) -> None:
        seconds = timers[timer] if timer in timers else unit.timeout_start or 0.0
        out.append(TimerWarning(code, phase.value if phase else None, timer, seconds, limit, limit_seconds,
                                f"{limit} {format_duration(limit_seconds)} is longer than {why} "
                                f"({timer.replace('_', ' ')} {format_duration(seconds)})"))

    skew = config.rank_skew
    if math.isfinite(skew) and skew > timers["post_load_barrier"]:
        warn("skew_after_barrier", Phase.WEIGHT_LOAD, "post_load_barrier", "rank_skew", skew,
             "SGLang's post-load barrier: a rank that slow is killed by the engine before phasewatch names it")
    if math.isfinite(skew) and skew > timers["nccl_collective"]:
        warn("skew_after_nccl", Phase.WEIGHT_LOAD, "nccl_collective", "rank_skew", skew,
             "the NCCL timeout: the ranks waiting on a straggler abort before phasewatch names it")
    for phase in COLLECTIVE_PHASES:
        stall = stall_in_force(config, phase)
        if stall is not None and stall > timers["nccl_collective"]:
            warn("stall_after_nccl", phase, "nccl_collective", f"{phase.value} stall window", stall,
                 "the NCCL timeout: a rank hung in a collective makes its peers abort first")
    dist = config.limits(Phase.DIST_INIT)
    for kind, limit in (("deadline", dist.deadline), ("stall window", dist.stall)):
        if limit is not None and limit > timers["dist_rendezvous"]:
            warn(f"dist_init_{kind.split()[0]}_after_rendezvous", Phase.DIST_INIT, "dist_rendezvous",
                 f"dist_init {kind}", limit, "torch.distributed's rendezvous timeout: dist init fails first")
    warmup = config.limits(Phase.WARMUP)
    if warmup.deadline is not None and warmup.deadline > timers["warmup"]:
        warn("warmup_deadline_after_engine", Phase.WARMUP, "warmup", "warmup deadline", warmup.deadline,
             "SGLang's warm-up timeout (SGLANG_WARMUP_TIMEOUT): the warm-up fails first")
    watchdog = timers.get("scheduler_watchdog")
    warmup_stall = stall_in_force(config, Phase.WARMUP)
    if watchdog is not None and warmup_stall is not None and warmup_stall > watchdog:
        warn("warmup_stall_after_watchdog", Phase.WARMUP, "scheduler_watchdog", "warmup stall window",
             warmup_stall, "the scheduler watchdog (--watchdog-timeout): a hung warm-up batch is killed first")
    out.extend(_systemd(config, unit))
    out.extend(_learned(config, learned_healthy or {}))
    if config.vitals.enabled and config.vitals.ras:
        out.extend(ras_warnings(unit.environment, ras_holder))
    return out


def ras_warnings(environment: Mapping[str, str], holder: str | None) -> list[TimerWarning]:
    """NCCL RAS names a collective hang's culprit (sources/host/ras.py) unless the unit turns it off, or
    another process answers on its port: another unit's NCCL job on the same port (NCCL binds it with
    SO_REUSEPORT, so the answers mix), or any local user who bound it first."""
    address = ras_address(environment)
    if not address.enabled:
        return [TimerWarning("ras_off", None, "nccl_ras", 0.0, "vitals.ras", 0.0,
                             "the unit sets NCCL_RAS_ENABLE=0: NCCL RAS cannot name a collective hang's culprit")]
    if address.problem is not None:
        return [TimerWarning("ras_address", None, "nccl_ras", 0.0, "vitals.ras", 0.0,
                             f"{address.problem}: NCCL's RAS cannot listen, and phasewatch cannot ask it")]
    if holder is not None:
        return [TimerWarning("ras_port_shared", None, "nccl_ras", 0.0, "vitals.ras", 0.0,
                             f"NCCL RAS's port {address} is held by {holder}, outside the unit: another job's RAS "
                             "(or another user) answers there; give the unit a port of its own "
                             "(phasewatch init --ras-dropin writes NCCL_RAS_ADDR)")]
    return []


def stall_in_force(config: Config, phase: Phase) -> float | None:
    """The stall window a hung rank meets: with GPU signs on (vitals.gpu), a GPU phase's `gpu_stall`
    (a rank whose GPU waits is judged by it); the daemon says once, apart, when NVML is not there."""
    limits = config.limits(phase)
    if config.vitals.enabled and config.vitals.gpu and limits.gpu_stall is not None:
        return limits.gpu_stall
    return limits.stall


def _systemd(config: Config, unit: UnitTimers) -> list[TimerWarning]:
    timeout = unit.timeout_start
    if timeout is None or not math.isfinite(timeout) or timeout <= 0:
        return []
    if unit.service_type not in START_JOB_TYPES and not unit.has_exec_start_post:
        return []  # Type=simple/exec without ExecStartPost=: the start job ends before the engine starts
    elapsed = 0.0
    for phase in config.phases:
        if phase in FINAL_PHASES:
            break
        deadline = config.limits(phase).deadline
        if deadline is None:
            continue
        elapsed += deadline
        if elapsed > timeout:
            return [TimerWarning(
                "deadline_after_timeout_start", phase.value, "timeout_start_sec", timeout,
                f"{phase.value} deadline (sum of deadlines up to it)", elapsed,
                f"systemd's TimeoutStartSec={format_duration(timeout)} ends the start job before phasewatch's "
                f"{phase.value} deadline can fire (the deadlines up to it add up to {format_duration(elapsed)}); "
                "set TimeoutStartSec=infinity and let phasewatch judge")]
    return []


def _learned(config: Config, healthy: Mapping[Phase, float]) -> list[TimerWarning]:
    out: list[TimerWarning] = []
    for phase, duration in healthy.items():
        if phase in FINAL_PHASES or phase in UNIT_PHASES and phase is not Phase.WARMUP:
            continue
        deadline = config.limits(phase).deadline
        if deadline is not None and deadline < duration:
            out.append(TimerWarning(
                "deadline_below_healthy", phase.value, "learned_healthy", duration, f"{phase.value} deadline",
                deadline, f"{phase.value} deadline {format_duration(deadline)} is shorter than a healthy start-up's "
                f"{phase.value} ({format_duration(duration)} in the history): it would stop a healthy start-up"))
    return out


def summary(warnings: Sequence[TimerWarning]) -> str:
    return "; ".join(w.message for w in warnings)
