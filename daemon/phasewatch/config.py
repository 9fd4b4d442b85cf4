"""Configuration: YAML -> frozen dataclasses, validated once, at the edge.

Every error names the key path, the file and the line: `phases.weight_load.deadline: expected a
duration like 90s, 20m or 1h30m, got '5x' (file: /etc/phasewatch/x.yaml, line 7)`.
The CLI turns ConfigError into exit status 78 (EX_CONFIG).
"""

from __future__ import annotations

import math
import os
import re
import reprlib
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from .events import Profile, ProfileError, load_builtin_profile, parse_profile
from .records import PHASE_NAMES, Phase

# What a config file may be: small, plain, shallow. Beyond these the loader refuses (exit 78) before
# any value is built, so no file can cost more than reading its own bytes.
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_NUMBER_CHARS = 20
MAX_ALIASES = 64
MAX_DURATION = 365 * 86400.0
SHOWN_CHARS = 60
PROFILE_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


class ConfigError(ValueError):
    def __init__(self, key: str, message: str, path: str | None = None, line: int | None = None) -> None:
        where = ", ".join(part for part in (f"file: {path}" if path else "", f"line {line}" if line else "") if part)
        shown_key = key if len(key) <= 2 * SHOWN_CHARS else key[:2 * SHOWN_CHARS] + "...(cut)"
        super().__init__(f"{shown_key}: {message}" + (f" ({where})" if where else ""))
        self.key, self.path, self.line = key, path, line


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxdict = 2, 4, 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = SHOWN_CHARS


def shown(value: object) -> str:
    """A value for an error message: its repr, cut to a short length."""
    text = _SHORT_REPR.repr(value)  # bounded however big or shared the value is
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...(cut)"


def parse_duration(value: object) -> float | None:
    """'90s', '20m', '1h30m', '2d', 45 (seconds), 'none' -> seconds (None = no limit).
    A limit is finite, positive and at most a year (MAX_DURATION)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "never")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    total: float | None = None
    if isinstance(value, (int, float)):
        if not value > 0:  # also NaN (YAML .nan), which no `spent > limit` would ever exceed
            raise ValueError(f"expected a positive duration, got {shown(value)}")
        total = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        match = DURATION_RE.match(value.strip().replace(" ", ""))
        if match and any(match.groups()):
            days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            total = days * 86400 + hours * 3600 + minutes * 60 + seconds
            total = total if total > 0 else None
    if total is None:
        raise ValueError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    if not math.isfinite(total) or total > MAX_DURATION:
        raise ValueError(f"expected a duration of at most 365d, got {shown(value)}")
    return total


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m{secs}s" if secs else f"{minutes}m"


@dataclass(frozen=True)
class PhaseLimits:
    """`deadline`: longest a rank may stay in the phase; `stall`: longest it may stay silent in it."""

    deadline: float | None
    stall: float | None
    # With a learned deadline: a phase whose progress bar keeps moving may run past it, at its own
    # pace, up to this cap (the configured ceiling). None: the deadline is firm.
    cap: float | None = None


# Sized for Kimi-K2.5 INT4 (547 GB) on 8 GPUs with an EAGLE-3 draft; see config/phasewatch.yaml.
DEFAULT_LIMITS: Mapping[Phase, PhaseLimits] = {
    Phase.LAUNCH: PhaseLimits(600, 600),
    Phase.DIST_INIT: PhaseLimits(600, 300),
    Phase.WEIGHT_LOAD: PhaseLimits(2700, 900),
    Phase.JIT_COMPILE: PhaseLimits(1800, 1200),
    Phase.KV_CACHE_ALLOC: PhaseLimits(600, 600),
    Phase.CUDA_GRAPH_CAPTURE: PhaseLimits(1800, 1200),
    Phase.DRAFT_WEIGHT_LOAD: PhaseLimits(600, 300),
    Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(1200, 1200),
    Phase.HTTP_SERVER_START: PhaseLimits(300, 300),
    Phase.WARMUP: PhaseLimits(720, 660),
    Phase.READY: PhaseLimits(None, None),
    Phase.SERVING: PhaseLimits(None, None),
}
DEFAULT_RANK_SKEW = 300.0

VERDICT_KINDS = ("stalled", "straggler", "rank_died", "crashed", "unhealthy", "lines_lost")
ACTION_NAMES = ("alert", "restart")
DEFAULT_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "stalled": ("alert", "restart"),
    "straggler": ("alert", "restart"),
    "rank_died": ("alert", "restart"),
    "crashed": ("alert",),  # the unit's own Restart= usually handles a crash
    "unhealthy": ("alert",),
    "lines_lost": ("alert",),
}


@dataclass(frozen=True)
class RestartBudget:
    """At most `max` failed start-ups within `window`, restarts at least `backoff` apart."""

    max: int = 3
    window: float = 6 * 3600.0
    backoff: float = 300.0


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


@dataclass(frozen=True)
class Adaptive:
    """Limits learned from past start-ups (learn.py): deadline = clamp(k x p95, floor x configured,
    ceiling x configured) once a phase has `min_samples` past durations."""

    enabled: bool = False
    k: float = 1.5
    min_samples: int = 5
    floor: float = 0.25
    ceiling: float = 2.0


@dataclass(frozen=True)
class Config:
    unit: str = "sglang.service"
    engine: str = "sglang"
    phases: Mapping[Phase, PhaseLimits] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    rank_skew: float = DEFAULT_RANK_SKEW
    profile: Profile | None = None
    source: str | None = None
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ACTIONS))
    restart_budget: RestartBudget = RestartBudget()
    dry_run: bool = False
    metrics_listen: str = "127.0.0.1:9877"
    health: HealthCheck = HealthCheck()
    adaptive: Adaptive = Adaptive()
    vitals: VitalsSampling = VitalsSampling()

    def limits(self, phase: Phase) -> PhaseLimits:
        return self.phases.get(phase, PhaseLimits(None, None))

    def engine_profile(self) -> Profile:
        return self.profile if self.profile is not None else load_builtin_profile(self.engine)


class _Refused(Exception):
    """The loader met something a config may not contain; `key` and `line` say where."""

    def __init__(self, key: str, message: str, line: int | None) -> None:
        super().__init__(message)
        self.key, self.message, self.line = key, message, line


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key and refuses, while composing, what
    could make loading cost more than the file's size: aliases of lists or mappings (they expand),
    nesting deeper than MAX_DEPTH; then, before building values: keys that are not plain scalars,
    duplicate keys, numbers longer than MAX_NUMBER_CHARS."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.key_path: list[str] = []
        self.aliases = 0

    def where(self) -> str:
        return ".".join(self.key_path).replace(".[", "[") or "config"

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        label = index.value if isinstance(index, yaml.ScalarNode) else f"[{index}]" if isinstance(index, int) else None
        if label is not None:
            self.key_path.append(str(label))
        try:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise _Refused(self.where(), f"more than {MAX_ALIASES} aliases", event.start_mark.line + 1)
                target = self.anchors.get(event.anchor)
                if target is not None and not isinstance(target, yaml.ScalarNode):
                    raise _Refused(self.where(), f"alias *{shown(event.anchor)[1:-1]} of a list or mapping refused "
                                   "(aliases that expand are not allowed in a config)", event.start_mark.line + 1)
            elif len(self.key_path) >= MAX_DEPTH:
                raise _Refused(self.where(), f"nested deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)  # type: ignore[arg-type]  # a key node, per PyYAML
        finally:
            if label is not None:
                self.key_path.pop()


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _check_nodes(node: yaml.Node, key: str) -> None:
    """Refuse what would raise or blow up while building values (iterative: depth is bounded anyway)."""
    pending: list[tuple[yaml.Node, str]] = [(node, key)]
    seen: set[int] = set()
    while pending:
        node, key = pending.pop()
        if id(node) in seen:
            continue  # a scalar alias: checked once
        seen.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
                raise _Refused(key, f"number of {len(node.value)} characters refused "
                               f"(at most {MAX_NUMBER_CHARS})", line)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{key}[{i}]") for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _Refused(key, "a key must be a plain name, not a list or mapping", key_line)
                child = key_node.value if key == "config" else f"{key}.{key_node.value}"
                if key_node.tag in _NUMBER_TAGS and len(key_node.value) > MAX_NUMBER_CHARS:
                    raise _Refused(key, "number key too long", key_line)
                if key_node.value in first and key_node.tag != "tag:yaml.org,2002:merge":
                    raise _Refused(child, f"duplicate key (first at line {first[key_node.value]})", key_line)
                first.setdefault(key_node.value, key_line)
                pending.append((value_node, child))


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, path: str | None) -> Any:
    """A YAML document through the guarded loader; every refusal a ConfigError naming key, file, line."""
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, "config")
        return loader.construct_document(node)
    except _Refused as exc:
        raise ConfigError(exc.key, exc.message, path, exc.line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError("config", f"invalid YAML: {problem}", path, mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def read_config_text(path: str, key: str = "config") -> str:
    """A regular file's text, at most MAX_CONFIG_BYTES; a FIFO, device or directory is refused
    without blocking (opened non-blocking, checked before reading)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(key, f"cannot read: {exc.strerror or exc}", path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(key, "not a regular file", path)
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(key, f"larger than {MAX_CONFIG_BYTES} bytes", path)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(key, f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(key, f"larger than {MAX_CONFIG_BYTES} bytes", path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(key, "not UTF-8 text", path) from None


def _strip_lines(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_lines(v) for k, v in value.items() if k != "__lines__"}
    if isinstance(value, list):
        return [_strip_lines(v) for v in value]
    return value


TOP_KEYS = ("unit", "engine", "profile_path", "phases", "rank_skew", "patterns", "actions", "restart_budget",
            "dry_run", "metrics", "health", "adaptive", "vitals")
LISTEN_RE = re.compile(r"^(?:\[[0-9a-fA-F:]+\]|[\w.-]+):(\d{1,5})$")


def load_config(path: str | Path) -> Config:
    path = str(path)
    return parse_config(read_config_text(path), path)


def parse_config(text: str, path: str | None = None) -> Config:
    document = load_yaml(text, path)
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
    if not isinstance(unit, str) or not re.fullmatch(r"[\w:.@\\-]+\.(?:service|scope)", unit):
        raise fail("unit", f"expected a unit name like sglang-kimi.service, got {shown(unit)}", lines.get("unit"))
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
        values = {"deadline": current.deadline, "stall": current.stall}
        for key, raw, key_at in _entries(spec, f"phases.{name}", at, "a mapping with deadline and/or stall", fail):
            if key not in values:
                raise fail(f"phases.{name}.{key}", "unknown setting (known: deadline, stall)", key_at)
            values[key] = _duration(raw, f"phases.{name}.{key}", key_at, fail)
        phases[Phase(name)] = PhaseLimits(values["deadline"], values["stall"])

    rank_skew = DEFAULT_RANK_SKEW
    if "rank_skew" in document:
        parsed = _duration(document["rank_skew"], "rank_skew", lines.get("rank_skew"), fail)
        rank_skew = parsed if parsed is not None else float("inf")

    patterns = document.get("patterns", []) or []
    if not isinstance(patterns, list):
        raise fail("patterns", "expected a list of rules", lines.get("patterns"))
    try:
        profile = profile.with_overrides(_strip_lines(patterns))
    except ProfileError as exc:
        index_match = re.match(r"patterns\[(\d+)\]", exc.key)
        line = None
        if index_match and int(index_match.group(1)) < len(patterns):
            item = patterns[int(index_match.group(1))]
            item_lines = item.get("__lines__", {}) if isinstance(item, dict) else {}
            field_name = exc.key.rsplit(".", 1)[-1]
            line = item_lines.get(field_name) or min(item_lines.values(), default=None)
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1], path, line or lines.get("patterns")) from None
    actions = dict(DEFAULT_ACTIONS)
    for kind, listed, at in _entries(document.get("actions", {}) or {}, "actions", lines.get("actions"),
                                     "a mapping of verdict kinds to action lists", fail):
        if kind not in VERDICT_KINDS:
            raise fail(f"actions.{kind}", f"unknown verdict kind (known: {', '.join(VERDICT_KINDS)})", at)
        if not isinstance(listed, list) or any(a not in ACTION_NAMES for a in listed):
            raise fail(f"actions.{kind}", f"expected a list of {', '.join(ACTION_NAMES)}, got {shown(listed)}", at)
        actions[kind] = tuple(listed)

    budget = RestartBudget()
    settings: dict[str, Any] = {"max": budget.max, "window": budget.window, "backoff": budget.backoff}
    for key, raw, at in _entries(document.get("restart_budget", {}) or {}, "restart_budget",
                                 lines.get("restart_budget"), "a mapping with max, window, backoff", fail):
        if key == "max":
            settings["max"] = _whole(raw, 0, "restart_budget.max", at, fail)
        elif key == "window":  # `none` would mean no limit on restarts at all
            window = _duration(raw, "restart_budget.window", at, fail)
            if window is None:
                raise fail("restart_budget.window", "expected a duration like 6h (none would remove the restart "
                           "limit)", at)
            settings["window"] = window
        elif key == "backoff":
            settings[key] = _duration(raw, "restart_budget.backoff", at, fail) or 0.0
        else:
            raise fail(f"restart_budget.{key}", "unknown setting (known: max, window, backoff)", at)
    budget = RestartBudget(settings["max"], settings["window"], settings["backoff"])

    dry_run = document.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise fail("dry_run", f"expected true or false, got {shown(dry_run)}", lines.get("dry_run"))
    listen = "127.0.0.1:9877"
    for key, raw, at in _entries(document.get("metrics", {}) or {}, "metrics", lines.get("metrics"),
                                 "a mapping with listen", fail):
        if key != "listen":
            raise fail(f"metrics.{key}", "unknown setting (known: listen)", at)
        port = LISTEN_RE.match(raw) if isinstance(raw, str) else None
        if port is None:
            raise fail("metrics.listen", f"expected HOST:PORT like 127.0.0.1:9877, got {shown(raw)}", at)
        if not 1 <= int(port.group(1)) <= 65535:
            raise fail("metrics.listen", f"port {port.group(1)} out of range (1..65535)", at)
        listen = raw
    health = _health(document.get("health", {}) or {}, lines.get("health"), fail)
    adaptive = _adaptive(document.get("adaptive", {}) or {}, lines.get("adaptive"), fail)
    vitals = _vitals(document.get("vitals", {}) or {}, lines.get("vitals"), fail)
    return Config(unit=unit, engine=engine, phases=phases, rank_skew=rank_skew, profile=profile, source=path,
                  actions=actions, restart_budget=budget, dry_run=dry_run, metrics_listen=listen, health=health,
                  adaptive=adaptive, vitals=vitals)


Fail = Callable[[str, str, "int | None"], ConfigError]


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
    document = _strip_lines(load_yaml(read_config_text(raw, "profile_path"), raw))
    try:
        return parse_profile(document, raw)
    except ProfileError as exc:
        raise fail("profile_path", f"{raw}: {str(exc)[:200]}", line) from None


def _vitals(doc: Any, line: int | None, fail: Fail) -> VitalsSampling:
    values: dict[str, Any] = {}
    for key, raw, at in _entries(doc, "vitals", line, "a mapping with period, enabled", fail):
        if key == "period":
            parsed = _duration(raw, "vitals.period", at, fail)
            if parsed is None or parsed < 0.5:
                raise fail("vitals.period", f"expected a duration of at least 0.5s, got {shown(raw)}", at)
            values["period"] = parsed
        elif key == "enabled":
            if not isinstance(raw, bool):
                raise fail("vitals.enabled", f"expected true or false, got {shown(raw)}", at)
            values["enabled"] = raw
        else:
            raise fail(f"vitals.{key}", "unknown setting (known: period, enabled)", at)
    return VitalsSampling(**values)
