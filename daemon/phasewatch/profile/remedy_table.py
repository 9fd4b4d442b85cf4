"""An engine profile's `remedies:` table: what to do about a verdict, each remedy with the condition
it applies under (profiles/sglang.yaml documents the keys). Parsed and checked once; applied by
stages/s4_judge/remedies.py.

A remedy's text names facts in braces: `{arg.mem_fraction_static}` (a launch argument: server_args=,
vLLM's non-default args, else the unit's ExecStart=), `{env.CUDA_VISIBLE_DEVICES}` (the unit's
Environment=), `{unit.PrivateDevices}`, `{line.tried}` (a number read from the failing lines),
`{host.port_holder}` (the process listening on the port the line or `--port` names), `{rank}`,
`{phase}`; `heartbeat.RULE` is known when a heartbeat rule's line was seen. Every fact a
text names must be known, else the remedy does not apply: none is better than one the facts do not
support."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ProfileError
from ..records import PHASE_NAMES, VerdictKind

FACT_RE = re.compile(r"\{([^{}]*)\}")
FACT_KINDS = ("arg", "env", "unit", "line", "heartbeat", "host")
PLAIN_FACTS = ("rank", "phase")
_KEYS = {"id", "kind", "cause", "phase", "needs", "absent", "text"}


@dataclass(frozen=True)
class RemedyRule:
    id: str
    kind: str  # the verdict kind it answers (crashed, stalled, straggler...)
    causes: frozenset[str]  # the verdict's cause (empty: any)
    phases: frozenset[str]  # the verdict's phase (empty: any)
    needs: tuple[str, ...]  # facts that must be known (those the text names, and more)
    absent: tuple[str, ...]  # facts that must be unknown, or false ("False", "None", "no")
    text: str

    @property
    def arguments(self) -> tuple[str, ...]:
        """The launch arguments it names (`arg.X` -> X), for `remedy.arguments`."""
        return tuple(n[4:] for n in self.needs if n.startswith("arg."))


def _names(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProfileError(key, "expected a name or a list of names")
    return tuple(value)


def _fact(name: str, key: str) -> str:
    kind = name.split(".", 1)[0]
    if name in PLAIN_FACTS or (kind in FACT_KINDS and "." in name):
        return name
    raise ProfileError(key, f"unknown fact {name!r} (arg.X, env.X, unit.X, line.X, heartbeat.RULE, "
                            "host.port_holder, rank, phase)")


def parse_remedy(spec: Mapping[str, Any], key: str) -> RemedyRule:
    if not isinstance(spec, Mapping):
        raise ProfileError(key, "expected a mapping with id, kind, cause and text")
    unknown = set(spec) - _KEYS
    if unknown:
        raise ProfileError(f"{key}.{sorted(unknown)[0]}", "unknown key")
    remedy_id, text = spec.get("id"), spec.get("text")
    if not isinstance(remedy_id, str) or not remedy_id:
        raise ProfileError(f"{key}.id", "expected a non-empty name")
    if not isinstance(text, str) or not text.strip():
        raise ProfileError(f"{key}.text", "expected the remedy's text")
    kind = spec.get("kind", VerdictKind.CRASHED.value)
    if kind not in {k.value for k in VerdictKind}:
        raise ProfileError(f"{key}.kind", f"expected a verdict kind, got {kind!r}")
    phases = _names(spec.get("phase"), f"{key}.phase")
    wrong = next((p for p in phases if p not in PHASE_NAMES), None)
    if wrong is not None:
        raise ProfileError(f"{key}.phase", f"expected one of {', '.join(PHASE_NAMES)}, got {wrong!r}")
    needs = [_fact(n, f"{key}.needs") for n in _names(spec.get("needs"), f"{key}.needs")]
    named = [_fact(n, f"{key}.text") for n in FACT_RE.findall(text)]
    absent = tuple(_fact(n, f"{key}.absent") for n in _names(spec.get("absent"), f"{key}.absent"))
    return RemedyRule(remedy_id, kind, frozenset(_names(spec.get("cause"), f"{key}.cause")), frozenset(phases),
                      tuple(dict.fromkeys([*needs, *named])), absent, " ".join(text.split()))


def parse_remedies(value: Any, origin: str) -> tuple[RemedyRule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ProfileError(f"{origin}: remedies", "expected a list")
    remedies = tuple(parse_remedy(spec, f"remedies[{i}]") for i, spec in enumerate(value))
    ids = [r.id for r in remedies]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        raise ProfileError(f"{origin}: remedies", f"duplicate id {duplicate!r}")
    return remedies
