"""What journalctl's text output says beyond its lines (a paste, `journalctl -u UNIT -n 50`): the
unit the lines are of, the year its short time stamps leave out, and where a pasted restart begins
the next start-up. Pure: records and lines in, facts out."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from ...records import MID_STARTED, JournalRecord

# PID 1's job lines ("Starting sglang-kimi.service - SGLang...") and a unit's name, as journalctl shows them.
JOB_RE = re.compile(r"(?P<verb>Started|Stopped|Starting|Stopping) (?P<what>.+?)(?:\.\.\.|\.)?")
UNIT_PATTERN = r"[\w:.\\@-]+\.(?:service|socket|target|device|mount|automount|swap|timer|path|slice|scope)"
_UNIT_RE = re.compile(UNIT_PATTERN)


def start_at_starting(records: list[JournalRecord]) -> None:
    """A paste whose `Started <unit>` was left out (grep, -n, a Type=notify unit's restart pasted
    before it was ready): its `Starting <unit>...` begins the next start-up, which the server's
    following lines are. Where `Started` comes before them, it begins it (and Starting stays a note)."""
    starting: int | None = None
    for index, record in enumerate(records):
        by_systemd = record.extra.get("SYSLOG_IDENTIFIER", "").startswith("systemd")
        if by_systemd and record.message_id is None and isinstance(record.message, str) \
                and JOB_RE.fullmatch(record.message) and record.message.startswith("Starting "):
            starting = index
        elif record.message_id == MID_STARTED:
            starting = None
        elif starting is not None and not by_systemd and record.unit is None:
            records[starting] = replace(records[starting], message_id=MID_STARTED)
            starting = None


# Identifiers that name a program, not a unit: systemd's default SyslogIdentifier= is the executable's name.
_PROGRAM_IDENT_RE = re.compile(r"(?:python[\d.]*|pypy[\d.]*|bash|sh|dash|zsh|env|sudo|su|uv|conda|mamba|micromamba|"
                               r"docker|podman|containerd.*|runc|torchrun|ray|node|java|kernel|audit|"
                               r"systemd(?:-.*)?|(?:sglang|vllm)(?:[-_.]?(?:serve|server|launch_server))?)")
_UNIT_NAME_RE = re.compile(r"[A-Za-z0-9:_.@-]{1,200}")


def unit_named(records: Iterable[JournalRecord]) -> str | None:
    """The unit a saved log is of: journald's _SYSTEMD_UNIT, or the unit PID 1's lines name, else the
    identifier journalctl shows for the server's lines (`sglang-kimi[201200]:`) when it is a name of
    its own (SyslogIdentifier=), not a program's (`python3`, `vllm`): `sglang-kimi.service`."""
    idents: Counter[str] = Counter()
    for record in records:
        if named := record.extra.get("_SYSTEMD_UNIT") or record.unit:
            return named
        ident = record.extra.get("SYSLOG_IDENTIFIER")
        if ident and record.pid not in (None, 1) and _UNIT_NAME_RE.fullmatch(ident) \
                and not _PROGRAM_IDENT_RE.fullmatch(ident.lower()):
            idents[ident] += 1
    if not idents:
        return None
    ident = idents.most_common(1)[0][0]
    return ident if _UNIT_RE.fullmatch(ident) else f"{ident}.service"


# A line's own date (SGLang's `[2026-03-01 10:40:10 TP0]`, a wrapper's ISO stamp) on the month and day
# of journalctl's stamp: the year that stamp leaves out.
_DATED_RE = re.compile(r"(?<!\d)((?:19|20)\d\d)-([01]\d)-([0-3]\d)[T ][0-2]\d:[0-5]\d")
YEAR_LINES = 5000  # lines looked at for a year


def year_of(stamped: Iterable[tuple[int, int, str]]) -> int | None:
    """The year of the first (month, day, message) when a message carries a date of its own line's month
    and day (one turn of the year between them read from the months); None when no line says one."""
    first_month = None
    for count, (month, day, message) in enumerate(stamped):
        if count >= YEAR_LINES:
            return None
        first_month = month if first_month is None else first_month
        for found in _DATED_RE.finditer(message, 0, 4096):
            if int(found.group(2)) == month and int(found.group(3)) == day:
                return int(found.group(1)) - (month < first_month)
    return None
