"""Which rule matched how many lines of a log, and which lines no rule matched (`replay --rules`).

An observer of the pipeline's lines and events: it never changes what they mean. Unmatched lines are
grouped by their digit-masked text, so ten thousand "Decode batch" variants are one entry. Rules are
listed with their confidence ("exact"; the profile's families: "family"), and the lines the tracker
refused because they would have moved a rank backwards (anomalies) are counted per rule.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from ...profile.load import Profile
from ...records import Event, Line
from .phaseorder import Anomaly

_DIGITS = str.maketrans("0123456789", "0000000000")
UNMATCHED_KINDS_KEPT = 2000  # distinct unmatched shapes remembered (a bound, not a sample size)


@dataclass
class RuleTally:
    hits: Counter[str] = field(default_factory=Counter)
    unmatched: Counter[str] = field(default_factory=Counter)
    unmatched_lines: int = 0
    lines: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)

    def add_anomalies(self, anomalies: Iterable[Anomaly]) -> None:
        """The tracker's refusals (from the final snapshot): shown per rule."""
        self.anomalies.extend(anomalies)

    def _refused(self) -> Counter[str]:
        return Counter(a.rule or "?" for a in self.anomalies)

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

    @staticmethod
    def _rows(profile: Profile) -> list[tuple[str, str, str]]:
        """(id, event, confidence) of every rule, then every family."""
        return ([(r.id, r.event, "exact") for r in profile.rules]
                + [(f.id, f.event, "family") for f in profile.families.rules])

    def to_json(self, profile: Profile) -> dict[str, object]:
        refused = self._refused()
        return {
            "lines": self.lines,
            "rules": [{"id": i, "event": e, "hits": self.hits.get(i, 0), "confidence": c, "refused": refused.get(i, 0)}
                      for i, e, c in self._rows(profile)],
            "unmatched_lines": self.unmatched_lines,
            "unmatched": [{"shape": s, "lines": n} for s, n in self.unmatched.most_common(50)],
            "anomalies": [{"rank": a.rank, "from": a.source, "to": a.target, "rule": a.rule, "ts": a.ts,
                           "confidence": a.confidence} for a in self.anomalies[:200]],
        }

    def to_table(self, profile: Profile, limit: int = 20) -> str:
        rows = self._rows(profile)
        refused = self._refused()
        width = max((len(i) for i, _, _ in rows), default=4)
        out = [f"{'rule':<{width}}  {'event':<12} {'hits':>7}  {'confidence':<10} {'refused':>7}"]
        for ident, event, confidence in rows:
            out.append(f"{ident:<{width}}  {event:<12} {self.hits.get(ident, 0):>7}  {confidence:<10} "
                       f"{refused.get(ident, 0):>7}")
        silent = sum(1 for i, _, _ in rows if not self.hits.get(i))
        out.append("")
        out.append(f"{self.lines} lines; {len(rows) - silent} rules matched, {silent} did not; "
                   f"{self.unmatched_lines} lines matched no rule")
        if self.anomalies:
            out.append(f"{len(self.anomalies)} line(s) refused: they would have moved a rank backwards "
                       "(refused = per rule):")
            for a in self.anomalies[:limit]:
                out.append(f"  {a.rank}: {a.source} -> {a.target} (rule {a.rule}, {a.confidence})")
        if self.unmatched:
            out.append(f"lines no rule matched (digits masked, most frequent first, up to {limit}):")
            for shape, count in self.unmatched.most_common(limit):
                out.append(f"  {count:>6}  {shape}")
        return "\n".join(out) + "\n"
