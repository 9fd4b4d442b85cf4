"""Which rule matched how many lines of a log, and which lines no rule matched (`replay --rules`).

An observer of the pipeline's lines and events: it never changes what they mean. Unmatched lines are
grouped by their digit-masked text, so ten thousand "Decode batch" variants are one entry.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from ..profile import Profile
from ..records import Event, Line

_DIGITS = str.maketrans("0123456789", "0000000000")
UNMATCHED_KINDS_KEPT = 2000  # distinct unmatched shapes remembered (a bound, not a sample size)


@dataclass
class RuleTally:
    hits: Counter[str] = field(default_factory=Counter)
    unmatched: Counter[str] = field(default_factory=Counter)
    unmatched_lines: int = 0
    lines: int = 0

    def add(self, line: Line, events: Iterable[Event]) -> None:
        self.lines += 1
        named = [e.rule for e in events if e.rule is not None]
        for rule in dict.fromkeys(named):
            self.hits[rule] += 1
        if not named and line.message.strip():
            self.unmatched_lines += 1
            shape = line.message.strip()[:160].translate(_DIGITS)
            if shape in self.unmatched or len(self.unmatched) < UNMATCHED_KINDS_KEPT:
                self.unmatched[shape] += 1

    def to_json(self, profile: Profile) -> dict[str, object]:
        return {
            "lines": self.lines,
            "rules": [{"id": r.id, "event": r.event, "hits": self.hits.get(r.id, 0)} for r in profile.rules],
            "unmatched_lines": self.unmatched_lines,
            "unmatched": [{"shape": s, "lines": n} for s, n in self.unmatched.most_common(50)],
        }

    def to_table(self, profile: Profile, limit: int = 20) -> str:
        width = max((len(r.id) for r in profile.rules), default=4)
        out = [f"{'rule':<{width}}  {'event':<12} {'hits':>7}"]
        for rule in profile.rules:
            out.append(f"{rule.id:<{width}}  {rule.event:<12} {self.hits.get(rule.id, 0):>7}")
        silent = sum(1 for r in profile.rules if not self.hits.get(r.id))
        out.append("")
        out.append(f"{self.lines} lines; {len(profile.rules) - silent} rules matched, {silent} did not; "
                   f"{self.unmatched_lines} lines matched no rule")
        if self.unmatched:
            out.append(f"lines no rule matched (digits masked, most frequent first, up to {limit}):")
            for shape, count in self.unmatched.most_common(limit):
                out.append(f"  {count:>6}  {shape}")
        return "\n".join(out) + "\n"
