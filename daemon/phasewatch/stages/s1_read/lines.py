"""Stage 1: journal records -> logical log lines.

Pure apart from its own bookkeeping: no I/O, no clock. Never raises on content.

What it undoes, in order:
- bytes that are not UTF-8 (decoded with U+FFFD replacement);
- entries journald cut at LineMax or at a PID change (`_LINE_BREAK=line-max|pid-change`):
  the unfinished tail is held and joined with that PID's next entry;
- `\\r` and `\\n` inside one entry (tqdm frames, several records glued together);
- ANSI escape sequences;
- record prefixes anywhere in a segment (a tqdm frame glued before a record), by the engine's grammar;
- unprefixed lines (tqdm bars, tracebacks, C++ logs): they get the rank of their PID once that PID
  has printed a prefixed line, and traceback lines stay with the record that opened them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from ...engines.sglang import find_prefixes
from ...prefixes import Prefix, bounded_int, epoch
from ...records import JournalRecord, Line, LineKind, Progress
from .timestamps import ForeignTime, foreign_time

ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
SEGMENT_SPLIT_RE = re.compile(r"\r\n|\r|\n")


# tqdm: "desc: 12%|##   | 3/23 [00:01<00:09, 2.44it/s]" and SGLang's shard bar
# "desc:  50% Completed | 15/30 [00:24<00:24,  1.63s/it]". The closing bracket may be missing
# when journald cut the frame. Possessive white space: a backtracking `^\s*` tried the description
# from every space of a line of spaces (quadratic).
TQDM_RE = re.compile(
    r"^\s*+(?:(?P<desc>[^\r\n]*?):\s++)?(?P<pct>\d{1,3})%(?:\|[^|\r\n]*\|| Completed \|)"
    r"\s*(?P<n>\d+)/(?P<total>\d+)(?P<tail> \[[^\]\r\n]*\]?)?"
)
BS_RE = re.compile(r"\bbs=(\d+)")
AVAIL_RE = re.compile(r"avail_mem=([\d.]+)\s*GB")

TRACEBACK_LINE_RE = re.compile(
    r"^(?:\s+\S|\s*File \"|Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|\^+\s*$|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b"
    r"|(?:[a-z_]\w*\.)+[A-Z]\w*:\s"
    r"|Possible solutions:|\d+\. |Open an issue on GitHub)"
)
OPENS_BLOCK_RE = re.compile(
    r"Traceback \(most recent call last\):\s*$|hit an exception:\s*(?:Traceback.*)?$|:\s*$"
)

# A traceback's frame (not faulthandler's, which has no comma before "in": a stack dump, not an
# exception). One that begins a record is a traceback whose header the log does not hold.
FRAME_RE = re.compile(r'^\s*File "[^"\r\n]+", line \d+, in \S')

# Lines of other loggers (torch C++, Gloo, NCCL) are records of their own, never a traceback's tail.
FOREIGN_RECORD_RE = re.compile(r"^(?:\[rank\d+\]:|\[Gloo\] |\S+:\d+:\d+ \[\d+\] NCCL |\[\d{4}-\d\d-\d\d )")

# Wrappers some launchers put before every line: docker compose "svc  | ", OpenMPI --tag-output,
# kubectl logs --prefix "[pod/name/container] ".
WRAPPER_RE = re.compile(
    r"^(?:[\w.-]+\s+\| |\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\[\d+,\d+\]<std(?:out|err)>:"
    r"|\[pod/[\w.-]+/[\w.-]+\] )"
)

# A held fragment longer than this is released as a line of its own: memory stays bounded.
MAX_PENDING_CHARS = 4 * 1024 * 1024
# ... and so is one that would make all held fragments together longer than this.
MAX_PENDING_TOTAL_CHARS = 32 * 1024 * 1024
# Writers (invocation, PID) remembered; past it the one silent longest is forgotten (its held
# fragment released as a line). A server has tens of processes; restarts bring new ones.
MAX_STREAMS = 1024


def opens_block(message: str) -> bool:
    """OPENS_BLOCK_RE.search(message), without the regex for the lines that end in neither ':' nor
    a Traceback: its `:\\s*$` is a ':' before trailing white space, and the other two need their words.
    uvicorn's "Exception in ASGI application" also opens one: the request's traceback follows, and so
    does a traceback's frame (a paste that begins inside one: its other lines follow)."""
    if message.rstrip().endswith((":", "Exception in ASGI application")):
        return True
    if "Traceback" not in message and "hit an exception" not in message:
        return 'File "' in message and FRAME_RE.match(message) is not None
    return OPENS_BLOCK_RE.search(message) is not None


def decode(message: bytes | str | None) -> str:
    if message is None:
        return ""
    if isinstance(message, bytes):
        return message.decode("utf-8", "replace")
    return message


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def _join(held: bytes | str, message: bytes | str | None) -> bytes | str:
    """A held tail and the next MESSAGE; bytes stay bytes so a split UTF-8 sequence rejoins."""
    if message is None:
        return held
    if not held:
        return message
    if isinstance(held, bytes) and isinstance(message, bytes):
        return held + message
    return decode(held) + decode(message)


def _tail_start(raw: bytes | str) -> int:
    """Where the last unfinished line starts: after the last \\r or \\n (never inside a UTF-8 sequence)."""
    if isinstance(raw, bytes):
        return max(raw.rfind(b"\r"), raw.rfind(b"\n")) + 1
    return max(raw.rfind("\r"), raw.rfind("\n")) + 1



def parse_progress(segment: str) -> tuple[Progress, int] | None:
    """A tqdm frame at the start of `segment`, and where it ends; None if it is not one."""
    if "%" not in segment:
        return None
    match = TQDM_RE.match(segment)
    if match is None:
        return None
    n, total = bounded_int(match.group("n")), bounded_int(match.group("total"))
    percent = bounded_int(match.group("pct"))
    if n is None or total is None or percent is None:
        return None  # counts no bar draws: not a progress bar
    desc = (match.group("desc") or "").strip()
    bs = BS_RE.search(desc)
    avail = AVAIL_RE.search(desc)
    progress = Progress(
        desc=desc,
        n=n,
        total=total,
        percent=percent,
        bs=bounded_int(bs.group(1)) if bs else None,
        avail_mem_gb=float(avail.group(1)) if avail else None,
    )
    return progress, match.end()



@dataclass
class WriterState:
    """Bookkeeping for one writer (invocation, PID)."""

    rank: str | None = None
    tagged: bool = False
    open_record: int = 0
    open_rank: str | None = None
    block_open: bool = False
    open_header: str | None = None
    # The open record began a traceback (its header or a frame) in a prefix without a header: a line
    # of the traceback with the same prefix continues it (vLLM tags every line of Python's own).
    traceback_open: bool = False
    open_untagged: str | None = None
    pending: bytes | str = ""  # the unfinished tail of a line_break entry, undecoded
    pending_ts: float | None = None  # the journal time of the entry that brought it


class LineSplitter:
    """Turns JournalRecords into Lines. One instance per source; state is per (invocation, PID)."""

    def __init__(self, find: Callable[[str], list[Prefix]] | None = None,
                 default_year: int | None = None) -> None:
        """`find`: the engine's prefix grammar (SGLang's by default); `default_year`: the year of a
        prefix that shows none (vLLM's "MM-DD"): None leaves such lines undated."""
        self._find: Callable[[str], list[Prefix]] = find or find_prefixes  # the default grammar
        self._default_year = default_year
        self._last_year: int | None = None
        self._last_month = 0
        self._streams: dict[tuple[str | None, int | None], WriterState] = {}  # least recently fed first
        self._pending_chars = 0  # of all streams' held fragments
        self._next_record = 0
        self._last_ts: float | None = None
        self._last_date: str | None = None
        self._engine_clock = False  # an engine prefix dated a line: other loggers' times are not used

    # -- what the fast path (stages/s3_track/fastpath.py) asks, and the changes it makes through them --
    def idle_writer(self, key: tuple[str | None, int | None]) -> WriterState | None:
        """The writer's state when nothing is held for it (no fragment, no traceback open), else None."""
        stream = self._streams.get(key)
        return None if stream is None or stream.pending or stream.traceback_open else stream

    def took_line(self, key: tuple[str | None, int | None], stream: WriterState, prefix: Prefix, ts: float,
                  block: bool, more: list[float] | None = None) -> range:
        """A whole line of an idle writer, with one engine prefix (no header, no untagged rank) that
        continues nothing and opens a block or not, as `feed` takes it, and `more` lines like it (the
        same prefix but for its time, the same plan) at those times: the new records' ids."""
        streams = self._streams
        del streams[key]
        streams[key] = stream  # the most recently fed writer
        if prefix.date is not None:
            self._last_date = prefix.date
        if prefix.year is not None:
            self._last_year = prefix.year
        stream.open_header = None
        if prefix.rank is not None:
            stream.rank = prefix.rank
            stream.tagged = True
        first = self._next_record + 1
        self._next_record += (1 + len(more)) if more else 1
        stream.open_record = self._next_record
        stream.open_rank, stream.open_untagged = prefix.rank, None
        stream.block_open = block
        self._last_ts = more[-1] if more else ts
        return range(first, self._next_record + 1)

    def pid_rank(self, invocation_id: str | None, pid: int | None) -> str | None:
        stream = self._streams.get((invocation_id, pid))
        return stream.rank if stream else None

    def feed(self, record: JournalRecord) -> list[Line]:
        key = (record.invocation_id, record.pid)
        stream = self._streams.pop(key, None)
        evicted: list[Line] = []
        if stream is None:
            stream = WriterState()
            if len(self._streams) >= MAX_STREAMS:
                evicted = self._forget(next(iter(self._streams)))
        self._streams[key] = stream  # now the most recently fed
        raw = _join(stream.pending, record.message)
        self._pending_chars -= len(stream.pending)
        stream.pending = ""
        if record.line_break in ("line-max", "pid-change") and record.pid is not None:
            # The entry is an unfinished line: hold its tail for the same PID's next entry. The tail
            # stays undecoded, so a character journald cut in two is decoded whole.
            cut = _tail_start(raw)
            held = len(raw) - cut
            if held <= MAX_PENDING_CHARS and self._pending_chars + held <= MAX_PENDING_TOTAL_CHARS:
                raw, stream.pending = raw[:cut], raw[cut:]
                stream.pending_ts = record.realtime
                self._pending_chars += held
        text = decode(raw)
        lines = self._lines(SEGMENT_SPLIT_RE.split(text) if "\r" in text or "\n" in text else (text,), record,
                            stream)
        return evicted + lines if evicted else lines

    def _release(self, key: tuple[str | None, int | None], stream: WriterState) -> list[Line]:
        if not stream.pending:
            return []
        invocation_id, pid = key
        held = JournalRecord(message=None, realtime=stream.pending_ts, pid=pid, invocation_id=invocation_id)
        pending, stream.pending = stream.pending, ""
        self._pending_chars -= len(pending)
        return self._lines([decode(pending)], held, stream)

    def _forget(self, key: tuple[str | None, int | None]) -> list[Line]:
        """Drop a writer's bookkeeping; its held fragment comes out as a line."""
        return self._release(key, self._streams.pop(key))

    def flush(self) -> list[Line]:
        """Release every held fragment (end of a replay)."""
        out: list[Line] = []
        for key, stream in self._streams.items():
            out.extend(self._release(key, stream))
        return out

    def _lines(self, segments: Iterable[str], record: JournalRecord, stream: WriterState) -> list[Line]:
        out: list[Line] = []
        for raw in segments:
            if not raw:
                continue
            segment = strip_ansi(raw)
            if not segment:
                continue
            self._split_segment(segment, record, stream, out)
        return out

    def _split_segment(self, segment: str, record: JournalRecord, stream: WriterState, out: list[Line]) -> None:
        prefixes = self._find(segment)
        if not prefixes:
            self._unprefixed(segment, record, stream, out)
            return
        head = segment[: prefixes[0].start]
        if head.strip():
            parsed = parse_progress(head)
            if parsed is not None:
                # A tqdm frame with a record glued after it: two lines.
                self._unprefixed(head, record, stream, out)
                head = ""
        for index, prefix in enumerate(prefixes):
            end = prefixes[index + 1].start if index + 1 < len(prefixes) else len(segment)
            piece = (head if index == 0 else "") + segment[prefix.start:end]
            message = segment[prefix.end:end]
            self._prefixed(piece, message, prefix, record, stream, out)

    @staticmethod
    def _inherited_rank(record: JournalRecord, stream: WriterState) -> str | None:
        """An unprefixed line's rank is its PID's; without a PID (a pasted log) it is unknown."""
        return stream.rank if stream.tagged and record.pid is not None else None

    def _timestamp(self, record: JournalRecord, prefix: Prefix | None,
                   foreign: ForeignTime | None = None) -> float | None:
        ts = record.realtime
        if prefix is not None and prefix.date is not None:
            self._last_date = prefix.date
        if prefix is not None and prefix.year is not None:
            self._last_year = prefix.year
        if ts is None and prefix is not None:
            if prefix.ts is not None:
                ts = prefix.ts
            elif prefix.time_only is not None and prefix.month_day is not None:
                ts = self._month_day_epoch(prefix.month_day, prefix.time_only)
            elif prefix.time_only is not None:
                # no date known: a time of day in the epoch's first day (timestamps.is_dated: undated)
                ts = epoch(self._last_date or "1970-01-01", prefix.time_only, None)
            self._engine_clock = self._engine_clock or ts is not None
        if ts is None and foreign is not None and not self._engine_clock:
            # The engine's prefix is missing: another logger's time (Docker, Python logging, glog).
            # Once the engine's own clock is seen, it alone dates lines (the others may be in UTC).
            ts = foreign.ts
            if foreign.date is not None:
                self._last_date = foreign.date
        if ts is None:
            ts = self._last_ts
        if ts is not None:
            self._last_ts = ts
        return ts

    def _month_day_epoch(self, month_day: str, time: str) -> float | None:
        year = self._last_year or self._default_year
        if year is None:
            return None  # no year anywhere: undated rather than 1970
        month = bounded_int(month_day[:2]) or 0
        if month < self._last_month - 6:
            year += 1  # December -> January: the year turned
        self._last_year, self._last_month = year, month
        return epoch(f"{year:04d}-{month_day}", time, None)

    def _prefixed(self, text: str, message: str, prefix: Prefix, record: JournalRecord,
                  stream: WriterState, out: list[Line]) -> None:
        ts = self._timestamp(record, prefix)
        continues = ((stream.block_open if prefix.header is not None else stream.traceback_open)
                     and stream.open_record > 0 and prefix.header == stream.open_header
                     and prefix.rank == stream.open_rank and prefix.untagged_rank == stream.open_untagged
                     and TRACEBACK_LINE_RE.match(message) is not None)
        if not continues:
            stream.open_header = prefix.header
            if prefix.rank is not None:
                stream.rank = prefix.rank
                stream.tagged = True
            self._next_record += 1
            stream.open_record = self._next_record
            stream.open_rank, stream.open_untagged = prefix.rank, prefix.untagged_rank
            stream.block_open = opens_block(message)
            stream.traceback_open = prefix.header is None and stream.block_open and (
                "Traceback" in message or FRAME_RE.match(message) is not None)
        out.append(Line(text=text, message=message, kind=LineKind.CONTINUATION if continues else LineKind.RECORD,
                        rank=stream.open_rank, ts=ts, pid=record.pid, invocation_id=record.invocation_id,
                        has_prefix=True, record_id=stream.open_record, untagged_rank=prefix.untagged_rank,
                        anonymous_rank=prefix.anonymous, engine_core=prefix.engine_core,
                        process_pid=prefix.process_pid))

    def _unprefixed(self, segment: str, record: JournalRecord, stream: WriterState, out: list[Line]) -> None:
        wrapper = WRAPPER_RE.match(segment)
        message = segment[wrapper.end():] if wrapper else segment
        foreign = foreign_time(message, self._last_date) if record.realtime is None else None
        if foreign is not None and foreign.end:
            message = message[foreign.end:]  # the logger's header is not the message
            if parse_progress(segment) is None and parse_progress(message) is not None:
                segment = message  # a bar behind an outer time stamp
        ts = self._timestamp(record, None, foreign)
        parsed = parse_progress(segment)
        if parsed is not None:
            progress, end = parsed
            self._next_record += 1
            rank = self._inherited_rank(record, stream)
            out.append(Line(text=segment[:end], message=segment[:end], kind=LineKind.PROGRESS, rank=rank,
                            ts=ts, pid=record.pid, invocation_id=record.invocation_id, progress=progress,
                            record_id=self._next_record))
            rest = segment[end:]
            if rest:
                self._unprefixed(rest, record, stream, out)
            return
        if stream.open_record and not FOREIGN_RECORD_RE.match(message) and (
                stream.block_open or (TRACEBACK_LINE_RE.match(message) and not FRAME_RE.match(message))):
            if not stream.block_open and "Traceback" in message:
                stream.block_open = opens_block(message)  # a traceback under its record's first line
            out.append(Line(text=segment, message=message, kind=LineKind.CONTINUATION, rank=stream.open_rank,
                            ts=ts, pid=record.pid, invocation_id=record.invocation_id,
                            record_id=stream.open_record))
            return
        self._next_record += 1
        stream.open_record = self._next_record
        stream.open_rank = self._inherited_rank(record, stream)
        stream.open_untagged, stream.traceback_open = None, False
        stream.block_open = ("Traceback" in message or "ASGI" in message or 'File "' in message) \
            and opens_block(message)
        out.append(Line(text=segment, message=message, kind=LineKind.RECORD, rank=stream.open_rank, ts=ts,
                        pid=record.pid, invocation_id=record.invocation_id, record_id=self._next_record))
