"""Stage 2: lines -> events, through the engine profile (a YAML rule table shipped in the package).

Also turns systemd's and journald's own entries about the unit into lifecycle events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import repeat

from ...engines import engine_module
from ...prefixes import rank_number
from ...profile.families import FamilyMatch
from ...profile.load import Profile, Rule
from ...records import (
    MAIN,
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    UNIT_PHASES,
    Event,
    EventKind,
    JournalRecord,
    Line,
    LineKind,
)
from .pattern_needles import IdMemo, digit_blind, mask_ids, needled_search, needles

# Patterns see a line through pattern_view(): at most PATTERN_VIEW_CHARS from each end.
PATTERN_VIEW_CHARS = 32 * 1024


def pattern_view(text: str) -> str:
    """What patterns see of a line: all of it up to 2 x PATTERN_VIEW_CHARS, else its first and last
    PATTERN_VIEW_CHARS joined by a newline (a rejoined megabyte line costs no more than 64 KB)."""
    if len(text) <= 2 * PATTERN_VIEW_CHARS:
        return text
    return text[:PATTERN_VIEW_CHARS] + "\n" + text[-PATTERN_VIEW_CHARS:]
C10D_RANK_RE = re.compile(r"^\[rank(\d+)\]:")
# Lines whose text names the rank that writes them, for a line without a prefix (a paste, a window):
# SGLang's post-load barrier ("TP rank 1 could finish the model loading, but ..."), Gloo's
# "[Rank 1]: ..." and vLLM's "rank 1 in world size 4 is assigned as ... TP rank 1".
SELF_NAMED_RE = re.compile(r"^(?:\w+(?:Error|Exception): )?TP rank (\d{1,6}) could finish the model loading"
                           r"|^\[Rank (\d{1,6})\]: "
                           r"|^rank \d{1,6} in world size \d{1,6} is assigned as .*?\bTP rank (\d{1,6})\b")




def parse_server_args(message: str) -> dict[str, str]:
    """SGLang's `server_args=...` (engines/sglang.py); a profile's own engine module reads its own."""
    return engine_module("sglang").parse_server_args(message)


_PHASE_EVENTS = {"phase_begin": EventKind.PHASE_BEGIN, "phase_end": EventKind.PHASE_END,
                 "phase_hint": EventKind.PHASE_HINT}
_MASK_DIGITS = bytes.maketrans(b"123456789", b"000000000")
MEMO_ENTRIES = 4096
MEMO_MAX_CHARS = 1024
# Longer lines (tracebacks' dumps, batch dumps) are remembered too, in a memo of its own bounded by
# the characters of its keys: such lines repeat with other numbers in them.
LONG_MEMO_CHARS = 1 << 21
RECORD_RANKS_LIMIT = 4096  # records whose rank continuation lines take


@dataclass
class WorkerNames:
    """vLLM V1 tags a worker `(Worker pid=N)` until it knows its rank, then `(Worker_TP0 pid=N)`:
    by (invocation, N), the label its anonymous lines had (not named yet), and the rank it became."""

    unnamed: dict[tuple[str | None, int], str] = field(default_factory=dict)
    named: dict[tuple[str | None, int], str] = field(default_factory=dict)

    def named_in(self, line: Line) -> list[Event]:
        """A worker's process that had no rank in its tag names one: its earlier lines' rank (`pidN`) is
        that rank (RANK_NAMED, once); its later untagged-rank lines are too (EventMapper._rank)."""
        key = (line.invocation_id, line.process_pid or 0)
        if line.anonymous_rank:
            if key not in self.named and line.rank == f"pid{line.process_pid}":
                if len(self.unnamed) >= MEMO_ENTRIES:
                    self.unnamed.clear()
                self.unnamed.setdefault(key, line.rank)
            return []
        if line.rank is None or self.named.get(key) == line.rank:
            return []
        if len(self.named) >= MEMO_ENTRIES:
            self.named.clear()
        self.named[key] = line.rank
        before = self.unnamed.pop(key, None)
        if before is None:
            return []
        return [Event(EventKind.RANK_NAMED, line.ts, rank=line.rank, text=before, invocation_id=line.invocation_id,
                      pid=line.pid)]


class EventMapper:
    """Lines -> events. Resolves ranks of untagged lines (single-GPU servers print no TP tag)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._engine = profile.engine_module
        self._engine_ranks: set[tuple[str | None, str]] = set()  # (invocation, label) of engine cores seen as ranks
        self._tagged_invocations: set[str | None] = set()  # a rank tag with a number showed
        self._worker_invocations: set[str | None] = set()  # any rank tag showed
        self._tp0_pids: set[tuple[str | None, int | None]] = set()
        self.workers = WorkerNames()
        self._record_ranks: dict[int, str | None] = {}
        self._harmless: set[int] = set()  # records whose traceback is not fatal
        self._line_rules = tuple(r for r in profile.rules if r.event != "progress")
        # Which rules a message matches, remembered by its digit-masked text ("#token: 00000"): exact for
        # the rules that cannot tell one digit from another (checked once, here); the others every time.
        self.blind_rules = tuple(r for r in self._line_rules if digit_blind(r.pattern))
        self.other_rules = tuple(r for r in self._line_rules if r not in self.blind_rules)
        self._position = {r.id: i for i, r in enumerate(self._line_rules)}
        needled = tuple((r, needles(r.pattern)) for r in self._line_rules)  # (`blind_matches`)
        self._blind_needled = tuple((r, texts) for r, texts in needled if r in self.blind_rules)
        self._other_needled = tuple((r, texts) for r, texts in needled if r not in self.blind_rules)
        self.ids = IdMemo(needled, self.in_profile_order, MEMO_ENTRIES)  # lines with ids (`mask_ids`)
        self._memo: dict[bytes, tuple[Rule, ...]] = {}
        self._long_memo: dict[bytes, tuple[Rule, ...]] = {}
        self._long_memo_chars = 0
        # Family answers by the line's digit-masked text, when no family pattern tells digits apart.
        self._family_memo: dict[bytes, FamilyMatch | None] | None = {} if all(
            digit_blind(p) for f in profile.families.rules for p in (*f.all, *f.none)) and (
            profile.families.draft_words is None or digit_blind(profile.families.draft_words)) else None

    def _matching(self, message: str) -> tuple[Rule, ...]:
        """The line rules `message` matches, in profile order."""
        # UTF-8 is one-to-one and its multi-byte sequences hold no ASCII digit: masking the bytes is
        # masking the text (and bytes.translate is eight times faster than str.translate).
        key = message.encode("utf-8", "surrogatepass").translate(_MASK_DIGITS)
        long = len(message) > MEMO_MAX_CHARS
        memo = self._long_memo if long else self._memo
        found = memo.get(key)  # (a text remembered here has no ids)
        if found is None:
            if not long and (id_key := mask_ids(key)) is not key and id_key != key:
                return self.ids.matching(id_key, message)
            if long:
                if self._long_memo_chars + len(key) > LONG_MEMO_CHARS:
                    memo.clear()
                    self._long_memo_chars = 0
                self._long_memo_chars += len(key)
            elif len(memo) >= MEMO_ENTRIES:
                memo.clear()
            found = memo[key] = self.blind_matches(message)
        if long:
            others = list(needled_search(self._other_needled, message))
        else:
            others = [r for r in self.other_rules if r.pattern.search(message)]
        if others:
            return tuple(sorted((*found, *others), key=lambda r: self._position[r.id]))
        return found

    def blind_matches(self, message: str) -> tuple[Rule, ...]:
        """The digit-blind rules `message` matches, in profile order: each searched only when the
        message holds one of the texts every match of it holds (`needles`; a substring test costs a
        fraction of a search: a line unlike every rule, such as an access line with its own request
        id, is searched by the few rules whose texts it holds instead of by all of them)."""
        return needled_search(self._blind_needled, message)

    def map_line(self, line: Line) -> list[Event]:
        events: list[Event] = [] if line.process_pid is None else self.workers.named_in(line)
        rank = self._rank(line)
        if line.kind is LineKind.PROGRESS and line.progress is not None:
            desc = pattern_view(line.progress.desc)
            bar = next((r for r in self.profile.rules if r.event == "progress" and r.pattern.search(desc)), None)
            return [*events, Event(EventKind.PROGRESS, line.ts, rank=rank, phase=bar.phase if bar else None,
                                   rule=bar.id if bar else None, progress=line.progress, text=line.text,
                                   invocation_id=line.invocation_id, pid=line.pid)]
        message = pattern_view(line.message)
        record_id = line.record_id
        continuation = line.kind is LineKind.CONTINUATION
        harmless = continuation and record_id in self._harmless
        for rule in self._matching(message):
            if continuation and (rule.event not in ("fatal", "phase_hint") or rule.record_head):
                continue
            if harmless and rule.event == "fatal":
                continue  # the traceback of one request's error: the server goes on
            if rule.harmless and not continuation:
                if len(self._harmless) > 1024:
                    self._harmless.clear()
                self._harmless.add(record_id)
            rule_rank = self._rule_rank(line, rule.scope, rank, rule.event in _PHASE_EVENTS)
            if rule.event == "server_args":
                events.append(Event(EventKind.SERVER_ARGS, line.ts, rank=MAIN, rule=rule.id, text=message,
                                    invocation_id=line.invocation_id, pid=line.pid, record_id=record_id,
                                    args=self._engine.parse_server_args(message)))
            elif rule.event == "fatal":
                events.append(Event(EventKind.FATAL, line.ts, rank=rule_rank, rule=rule.id, cause=rule.cause,
                                    text=message, invocation_id=line.invocation_id, pid=line.pid,
                                    echo=rule.echo, record_id=record_id, prefixed=line.has_prefix))
            elif rule.event == "heartbeat":
                events.append(Event(EventKind.HEARTBEAT, line.ts, rank=rule_rank, rule=rule.id, text=message,
                                    invocation_id=line.invocation_id, pid=line.pid, record_id=record_id))
            elif rule.event == "activity" or (rule.scope != "main" and rule_rank == MAIN
                                               and line.untagged_rank is not None and rule.phase not in UNIT_PHASES):
                # (a rank's line or frame from a coordinator, vLLM's engine core with workers: no phase of its own)
                events.append(Event(EventKind.ACTIVITY, line.ts, rank=rule_rank, rule=rule.id, text=message,
                                    invocation_id=line.invocation_id, pid=line.pid, record_id=record_id))
            else:
                events.append(Event(_PHASE_EVENTS[rule.event], line.ts, rank=rule_rank, phase=rule.phase,
                                    rule=rule.id, text=message, invocation_id=line.invocation_id, pid=line.pid,
                                    record_id=record_id))
        named = events[:1] if events and events[0].kind is EventKind.RANK_NAMED else []
        if len(events) == len(named) and line.kind is LineKind.RECORD:
            events = named + self._family_events(line, message, rank)
        # A prefix alone (a bar's newline tagged by vLLM's prefixer) is its rank's sign of life too.
        if len(events) == len(named) and (message.strip() or (line.has_prefix and line.rank is not None)):
            events.append(Event(EventKind.ACTIVITY, line.ts, rank=rank, text=message,
                                invocation_id=line.invocation_id, pid=line.pid, record_id=record_id))
        if line.kind is LineKind.RECORD:
            if len(self._record_ranks) > RECORD_RANKS_LIMIT:
                self._record_ranks.clear()
            ranked = events[len(named):]
            self._record_ranks[record_id] = ranked[0].rank if ranked else rank
        return events

    # -- what the fast path (stages/s3_track/fastpath.py) asks, and the changes it makes through them --
    def in_profile_order(self, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
        return tuple(sorted(rules, key=lambda r: self._position[r.id]))

    def reads_no_phase(self, message: str) -> bool:
        """Whether the family vocabulary reads no phase in a line no rule matches, as its digit-masked
        text: False when a family pattern tells digits apart (asked line by line, then)."""
        return self._family_memo is not None and bool(message.strip()) and self._classify(message) is None

    def rank_of_untagged(self, invocation_id: str | None, pid: int | None) -> str:
        """The rank of a prefixed line without a rank tag: a one-GPU scheduler's PID's, else main."""
        return "TP0" if (invocation_id, pid) in self._tp0_pids else MAIN

    def tags_ranks(self, invocation_id: str | None) -> bool:
        """Whether a rank tag with a number showed in the start-up."""
        return invocation_id in self._tagged_invocations

    def took_records(self, invocation_id: str | None, record_ids: range, rank: str, tagged: bool,
                     anonymous: bool) -> None:
        """Records read by rank `rank` (of its tag when `tagged`), as `map_line` notes them."""
        if tagged:
            if not anonymous:
                self._tagged_invocations.add(invocation_id)
            if len(self._worker_invocations) < MEMO_ENTRIES:
                self._worker_invocations.add(invocation_id)
        record_ranks = self._record_ranks
        if len(record_ranks) + len(record_ids) - 1 <= RECORD_RANKS_LIMIT:  # (no record would clear it)
            record_ranks.update(zip(record_ids, repeat(rank)))
            return
        for record_id in record_ids:
            if len(record_ranks) > RECORD_RANKS_LIMIT:
                record_ranks.clear()
            record_ranks[record_id] = rank

    def _family_events(self, line: Line, message: str, rank: str | None) -> list[Event]:
        """The profile's fallback vocabulary, for a record no exact rule matched."""
        found = self._classify(message)
        if found is None:
            return []
        family = found.family
        family_rank = self._rule_rank(line, family.scope, rank, True)
        if family.scope == "rank" and family_rank in (None, MAIN):
            return []  # a scheduler's word in the main process's (or nobody's) line: not a rank's phase
        return [Event(_PHASE_EVENTS[family.event], line.ts, rank=family_rank, phase=found.phase, rule=family.id,
                      text=message, invocation_id=line.invocation_id, pid=line.pid, record_id=line.record_id,
                      confidence="family")]

    def _classify(self, message: str) -> FamilyMatch | None:
        memo = self._family_memo
        if memo is None or len(message) > MEMO_MAX_CHARS:
            return self.profile.families.classify(message)
        key = message.encode("utf-8", "surrogatepass").translate(_MASK_DIGITS)
        if key in memo:
            return memo[key]
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        found = memo[key] = self.profile.families.classify(message)
        return found

    def _rank(self, line: Line) -> str | None:
        if line.anonymous_rank and line.process_pid is not None:
            named = self.workers.named.get((line.invocation_id, line.process_pid))
            if named is not None:
                return named
        if line.has_prefix and line.rank is not None:
            if not line.anonymous_rank:
                self._tagged_invocations.add(line.invocation_id)
            if line.untagged_rank is None and len(self._worker_invocations) < MEMO_ENTRIES:
                self._worker_invocations.add(line.invocation_id)
            return line.rank
        if line.untagged_rank is not None and line.rank is None:
            # A process the prefix names but that is no rank by its tag (vLLM's engine core, API server).
            if (line.untagged_rank != MAIN and not self._coordinating(line)
                    and (line.invocation_id, line.untagged_rank) in self._engine_ranks):
                return line.untagged_rank
            return MAIN
        c10d = C10D_RANK_RE.match(line.message)
        if c10d and (number := rank_number(c10d.group(1))) is not None:
            # torch's "[rank3]:" is the global rank; with TP only it is the TP rank.
            return f"TP{number}"
        if line.kind is LineKind.CONTINUATION and line.record_id in self._record_ranks:
            return self._record_ranks[line.record_id]
        self_named = SELF_NAMED_RE.search(line.message) if not line.has_prefix else None
        if self_named and (number := rank_number(next(g for g in self_named.groups() if g))) is not None:
            return f"TP{number}"
        if line.rank is not None:
            return line.rank
        if (line.invocation_id, line.pid) in self._tp0_pids and line.pid is not None:
            return "TP0"
        return MAIN if line.has_prefix else None

    def _coordinating(self, line: Line) -> bool:
        """Whether a process that is no rank by its tag coordinates ranks that others run."""
        workers = self._worker_invocations if line.engine_core else self._tagged_invocations
        return line.invocation_id in workers

    def _rule_rank(self, line: Line, scope: str, rank: str | None, phase_event: bool = False) -> str | None:
        if line.rank is not None:
            return rank
        if scope == "main":
            return MAIN
        if line.untagged_rank is not None:
            if line.untagged_rank == MAIN or self._coordinating(line):
                return MAIN if rank is None else rank
            if len(self._engine_ranks) >= MEMO_ENTRIES:
                self._engine_ranks.clear()
            # An engine core that holds its GPU itself (no worker tags in this log): its rank.
            self._engine_ranks.add((line.invocation_id, line.untagged_rank))
            return line.untagged_rank
        # A pasted log without any prefix (no PID either): a scheduler's phase line is the one
        # scheduler's of a one-GPU server. Not its fatal lines: an unprefixed traceback in a paste is
        # as often the launcher's.
        pasted = phase_event and line.pid is None and line.kind is LineKind.RECORD
        if (scope == "rank" and rank in (None, MAIN) and (line.has_prefix or pasted)
                and line.invocation_id not in self._tagged_invocations):
            # A one-GPU server: the scheduler prints no tag, and only a scheduler prints this line.
            if len(self._tp0_pids) >= MEMO_ENTRIES:
                self._tp0_pids.clear()  # thousands of single-GPU schedulers: forged, or long gone
            self._tp0_pids.add((line.invocation_id, line.pid))
            return "TP0"
        return rank


_MESSAGE_ID_EVENTS = {
    MID_STARTED: EventKind.INVOCATION_START,
    MID_STOPPING: EventKind.UNIT_STOPPING,
    MID_STOPPED: EventKind.UNIT_STOPPED,
    MID_DEACTIVATED: EventKind.UNIT_STOPPED,
    MID_MAIN_EXITED: EventKind.UNIT_EXITED,
    MID_FAILED: EventKind.UNIT_FAILED,
    MID_RESTART_SCHEDULED: EventKind.RESTART_SCHEDULED,
}


def is_lifecycle_record(record: JournalRecord) -> bool:
    """Entries written about the unit by PID 1 or journald, not by the unit's processes."""
    return record.message_id in _MESSAGE_ID_EVENTS or record.message_id == MID_SUPPRESSED or (
        record.object_unit is not None and record.n_dropped is not None)


def lifecycle_event(record: JournalRecord) -> Event | None:
    message = record.message if isinstance(record.message, str) else (
        record.message.decode("utf-8", "replace") if record.message else "")
    if record.message_id == MID_SUPPRESSED or (record.object_unit and record.n_dropped is not None):
        return Event(EventKind.LINES_LOST, record.realtime, text=message, count=record.n_dropped or 0,
                     cause="journald_rate_limit")
    kind = _MESSAGE_ID_EVENTS.get(record.message_id or "")
    if kind is None:
        return None
    invocation = record.extra.get("INVOCATION_ID") or record.invocation_id
    return Event(kind, record.realtime, text=message, invocation_id=invocation,
                 args={k: v for k, v in record.extra.items()})
