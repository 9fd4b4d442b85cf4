"""The fallback vocabulary of a profile: families of words that name a phase, for lines no exact rule
knows (a renamed line, a vendor build's wording, a version not read yet).

A family is tried only when no exact rule matched a line. It matches when every one of its `all`
patterns is found in the line and none of its `none` patterns is (case-insensitive), and the line is
a record of its own (not a traceback line, not a bar), at most FAMILY_MAX_CHARS long. What it yields
carries `confidence: "family"`, so every output can say the phase was guessed from vocabulary.

A profile's `families:` section (data, so a second engine reuses the mechanism):

    families:
      draft_words: '\\b(?:draft|eagle\\d*|nextn|mtp)\\b'    # a line with these is about the draft model
      draft_phases: {weight_load: draft_weight_load}      # ... and so means these phases instead
      rules:
        - {id: family_weight_load_end, event: phase_end, phase: weight_load, scope: rank,
           all: ['\\bload', '\\bweights?\\b'], none: ['\\bfail']}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from ..records import PHASE_NAMES, Phase

FAMILY_EVENTS = ("phase_begin", "phase_end", "phase_hint")
FAMILY_SCOPES = ("rank", "main", "any")
# Longer lines are dumps (server_args, a config, a stack), not milestones: families skip them.
FAMILY_MAX_CHARS = 512
MAX_FAMILY_PATTERN_CHARS = 500


class FamilyError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Family:
    id: str
    event: str
    phase: Phase
    scope: str
    all: tuple[re.Pattern[str], ...]
    none: tuple[re.Pattern[str], ...] = ()

    @cached_property
    def _joined(self) -> re.Pattern[str]:
        """all and none as one anchored pattern of look-aheads: one search per family (each look-ahead
        scans the line once from its start: linear)."""
        ahead = "".join(f"(?=.*?(?:{p.pattern}))" for p in self.all)
        not_ahead = "".join(f"(?!.*?(?:{p.pattern}))" for p in self.none)
        return re.compile(r"\A" + ahead + not_ahead, re.IGNORECASE | re.DOTALL)

    def matches(self, message: str) -> bool:
        return self._joined.match(message) is not None


@dataclass(frozen=True)
class FamilyMatch:
    family: Family
    phase: Phase  # the family's phase, or its draft counterpart when the line names the draft model


@dataclass(frozen=True)
class Families:
    rules: tuple[Family, ...] = ()
    draft_words: re.Pattern[str] | None = None
    draft_phases: Mapping[Phase, Phase] = field(default_factory=dict)
    # Any family's first word set, as one pattern: most lines no rule knows (warnings, a model's
    # chatter) have none of them and cost one search instead of one per family.
    trigger: re.Pattern[str] | None = None

    def classify(self, message: str) -> FamilyMatch | None:
        """The first family `message` belongs to, or None."""
        if not self.rules or len(message) > FAMILY_MAX_CHARS or not message.strip():
            return None
        if self.trigger is not None and self.trigger.search(message) is None:
            return None
        for family in self.rules:
            if family.matches(message):
                phase = family.phase
                drafted = self.draft_phases.get(phase)
                if drafted is not None and self.draft_words is not None and self.draft_words.search(message):
                    phase = drafted
                return FamilyMatch(family, phase)
        return None


def _pattern(text: object, key: str) -> re.Pattern[str]:
    if not isinstance(text, str) or not text:
        raise FamilyError(key, "expected a regular expression")
    if len(text) > MAX_FAMILY_PATTERN_CHARS:
        raise FamilyError(key, f"longer than {MAX_FAMILY_PATTERN_CHARS} characters")
    try:
        return re.compile(text, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise FamilyError(key, f"invalid regular expression {text[:80]!r}: {exc}") from None


def _phase(name: object, key: str) -> Phase:
    if name not in PHASE_NAMES:
        raise FamilyError(key, f"expected one of {', '.join(PHASE_NAMES)}, got {name!r}")
    return Phase(str(name))


def _patterns(value: object, key: str, required: bool) -> tuple[re.Pattern[str], ...]:
    if value is None and not required:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or (required and not value):
        raise FamilyError(key, "expected a list of regular expressions")
    return tuple(_pattern(text, f"{key}[{i}]") for i, text in enumerate(value))


def parse_family(spec: Mapping[str, Any], key: str) -> Family:
    if not isinstance(spec, Mapping):
        raise FamilyError(key, "expected a mapping with id, event, phase and all")
    unknown = set(spec) - {"id", "event", "phase", "scope", "all", "none"}
    if unknown:
        raise FamilyError(f"{key}.{sorted(unknown)[0]}", "unknown key")
    family_id = spec.get("id")
    if not isinstance(family_id, str) or not family_id:
        raise FamilyError(f"{key}.id", "expected a non-empty name")
    event = spec.get("event")
    if event not in FAMILY_EVENTS:
        raise FamilyError(f"{key}.event", f"expected one of {', '.join(FAMILY_EVENTS)}, got {event!r}")
    scope = spec.get("scope", "rank")
    if scope not in FAMILY_SCOPES:
        raise FamilyError(f"{key}.scope", f"expected one of {', '.join(FAMILY_SCOPES)}, got {scope!r}")
    return Family(family_id, str(event), _phase(spec.get("phase"), f"{key}.phase"), str(scope),
                  _patterns(spec.get("all"), f"{key}.all", True), _patterns(spec.get("none"), f"{key}.none", False))


def parse_families(spec: object, origin: str) -> Families:
    if spec is None:
        return Families()
    if not isinstance(spec, Mapping):
        raise FamilyError(f"{origin}: families", "expected a mapping with rules (and draft_words, draft_phases)")
    unknown = set(spec) - {"rules", "draft_words", "draft_phases"}
    if unknown:
        raise FamilyError(f"{origin}: families.{sorted(unknown)[0]}", "unknown key")
    rules_spec = spec.get("rules", [])
    if not isinstance(rules_spec, list):
        raise FamilyError(f"{origin}: families.rules", "expected a list")
    rules = tuple(parse_family(item, f"families.rules[{i}]") for i, item in enumerate(rules_spec))
    ids = [f.id for f in rules]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        raise FamilyError(f"{origin}: families.rules", f"duplicate id {duplicate!r}")
    words = spec.get("draft_words")
    draft_words = _pattern(words, "families.draft_words") if words is not None else None
    mapping = spec.get("draft_phases", {})
    if not isinstance(mapping, Mapping):
        raise FamilyError("families.draft_phases", "expected a mapping phase: draft phase")
    draft_phases = {_phase(k, "families.draft_phases"): _phase(v, f"families.draft_phases.{k}")
                    for k, v in mapping.items()}
    trigger = re.compile("|".join(f"(?:{f.all[0].pattern})" for f in rules), re.IGNORECASE) if rules else None
    return Families(rules, draft_words, draft_phases, trigger)
