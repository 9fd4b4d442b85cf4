"""Offline input: recognise what a user handed us (journal export, journalctl JSON or text, a plain
log) and turn it into JournalRecords. Pure: bytes in, records out. Raises only InputError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from itertools import islice

from ...errors import InputError
from ...prefixes import bounded_int
from ...records import (
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    JournalRecord,
    record_from_fields,
)
from .pastes import JOB_RE, UNIT_PATTERN, start_at_starting, year_of


@dataclass(frozen=True)
class ParsedSource:
    format: str
    records: tuple[JournalRecord, ...]
    warnings: tuple[str, ...]


SAMPLE_LINES = 50
MAX_BAD_REASONS = 100  # bad lines are counted; only the first reasons are kept (the first is shown)
NOT_TEXT = "input is not a journal export, journalctl JSON/text, or a text log"

_EXPORT_KEY_RE = re.compile(rb"[A-Z_][A-Z0-9_]*")
_EXPORT_MARKER_KEYS = frozenset({"__CURSOR", "__REALTIME_TIMESTAMP", "MESSAGE"})
_DIGITS_RE = re.compile(r"\d{1,20}")

_MARKER_RE = re.compile(r"-- (?:Boot [0-9a-f]{32}|Reboot|No entries|(?:Logs begin|Journal begins) at .*) --")
_BLOB_RE = re.compile(r"\[\d+(?:\.\d+)?[BKMGTPE] blob data\]")
# Host is optional (--no-hostname) and cannot end in ":", so "ident[pid]: a: b" keeps its identifier.
_TAIL = r" (?:(?P<host>\S*[^\s:]) )?(?P<ident>\S+?)(?:\[(?P<pid>\d+)\])?:(?: (?P<msg>.*)|$)"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_SYSLOG_TS = r"(?P<mon>" + "|".join(_MONTHS) + r") (?P<day>[ \d]\d) (?P<time>\d\d:\d\d:\d\d)"
_DATE_TIME = r"(?P<date>\d{4}-\d\d-\d\d)%s(?P<time>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
_SHORT_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(ts + _TAIL)) for name, ts in (
        ("short", _SYSLOG_TS),
        ("short-precise", _SYSLOG_TS + r"\.(?P<frac>\d+)"),
        ("short-iso", _DATE_TIME % "T" + r"(?P<zone>Z|[+-]\d\d(?::?\d\d)?)?"),
        ("short-full", r"[A-Z][a-z]{2} " + _DATE_TIME % " " + r" (?P<zone>[A-Za-z][\w/+-]*|[+-]\d{2,4})"),
        ("short-unix", r"(?P<unix>\d{1,12}\.\d+)"),
        ("short-monotonic", r"\[\s*\d+\.\d+(?:\s*<\s*\d+\.\d+>)?\]"),
    )
)

_UNIT_RE = re.compile(r"(?P<unit>" + UNIT_PATTERN + r")(?: - .*)?")
_UNIT_LINE_RE = re.compile(r"(?P<unit>" + UNIT_PATTERN + r"): (?P<rest>.*)")
_EXITED_RE = re.compile(r"Main process exited, code=(?P<code>\w+), status=(?P<status>-?\d+)")
_FAILED_RE = re.compile(r"Failed with result '(?P<result>[^']*)'")
_RESTART_RE = re.compile(r"Scheduled restart job, restart counter is at (?P<n>\d+)")
_SUPPRESSED_RE = re.compile(r"Suppressed (?P<n>\d+) messages from (?P<unit>\S+?)\.?")
_JOB_MIDS = {"Started": MID_STARTED, "Stopped": MID_STOPPED, "Stopping": MID_STOPPING, "Starting": None}

_BAD_CHAR_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")
# After a bad line, go on at the next line that can start an object (json-pretty indents the inside).
_JSON_RESYNC_RE = re.compile(r"\n(?=[^ \t\r\n\"}\]])")


def parse_source(data: bytes, *, default_year: int = 1970) -> ParsedSource:
    """Detect the format of `data` and parse it; raise InputError if it is none we know."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        return ParsedSource("empty", (), ())
    if _looks_like_export(data):
        return _parse_export(data)
    text = data.decode("utf-8", "replace")
    if data.lstrip()[:1] in (b"{", b"\x1e") and not _application_json(text):
        return _parse_json(text)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    sample = list(islice((ln for ln in lines if ln.strip() and not _MARKER_RE.fullmatch(ln)), SAMPLE_LINES))
    if not sample:
        return ParsedSource("empty", (), ())
    for name, pattern in _SHORT_FORMATS:
        if pattern.match(sample[0]):
            fitting = sum(1 for line in sample if line[:1] in (" ", "\t") or pattern.match(line))
            if fitting >= 0.8 * len(sample):
                return _parse_short(name, pattern, lines, default_year)
    _reject_binary(text)
    return _parse_plain(lines)


def _application_json(text: str) -> bool:
    """Whether JSON lines are an application's own log records (vLLM's JSON logging: `message`,
    `levelname`...), not journalctl's export: they are read as the text log they are."""
    first = text.lstrip(" \t\r\n\x1e").split("\n", 1)[0]
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(record, dict) and "message" in record and not (_EXPORT_MARKER_KEYS & set(record))


def _reject_binary(text: str) -> None:
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError(f"{NOT_TEXT}: it contains NUL bytes (first at character {nul})")
    bad = len(text) - len(_BAD_CHAR_RE.sub("", text))
    if bad > 0.1 * len(text):
        raise InputError(f"{NOT_TEXT}: {round(100 * bad / len(text))}% of it is binary")


def _blob_warning(count: int) -> str:
    entries = "1 entry" if count == 1 else f"{count} entries"
    return (f"{entries} shown as '[... blob data]': lines journalctl did not print (control characters, "
            "a progress bar's frames), not lost: each is read as a sign of life at its time; to see them, "
            "re-export with journalctl -a (or -o json --all / -o export)")


# --- journalctl -o export -------------------------------------------------------------------------


class _BadExport(Exception):
    def __init__(self, pos: int, reason: str) -> None:
        super().__init__(f"byte {pos}: {reason}")


def _export_entry(data: bytes, pos: int) -> tuple[dict[str, str | bytes], int]:
    """Read one entry starting at `pos`; return its fields and the position after it."""
    fields: dict[str, str | bytes] = {}
    end = len(data)
    while pos < end:
        eol = data.find(b"\n", pos)
        if eol < 0:
            eol = end
        line = data[pos:eol]
        if not line:
            return fields, eol + 1
        eq = line.find(b"=")
        key = line[:eq] if eq >= 0 else line
        if not _EXPORT_KEY_RE.fullmatch(key):
            raise _BadExport(pos, f"invalid field name {key[:40]!r}")
        value: str | bytes
        if eq >= 0:
            raw = line[eq + 1:]
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = raw
            pos = eol + 1
        else:
            if eol + 9 > end:
                raise _BadExport(pos, f"field {key.decode()} has no length")
            size = int.from_bytes(data[eol + 1:eol + 9], "little")
            start = eol + 9
            if start + size >= end or data[start + size] != 0x0A:
                raise _BadExport(pos, f"field {key.decode()} is cut short or overlong ({size} bytes)")
            value = data[start:start + size]
            pos = start + size + 1
        fields.setdefault(key.decode(), value)
    return fields, pos


def _looks_like_export(data: bytes) -> bool:
    pos = len(data) - len(data.lstrip(b"\n"))
    try:
        fields, _ = _export_entry(data, pos)
    except _BadExport:
        return False
    return not _EXPORT_MARKER_KEYS.isdisjoint(fields)


def _record(fields: dict[str, object]) -> JournalRecord:
    for key, value in fields.items():
        if key != "MESSAGE" and isinstance(value, bytes):
            fields[key] = value.decode("utf-8", "replace")
    realtime = fields.get("__REALTIME_TIMESTAMP")
    if realtime is not None and not (isinstance(realtime, str) and _DIGITS_RE.fullmatch(realtime)):
        del fields["__REALTIME_TIMESTAMP"]
    return record_from_fields(fields)


def _parse_export(data: bytes) -> ParsedSource:
    records: list[JournalRecord] = []
    bad: list[str] = []
    pos = 0
    while pos < len(data):
        try:
            fields, pos = _export_entry(data, pos)
        except _BadExport as exc:
            bad.append(str(exc))
            next_entry = data.find(b"\n\n", pos)
            pos = len(data) if next_entry < 0 else next_entry + 2
            continue
        if fields:
            records.append(_record(dict(fields)))
    warnings = [f"{len(bad)} export entries could not be parsed (first: {bad[0]})"] if bad else []
    return ParsedSource("export", tuple(records), tuple(warnings))


# --- journalctl -o json / json-pretty / json-seq --------------------------------------------------


def _json_value(value: object) -> object:
    """A field as journalctl writes it: string, null, byte array, or a list of those (repeated field)."""
    while isinstance(value, list):
        if all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value):
            return bytes(value)
        value = value[0]
    if value is None or isinstance(value, str):
        return value
    return None if isinstance(value, dict) else str(value)


def _parse_json(text: str) -> ParsedSource:
    decoder = json.JSONDecoder()
    records: list[JournalRecord] = []
    bad: list[str] = []
    bad_count = 0
    null_messages = 0
    with_message = 0
    pos, end = 0, len(text)
    counted_to, line_number = 0, 1  # newlines are counted once, from where the last bad line was
    while True:
        while pos < end and text[pos] in " \t\r\n\x1e":
            pos += 1
        if pos >= end:
            break
        # An object ends before the next line that could start one: decode only up to there (a
        # JSONDecodeError counts the lines of all it was given, from its start: quadratic on the
        # whole text when there are many bad lines).
        found = _JSON_RESYNC_RE.search(text, pos)
        stop = found.start() + 1 if found else end
        try:
            obj, used = decoder.raw_decode(text[pos:stop])
            if not isinstance(obj, dict):
                raise ValueError(f"a JSON {type(obj).__name__}, not an object")
        except (ValueError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
            line_number += text.count("\n", counted_to, pos)
            counted_to = pos
            if len(bad) < MAX_BAD_REASONS:
                bad.append(f"line {line_number}: {reason}")
            bad_count += 1
            pos = stop
            continue
        pos += used
        if "MESSAGE" in obj:
            with_message += 1
            null_messages += obj["MESSAGE"] is None
        records.append(_record({str(k): _json_value(v) for k, v in obj.items()}))
    if not records and not bad:
        return ParsedSource("empty", (), ())
    if not records:
        raise InputError(f"input looks like journalctl JSON but no line parses as JSON ({bad[0]})")
    warnings: list[str] = []
    if bad:
        warnings.append(f"{bad_count} JSON lines could not be parsed (first: {bad[0]})")
    if not with_message:
        warnings.append("no JSON object has a MESSAGE field: is this journalctl -o json output?")
    if null_messages:
        warnings.append(f"{null_messages} entries have MESSAGE null (journalctl elides fields of 4096 bytes "
                        "or more): re-export with journalctl -o json --all")
    return ParsedSource("json", tuple(records), tuple(warnings))


# --- journalctl -o short* -------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _zone_offset(zone: str | None) -> int | None:
    """Seconds east of UTC; None when the zone is a name we cannot resolve."""
    if zone is None or zone in ("Z", "UTC", "GMT"):
        return 0
    match = re.fullmatch(r"([+-])(\d\d):?(\d\d)?", zone)
    if match is None:
        return None
    seconds = int(match.group(2)) * 3600 + int(match.group(3) or 0) * 60
    return -seconds if match.group(1) == "-" else seconds


def _realtime(groups: dict[str, str | None], year: int) -> float | None:
    if unix := groups.get("unix"):
        return float(unix)
    if not (time := groups.get("time")):
        return None
    date = groups.get("date") or f"{year}-{_MONTHS.index(groups.get('mon') or 'Jan') + 1}-{groups.get('day')}"
    whole = _whole_seconds(date, time, groups.get("zone"))
    frac = groups.get("frac")
    return None if whole is None else whole + (float("0." + frac) if frac else 0.0)


@lru_cache(maxsize=4096)
def _whole_seconds(date: str, time: str, zone: str | None) -> float | None:
    try:
        year, month, day = (int(x) for x in date.split("-"))
        hour, minute, second = (int(x) for x in time.split(":"))
        stamp = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return None
    return stamp.timestamp() - (_zone_offset(zone) or 0)


def _systemd_fields(message: str) -> tuple[str | None, str | None, dict[str, str]]:
    """MESSAGE_ID, UNIT and extra fields PID 1 attaches to the entry that printed `message`."""
    job = JOB_RE.fullmatch(message)
    if job:
        unit = _UNIT_RE.fullmatch(job.group("what"))
        return _JOB_MIDS[job.group("verb")], unit.group("unit") if unit else None, {}
    line = _UNIT_LINE_RE.fullmatch(message)
    if line is None:
        return None, None, {}
    unit_name, rest = line.group("unit"), line.group("rest")
    if rest == "Deactivated successfully.":
        return MID_DEACTIVATED, unit_name, {}
    if exited := _EXITED_RE.match(rest):
        return MID_MAIN_EXITED, unit_name, {"EXIT_CODE": exited["code"], "EXIT_STATUS": exited["status"]}
    if failed := _FAILED_RE.match(rest):
        return MID_FAILED, unit_name, {"UNIT_RESULT": failed["result"]}
    if restart := _RESTART_RE.match(rest):
        return MID_RESTART_SCHEDULED, unit_name, {"N_RESTARTS": restart["n"]}
    return None, unit_name, {}


def _short_record(match: re.Match[str], realtime: float | None) -> JournalRecord:
    message, ident = match.group("msg") or "", match.group("ident")
    pid = bounded_int(match.group("pid")) if match.group("pid") else None
    extra = {"SYSLOG_IDENTIFIER": ident}
    if _BLOB_RE.fullmatch(message):
        return JournalRecord(message=None, realtime=realtime, pid=pid, extra=extra)
    if ident == "systemd" and pid in (1, None):
        message_id, unit, more = _systemd_fields(message)
        return JournalRecord(message=message, realtime=realtime, pid=pid, message_id=message_id, unit=unit,
                             extra={**extra, **more})
    if ident == "systemd-journald" and (suppressed := _SUPPRESSED_RE.fullmatch(message)):
        return JournalRecord(message=message, realtime=realtime, pid=pid, message_id=MID_SUPPRESSED,
                             object_unit=suppressed["unit"], n_dropped=bounded_int(suppressed["n"]), extra=extra)
    return JournalRecord(message=message, realtime=realtime, pid=pid, extra=extra)


def _parse_short(name: str, pattern: re.Pattern[str], lines: list[str], year: int) -> ParsedSource:
    records: list[JournalRecord] = []
    warnings: list[str] = []
    if name in ("short", "short-precise"):  # journalctl's stamp has no year: a line's own date may say it
        matches = (pattern.match(line) for line in lines)
        said = year_of((_MONTHS.index(m["mon"]) + 1, int(m["day"]), m["msg"] or "") for m in matches if m)
        if said is None:
            warnings.append(f"journalctl's {name} time stamps have no year and no line names one: read as {year}")
        year = said or year
    blobs = 0
    unknown_zones: set[str] = set()
    last_month = 0
    previous: JournalRecord | None = None
    indent = 0
    for line in lines:
        match = pattern.match(line)
        if match is None:
            if not line or _MARKER_RE.fullmatch(line):
                continue
            text = line[indent:] if line.startswith(" " * indent) else line
            previous = previous or JournalRecord(message=None)
            records.append(JournalRecord(message=text, realtime=previous.realtime, pid=previous.pid,
                                         extra=previous.extra))
            continue
        groups = match.groupdict()
        if (zone := groups.get("zone")) and _zone_offset(zone) is None:
            unknown_zones.add(zone)
        if mon := groups.get("mon"):
            month = _MONTHS.index(mon) + 1
            year += month < last_month - 6  # Dec -> Jan: the year turned
            last_month = month
        previous = _short_record(match, _realtime(groups, year))
        blobs += previous.message is None
        records.append(previous)
        indent = match.start("msg") if match.group("msg") is not None else len(line)
    if blobs:
        warnings.append(_blob_warning(blobs))
    start_at_starting(records)
    if unknown_zones:
        warnings.append(f"times in time zone {', '.join(sorted(unknown_zones))} were read as UTC")
    return ParsedSource(name, tuple(records), tuple(warnings))


# --- plain text, journalctl -o cat ----------------------------------------------------------------


def _parse_plain(lines: list[str]) -> ParsedSource:
    records = tuple(JournalRecord(message=None if _BLOB_RE.fullmatch(line) else line)
                    for line in lines if not _MARKER_RE.fullmatch(line))
    blobs = sum(1 for record in records if record.message is None)
    return ParsedSource("plain", records, (_blob_warning(blobs),) if blobs else ())

