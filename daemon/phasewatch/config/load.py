"""Configuration: YAML -> frozen dataclasses, validated once, at the edge.

Every error names the key path, the file and the line: `phases.weight_load.deadline: expected a
duration like 90s, 20m or 1h30m, got '5x' (file: /etc/phasewatch/x.yaml, line 7)`.
The CLI turns ConfigError into exit status 78 (EX_CONFIG).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..durations import shown
from ..errors import ConfigError, ProfileError
from ..profile.load import Profile, load_builtin_profile, parse_profile
from ..records import Phase, VerdictKind
from .group import parse_group
from .parse_sections import (
    Fail,
    duration,
    entries,
    parse_adaptive,
    parse_evidence,
    parse_health,
    parse_hooks,
    parse_leftovers,
    parse_metrics,
    parse_phases,
    parse_restart_budget,
    parse_vitals,
)

# Re-exported: the section records are part of what a Config is.
from .sections import CHAIN_LIMIT, chain_bound
from .sections import DEFAULT_LIMITS as DEFAULT_LIMITS
from .sections import Adaptive as Adaptive
from .sections import EvidenceCapture as EvidenceCapture
from .sections import Group as Group
from .sections import HealthCheck as HealthCheck
from .sections import Hook as Hook
from .sections import Leftovers as Leftovers
from .sections import PhaseLimits as PhaseLimits
from .sections import RestartBudget as RestartBudget
from .sections import VitalsSampling as VitalsSampling
from .yaml_file import load_yaml, read_config_text, strip_lines

PROFILE_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# systemd's unit names (unit_name_is_valid): ASCII letters, digits and :-_.\ with an instance after
# the first @, below 256 bytes; a template (`x@.service`) is no unit to watch.
UNIT_NAME_RE = re.compile(r"[A-Za-z0-9:_.\\-]+(?:@[A-Za-z0-9:_.\\@-]+)?\.(?:service|scope)")




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
    profile_path: str | None = None  # the file `profile` came from (file_trust.py checks who may write it)
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ACTIONS))
    restart_budget: RestartBudget = RestartBudget()
    dry_run: bool = False
    metrics_listen: str = "127.0.0.1:9877"
    metrics_listen_line: int | None = field(default=None, compare=False)  # (config/host.py names it)
    health: HealthCheck = HealthCheck()
    adaptive: Adaptive = Adaptive()
    vitals: VitalsSampling = VitalsSampling()
    rank_processes: str = "cgroup"  # "host": also look for rank titles outside the cgroup (containers)
    evidence: EvidenceCapture = EvidenceCapture()
    hooks: Mapping[str, Hook] = field(default_factory=dict)
    leftovers: Leftovers = Leftovers()
    group: Group | None = None  # one node of a multi-node server (config/group.py)

    def limits(self, phase: Phase) -> PhaseLimits:
        return self.phases.get(phase, PhaseLimits(None, None))

    def engine_profile(self) -> Profile:
        return self.profile if self.profile is not None else load_builtin_profile(self.engine)


TOP_KEYS = ("unit", "engine", "profile_path", "phases", "rank_skew", "crash_cause_wait", "patterns", "actions",
            "restart_budget", "dry_run", "metrics", "health", "adaptive", "vitals", "rank_processes",
            "evidence", "hooks", "leftovers", "group")


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

    def section(key: str) -> tuple[Any, int | None, Fail]:
        return document.get(key, {}) or {}, lines.get(key), fail

    unit = _unit(document.get("unit", Config.unit), lines.get("unit"), fail)
    engine, profile = _engine_profile(document, lines, path, fail)
    phases = parse_phases(*section("phases"))
    rank_skew = _rank_skew(document, lines, fail)
    crash_cause_wait = _crash_cause_wait(document, lines, fail)
    profile = _with_patterns(profile, document.get("patterns", []) or [], lines.get("patterns"), path)
    hooks = parse_hooks(*section("hooks"))
    actions = _actions(*section("actions"), hooks)
    budget = parse_restart_budget(*section("restart_budget"))
    dry_run = _dry_run(document, lines, fail)
    listen, listen_line = parse_metrics(*section("metrics"))
    health = parse_health(*section("health"))
    adaptive = parse_adaptive(*section("adaptive"))
    vitals = parse_vitals(*section("vitals"))
    rank_processes = _rank_processes(document, lines, fail)
    evidence = parse_evidence(*section("evidence"))
    _check_chains(actions, evidence, hooks, lines.get("actions"), fail)
    return Config(unit=unit, engine=engine, phases=phases, rank_skew=rank_skew, crash_cause_wait=crash_cause_wait,
                  profile=profile, source=path, profile_path=document.get("profile_path"), actions=actions,
                  restart_budget=budget, dry_run=dry_run, metrics_listen=listen, metrics_listen_line=listen_line,
                  health=health, adaptive=adaptive, vitals=vitals, rank_processes=rank_processes, evidence=evidence,
                  hooks=hooks, leftovers=parse_leftovers(*section("leftovers")),
                  group=parse_group(document.get("group"), lines.get("group"), fail))


def _unit(unit: Any, line: int | None, fail: Fail) -> str:
    if not isinstance(unit, str) or not UNIT_NAME_RE.fullmatch(unit) or len(unit) > 255:
        raise fail("unit", f"expected a unit name like sglang-kimi.service, got {shown(unit)} (systemd's: ASCII "
                   "letters, digits and :-_.\\@, at most 255)", line)
    return unit


def _engine_profile(document: dict[str, Any], lines: dict[str, int], path: str | None,
                    fail: Fail) -> tuple[str, Profile]:
    """The engine and its profile: `profile_path:`'s file, else the built-in profile `engine:` names."""
    engine = document.get("engine", "sglang")
    if not isinstance(engine, str) or not PROFILE_NAME_RE.fullmatch(engine):
        raise fail("engine", f"expected a built-in profile name like sglang, got {shown(engine)} "
                   "(a profile file goes in profile_path:)", lines.get("engine"))
    if "profile_path" in document:
        profile = _profile_file(document["profile_path"], lines.get("profile_path"), path, fail)
        return profile.engine, profile
    try:
        return engine, load_builtin_profile(engine)
    except ProfileError as exc:
        raise fail("engine", str(exc).split(": ", 1)[1], lines.get("engine")) from None


def _with_patterns(profile: Profile, patterns: Any, line: int | None, path: str | None) -> Profile:
    """The profile with the config's `patterns:` rules over it; an error at the failing rule's line."""
    if not isinstance(patterns, list):
        raise ConfigError("patterns", "expected a list of rules", path, line)
    try:
        return profile.with_overrides(strip_lines(patterns))
    except ProfileError as exc:
        index_match = re.match(r"patterns\[(\d+)\]", exc.key)
        at = None
        if index_match and int(index_match.group(1)) < len(patterns):
            item = patterns[int(index_match.group(1))]
            item_lines = item.get("__lines__", {}) if isinstance(item, dict) else {}
            field_name = exc.key.rsplit(".", 1)[-1]
            at = item_lines.get(field_name) or min(item_lines.values(), default=None)
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1], path, at or line) from None


def _rank_skew(document: dict[str, Any], lines: dict[str, int], fail: Fail) -> float:
    if "rank_skew" not in document:
        return DEFAULT_RANK_SKEW
    parsed = duration(document["rank_skew"], "rank_skew", lines.get("rank_skew"), fail)
    return parsed if parsed is not None else float("inf")


def _crash_cause_wait(document: dict[str, Any], lines: dict[str, int], fail: Fail) -> float:
    if "crash_cause_wait" not in document:
        return DEFAULT_CRASH_CAUSE_WAIT
    wait = duration(document["crash_cause_wait"], "crash_cause_wait", lines.get("crash_cause_wait"), fail) or 0.0
    if wait > MAX_CRASH_CAUSE_WAIT:
        raise fail("crash_cause_wait", f"at most {MAX_CRASH_CAUSE_WAIT:g}s: a crash's alert and restart wait "
                   "this long", lines.get("crash_cause_wait"))
    return wait


def _actions(section: Any, line: int | None, fail: Fail, hooks: Mapping[str, Hook]) -> dict[str, tuple[str, ...]]:
    actions = dict(DEFAULT_ACTIONS)
    for kind, listed, at in entries(section, "actions", line, "a mapping of verdict kinds to action lists", fail):
        if kind not in VERDICT_KINDS:
            raise fail(f"actions.{kind}", f"unknown verdict kind (known: {', '.join(VERDICT_KINDS)})", at)
        known = (*ACTION_NAMES, *(f"hook:{name}" for name in hooks))
        if not isinstance(listed, list) or any(a not in known for a in listed):
            raise fail(f"actions.{kind}", f"expected a list of {', '.join(known)}, got {shown(listed)}", at)
        actions[kind] = tuple(listed)
    return actions


def _check_chains(actions: Mapping[str, tuple[str, ...]], evidence: EvidenceCapture, hooks: Mapping[str, Hook],
                  line: int | None, fail: Fail) -> None:
    """Each verdict's actions ask for the restart within CHAIN_LIMIT."""
    for kind, listed in actions.items():
        bound = chain_bound(listed, evidence.timeout, {name: h.timeout for name, h in hooks.items()})
        if bound > CHAIN_LIMIT:
            raise fail(f"actions.{kind}", f"the actions take up to {bound:g}s before the restart is asked for "
                       f"(evidence.timeout, each hook's timeout, D-Bus): at most {CHAIN_LIMIT:g}s (docs/operations.md"
                       ", \"Actions and their bounds\")", line)


def _dry_run(document: dict[str, Any], lines: dict[str, int], fail: Fail) -> bool:
    dry_run = document.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise fail("dry_run", f"expected true or false, got {shown(dry_run)}", lines.get("dry_run"))
    return dry_run


def _rank_processes(document: dict[str, Any], lines: dict[str, int], fail: Fail) -> str:
    rank_processes = document.get("rank_processes", "cgroup")
    if rank_processes not in ("cgroup", "host"):
        raise fail("rank_processes", f"expected cgroup or host, got {shown(rank_processes)}",
                   lines.get("rank_processes"))
    return str(rank_processes)


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
