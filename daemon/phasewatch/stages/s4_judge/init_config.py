"""`phasewatch init`, the pure part: a unit's ExecStart= argv and Environment= -> the engine and its
parallelism -> the text of a commented config that `check-config` accepts.

Nothing here reads D-Bus, the journal or files: commands/init.py passes what it read.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...config.load import DEFAULT_LIMITS, PhaseLimits
from ...durations import format_duration
from ...errors import ConfigError
from ...records import FINAL_PHASES, Phase

DRAFT_PHASES = frozenset({Phase.DRAFT_WEIGHT_LOAD, Phase.DRAFT_CUDA_GRAPH_CAPTURE})
# SGLang's defaults when the flag is absent (server_args.py of v0.5.x): the scheduler's watchdog kills
# a batch hung this long; torch.distributed's default collective timeout is 30 min.
SGLANG_WATCHDOG_DEFAULT = 300.0
# What each phase does, written beside its limits.
PHASE_NOTES: Mapping[Phase, str] = {
    Phase.LAUNCH: "python start-up, imports, argument parsing, until the first rank speaks",
    Phase.DIST_INIT: "torch.distributed/NCCL rendezvous of the ranks",
    Phase.WEIGHT_LOAD: "the model's safetensors: minutes from page cache, more from network storage",
    Phase.KV_CACHE_ALLOC: "memory pool; seconds normally",
    Phase.CUDA_GRAPH_CAPTURE: "one graph per batch size; its bar reaches the journal only at the end",
    Phase.DRAFT_WEIGHT_LOAD: "the speculative draft model, its own dist init and KV pool",
    Phase.DRAFT_CUDA_GRAPH_CAPTURE: "draft decode and draft extend graphs",
    Phase.HTTP_SERVER_START: "the HTTP server binds; seconds",
    Phase.WARMUP: "the engine's own warm-up request",
    Phase.JIT_COMPILE: "kernels compiled on first use (a cold cache); beside the other phases",
}


@dataclass(frozen=True)
class UnitCommand:
    """What init read about the unit: over D-Bus at the edge, or from a unit file in tests."""

    unit: str
    argv: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_start: float | None = None  # TimeoutStartSec=, seconds; None = infinity
    user: str | None = None
    service_type: str = "simple"
    # Durations of the phases of the last start-up found in the journal (empty: none found).
    last_startup: Mapping[Phase, float] = field(default_factory=dict)
    log_rate_burst: int = 0  # LogRateLimitBurst=; 0 = journald's global limit applies to the unit


@dataclass(frozen=True)
class EngineFacts:
    engine: str | None  # sglang, vllm; None: not recognised
    model: str | None = None
    tp: int = 1
    dp: int = 1
    pp: int = 1
    nnodes: int = 1
    speculative: str | None = None  # the algorithm (EAGLE3, NEXTN, ...) or the vLLM speculative config
    watchdog_timeout: float | None = None
    dist_timeout: float | None = None
    port: int | None = None

    @property
    def ranks(self) -> int:
        """Ranks on this node (multi-node: TP*PP split over nnodes)."""
        return max(1, self.tp * self.pp * self.dp // max(1, self.nnodes))

    def check_size(self) -> None:
        """More ranks on one host than any server has is refused (ConfigError), not written as a fact."""
        if self.ranks > MAX_RANKS_PER_HOST:
            raise ConfigError("engine", f"the arguments ask for {self.ranks if self.ranks < 10**12 else 'over 10^12'}"
                              f" ranks on this host (TP={self.tp}, DP={self.dp}, PP={self.pp}, {self.nnodes} "
                              f"node(s)); phasewatch judges at most {MAX_RANKS_PER_HOST} per host: check ExecStart=")


MAX_COUNT_DIGITS = 9  # --tp-size and friends: 999999999 at most, before any product
MAX_RANKS_PER_HOST = 1024  # as the tracker: more than this on one node is no server (architecture.md)


def one_line(text: str) -> str:
    """`text` with every character that is not printable escaped (C0, DEL, C1 with U+0085, U+2028,
    U+2029, BOM...): a value of the unit (C-unescaped by systemd) stays on its comment line, and
    YAML's reader sees no character it refuses."""
    return "".join(ch if ch.isprintable() else
                   f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000
                   else f"\\U{ord(ch):08x}" for ch in text)


def _is_flag(word: str) -> bool:
    """`--tp`, `-tp`; not `-1` (a value)."""
    return word.startswith("-") and len(word) > 1 and not word[1].isdigit()


class FlagReader:
    """`--name value` and `--name=value`, last one wins (like argparse)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.values: dict[str, str] = {}
        self.present: set[str] = set()
        for index, word in enumerate(argv):
            if not _is_flag(word):
                continue
            name, equals, value = word.partition("=")
            self.present.add(name)
            if equals:
                self.values[name] = value
            elif index + 1 < len(argv) and not _is_flag(argv[index + 1]):
                self.values[name] = argv[index + 1]

    def text(self, *names: str) -> str | None:
        for name in names:
            if name in self.values:
                return self.values[name]
        return None

    def whole(self, *names: str, default: int = 1) -> int:
        """A positive count; a number of more than MAX_COUNT_DIGITS digits is refused (ConfigError)."""
        value = self.text(*names)
        if value is None or not (value.isascii() and value.isdigit()):
            return default
        if len(value.lstrip("0")) > MAX_COUNT_DIGITS:
            raise ConfigError(names[0], f"{names[0]} {value[:24]}{'...' if len(value) > 24 else ''} "
                              f"({len(value)} digits) is no count phasewatch can size limits for")
        return int(value) if int(value) > 0 else default

    def seconds(self, *names: str) -> float | None:
        value = self.text(*names)
        try:
            parsed = float(value) if value is not None else None
        except ValueError:
            return None
        return parsed if parsed is not None and math.isfinite(parsed) and parsed > 0 else None


def detect_engine(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The engine and the arguments after its entry point: `python -m sglang.launch_server ...`,
    `sglang serve ...`, `vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server ...`."""
    words = list(argv)
    for index, word in enumerate(words):
        base = word.rpartition("/")[2]
        following = words[index + 1] if index + 1 < len(words) else ""
        if word == "-m" and following.startswith("sglang.launch_server"):
            return "sglang", words[index + 2:]
        if word == "-m" and following.startswith("vllm.entrypoints"):
            return "vllm", words[index + 2:]
        if base == "sglang" and following == "serve":
            return "sglang", words[index + 2:]
        if base == "vllm" and following == "serve":
            return "vllm", words[index + 2:]
    return None, words


def engine_facts(argv: Sequence[str]) -> EngineFacts:
    engine, rest = detect_engine(argv)
    if engine is None:
        return EngineFacts(None)
    flags = FlagReader(rest)
    if engine == "vllm":
        model = flags.text("--model") or (rest[0] if rest and not rest[0].startswith("-") else None)
        speculative = flags.text("--speculative-config", "--speculative-model")
        return EngineFacts(engine, model, tp=flags.whole("--tensor-parallel-size", "-tp"),
                           dp=flags.whole("--data-parallel-size", "-dp"),
                           pp=flags.whole("--pipeline-parallel-size", "-pp"), nnodes=1, speculative=speculative,
                           port=flags.whole("--port", default=0) or None)
    speculative = flags.text("--speculative-algorithm", "--speculative-algo")
    return EngineFacts(engine, flags.text("--model-path", "--model"),
                       tp=flags.whole("--tp-size", "--tp", "--tensor-parallel-size"),
                       dp=flags.whole("--dp-size", "--dp", "--data-parallel-size"),
                       pp=flags.whole("--pp-size", "--pp", "--pipeline-parallel-size"),
                       nnodes=flags.whole("--nnodes"), speculative=speculative,
                       watchdog_timeout=flags.seconds("--watchdog-timeout"),
                       dist_timeout=flags.seconds("--dist-timeout"), port=flags.whole("--port", default=0) or None)


def exec_argv(exec_start: str) -> tuple[str, ...]:
    """A unit file's `ExecStart=` value (continuations joined) as argv; the `-@:+!` prefixes dropped."""
    words = shlex.split(exec_start.replace("\\\n", " "))
    if words:
        words[0] = words[0].lstrip("-@:+!")
    return tuple(words)


def limits_for(facts: EngineFacts, last: Mapping[Phase, float],
               environment: Mapping[str, str] | None = None) -> dict[Phase, PhaseLimits]:
    """The shipped limits; a phase the last start-up took long in gets at least 3x that (a deadline a
    normal start-up reaches is a false alarm); no draft phases without speculative decoding; then
    each limit an engine timer would pre-empt (stages/s4_judge/timerlint.py) brought a minute under it, so
    that phasewatch names a hang before the engine turns it into a crash."""
    from .timerlint import COLLECTIVE_PHASES, engine_timers

    server_args = {key: f"{value:g}" for key, value in (("dist_timeout", facts.dist_timeout),
                                                         ("watchdog_timeout", facts.watchdog_timeout))
                   if value is not None}
    timers = engine_timers(server_args, environment or {})
    under = {phase: timers["nccl_collective"] - 60 for phase in COLLECTIVE_PHASES}
    limits: dict[Phase, PhaseLimits] = {}
    for phase, base in DEFAULT_LIMITS.items():
        if phase in FINAL_PHASES or (phase in DRAFT_PHASES and facts.speculative is None):
            continue
        deadline, stall = base.deadline, base.stall
        took = last.get(phase)
        if took is not None and deadline is not None and 3 * took > deadline:
            deadline = _round_up(3 * took)
        if phase in under and stall is not None:
            stall = min(stall, under[phase])
        if phase is Phase.DIST_INIT and deadline is not None and stall is not None:
            deadline, stall = min(deadline, timers["dist_rendezvous"] - 60), min(stall, timers["dist_rendezvous"] - 60)
        if phase is Phase.WARMUP and deadline is not None and stall is not None:
            deadline = min(deadline, timers["warmup"] - 60)
            stall = min(stall, timers.get("scheduler_watchdog", stall) - 60)
        gpu_stall = base.gpu_stall
        if gpu_stall is not None and stall is not None:
            gpu_stall = min(gpu_stall, stall)
        limits[phase] = PhaseLimits(deadline, stall if stall is None or deadline is None else min(stall, deadline),
                                    gpu_stall=gpu_stall)
    return limits


def _round_up(seconds: float) -> float:
    return float(math.ceil(seconds / 60) * 60)


def timer_notes(command: UnitCommand, facts: EngineFacts, limits: Mapping[Phase, PhaseLimits]) -> list[str]:
    """The engine's and systemd's own timers beside phasewatch's limits: which fires first."""
    notes: list[str] = []
    longest = sum(limit.deadline or 0 for limit in limits.values())
    timeout = command.timeout_start
    if command.service_type == "simple" or command.service_type == "exec":
        shown_timeout = "infinity" if timeout is None else format_duration(timeout)
        notes.append(f"TimeoutStartSec={shown_timeout} bounds only the fork (Type={command.service_type}): "
                     "the start-up itself is judged by the limits below")
    elif timeout is not None and timeout < longest:
        notes.append(f"TimeoutStartSec={format_duration(timeout)} is shorter than the sum of the deadlines "
                     f"({format_duration(longest)}): systemd may kill a slow but healthy start-up first")
    dist = limits.get(Phase.DIST_INIT)
    if facts.dist_timeout is not None and dist is not None and dist.deadline is not None:
        if facts.dist_timeout <= dist.deadline:
            notes.append(f"--dist-timeout {facts.dist_timeout:g} fires before dist_init's deadline "
                         f"({format_duration(dist.deadline)}): torch gives up first, phasewatch sees a crash")
        else:
            notes.append(f"--dist-timeout {facts.dist_timeout:g}: dist_init's deadline "
                         f"({format_duration(dist.deadline)}) comes first")
    if facts.engine == "sglang":
        watchdog = facts.watchdog_timeout or SGLANG_WATCHDOG_DEFAULT
        origin = "" if facts.watchdog_timeout else " (SGLang's default)"
        notes.append(f"--watchdog-timeout {watchdog:g}{origin}: SGLang kills a batch hung that long once "
                     "serving; it does not bound the start-up")
    return notes


def render_config(command: UnitCommand, facts: EngineFacts) -> str:
    """The config text: every setting that matters for this unit, each with why."""
    assert facts.engine is not None
    limits = limits_for(facts, command.last_startup, command.environment)
    parallel = f"TP={facts.tp}" + (f", DP={facts.dp}" if facts.dp > 1 else "") + (
        f", PP={facts.pp}" if facts.pp > 1 else "") + (f", {facts.nnodes} nodes" if facts.nnodes > 1 else "")
    lines = [f"# phasewatch for {command.unit}, written by `phasewatch init` from its ExecStart=.",
             f"# engine {facts.engine}, model {facts.model or '(not named)'}, {parallel}, "
             f"{facts.ranks} rank(s) on this host" + (f", speculative {facts.speculative}" if facts.speculative
                                                      else ", no speculative decoding"),
             f"# runs as User={command.user or 'root'}" + (
                 "; its last start-up in the journal sized the limits it came near" if command.last_startup
                 else "; no start-up in the journal yet: the shipped limits"),
             "# deadline: longest one rank may stay in a phase; stall: longest it may stay silent in it;",
             "# gpu_stall: the stall window while the rank's GPU is observed (NVML; docs/phases.md).",
             "# Durations: 90s, 20m, 1h30m, or none. Check with: phasewatch check-config FILE",
             ""]
    lines += [f"# {note}" for note in timer_notes(command, facts, limits)]
    lines += ["", f"unit: {command.unit}", f"engine: {facts.engine}", "", "phases:"]
    for phase, limit in limits.items():
        took = command.last_startup.get(phase)
        note = PHASE_NOTES.get(phase, "")
        if took is not None:
            note += f" (last start-up: {format_duration(took)})"
        lines.append(f"  {phase.value}:{' ' * max(1, 26 - len(phase.value))}# {note}")
        lines.append(f"    deadline: {_limit(limit.deadline)}")
        lines.append(f"    stall: {_limit(limit.stall)}")
        if limit.gpu_stall is not None:
            lines.append(f"    gpu_stall: {_limit(limit.gpu_stall)}      # while its GPU is observed (NVML)")
    lines += ["  ready: {deadline: none, stall: none}", "  serving: {deadline: none, stall: none}", ""]
    if facts.ranks > 1:
        lines += ["# A rank still in a phase this long after the first rank left it is a straggler.",
                  "rank_skew: 5m", ""]
    lines = [one_line(line) for line in lines]  # (the unit's name is plain: systemd allows [\w:.@\\-] only)
    lines += _lint_lines(command, facts, "\n".join(lines), {phase.value for phase in limits})
    lines += ["# What to do about each verdict, and how often phasewatch may restart the unit.",
              "restart_budget: {max: 3, window: 6h, backoff: 5m}",
              "# evidence: the stuck rank's stacks (py-spy) and state, written before the restart; the alert",
              "# and every remedy name the file.",
              "actions: {stalled: [evidence, alert, restart], straggler: [evidence, alert, restart]}",
              "dry_run: false              # true: log what would be done, do nothing",
              'metrics: {listen: "127.0.0.1:9877"}', ""]
    return "\n".join(one_line(line) for line in lines)


def intended_keys(facts: EngineFacts, command: UnitCommand) -> dict[str, object]:
    """The top-level keys render_config writes, `phases` with the phases it names: what the written
    text must parse back to (anything else came from a value of the unit)."""
    phases = sorted({phase.value for phase in limits_for(facts, command.last_startup, command.environment)}
                    | {"ready", "serving"})
    keys: dict[str, object] = {"unit": command.unit, "engine": facts.engine, "phases": phases,
                               "restart_budget": None, "actions": None, "dry_run": None, "metrics": None}
    if facts.ranks > 1:
        keys["rank_skew"] = None
    return keys


def _limit(seconds: float | None) -> str:
    return "none" if seconds is None else format_duration(seconds)



def phase_durations(spans: Sequence[tuple[Phase, float | None, float | None]]) -> dict[Phase, float]:
    """The longest finished span of each phase over the ranks of one start-up."""
    longest: dict[Phase, float] = {}
    for phase, start, end in spans:
        if start is not None and end is not None and end >= start:
            longest[phase] = max(longest.get(phase, 0.0), end - start)
    return longest


SEAL_PREFIX = "# written by phasewatch init; edited once this stops matching: sha256 "


# The example config as `make install` puts it in /etc (sealed there by the Makefile): init may
# replace it as it replaces its own file, until someone edits it.
EXAMPLE_SEAL_PREFIX = "# phasewatch's example config, installed unedited; edited once this stops matching: sha256 "


def sealed(text: str, prefix: str = SEAL_PREFIX) -> str:
    """The config with a last line that tells init later whether anyone edited it."""
    return f"{text}{prefix}{hashlib.sha256(text.encode()).hexdigest()[:16]}\n"


def untouched(text: str) -> bool:
    """True for a file exactly as init wrote it or as the install put the example (so init may
    replace it); False once edited."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    return any(last.startswith(prefix) and sealed(body + "\n", prefix) == text
               for prefix in (SEAL_PREFIX, EXAMPLE_SEAL_PREFIX))


# Below this LogRateLimitBurst= journald may drop a start-up's lines (docs/operations.md).
LOG_RATE_BURST_NEEDED = 100_000


def _lint_lines(command: UnitCommand, facts: EngineFacts, limits_text: str, written: set[str]) -> list[str]:
    """phasewatch's timer lint (stages/s4_judge/timerlint.py) over the limits just written: each limit an
    engine or systemd timer pre-empts, as a comment to act on."""
    from ...config.load import parse_config
    from .timerlint import UnitTimers, lint

    server_args = {key: f"{value:g}" for key, value in (("dist_timeout", facts.dist_timeout),
                                                         ("watchdog_timeout", facts.watchdog_timeout))
                   if value is not None}
    timers = UnitTimers(timeout_start=math.inf if command.timeout_start is None else command.timeout_start,
                        service_type=command.service_type, environment=dict(command.environment))
    try:
        config = parse_config(limits_text)
    except ConfigError as exc:  # an engine without a built-in profile here
        return [f"# timer lint: not run ({exc})", ""]
    warnings = [w for w in lint(config, server_args, timers) if w.phase is None or w.phase in written]
    if not warnings:
        return ["# timer lint: no engine or systemd timer ends a start-up before these limits", ""]
    return ["# timer lint (check-config shows it too): a timer that fires before a limit above", *(
        f"#   {warning.message}" for warning in warnings), ""]


# `phasewatch init --ras-dropin`: NCCL RAS of each unit on a port of its own, so that two servers on one
# host never answer for each other (NCCL binds its RAS port with SO_REUSEPORT: the answers would mix).
RAS_PORT_FIRST = 28100
RAS_PORT_COUNT = 900


def ras_port_for(unit: str) -> int:
    """A port for the unit's RAS, the same every time for the same unit (two units may still meet on
    one: the timer lint says so, `ras_port_shared`)."""
    digest = hashlib.sha256(unit.encode()).hexdigest()
    return RAS_PORT_FIRST + int(digest[:8], 16) % RAS_PORT_COUNT


def ras_dropin(unit: str, port: int) -> str:
    return ("# Written by `phasewatch init --ras-dropin`: NCCL RAS of this unit on a port of its own, on\n"
            "# loopback (phasewatch asks it who a collective hang waits for). Any local user can bind a\n"
            "# free port first: phasewatch believes only answers that name the unit's own processes.\n"
            f"[Service]\nEnvironment=NCCL_RAS_ADDR=127.0.0.1:{port}\n")
