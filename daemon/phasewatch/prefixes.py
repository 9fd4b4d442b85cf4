"""A record's prefix, as an engine's grammar finds it in a line (engines/): where it is, the rank
label it names in canonical form, its time; and the bounded numbers read from it. Pure."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

from .records import direct_init

TAG_RE = re.compile(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)")
TAG_ORDER = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
_UNKNOWN = object()

# Numbers read from content are believed only this long: Python refuses to convert more than 4300
# digits (a ValueError out of a step), and no rank, count or batch size needs more than a few.
MAX_NUMBER_DIGITS = 18
MAX_RANK_DIGITS = 6


def bounded_int(digits: str, max_digits: int = MAX_NUMBER_DIGITS) -> int | None:
    """The whole number `digits` (a regex's \\d+ group), or None when it has more than `max_digits`
    significant digits (leading zeros do not count)."""
    significant = digits.lstrip("0")
    if len(significant) > max_digits:
        return None
    try:
        return int(significant or "0")
    except ValueError:
        return None


def rank_number(digits: str) -> int | None:
    """A rank number from a tag: at most MAX_RANK_DIGITS digits, else None (not a rank we believe)."""
    return bounded_int(digits, MAX_RANK_DIGITS)

_RANK_MEMO: dict[str, str | None] = {}
RANK_MEMO_ENTRIES = 1024
RANK_MEMO_KEY_CHARS = 256  # tag texts longer than this are rare and not remembered (memo under 1 MB)


def canonical_rank(tags: str) -> str | None:
    """' TP3 DP0' -> 'DP0 TP3': tags in the order DP, PP, ATTN_CP, MOE_DP, TP, EP."""
    known = _RANK_MEMO.get(tags, _UNKNOWN)
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]
    found = {name: number for name, digits in TAG_RE.findall(tags)
             if (number := rank_number(digits)) is not None}
    label = " ".join(f"{name}{found[name]}" for name in TAG_ORDER if name in found) if found else None
    if len(_RANK_MEMO) < RANK_MEMO_ENTRIES and len(tags) <= RANK_MEMO_KEY_CHARS:
        _RANK_MEMO[tags] = label
    return label


@direct_init
@dataclass(frozen=True)
class Prefix:
    start: int
    end: int
    rank: str | None
    ts: float | None
    time_only: str | None = None  # "HH:MM:SS" of the 2024 form, resolved against the last date
    date: str | None = None
    # Engine hooks (engines/): a "MM-DD" without its year (vLLM), resolved against the year a
    # dated wrapper showed or the splitter's default year; a year seen in the segment.
    month_day: str | None = None
    year: int | None = None
    untagged_rank: str | None = None  # see records.Line
    anonymous: bool = False
    engine_core: bool = False
    process_pid: int | None = None  # the PID in the process tag that gave `rank` (vLLM's `(Worker_TP0 pid=9)`)
    # "LEVEL [file:line]" of an engine that repeats its whole prefix on every line of a logged
    # traceback: a line with the same header continues the record that opened the traceback.
    header: str | None = None


_last_epoch: tuple[str, str, str | None, float | None] = ("", "", None, None)


def epoch(date: str, time: str, ms: str | None) -> float | None:
    """`2026-02-22`, `23:59:15`, `.123` as UTC seconds; None when no real date."""
    global _last_epoch
    last = _last_epoch
    if last[0] == date and last[1] == time and last[2] == ms:
        return last[3]  # lines come in bursts within one second
    value = _epoch_of(date, time, ms)
    _last_epoch = (date, time, ms, value)
    return value


_DAY_EPOCH: dict[str, int | None] = {}


def _epoch_of(date: str, time: str, ms: str | None) -> float | None:
    # timegm is linear in hour, minute and second: the day's start is computed once per date.
    day: int | None
    if date in _DAY_EPOCH:
        day = _DAY_EPOCH[date]
    else:
        try:
            year, month, mday = (int(x) for x in date.split("-"))
            day = calendar.timegm((year, month, mday, 0, 0, 0, 0, 0, 0))
        except (ValueError, OverflowError):
            day = None
        if len(_DAY_EPOCH) < 4096:
            _DAY_EPOCH[date] = day
    if day is None:
        return None
    try:
        hour, minute, second = (int(x) for x in time.split(":"))
    except ValueError:
        return None
    return float(day + (hour * 60 + minute) * 60 + second) + (float(ms) if ms else 0.0)

