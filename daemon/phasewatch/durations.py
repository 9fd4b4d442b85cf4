"""Durations as people write them in configs and on the command line (`90s`, `20m`, `1h30m`, `2d`,
and systemd time spans: `45min`, `1h 30min`, `1d 2h`), and as phasewatch prints them; `shown` cuts
a value for an error message."""

from __future__ import annotations

import math
import re
import reprlib

from .errors import DurationError

MAX_DURATION = 365 * 86400.0
SHOWN_CHARS = 60
# A systemd time span (systemd.time(7)): number-unit pairs, optionally spaced, each unit once.
SPAN_PART_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Zµ]+)\s*")
SPAN_UNITS: dict[str, float] = {
    **dict.fromkeys(("us", "usec", "µs"), 1e-6), **dict.fromkeys(("ms", "msec"), 1e-3),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0), **dict.fromkeys(("w", "week", "weeks"), 604800.0),
    **dict.fromkeys(("M", "month", "months"), 2629800.0), **dict.fromkeys(("y", "year", "years"), 31557600.0),
}

_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxdict = 2, 4, 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = SHOWN_CHARS


def shown(value: object) -> str:
    """A value for an error message: its repr, cut to a short length."""
    text = _SHORT_REPR.repr(value)  # bounded however big or shared the value is
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...(cut)"


def parse_duration(value: object) -> float | None:
    """'90s', '20m', '1h30m', '45min', '1h 30min', '1d 2h' (systemd time spans), 45 (seconds),
    'none' -> seconds (None = no limit).
    A limit is finite, positive and at most a year (MAX_DURATION)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "never")):
        return None
    if isinstance(value, bool):
        raise DurationError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    total: float | None = None
    if isinstance(value, (int, float)):
        if not value > 0:  # also NaN (YAML .nan), which no `spent > limit` would ever exceed
            raise DurationError(f"expected a positive duration, got {shown(value)}")
        total = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        total = _time_span(value)
    if total is None:
        raise DurationError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    if not math.isfinite(total) or total > MAX_DURATION:
        raise DurationError(f"expected a duration of at most 365d, got {shown(value)}")
    return total


def _time_span(text: str) -> float | None:
    """The seconds of a systemd time span, or None when `text` is not one (or is zero)."""
    total, end, seen = 0.0, 0, set()
    while end < len(text):
        part = SPAN_PART_RE.match(text, end)
        if part is None or part.group(2) not in SPAN_UNITS:
            return None
        scale = SPAN_UNITS[part.group(2)]
        if scale in seen:  # '1h1h': a typo more likely than a sum
            return None
        seen.add(scale)
        total += float(part.group(1)) * scale
        end = part.end()
    return total if seen and total > 0 else None


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
