"""An engine profile: the YAML rule table that says what each line of an engine's log means
(`profiles/sglang.yaml`, documented in its header), parsed and checked once."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from typing import Any, Iterable, Mapping

import yaml

from ..engines import KNOWN as KNOWN_ENGINES
from ..engines import Engine, engine_module
from ..errors import ProfileError
from ..records import PHASE_NAMES, Phase
from .families import Families, FamilyError, parse_families
from .pattern_tree import parse_tree
from .remedy_table import RemedyRule, parse_remedies

RULE_EVENTS = ("phase_begin", "phase_end", "phase_hint", "progress", "fatal", "activity", "server_args", "heartbeat")
SCOPES = ("rank", "main", "any")
# A rule's pattern: at most this long, and no {m,n} above MAX_PATTERN_REPEAT (a{4294967296} makes
# re.compile raise; a{100000} compiles to a program that size).
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_REPEAT = 1000


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: re.Pattern[str]
    event: str
    phase: Phase | None = None
    scope: str = "any"
    cause: str | None = None
    echo: bool = False
    harmless: bool = False  # the record and the traceback under it are one request's error
    proof_of_life: bool = False  # after ready, the server is serving (no health probe needed meanwhile)
    per_request: bool = False  # after ready, a fatal line of one request, not the server's crash
    record_head: bool = False  # matches a record's first line only, never a line continuing one


@dataclass(frozen=True)
class CauseClass:
    id: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Profile:
    engine: str
    rules: tuple[Rule, ...]
    causes: tuple[CauseClass, ...]
    families: Families = field(default_factory=Families)  # the fallback vocabulary (profile/families.py)
    module: str = "sglang"  # the engine module (engines/) for prefixes, titles and arguments
    lockstep: bool = False  # a rank beginning a phase moves its engine's ranks along (stages/s3_track/lockstep.py)
    draft_phases: bool = True  # a second dist init / weight load is the draft model's
    remedies: tuple[RemedyRule, ...] = ()  # what to do about a verdict (profile/remedy_table.py)

    @property
    def engine_module(self) -> Engine:
        return engine_module(self.module)

    @cached_property
    def proof_of_life_rules(self) -> frozenset[str]:
        return frozenset(r.id for r in self.rules if r.proof_of_life)

    @cached_property
    def per_request_rules(self) -> frozenset[str]:
        return frozenset(r.id for r in self.rules if r.per_request)

    def with_overrides(self, specs: Iterable[Mapping[str, Any]], key: str = "patterns") -> Profile:
        """Add rules, or replace those with the same id (keeping their place in the order)."""
        rules = list(self.rules)
        for index, spec in enumerate(specs):
            rule = parse_rule(spec, f"{key}[{index}]")
            position = next((i for i, r in enumerate(rules) if r.id == rule.id), None)
            if position is None:
                rules.append(rule)
            else:  # what the replaced rule meant beyond its event stays, unless the override says
                replaced = rules[position]
                rules[position] = replace(rule, proof_of_life=spec.get("proof_of_life", replaced.proof_of_life),
                                          per_request=spec.get("per_request", replaced.per_request),
                                          record_head=spec.get("record_head", replaced.record_head))
        return replace(self, rules=tuple(rules))

    def classify_cause(self, texts: Iterable[str], skip: frozenset[str] = frozenset()) -> str | None:
        materialised = [t for t in texts if t]
        for cause in self.causes:
            if cause.id not in skip and any(cause.pattern.search(t) for t in materialised):
                return cause.id
        return None


def _compile(spec: Mapping[str, Any], key: str) -> re.Pattern[str]:
    pattern = spec.get("match")
    if not isinstance(pattern, str) or not pattern:
        raise ProfileError(f"{key}.match", "expected a regular expression")
    flags = 0
    flag_text = spec.get("flags", "")
    if not isinstance(flag_text, str) or set(flag_text) - {"i"}:
        raise ProfileError(f"{key}.flags", f"expected '' or 'i', got {flag_text!r}")
    if "i" in flag_text:
        flags |= re.IGNORECASE
    shown = repr(pattern) if len(pattern) <= 80 else repr(pattern[:80]) + "..."
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ProfileError(f"{key}.match", f"regular expression {shown} is longer than {MAX_PATTERN_CHARS} "
                                           "characters")
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise ProfileError(f"{key}.match", f"invalid regular expression {shown}: {exc}") from None
    except (OverflowError, RecursionError, MemoryError, ValueError) as exc:
        # a{4294967296}; thousands of nested groups
        raise ProfileError(f"{key}.match", f"regular expression {shown} cannot be compiled: "
                                           f"{str(exc) or type(exc).__name__}") from None
    repeat = _largest_repeat(compiled)
    if repeat > MAX_PATTERN_REPEAT:
        raise ProfileError(f"{key}.match", f"regular expression {shown} repeats something {repeat} times "
                                           f"(at most {MAX_PATTERN_REPEAT})")
    return compiled


def _largest_repeat(pattern: re.Pattern[str]) -> int:
    """The largest bounded count in a {m,n} of `pattern` (walked without recursion: deep nesting is
    fine here)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = parse_tree(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - re.compile took it; its private parser's doubts are not ours
        return 0
    repeats = (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT)
    largest = 0
    stack: list[Any] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, _parser.SubPattern):
            stack.extend(item.data)
        elif isinstance(item, (list, tuple)):
            if len(item) == 2 and item[0] in repeats:
                low, high = item[1][0], item[1][1]
                largest = max(largest, low, 0 if high == _parser.MAXREPEAT else high)
            stack.extend(x for x in item if isinstance(x, (list, tuple, _parser.SubPattern)))
    return largest


def parse_rule(spec: Mapping[str, Any], key: str) -> Rule:
    if not isinstance(spec, Mapping):
        raise ProfileError(key, f"expected a mapping with id, match and event, got {type(spec).__name__}")
    unknown = set(spec) - {"id", "match", "event", "phase", "scope", "cause", "echo", "flags", "harmless",
                                "proof_of_life", "per_request", "record_head"}
    if unknown:
        raise ProfileError(f"{key}.{sorted(unknown)[0]}", "unknown key")
    rule_id = spec.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise ProfileError(f"{key}.id", "expected a non-empty name")
    event = spec.get("event")
    if event not in RULE_EVENTS:
        raise ProfileError(f"{key}.event", f"expected one of {', '.join(RULE_EVENTS)}, got {event!r}")
    phase_name = spec.get("phase")
    phase: Phase | None = None
    if phase_name is not None:
        if phase_name not in PHASE_NAMES:
            raise ProfileError(f"{key}.phase", f"expected one of {', '.join(PHASE_NAMES)}, got {phase_name!r}")
        phase = Phase(phase_name)
    elif event in ("phase_begin", "phase_end", "phase_hint", "progress"):
        raise ProfileError(f"{key}.phase", f"required for event {event}")
    scope = spec.get("scope", "any")
    if scope not in SCOPES:
        raise ProfileError(f"{key}.scope", f"expected one of {', '.join(SCOPES)}, got {scope!r}")
    cause = spec.get("cause")
    if cause is not None and not isinstance(cause, str):
        raise ProfileError(f"{key}.cause", "expected a cause class name")
    echo = spec.get("echo", False)
    if not isinstance(echo, bool):
        raise ProfileError(f"{key}.echo", f"expected true or false, got {echo!r}")
    harmless = spec.get("harmless", False)
    if not isinstance(harmless, bool):
        raise ProfileError(f"{key}.harmless", f"expected true or false, got {harmless!r}")
    flags: dict[str, bool] = {}
    for name in ("proof_of_life", "per_request", "record_head"):
        flags[name] = spec.get(name, False)
        if not isinstance(flags[name], bool):
            raise ProfileError(f"{key}.{name}", f"expected true or false, got {flags[name]!r}")
    return Rule(rule_id, _compile(spec, key), event, phase, scope, cause, echo, harmless, **flags)


def parse_profile(document: Mapping[str, Any], origin: str) -> Profile:
    if not isinstance(document, Mapping):
        raise ProfileError(origin, "expected a mapping with engine, rules and causes")
    rules_spec = document.get("rules")
    if not isinstance(rules_spec, list):
        raise ProfileError(f"{origin}: rules", "expected a list")
    causes_spec = document.get("causes", [])
    if not isinstance(causes_spec, list):
        raise ProfileError(f"{origin}: causes", "expected a list")
    rules = tuple(parse_rule(spec, f"rules[{i}]") for i, spec in enumerate(rules_spec))
    ids = [r.id for r in rules]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        raise ProfileError(f"{origin}: rules", f"duplicate id {duplicate!r}")
    causes = tuple(CauseClass(str(spec.get("id")), _compile(spec, f"causes[{i}]"))
                   for i, spec in enumerate(causes_spec))
    try:
        families = parse_families(document.get("families"), origin)
    except FamilyError as exc:
        raise ProfileError(exc.key, str(exc)[len(exc.key) + 2:]) from None
    clash = next((f.id for f in families.rules if f.id in ids), None)
    if clash:
        raise ProfileError(f"{origin}: families.rules", f"id {clash!r} is also a rule's id")
    engine = str(document.get("engine", origin))
    # A profile of another engine without a module of its own reads SGLang-style prefixes.
    module = document.get("module", engine if engine in KNOWN_ENGINES else "sglang")
    if module not in KNOWN_ENGINES:
        raise ProfileError(f"{origin}: module", f"expected one of {', '.join(KNOWN_ENGINES)}, got {module!r}")
    flags = []
    for name, default in (("lockstep", False), ("draft_phases", True)):
        value = document.get(name, default)
        if not isinstance(value, bool):
            raise ProfileError(f"{origin}: {name}", f"expected true or false, got {value!r}")
        flags.append(value)
    lockstep, draft_phases = flags
    return Profile(engine, rules, causes, families, module, lockstep, draft_phases,
                   parse_remedies(document.get("remedies"), origin))


def builtin_engines() -> list[str]:
    """The engines with a profile shipped in the package (profiles/<engine>.yaml)."""
    return sorted(f.name[:-5] for f in resources.files("phasewatch").joinpath("profile", "profiles").iterdir()
                  if f.name.endswith(".yaml"))


def load_builtin_profile(engine: str) -> Profile:
    try:
        text = resources.files("phasewatch").joinpath("profile", "profiles", f"{engine}.yaml").read_text("utf-8")
    except FileNotFoundError:
        raise ProfileError("engine", f"no built-in profile for engine {engine!r} "
                                     f"(known: {', '.join(builtin_engines())})") from None
    # The package's own files: libyaml's loader when PyYAML has it (tests/unit/test_vocabulary.py: the
    # same documents as safe_load's), a tenth of the start-up of every command otherwise.
    return parse_profile(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), f"{engine}.yaml")
