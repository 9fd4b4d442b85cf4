"""Durations as people write them in configs and on the command line (`90s`, `20m`, `1h30m`, `2d`),
and as phasewatch prints them; `shown` cuts a value for an error message."""

from __future__ import annotations

import math
import re
import reprlib

from .errors import DurationError

MAX_DURATION = 365 * 86400.0
SHOWN_CHARS = 60
DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")

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
        raise DurationError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    total: float | None = None
    if isinstance(value, (int, float)):
        if not value > 0:  # also NaN (YAML .nan), which no `spent > limit` would ever exceed
            raise DurationError(f"expected a positive duration, got {shown(value)}")
        total = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        match = DURATION_RE.match(value.strip().replace(" ", ""))
        if match and any(match.groups()):
            days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            total = days * 86400 + hours * 3600 + minutes * 60 + seconds
            total = total if total > 0 else None
    if total is None:
        raise DurationError(f"expected a duration like 90s, 20m or 1h30m, got {shown(value)}")
    if not math.isfinite(total) or total > MAX_DURATION:
        raise DurationError(f"expected a duration of at most 365d, got {shown(value)}")
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
