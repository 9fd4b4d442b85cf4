"""Configuration: YAML -> frozen dataclasses, validated once, at the edge.

Every error names the key path, the file and the line: `phases.weight_load.deadline: expected a
duration like 90s, 20m or 1h30m, got '5x' (file: /etc/phasewatch/x.yaml, line 7)`.
The CLI turns ConfigError into exit status 78 (EX_CONFIG).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..durations import parse_duration, shown
from ..errors import ConfigError, ProfileError
from ..profile.load import Profile, load_builtin_profile, parse_profile
from ..records import PHASE_NAMES, Phase, VerdictKind
from .group import parse_group

# Re-exported: the section records are part of what a Config is.
from .sections import CHAIN_LIMIT, MAX_RESTARTS, chain_bound
from .sections import Adaptive as Adaptive
from .sections import EvidenceCapture as EvidenceCapture
from .sections import Group as Group
from .sections import HealthCheck as HealthCheck
from .sections import Hook as Hook
from .sections import Leftovers as Leftovers
from .sections import RestartBudget as RestartBudget
from .sections import VitalsSampling as VitalsSampling
from .yaml_file import load_yaml, read_config_text, strip_lines

PROFILE_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# systemd's unit names (unit_name_is_valid): ASCII letters, digits and :-_.\ with an instance after
# the first @, below 256 bytes; a template (`x@.service`) is no unit to watch.
UNIT_NAME_RE = re.compile(r"[A-Za-z0-9:_.\\-]+(?:@[A-Za-z0-9:_.\\@-]+)?\.(?:service|scope)")




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
DEFAULT_RANK_SKEW = 300.0
DEFAULT_CRASH_CAUSE_WAIT = 3.0
MAX_CRASH_CAUSE_WAIT = 60.0

VERDICT_KINDS = tuple(VerdictKind)
ACTION_NAMES = ("evidence", "alert", "restart")
DEFAULT_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "stalled": ("alert", "restart"),
    "straggler": ("alert", "restart"),
    "rank_died": ("alert", "restart"),
    "crashed": ("alert",),  # the unit's own Restart= usually handles a crash
    "unhealthy": ("alert",),
    "lines_lost": ("alert",),
    "waiting_for_node": ("alert",),  # a node of a group: the group decides its restart
    "gpu_fault": ("alert",),  # a GPU's XID or NVML health; its action holds restarts back (restart_gate.py)
}


@dataclass(frozen=True)
class Config:
    unit: str = "sglang.service"
    engine: str = "sglang"
    phases: Mapping[Phase, PhaseLimits] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    rank_skew: float = DEFAULT_RANK_SKEW
    # How long a crash whose cause is only generic ("WorkerProc failed to start.") waits for the line
    # naming a specific one (the OutOfMemoryError at the end of its traceback), unless the unit ends first.
    crash_cause_wait: float = DEFAULT_CRASH_CAUSE_WAIT
    profile: Profile | None = None
    source: str | None = None
    profile_path: str | None = None  # the file `profile` came from (config_trust checks who may write it)
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ACTIONS))
    restart_budget: RestartBudget = RestartBudget()
    dry_run: bool = False
    metrics_listen: str = "127.0.0.1:9877"
    metrics_listen_line: int | None = field(default=None, compare=False)  # (config_host.py names it)
    health: HealthCheck = HealthCheck()
    adaptive: Adaptive = Adaptive()
    vitals: VitalsSampling = VitalsSampling()
    rank_processes: str = "cgroup"  # "host": also look for rank titles outside the cgroup (containers)
    evidence: EvidenceCapture = EvidenceCapture()
    hooks: Mapping[str, Hook] = field(default_factory=dict)
    leftovers: Leftovers = Leftovers()
    group: Group | None = None  # one node of a multi-node server (config_group.py)

    def limits(self, phase: Phase) -> PhaseLimits:
        return self.phases.get(phase, PhaseLimits(None, None))

    def engine_profile(self) -> Profile:
        return self.profile if self.profile is not None else load_builtin_profile(self.engine)


TOP_KEYS = ("unit", "engine", "profile_path", "phases", "rank_skew", "crash_cause_wait", "patterns", "actions",
            "restart_budget", "dry_run", "metrics", "health", "adaptive", "vitals", "rank_processes",
            "evidence", "hooks", "leftovers", "group")
LISTEN_RE = re.compile(r"^(?:\[[0-9a-fA-F:]+\]|[\w.-]+):(\d{1,5})$")


def load_config(path: str | Path) -> Config:
    path = str(path)
    return parse_config(read_config_text(path), path)


def parse_config(text: str, path: str | None = None) -> Config:
    return parse_document(load_yaml(text, path), path)


def parse_document(document: Any, path: str | None = None) -> Config:
    """The config from its YAML document (mappings carry `__lines__`: each key's line)."""
    if document is None:
        document = {"__lines__": {}}
    if not isinstance(document, dict):
        raise ConfigError("config", "expected a mapping of settings at the top level", path, 1)
    lines: dict[str, int] = document.get("__lines__", {})

    def fail(key: str, message: str, line: int | None) -> ConfigError:
        return ConfigError(key, message, path, line)

    for key in document:
        if key != "__lines__" and key not in TOP_KEYS:
            raise fail(str(key), f"unknown setting (known: {', '.join(TOP_KEYS)})", lines.get(key))
    unit = document.get("unit", Config.unit)
    if not isinstance(unit, str) or not UNIT_NAME_RE.fullmatch(unit) or len(unit) > 255:
        raise fail("unit", f"expected a unit name like sglang-kimi.service, got {shown(unit)} (systemd's: ASCII "
                   "letters, digits and :-_.\\@, at most 255)", lines.get("unit"))
    engine = document.get("engine", "sglang")
    if not isinstance(engine, str) or not PROFILE_NAME_RE.fullmatch(engine):
        raise fail("engine", f"expected a built-in profile name like sglang, got {shown(engine)} "
                   "(a profile file goes in profile_path:)", lines.get("engine"))
    if "profile_path" in document:
        profile = _profile_file(document["profile_path"], lines.get("profile_path"), path, fail)
        engine = profile.engine
    else:
        try:
            profile = load_builtin_profile(engine)
        except ProfileError as exc:
            raise fail("engine", str(exc).split(": ", 1)[1], lines.get("engine")) from None

    phases = dict(DEFAULT_LIMITS)
    for name, spec, at in _entries(document.get("phases", {}) or {}, "phases", lines.get("phases"),
                                   "a mapping of phase names", fail):
        if name not in PHASE_NAMES:
            raise fail(f"phases.{name}", f"unknown phase (known: {', '.join(PHASE_NAMES)})", at)
        current = phases[Phase(name)]
        values = {"deadline": current.deadline, "stall": current.stall, "gpu_stall": current.gpu_stall}
        for key, raw, key_at in _entries(spec, f"phases.{name}", at, "a mapping with deadline and/or stall", fail):
            if key not in values:
                raise fail(f"phases.{name}.{key}", "unknown setting (known: deadline, stall, gpu_stall)", key_at)
            values[key] = _duration(raw, f"phases.{name}.{key}", key_at, fail)
        if isinstance(spec, dict) and "stall" in spec and "gpu_stall" not in spec:
            # A stall window set alone bounds the shipped GPU one (none: no stall judgement at all).
            stall, gpu = values["stall"], values["gpu_stall"]
            values["gpu_stall"] = None if stall is None or gpu is None else min(stall, gpu)
        phases[Phase(name)] = PhaseLimits(values["deadline"], values["stall"], gpu_stall=values["gpu_stall"])

    rank_skew = DEFAULT_RANK_SKEW
    if "rank_skew" in document:
        parsed = _duration(document["rank_skew"], "rank_skew", lines.get("rank_skew"), fail)
        rank_skew = parsed if parsed is not None else float("inf")

    crash_cause_wait = DEFAULT_CRASH_CAUSE_WAIT
    if "crash_cause_wait" in document:
        crash_cause_wait = _duration(document["crash_cause_wait"], "crash_cause_wait", lines.get("crash_cause_wait"),
                                     fail) or 0.0
        if crash_cause_wait > MAX_CRASH_CAUSE_WAIT:
            raise fail("crash_cause_wait", f"at most {MAX_CRASH_CAUSE_WAIT:g}s: a crash's alert and restart wait "
                       "this long", lines.get("crash_cause_wait"))

    patterns = document.get("patterns", []) or []
    if not isinstance(patterns, list):
        raise fail("patterns", "expected a list of rules", lines.get("patterns"))
    try:
        profile = profile.with_overrides(strip_lines(patterns))
    except ProfileError as exc:
        index_match = re.match(r"patterns\[(\d+)\]", exc.key)
        line = None
        if index_match and int(index_match.group(1)) < len(patterns):
            item = patterns[int(index_match.group(1))]
            item_lines = item.get("__lines__", {}) if isinstance(item, dict) else {}
            field_name = exc.key.rsplit(".", 1)[-1]
            line = item_lines.get(field_name) or min(item_lines.values(), default=None)
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1], path, line or lines.get("patterns")) from None
    hooks = _hooks(document.get("hooks", {}) or {}, lines.get("hooks"), fail)
    actions = dict(DEFAULT_ACTIONS)
    for kind, listed, at in _entries(document.get("actions", {}) or {}, "actions", lines.get("actions"),
                                     "a mapping of verdict kinds to action lists", fail):
        if kind not in VERDICT_KINDS:
            raise fail(f"actions.{kind}", f"unknown verdict kind (known: {', '.join(VERDICT_KINDS)})", at)
        known = (*ACTION_NAMES, *(f"hook:{name}" for name in hooks))
        if not isinstance(listed, list) or any(a not in known for a in listed):
            raise fail(f"actions.{kind}", f"expected a list of {', '.join(known)}, got {shown(listed)}", at)
        actions[kind] = tuple(listed)

    budget = RestartBudget()
    settings: dict[str, Any] = {"max": budget.max, "window": budget.window, "backoff": budget.backoff,
                                "stable": budget.stable, "same_failure": budget.same_failure}
    for key, raw, at in _entries(document.get("restart_budget", {}) or {}, "restart_budget",
                                 lines.get("restart_budget"), "a mapping with max, window, backoff, stable", fail):
        if key in ("max", "same_failure"):  # same_failure: refused after that many alike in a row (restart_gate.py)
            settings[key] = _whole(raw, 0 if key == "max" else 1, f"restart_budget.{key}", at, fail)
            if key == "max" and settings["max"] > MAX_RESTARTS:
                raise fail("restart_budget.max", f"at most {MAX_RESTARTS}, got {raw} (more would remove the restart "
                           "limit, as window: none would)", at)
        elif key == "window":  # `none` would mean no limit on restarts at all
            window = _duration(raw, "restart_budget.window", at, fail)
            if window is None:
                raise fail("restart_budget.window", "expected a duration like 6h (none would remove the restart "
                           "limit)", at)
            settings["window"] = window
        elif key in ("backoff", "stable"):
            settings[key] = _duration(raw, f"restart_budget.{key}", at, fail) or 0.0
        else:
            raise fail(f"restart_budget.{key}", "unknown setting (known: max, window, backoff, stable, "
                       "same_failure)", at)
    budget = RestartBudget(**settings)

    dry_run = document.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise fail("dry_run", f"expected true or false, got {shown(dry_run)}", lines.get("dry_run"))
    listen, listen_line = "127.0.0.1:9877", None
    for key, raw, at in _entries(document.get("metrics", {}) or {}, "metrics", lines.get("metrics"),
                                 "a mapping with listen", fail):
        if key != "listen":
            raise fail(f"metrics.{key}", "unknown setting (known: listen)", at)
        problem = listen_problem(raw)
        if problem is not None:
            raise fail("metrics.listen", problem, at)
        listen, listen_line = raw, at
    health = _health(document.get("health", {}) or {}, lines.get("health"), fail)
    adaptive = _adaptive(document.get("adaptive", {}) or {}, lines.get("adaptive"), fail)
    vitals = _vitals(document.get("vitals", {}) or {}, lines.get("vitals"), fail)
    rank_processes = document.get("rank_processes", "cgroup")
    if rank_processes not in ("cgroup", "host"):
        raise fail("rank_processes", f"expected cgroup or host, got {shown(rank_processes)}",
                   lines.get("rank_processes"))
    evidence = EvidenceCapture()
    for key, raw, at in _entries(document.get("evidence", {}) or {}, "evidence", lines.get("evidence"),
                                 "a mapping with timeout", fail):
        if key != "timeout":
            raise fail(f"evidence.{key}", "unknown setting (known: timeout)", at)
        timeout = _duration(raw, "evidence.timeout", at, fail)
        if not timeout:
            raise fail("evidence.timeout", "expected a duration like 15s", at)
        evidence = replace(evidence, timeout=timeout)
    for kind, listed in actions.items():
        bound = chain_bound(listed, evidence.timeout, {name: h.timeout for name, h in hooks.items()})
        if bound > CHAIN_LIMIT:
            raise fail(f"actions.{kind}", f"the actions take up to {bound:g}s before the restart is asked for "
                       f"(evidence.timeout, each hook's timeout, D-Bus): at most {CHAIN_LIMIT:g}s (docs/operations.md"
                       ", \"Actions and their bounds\")", lines.get("actions"))
    return Config(unit=unit, engine=engine, phases=phases, rank_skew=rank_skew, crash_cause_wait=crash_cause_wait,
                  profile=profile, source=path, profile_path=document.get("profile_path"), actions=actions,
                  restart_budget=budget, dry_run=dry_run, metrics_listen=listen, metrics_listen_line=listen_line,
                  health=health, adaptive=adaptive, vitals=vitals, rank_processes=rank_processes, evidence=evidence,
                  hooks=hooks,
                  leftovers=_leftovers(document.get("leftovers", {}) or {}, lines.get("leftovers"), fail),
                  group=parse_group(document.get("group"), lines.get("group"), fail, _entries, listen_problem))


def listen_problem(raw: Any) -> str | None:
    """What is wrong with a HOST:PORT setting (None: nothing)."""
    port = LISTEN_RE.match(raw) if isinstance(raw, str) else None
    if port is None:
        return f"expected HOST:PORT like 127.0.0.1:9877, got {shown(raw)}"
    if not 1 <= int(port.group(1)) <= 65535:
        return f"port {port.group(1)} out of range (1..65535)"
    return None


Fail = Callable[[str, str, "int | None"], ConfigError]


def _leftovers(section: Any, line: int | None, fail: Fail) -> Leftovers:
    leftovers = Leftovers()
    for key, raw, at in _entries(section, "leftovers", line, "a mapping with check, wait, after_any_stop", fail):
        if key in ("check", "after_any_stop"):
            if not isinstance(raw, bool):
                raise fail(f"leftovers.{key}", f"expected true or false, got {shown(raw)}", at)
            leftovers = replace(leftovers, **{key: raw})
        elif key == "wait":
            wait = _duration(raw, "leftovers.wait", at, fail)
            if wait is None:
                raise fail("leftovers.wait", "expected a duration like 10m (the wait is always bounded)", at)
            leftovers = replace(leftovers, wait=wait)
        else:
            raise fail(f"leftovers.{key}", "unknown setting (known: check, wait, after_any_stop)", at)
    return leftovers


def _hooks(section: Any, line: int | None, fail: Fail) -> dict[str, Hook]:
    hooks = {}
    for name, raw, at in _entries(section, "hooks", line, "a mapping of hook names to {exec, timeout}", fail):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise fail(f"hooks.{name}", "expected a name of letters, digits, '_', '.', '-'", at)
        settings = {"timeout": 30.0}
        argv: list[str] | None = None
        for key, value, key_at in _entries(raw, f"hooks.{name}", at, "a mapping with exec, timeout", fail):
            if key == "exec":
                if not (isinstance(value, list) and value and all(isinstance(a, str) for a in value)):
                    raise fail(f"hooks.{name}.exec", f"expected a command as a list of strings, got {shown(value)}",
                               key_at)
                argv = value
            elif key == "timeout":
                timeout = _duration(value, f"hooks.{name}.timeout", key_at, fail)
                if timeout is None:
                    raise fail(f"hooks.{name}.timeout", "expected a duration like 30s (a hook is always bounded)",
                               key_at)
                settings["timeout"] = timeout
            else:
                raise fail(f"hooks.{name}.{key}", "unknown setting (known: exec, timeout)", key_at)
        if argv is None:
            raise fail(f"hooks.{name}.exec", "missing: the command to run", at)
        hooks[name] = Hook(tuple(argv), settings["timeout"])
    return hooks


def _entries(section: Any, key: str, line: int | None, expected: str, fail: Fail) -> list[tuple[str, Any, int | None]]:
    """A mapping section's (name, value, line), or an error naming it."""
    if not isinstance(section, dict):
        raise fail(key, f"expected {expected}", line)
    lines: dict[str, int] = section.get("__lines__", {})
    return [(str(name), value, lines.get(name)) for name, value in section.items() if name != "__lines__"]


def _whole(raw: Any, minimum: int, key: str, line: int | None, fail: Fail) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise fail(key, f"expected a whole number >= {minimum}, got {shown(raw)}", line)
    return raw


def _duration(raw: Any, key: str, line: int | None, fail: Fail) -> float | None:
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise fail(key, str(exc), line) from None


def _adaptive(doc: Any, line: int | None, fail: Fail) -> Adaptive:
    if isinstance(doc, bool):
        return Adaptive(enabled=doc)
    values: dict[str, Any] = {}
    floor_at: int | None = None
    for key, raw, at in _entries(doc, "adaptive", line,
                                 "true, false, or a mapping with enabled, k, min_samples, floor, ceiling", fail):
        if key == "enabled":
            if not isinstance(raw, bool):
                raise fail("adaptive.enabled", f"expected true or false, got {shown(raw)}", at)
        elif key == "min_samples":
            raw = _whole(raw, 1, "adaptive.min_samples", at, fail)
        elif key in ("k", "floor", "ceiling"):
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw < math.inf:
                raise fail(f"adaptive.{key}", f"expected a positive number, got {shown(raw)}", at)
            raw = float(raw)
        else:
            raise fail(f"adaptive.{key}", "unknown setting (known: enabled, k, min_samples, floor, ceiling)", at)
        if key == "floor":
            floor_at = at
        values[key] = raw
    result = Adaptive(**values)
    if result.floor > result.ceiling:
        raise fail("adaptive.floor", f"floor {result.floor:g} is above ceiling {result.ceiling:g}", floor_at)
    return result


def _health(doc: Any, line: int | None, fail: Fail) -> HealthCheck:
    known = ("url", "interval", "timeout", "failures", "enabled")
    values: dict[str, Any] = {}
    for key, raw, at in _entries(doc, "health", line, f"a mapping with {', '.join(known)}", fail):
        if key not in known:
            raise fail(f"health.{key}", f"unknown setting (known: {', '.join(known)})", at)
        if key == "url":
            if raw is not None and (not isinstance(raw, str) or not re.match(r"^https?://", raw)):
                raise fail("health.url", f"expected an http:// or https:// URL, got {shown(raw)}", at)
            values["url"] = raw
        elif key in ("interval", "timeout"):
            parsed = _duration(raw, f"health.{key}", at, fail)
            if parsed is None:
                raise fail(f"health.{key}", "expected a duration, got none", at)
            values[key] = parsed
        elif key == "failures":
            values["failures"] = _whole(raw, 1, "health.failures", at, fail)
        else:
            if not isinstance(raw, bool):
                raise fail("health.enabled", f"expected true or false, got {shown(raw)}", at)
            values["enabled"] = raw
    return HealthCheck(**values)


def _profile_file(raw: Any, line: int | None, config_path: str | None, fail: Fail) -> Profile:
    """`profile_path:` the one place a config names a file to load: an absolute path to a regular
    YAML file, read through the same guarded loader."""
    if not isinstance(raw, str) or not raw.startswith("/"):
        raise fail("profile_path", f"expected an absolute path to a profile YAML file, got {shown(raw)}", line)
    try:
        document = strip_lines(load_yaml(read_config_text(raw, "profile_path"), raw))
    except ConfigError as exc:  # named at the config's line, with the profile file it could not take
        raise fail("profile_path", f"{exc.detail}: {shown(raw)}", line) from None
    try:
        return parse_profile(document, raw)
    except ProfileError as exc:
        raise fail("profile_path", str(exc)[:200], line) from None


def _vitals(doc: Any, line: int | None, fail: Fail) -> VitalsSampling:
    values: dict[str, Any] = {}
    for key, raw, at in _entries(doc, "vitals", line, "a mapping with period, enabled, gpu, ras", fail):
        if key == "period":
            parsed = _duration(raw, "vitals.period", at, fail)
            if parsed is None or parsed < 0.5:
                raise fail("vitals.period", f"expected a duration of at least 0.5s, got {shown(raw)}", at)
            values["period"] = parsed
        elif key in ("enabled", "gpu", "ras"):
            if not isinstance(raw, bool):
                raise fail(f"vitals.{key}", f"expected true or false, got {shown(raw)}", at)
            values[key] = raw
        else:
            raise fail(f"vitals.{key}", "unknown setting (known: period, enabled, gpu, ras)", at)
    return VitalsSampling(**values)
