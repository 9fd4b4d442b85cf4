"""Each section of a config checked into its record (sections.py), or a ConfigError naming the key
and its line (`fail`). Used by load.py's `parse_document`, which checks the top level and the
settings that depend on each other."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, Callable

from ..durations import parse_duration, shown
from ..errors import ConfigError
from ..records import PHASE_NAMES, Phase
from .sections import (
    DEFAULT_LIMITS,
    MAX_RESTARTS,
    Adaptive,
    EvidenceCapture,
    HealthCheck,
    Hook,
    Leftovers,
    PhaseLimits,
    RestartBudget,
    VitalsSampling,
)

Fail = Callable[[str, str, "int | None"], ConfigError]
LISTEN_RE = re.compile(r"^(?:\[[0-9a-fA-F:]+\]|[\w.-]+):(\d{1,5})$")


def parse_phases(section: Any, line: int | None, fail: Fail) -> dict[Phase, PhaseLimits]:
    """The shipped limits, with the `phases:` section's over them."""
    phases = dict(DEFAULT_LIMITS)
    for name, spec, at in entries(section, "phases", line, "a mapping of phase names", fail):
        if name not in PHASE_NAMES:
            raise fail(f"phases.{name}", f"unknown phase (known: {', '.join(PHASE_NAMES)})", at)
        current = phases[Phase(name)]
        values = {"deadline": current.deadline, "stall": current.stall, "gpu_stall": current.gpu_stall}
        for key, raw, key_at in entries(spec, f"phases.{name}", at, "a mapping with deadline and/or stall", fail):
            if key not in values:
                raise fail(f"phases.{name}.{key}", "unknown setting (known: deadline, stall, gpu_stall)", key_at)
            values[key] = duration(raw, f"phases.{name}.{key}", key_at, fail)
        if isinstance(spec, dict) and "stall" in spec and "gpu_stall" not in spec:
            # A stall window set alone bounds the shipped GPU one (none: no stall judgement at all).
            stall, gpu = values["stall"], values["gpu_stall"]
            values["gpu_stall"] = None if stall is None or gpu is None else min(stall, gpu)
        phases[Phase(name)] = PhaseLimits(values["deadline"], values["stall"], gpu_stall=values["gpu_stall"])
    return phases


def parse_restart_budget(section: Any, line: int | None, fail: Fail) -> RestartBudget:
    budget = RestartBudget()
    settings: dict[str, Any] = {"max": budget.max, "window": budget.window, "backoff": budget.backoff,
                                "stable": budget.stable, "same_failure": budget.same_failure}
    for key, raw, at in entries(section, "restart_budget", line, "a mapping with max, window, backoff, stable", fail):
        if key in ("max", "same_failure"):  # same_failure: refused after that many alike in a row (restart_gate.py)
            settings[key] = whole(raw, 0 if key == "max" else 1, f"restart_budget.{key}", at, fail)
            if key == "max" and settings["max"] > MAX_RESTARTS:
                raise fail("restart_budget.max", f"at most {MAX_RESTARTS}, got {raw} (more would remove the restart "
                           "limit, as window: none would)", at)
        elif key == "window":  # `none` would mean no limit on restarts at all
            window = duration(raw, "restart_budget.window", at, fail)
            if window is None:
                raise fail("restart_budget.window", "expected a duration like 6h (none would remove the restart "
                           "limit)", at)
            settings["window"] = window
        elif key in ("backoff", "stable"):
            settings[key] = duration(raw, f"restart_budget.{key}", at, fail) or 0.0
        else:
            raise fail(f"restart_budget.{key}", "unknown setting (known: max, window, backoff, stable, "
                       "same_failure)", at)
    return RestartBudget(**settings)


def parse_metrics(section: Any, line: int | None, fail: Fail) -> tuple[str, int | None]:
    """The exporter's listen address and its line (None: the default's)."""
    listen, listen_line = "127.0.0.1:9877", None
    for key, raw, at in entries(section, "metrics", line, "a mapping with listen", fail):
        if key != "listen":
            raise fail(f"metrics.{key}", "unknown setting (known: listen)", at)
        problem = listen_problem(raw)
        if problem is not None:
            raise fail("metrics.listen", problem, at)
        listen, listen_line = raw, at
    return listen, listen_line


def parse_evidence(section: Any, line: int | None, fail: Fail) -> EvidenceCapture:
    evidence = EvidenceCapture()
    for key, raw, at in entries(section, "evidence", line, "a mapping with timeout", fail):
        if key != "timeout":
            raise fail(f"evidence.{key}", "unknown setting (known: timeout)", at)
        timeout = duration(raw, "evidence.timeout", at, fail)
        if not timeout:
            raise fail("evidence.timeout", "expected a duration like 15s", at)
        evidence = replace(evidence, timeout=timeout)
    return evidence


def listen_problem(raw: Any) -> str | None:
    """What is wrong with a HOST:PORT setting (None: nothing)."""
    port = LISTEN_RE.match(raw) if isinstance(raw, str) else None
    if port is None:
        return f"expected HOST:PORT like 127.0.0.1:9877, got {shown(raw)}"
    if not 1 <= int(port.group(1)) <= 65535:
        return f"port {port.group(1)} out of range (1..65535)"
    return None



def parse_leftovers(section: Any, line: int | None, fail: Fail) -> Leftovers:
    leftovers = Leftovers()
    for key, raw, at in entries(section, "leftovers", line, "a mapping with check, wait, after_any_stop", fail):
        if key in ("check", "after_any_stop"):
            if not isinstance(raw, bool):
                raise fail(f"leftovers.{key}", f"expected true or false, got {shown(raw)}", at)
            leftovers = replace(leftovers, **{key: raw})
        elif key == "wait":
            wait = duration(raw, "leftovers.wait", at, fail)
            if wait is None:
                raise fail("leftovers.wait", "expected a duration like 10m (the wait is always bounded)", at)
            leftovers = replace(leftovers, wait=wait)
        else:
            raise fail(f"leftovers.{key}", "unknown setting (known: check, wait, after_any_stop)", at)
    return leftovers


def parse_hooks(section: Any, line: int | None, fail: Fail) -> dict[str, Hook]:
    hooks = {}
    for name, raw, at in entries(section, "hooks", line, "a mapping of hook names to {exec, timeout}", fail):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise fail(f"hooks.{name}", "expected a name of letters, digits, '_', '.', '-'", at)
        settings = {"timeout": 30.0}
        argv: list[str] | None = None
        for key, value, key_at in entries(raw, f"hooks.{name}", at, "a mapping with exec, timeout", fail):
            if key == "exec":
                if not (isinstance(value, list) and value and all(isinstance(a, str) for a in value)):
                    raise fail(f"hooks.{name}.exec", f"expected a command as a list of strings, got {shown(value)}",
                               key_at)
                argv = value
            elif key == "timeout":
                timeout = duration(value, f"hooks.{name}.timeout", key_at, fail)
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


def entries(section: Any, key: str, line: int | None, expected: str, fail: Fail) -> list[tuple[str, Any, int | None]]:
    """A mapping section's (name, value, line), or an error naming it."""
    if not isinstance(section, dict):
        raise fail(key, f"expected {expected}", line)
    lines: dict[str, int] = section.get("__lines__", {})
    return [(str(name), value, lines.get(name)) for name, value in section.items() if name != "__lines__"]


def whole(raw: Any, minimum: int, key: str, line: int | None, fail: Fail) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise fail(key, f"expected a whole number >= {minimum}, got {shown(raw)}", line)
    return raw


def duration(raw: Any, key: str, line: int | None, fail: Fail) -> float | None:
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise fail(key, str(exc), line) from None


def parse_adaptive(doc: Any, line: int | None, fail: Fail) -> Adaptive:
    if isinstance(doc, bool):
        return Adaptive(enabled=doc)
    values: dict[str, Any] = {}
    floor_at: int | None = None
    for key, raw, at in entries(doc, "adaptive", line,
                                 "true, false, or a mapping with enabled, k, min_samples, floor, ceiling", fail):
        if key == "enabled":
            if not isinstance(raw, bool):
                raise fail("adaptive.enabled", f"expected true or false, got {shown(raw)}", at)
        elif key == "min_samples":
            raw = whole(raw, 1, "adaptive.min_samples", at, fail)
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


def parse_health(doc: Any, line: int | None, fail: Fail) -> HealthCheck:
    known = ("url", "interval", "timeout", "failures", "enabled")
    values: dict[str, Any] = {}
    for key, raw, at in entries(doc, "health", line, f"a mapping with {', '.join(known)}", fail):
        if key not in known:
            raise fail(f"health.{key}", f"unknown setting (known: {', '.join(known)})", at)
        if key == "url":
            if raw is not None and (not isinstance(raw, str) or not re.match(r"^https?://", raw)):
                raise fail("health.url", f"expected an http:// or https:// URL, got {shown(raw)}", at)
            values["url"] = raw
        elif key in ("interval", "timeout"):
            parsed = duration(raw, f"health.{key}", at, fail)
            if parsed is None:
                raise fail(f"health.{key}", "expected a duration, got none", at)
            values[key] = parsed
        elif key == "failures":
            values["failures"] = whole(raw, 1, "health.failures", at, fail)
        else:
            if not isinstance(raw, bool):
                raise fail("health.enabled", f"expected true or false, got {shown(raw)}", at)
            values["enabled"] = raw
    return HealthCheck(**values)


def parse_vitals(doc: Any, line: int | None, fail: Fail) -> VitalsSampling:
    values: dict[str, Any] = {}
    for key, raw, at in entries(doc, "vitals", line, "a mapping with period, enabled, gpu, ras", fail):
        if key == "period":
            parsed = duration(raw, "vitals.period", at, fail)
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
