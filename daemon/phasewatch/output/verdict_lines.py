"""Verdict lines for the text outputs (replay's table, `status`): ranks that fail alike share one line.

Eight ranks stalled in the same phase make eight verdicts whose messages differ only in the rank
label (and by a few seconds in the durations): they are shown as one line, `TP0–TP7 stalled in ...`,
with a duration that differs between them given as its range. Pure; the JSON outputs keep one entry
per verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..durations import format_duration, parse_duration

# What format_duration() writes: 45s, 2m17s, 1h30m, 1h.
_DURATION_RE = re.compile(r"\b\d+[hms](?:\d+[ms])?\b")
_NUMBER_RE = re.compile(r"(\d+)")
_PEERS_RE = re.compile(r"; (\d+) other rank\(s\) in the same phase$")
RANK_SLOT = "\x00"  # where the rank label stood in a message


@dataclass(frozen=True)
class VerdictLine:
    """What a text output shows of one verdict."""

    kind: str
    rank: str | None
    message: str


def _template(line: VerdictLine) -> tuple[str, list[float]] | None:
    """The message with its rank label cut out and its durations taken out, or None when the message
    does not name the rank (it is shown alone)."""
    if not line.rank:
        return None
    marked, found = re.subn(rf"(?<!\w){re.escape(line.rank)}(?!\w)", RANK_SLOT, line.message, count=1)
    if not found:
        return None
    durations = [_seconds(m.group()) for m in _DURATION_RE.finditer(marked)]
    return _DURATION_RE.sub("\x01", marked), durations


def _seconds(text: str) -> float:
    """A duration in a message; "0s" (a rank silent for under a second) is none, not a bad limit."""
    try:
        return parse_duration(text) or 0.0
    except ValueError:
        return 0.0


def rank_ranges(labels: list[str]) -> str:
    """`TP0–TP7`, `DP0 TP0–DP3 TP3`, `TP0–TP2, TP5`: runs of labels whose numbers all step by one."""
    runs: list[list[str]] = []
    for label in labels:
        if runs and _follows(runs[-1][-1], label):
            runs[-1].append(label)
        else:
            runs.append([label])
    parts = []
    for run in runs:
        parts.append(f"{run[0]}–{run[-1]}" if len(run) >= 3 else ", ".join(run))
    return ", ".join(parts)


def _follows(previous: str, label: str) -> bool:
    a, b = _NUMBER_RE.split(previous), _NUMBER_RE.split(label)
    if len(a) != len(b) or len(a) < 2 or a[0::2] != b[0::2]:
        return False
    return all(int(y) == int(x) + 1 for x, y in zip(a[1::2], b[1::2], strict=True))


def _span(values: list[float]) -> str:
    low, high = format_duration(min(values)), format_duration(max(values))
    return low if low == high else f"{low}–{high}"


def grouped(lines: Iterable[VerdictLine]) -> list[str]:
    """`kind: message` per verdict, verdicts of one kind whose messages differ only in the rank and
    the durations merged into one, at the place of the first of them."""
    groups: dict[object, list[tuple[VerdictLine, list[float]]]] = {}
    for index, line in enumerate(lines):
        template = _template(line)
        key: object = (line.kind, template[0]) if template is not None else index
        groups.setdefault(key, []).append((line, template[1] if template is not None else []))
    out = []
    for key, members in groups.items():
        first = members[0][0]
        if len(members) == 1 or not isinstance(key, tuple):
            out.append(f"{first.kind}: {first.message}")
            continue
        text = key[1]
        for position in range(len(members[0][1])):
            text = text.replace("\x01", _span([durations[position] for _, durations in members]), 1)
        peers = _PEERS_RE.search(text)
        if peers is not None and int(peers.group(1)) == len(members) - 1:
            text = text[:peers.start()]  # the others in the phase are the ones named
        labels = [line.rank for line, _ in members if line.rank is not None]
        out.append(f"{first.kind}: {text.replace(RANK_SLOT, rank_ranges(labels))}")
    return out
