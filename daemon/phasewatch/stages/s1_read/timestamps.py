"""Times of lines that carry no engine prefix, from the other loggers of the same output; and what
counts as a date at all.

A time of day without a date (SGLang 2024's `[12:01:02 TP0]`, a `MM-DD` stamp without its year in a
log that never names one) is placed in the first year of the epoch: durations between such times
hold, but they are not dates. `is_dated` tells the two apart, and every renderer shows an undated
time without a date (never as 1970).

Pure: text in, seconds out; no clock, no I/O.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

# Times before this are times of day (or of a year) without a date: 1971-01-02T00:00:00Z.
DATED_FROM = 366 * 86400.0
UNDATED_YEAR = 1970

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# Docker/kubectl/ECS `--timestamps` (RFC 3339, nanoseconds, Z) and Python logging's default
# `%(asctime)s` (`2025-06-25 11:25:58,633`), each followed by Python logging's ` - name - LEVEL - `
# or FlashInfer's ` - LEVEL - ` fields when present.
_ISO_RE = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d\d:?\d\d)?"
    r"(?P<fields>(?:\s+-\s+[\w.<>:-]+){1,2}\s+-\s+|\s+(?:[A-Z]{4,8}\s+)?)"
)
# journalctl -o short inside a paste that is not all in that format: `Nov 30 01:45:07 host unit[12]: `
_SYSLOG_RE = re.compile(
    r"(?P<mon>" + "|".join(_MONTHS) + r") (?P<day>[ \d]\d) (?P<time>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? "
    r"\S+ [^\s\[:]+(?:\[\d+\])?: "
)
# glog, as torch's C++ logs print it: `[rank3]:[E0222 23:59:15.123456789 File.cpp:685]` or bare
# `E0222 23:59:15.123456 12 File.cpp:685]`. Kept in the message: `[rankN]:` names the rank.
_GLOG_RE = re.compile(
    r"(?:\[rank\d+\]:\[|)[EWIF](?P<mon>\d\d)(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?[ \]]"
)
# vLLM-style `INFO 11-26 14:23:34 file.py:243]`: kept in the message (another profile's grammar).
_LEVEL_MD_RE = re.compile(
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL|WARN) (?P<mon>\d\d)-(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)"
    r"(?:\.(?P<frac>\d+))? "
)


@dataclass(frozen=True)
class ForeignTime:
    ts: float
    end: int  # where the header ends: the message starts there (0: keep the whole text)
    date: str | None  # YYYY-MM-DD when the header named its year


def is_dated(ts: float | None) -> bool:
    """True when `ts` is a date and time, not a time of day (or of a year) without a date."""
    return ts is not None and ts == ts and ts >= DATED_FROM


def _seconds(year: int, month: int, day: int, clock: str, frac: str | None) -> float | None:
    try:
        hour, minute, second = (int(x) for x in clock.split(":"))
        if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 62):
            return None
        whole = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return whole + (float("0." + frac) if frac else 0.0)


def _zone(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
    return -seconds if zone[0] == "-" else seconds


def _year(last_date: str) -> int:
    return int(last_date[:4]) if last_date[:4].isdigit() else UNDATED_YEAR


def foreign_time(text: str, last_date: str | None = None) -> ForeignTime | None:
    """The time a non-engine logger put at the start of `text`, or None. `last_date` (YYYY-MM-DD,
    the last one the log named) gives the year to stamps that have none."""
    if not text or not (text[0].isdigit() or text[0] in "[EWIFDJMASON"):
        return None
    if text[0].isdigit():
        iso = _ISO_RE.match(text)
        if iso is None:
            return None
        year, month, day = (int(x) for x in iso.group("date").split("-"))
        ts = _seconds(year, month, day, iso.group("time"), iso.group("frac"))
        if ts is None:
            return None
        return ForeignTime(ts - _zone(iso.group("zone")), iso.end(), iso.group("date"))
    if last_date is None:
        # A stamp without its year, and no line named one yet: a date would be a guess, and a
        # line of the engine's may date the log later (it alone would then be right).
        return None
    for pattern, strip in ((_SYSLOG_RE, True), (_GLOG_RE, False), (_LEVEL_MD_RE, False)):
        found = pattern.match(text)
        if found is None:
            continue
        mon = found.group("mon")
        month = _MONTHS.index(mon) + 1 if mon in _MONTHS else int(mon)
        ts = _seconds(_year(last_date), month, int(found.group("day")), found.group("time"), found.group("frac"))
        if ts is None:
            return None
        return ForeignTime(ts, found.end() if strip else 0, None)
    return None
