"""Stage 2: lines -> events, through the engine profile (a YAML rule table shipped in the package).

Also turns systemd's and journald's own entries about the unit into lifecycle events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Iterable, Mapping

import yaml

from .engines import KNOWN as KNOWN_ENGINES
from .engines import Engine, engine_module
from .lines import rank_number
from .records import (
    MAIN,
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    PHASE_NAMES,
    UNIT_PHASES,
    Event,
    EventKind,
    JournalRecord,
    Line,
    LineKind,
    Phase,
)

RULE_EVENTS = ("phase_begin", "phase_end", "phase_hint", "progress", "fatal", "activity", "server_args", "heartbeat")
SCOPES = ("rank", "main", "any")
# A rule's pattern: at most this long, and no {m,n} above MAX_PATTERN_REPEAT (a{4294967296} makes
# re.compile raise; a{100000} compiles to a program that size). Patterns see a line through
# pattern_view(): at most PATTERN_VIEW_CHARS from each end.
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_REPEAT = 1000
PATTERN_VIEW_CHARS = 32 * 1024


def pattern_view(text: str) -> str:
    """What patterns see of a line: all of it up to 2 x PATTERN_VIEW_CHARS, else its first and last
    PATTERN_VIEW_CHARS joined by a newline (a rejoined megabyte line costs no more than 64 KB)."""
    if len(text) <= 2 * PATTERN_VIEW_CHARS:
        return text
    return text[:PATTERN_VIEW_CHARS] + "\n" + text[-PATTERN_VIEW_CHARS:]
C10D_RANK_RE = re.compile(r"^\[rank(\d+)\]:")


class ProfileError(ValueError):
    """A rule in a profile or in a config's `patterns:` is malformed. `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: re.Pattern[str]
    event: str
    phase: Phase | None = None
    scope: str = "any"
    cause: str | None = None
    echo: bool = False
    harmless: bool = False  # the record and the traceback under it are one request's error


@dataclass(frozen=True)
class CauseClass:
    id: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Profile:
    engine: str
    rules: tuple[Rule, ...]
    causes: tuple[CauseClass, ...]
    module: str = "sglang"  # the engine module (engines/) for prefixes, titles and arguments
    lockstep: bool = False  # a rank beginning a phase moves its group along (tracker.Tracker)
    draft_phases: bool = True  # a second dist init / weight load is the draft model's

    @property
    def engine_module(self) -> Engine:
        return engine_module(self.module)

    def with_overrides(self, specs: Iterable[Mapping[str, Any]], key: str = "patterns") -> Profile:
        """Add rules, or replace those with the same id (keeping their place in the order)."""
        rules = list(self.rules)
        for index, spec in enumerate(specs):
            rule = parse_rule(spec, f"{key}[{index}]")
            position = next((i for i, r in enumerate(rules) if r.id == rule.id), None)
            if position is None:
                rules.append(rule)
            else:
                rules[position] = rule
        return replace(self, rules=tuple(rules))

    def classify_cause(self, texts: Iterable[str], skip: frozenset[str] = frozenset()) -> str | None:
        materialised = [t for t in texts if t]
        for cause in self.causes:
            if cause.id not in skip and any(cause.pattern.search(t) for t in materialised):
                return cause.id
        return None


def _compile(spec: Mapping[str, Any], key: str) -> re.Pattern[str]:
    pattern = spec.get("match")
    if not isinstance(pattern, str) or not pattern:
        raise ProfileError(f"{key}.match", "expected a regular expression")
    flags = 0
    flag_text = spec.get("flags", "")
    if not isinstance(flag_text, str) or set(flag_text) - {"i"}:
        raise ProfileError(f"{key}.flags", f"expected '' or 'i', got {flag_text!r}")
    if "i" in flag_text:
        flags |= re.IGNORECASE
    shown = repr(pattern) if len(pattern) <= 80 else repr(pattern[:80]) + "..."
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ProfileError(f"{key}.match", f"regular expression {shown} is longer than {MAX_PATTERN_CHARS} "
                                           "characters")
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise ProfileError(f"{key}.match", f"invalid regular expression {shown}: {exc}") from None
    except (OverflowError, RecursionError, MemoryError, ValueError) as exc:
        # a{4294967296}; thousands of nested groups
        raise ProfileError(f"{key}.match", f"regular expression {shown} cannot be compiled: "
                                           f"{str(exc) or type(exc).__name__}") from None
    repeat = _largest_repeat(compiled)
    if repeat > MAX_PATTERN_REPEAT:
        raise ProfileError(f"{key}.match", f"regular expression {shown} repeats something {repeat} times "
                                           f"(at most {MAX_PATTERN_REPEAT})")
    return compiled


def _largest_repeat(pattern: re.Pattern[str]) -> int:
    """The largest bounded count in a {m,n} of `pattern` (walked without recursion: deep nesting is
    fine here)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - re.compile took it; its private parser's doubts are not ours
        return 0
    repeats = (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT)
    largest = 0
    stack: list[Any] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, _parser.SubPattern):
            stack.extend(item.data)
        elif isinstance(item, (list, tuple)):
            if len(item) == 2 and item[0] in repeats:
                low, high = item[1][0], item[1][1]
                largest = max(largest, low, 0 if high == _parser.MAXREPEAT else high)
            stack.extend(x for x in item if isinstance(x, (list, tuple, _parser.SubPattern)))
    return largest


def parse_rule(spec: Mapping[str, Any], key: str) -> Rule:
    if not isinstance(spec, Mapping):
        raise ProfileError(key, f"expected a mapping with id, match and event, got {type(spec).__name__}")
    unknown = set(spec) - {"id", "match", "event", "phase", "scope", "cause", "echo", "flags", "harmless"}
    if unknown:
        raise ProfileError(f"{key}.{sorted(unknown)[0]}", "unknown key")
    rule_id = spec.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise ProfileError(f"{key}.id", "expected a non-empty name")
    event = spec.get("event")
    if event not in RULE_EVENTS:
        raise ProfileError(f"{key}.event", f"expected one of {', '.join(RULE_EVENTS)}, got {event!r}")
    phase_name = spec.get("phase")
    phase: Phase | None = None
    if phase_name is not None:
        if phase_name not in PHASE_NAMES:
            raise ProfileError(f"{key}.phase", f"expected one of {', '.join(PHASE_NAMES)}, got {phase_name!r}")
        phase = Phase(phase_name)
    elif event in ("phase_begin", "phase_end", "phase_hint", "progress"):
        raise ProfileError(f"{key}.phase", f"required for event {event}")
    scope = spec.get("scope", "any")
    if scope not in SCOPES:
        raise ProfileError(f"{key}.scope", f"expected one of {', '.join(SCOPES)}, got {scope!r}")
    cause = spec.get("cause")
    if cause is not None and not isinstance(cause, str):
        raise ProfileError(f"{key}.cause", "expected a cause class name")
    echo = spec.get("echo", False)
    if not isinstance(echo, bool):
        raise ProfileError(f"{key}.echo", f"expected true or false, got {echo!r}")
    harmless = spec.get("harmless", False)
    if not isinstance(harmless, bool):
        raise ProfileError(f"{key}.harmless", f"expected true or false, got {harmless!r}")
    return Rule(rule_id, _compile(spec, key), event, phase, scope, cause, echo, harmless)


def parse_profile(document: Mapping[str, Any], origin: str) -> Profile:
    if not isinstance(document, Mapping):
        raise ProfileError(origin, "expected a mapping with engine, rules and causes")
    rules_spec = document.get("rules")
    if not isinstance(rules_spec, list):
        raise ProfileError(f"{origin}: rules", "expected a list")
    causes_spec = document.get("causes", [])
    if not isinstance(causes_spec, list):
        raise ProfileError(f"{origin}: causes", "expected a list")
    rules = tuple(parse_rule(spec, f"rules[{i}]") for i, spec in enumerate(rules_spec))
    ids = [r.id for r in rules]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        raise ProfileError(f"{origin}: rules", f"duplicate id {duplicate!r}")
    causes = tuple(CauseClass(str(spec.get("id")), _compile(spec, f"causes[{i}]"))
                   for i, spec in enumerate(causes_spec))
    engine = str(document.get("engine", origin))
    # A profile of another engine without a module of its own reads SGLang-style prefixes.
    module = document.get("module", engine if engine in KNOWN_ENGINES else "sglang")
    if module not in KNOWN_ENGINES:
        raise ProfileError(f"{origin}: module", f"expected one of {', '.join(KNOWN_ENGINES)}, got {module!r}")
    lockstep = document.get("lockstep", False)
    if not isinstance(lockstep, bool):
        raise ProfileError(f"{origin}: lockstep", f"expected true or false, got {lockstep!r}")
    draft_phases = document.get("draft_phases", True)
    if not isinstance(draft_phases, bool):
        raise ProfileError(f"{origin}: draft_phases", f"expected true or false, got {draft_phases!r}")
    return Profile(engine, rules, causes, module, lockstep, draft_phases)


def builtin_engines() -> list[str]:
    """The engines with a profile shipped in the package (profiles/<engine>.yaml)."""
    return sorted(f.name[:-5] for f in resources.files("phasewatch").joinpath("profiles").iterdir()
                  if f.name.endswith(".yaml"))


def load_builtin_profile(engine: str) -> Profile:
    try:
        text = resources.files("phasewatch").joinpath("profiles", f"{engine}.yaml").read_text("utf-8")
    except FileNotFoundError:
        raise ProfileError("engine", f"no built-in profile for engine {engine!r} "
                                     f"(known: {', '.join(builtin_engines())})") from None
    return parse_profile(yaml.safe_load(text), f"{engine}.yaml")


def parse_server_args(message: str) -> dict[str, str]:
    """SGLang's `server_args=...` (engines/sglang.py); a profile's own engine module reads its own."""
    return engine_module("sglang").parse_server_args(message)


_PHASE_EVENTS = {"phase_begin": EventKind.PHASE_BEGIN, "phase_end": EventKind.PHASE_END,
                 "phase_hint": EventKind.PHASE_HINT}
_MASK_DIGITS = bytes.maketrans(b"123456789", b"000000000")
MEMO_ENTRIES = 4096
MEMO_MAX_CHARS = 1024


def digit_blind(pattern: re.Pattern[str]) -> bool:
    """True when `pattern` cannot tell one ASCII digit from another (no digit literal, no set with
    some digits but not all, no back-reference), so it matches a text exactly when it matches the
    text with every digit replaced by 0. Unknown constructs: False."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - a private module: any doubt means "not blind"
        return False
    return _blind(tree, _parser)


def _blind(tree: Any, parser: Any) -> bool:
    c = parser  # the opcode constants live on the parser module
    digits = range(48, 58)
    for op, av in tree:
        if op in (c.LITERAL, c.NOT_LITERAL):
            if av in digits:
                return False
        elif op is c.IN:
            covered = set()
            for item_op, item_av in av:
                if item_op is c.LITERAL and item_av in digits:
                    covered.add(item_av)
                elif item_op is c.RANGE:
                    covered.update(d for d in digits if item_av[0] <= d <= item_av[1])
                elif item_op not in (c.NEGATE, c.CATEGORY, c.LITERAL):
                    return False
            if covered and len(covered) != 10:
                return False
        elif op is c.SUBPATTERN:
            if not _blind(av[-1], parser):
                return False
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            if not _blind(av[2], parser):
                return False
        elif op is c.BRANCH:
            if not all(_blind(branch, parser) for branch in av[1]):
                return False
        elif op in (c.ASSERT, c.ASSERT_NOT):
            if not _blind(av[1], parser):
                return False
        elif op is c.ATOMIC_GROUP:
            if not _blind(av, parser):
                return False
        elif op not in (c.ANY, c.AT, c.CATEGORY):
            return False
    return True


class EventMapper:
    """Lines -> events. Resolves ranks of untagged lines (single-GPU servers print no TP tag)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._engine = profile.engine_module
        self._engine_ranks: set[tuple[str | None, str]] = set()  # (invocation, label) of engine cores seen as ranks
        self._tagged_invocations: set[str | None] = set()  # a rank tag with a number showed
        self._worker_invocations: set[str | None] = set()  # any rank tag showed
        self._tp0_pids: set[tuple[str | None, int | None]] = set()
        self._record_ranks: dict[int, str | None] = {}
        self._harmless: set[int] = set()  # records whose traceback is not fatal
        self._line_rules = tuple(r for r in profile.rules if r.event != "progress")
        # Which rules a message matches, remembered by its digit-masked text ("Decode batch, #token:
        # 00000, ..."): exact for the rules that cannot tell one digit from another (checked once,
        # here); the others ("/v1/...") are searched every time.
        self._blind_rules = tuple(r for r in self._line_rules if digit_blind(r.pattern))
        self._other_rules = tuple(r for r in self._line_rules if r not in self._blind_rules)
        self._position = {r.id: i for i, r in enumerate(self._line_rules)}
        self._memo: dict[bytes, tuple[Rule, ...]] = {}

    def _matching(self, message: str) -> tuple[Rule, ...]:
        """The line rules `message` matches, in profile order."""
        if len(message) > MEMO_MAX_CHARS:
            return tuple(r for r in self._line_rules if r.pattern.search(message))
        memo = self._memo
        # UTF-8 is one-to-one and its multi-byte sequences hold no ASCII digit: masking the bytes is
        # masking the text (and bytes.translate is eight times faster than str.translate).
        key = message.encode("utf-8", "surrogatepass").translate(_MASK_DIGITS)
        found = memo.get(key)
        if found is None:
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            found = memo[key] = tuple(r for r in self._blind_rules if r.pattern.search(message))
        others = [r for r in self._other_rules if r.pattern.search(message)]
        if others:
            return tuple(sorted((*found, *others), key=lambda r: self._position[r.id]))
        return found

    def map_line(self, line: Line) -> list[Event]:
        rank = self._rank(line)
        events: list[Event] = []
        if line.kind is LineKind.PROGRESS and line.progress is not None:
            desc = pattern_view(line.progress.desc)
            bar = next((r for r in self.profile.rules if r.event == "progress" and r.pattern.search(desc)), None)
            return [Event(EventKind.PROGRESS, line.ts, rank=rank, phase=bar.phase if bar else None,
                          rule=bar.id if bar else None, progress=line.progress, text=line.text,
                          invocation_id=line.invocation_id, pid=line.pid)]
        message = pattern_view(line.message)
        record_id = line.record_id
        continuation = line.kind is LineKind.CONTINUATION
        harmless = continuation and record_id in self._harmless
        for rule in self._matching(message):
            if continuation and rule.event not in ("fatal", "phase_hint"):
                continue
            if harmless and rule.event == "fatal":
                continue  # the traceback of one request's error: the server goes on
            if rule.harmless and not continuation:
                if len(self._harmless) > 1024:
                    self._harmless.clear()
                self._harmless.add(record_id)
            rule_rank = self._rule_rank(line, rule, rank)
            if rule.event == "server_args":
                events.append(Event(EventKind.SERVER_ARGS, line.ts, rank=MAIN, rule=rule.id, text=message,
                                    invocation_id=line.invocation_id, pid=line.pid, record_id=record_id,
                                    args=self._engine.parse_server_args(message)))
            elif rule.event == "fatal":
                events.append(Event(EventKind.FATAL, line.ts, rank=rule_rank, rule=rule.id, cause=rule.cause,
                                    text=message, invocation_id=line.invocation_id, pid=line.pid,
                                    count=0 if rule.echo else 1, record_id=record_id, prefixed=line.has_prefix))
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
        # A prefix alone (a bar's newline tagged by vLLM's prefixer) is its rank's sign of life too.
        if not events and (message.strip() or (line.has_prefix and line.rank is not None)):
            events.append(Event(EventKind.ACTIVITY, line.ts, rank=rank, text=message,
                                invocation_id=line.invocation_id, pid=line.pid, record_id=record_id))
        if line.kind is LineKind.RECORD:
            if len(self._record_ranks) > 4096:
                self._record_ranks.clear()
            self._record_ranks[record_id] = events[0].rank if events else rank
        return events

    def _rank(self, line: Line) -> str | None:
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
        if line.rank is not None:
            return line.rank
        if (line.invocation_id, line.pid) in self._tp0_pids and line.pid is not None:
            return "TP0"
        return MAIN if line.has_prefix else None

    def _coordinating(self, line: Line) -> bool:
        """Whether a process that is no rank by its tag coordinates ranks that others run."""
        workers = self._worker_invocations if line.engine_core else self._tagged_invocations
        return line.invocation_id in workers

    def _rule_rank(self, line: Line, rule: Rule, rank: str | None) -> str | None:
        if line.rank is not None:
            return rank
        if rule.scope == "main":
            return MAIN
        if line.untagged_rank is not None:
            if line.untagged_rank == MAIN or self._coordinating(line):
                return MAIN if rank is None else rank
            if len(self._engine_ranks) >= MEMO_ENTRIES:
                self._engine_ranks.clear()
            # An engine core that holds its GPU itself (no worker tags in this log): its rank.
            self._engine_ranks.add((line.invocation_id, line.untagged_rank))
            return line.untagged_rank
        if (rule.scope == "rank" and rank in (None, MAIN) and line.has_prefix
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
