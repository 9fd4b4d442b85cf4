"""The catch-up fast path: a line that changes nothing but "last activity", applied straight to the
splitter's, mapper's and tracker's state from its MESSAGE bytes, without Line or Event objects.

Most entries of a serving journal are such lines (SGLang's `Decode batch`, uvicorn's access log).
Which lines qualify is not written here: it follows from the engine's prefix grammar
(`fast_prefix` of its module) and the profile's rules, checked against the state the line meets.
A line qualifies when:
- its MESSAGE is one ASCII line (no CR, LF or ESC) with one engine prefix at its start and no
  other, from a writer (invocation, PID) already seen, with nothing held for it;
- every rule it matches is an `activity` rule or a phase rule of a unit phase the start-up has
  already passed, none is `harmless`, and at least one matches (else the family vocabulary decides);
- its rank is known in its start-up and nothing about its rank would be learned from it.
Anything else returns False before a single change, and the caller takes the full path.
`apply` then makes exactly the changes the full path would have made (tests/unit/test_fastpath.py
and tests/integration/test_fastpath_journal.py compare both paths' outputs).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Union

from ...prefixes import Prefix
from ...profile.load import Rule
from ...records import MAIN, Phase, UnitRun
from ..s1_read.lines import LineSplitter, opens_block
from ..s2_interpret.events import MEMO_ENTRIES, MEMO_MAX_CHARS, EventMapper
from ..s2_interpret.pattern_needles import mask_ids, needles
from .snapshot import UNIT_PHASE_ORDER, UnitState
from .tracker import Tracker
from .tracker_state import InvocationState, RankState

_MASK_DIGITS = bytes.maketrans(b"123456789", b"000000000")
Plan = Union[tuple[tuple[Rule, ...], bool, tuple[int, ...], bool, tuple[Rule, ...], bool], tuple[()]]
# A line with ids (`mask_ids`): its plan by its ids masked; whether it is a plain sign of life is
# asked line by line (None), and whether it opens a block too where an id could change the answer.
IdPlan = Union[tuple[tuple[Rule, ...], Union[bool, None], tuple[int, ...], bool, tuple[Rule, ...], None], tuple[()]]
# `opens_block` of a text without these is decided by its end (':', uvicorn's "Exception in ASGI
# application"), which no id can reach into: the same for every text of one `mask_ids` text.
_BLOCK_WORDS = (b"Traceback", b"hit an exception", b'File "')
Merged = Union[tuple[tuple[Rule, ...], tuple[int, ...], bool], tuple[()]]
_READY_INDEX = UNIT_PHASE_ORDER.index(Phase.READY)
_SERVING_INDEX = UNIT_PHASE_ORDER.index(Phase.SERVING)
_PHASE_INDEX = {phase: index for index, phase in enumerate(UNIT_PHASE_ORDER)}
_OPEN_STATES = (UnitState.STARTING, UnitState.READY)


def _quiet(rule: Rule) -> bool:
    """A rule whose event changes nothing but last activity, or nothing once its unit phase is passed."""
    return not rule.harmless and (rule.event == "activity" or (
        rule.event in ("phase_begin", "phase_end", "phase_hint") and rule.phase in _PHASE_INDEX))


def _orders(rules: tuple[Rule, ...]) -> tuple[int, ...]:
    """Each rule's unit phase as its place in UNIT_PHASE_ORDER; -1 for an activity rule."""
    return tuple(-1 if r.event == "activity" else _PHASE_INDEX[r.phase] for r in rules)  # type: ignore[index]


class FastPath:
    """One per pipeline; asks its stages about a line and has them take it (their methods: they own
    their state)."""

    def __init__(self, find: Callable[[bytes], Prefix | None], marks: tuple[bytes, ...], splitter: LineSplitter,
                 mapper: EventMapper, tracker: Tracker) -> None:
        self._find = find
        # After the prefix, a line qualifies only without these (each masked text is checked once):
        # another prefix's mark, the splitter's line ends and ANSI escapes.
        self._unsafe = (*marks, b"\r", b"\n", b"\x1b")
        self._splitter, self._mapper, self._tracker = splitter, mapper, tracker
        # (their methods bound once: a line that qualifies calls each of them)
        self._idle_writer, self._took_line = splitter.idle_writer, splitter.took_line
        self._took_records, self._invocation, self._alive = mapper.took_records, tracker.invocation, tracker.took_line
        # digit-masked message -> (the digit-blind rules it matches, whether it opens a block, their
        # unit phases' places, whether one proves serving, the other rules to search it with, whether
        # it is a plain sign of life when no rule matches); () when it can never take the fast path.
        self._plans: dict[bytes, Plan] = {}
        # (masked message, which of its plan's other rules match) -> `_with_others`'s answer
        self._merged: dict[tuple[bytes, int], Merged] = {}
        # The same for lines with ids, by their `mask_ids` text; only when no mark of `_unsafe` holds
        # a character that text changes or writes (then it holds a mark exactly when the line does).
        self._id_plans: dict[bytes, IdPlan] | None = None if any(
            set(u) & set(b"0abcdef") for u in self._unsafe) else {}
        self._id_merged: dict[tuple[bytes, int], Merged] = {}
        # The rules that tell digits apart, each with a text any match of it contains (None: no such
        # text known), so that most lines are not searched with them.
        # Masked too: a text absent from a line's masked text is absent from the line.
        self._others = tuple((rule, None if (texts := needles(rule.pattern)) is None else tuple(
            t.encode("utf-8", "surrogatepass").translate(_MASK_DIGITS) for t in texts)) for rule in mapper.other_rules)
        self.taken = 0

    def _plan(self, key: bytes, rest: bytes) -> Plan:
        plan: Plan = ()
        if rest and len(rest) <= MEMO_MAX_CHARS and key.isascii() and not any(u in key for u in self._unsafe):
            plan = self._quiet_plan(key, rest)
        if len(self._plans) >= MEMO_ENTRIES:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _plan_of(self, masked: bytes, rest: bytes) -> tuple[Plan | IdPlan, bytes | None]:
        """The plan of a line whose digit-masked text has none yet, and its `mask_ids` text if it has ids
        (its digit-masked text is then its own: not remembered). A line too long to plan is not looked
        at for ids (a batch dump of kilobytes holds hundreds: 0.3 ms a line)."""
        if self._id_plans is None or len(rest) > MEMO_MAX_CHARS:
            return self._plan(masked, rest), None
        ids = mask_ids(masked)
        if ids is masked or ids == masked:
            return self._plan(masked, rest), None
        plan = self._id_plans.get(ids)
        return (self._id_plan(ids, rest, self._id_plans) if plan is None else plan), ids

    def _planned(self, rest: bytes) -> tuple[Plan | IdPlan, bytes, dict[tuple[bytes, int], Merged]]:
        """The plan of a line's text after its prefix, the text it is remembered by (its `mask_ids` text
        for a line with ids) and the memo of its merges with the rules that tell digits apart."""
        masked = rest.translate(_MASK_DIGITS)
        plan = self._plans.get(masked)
        if plan is not None:
            return plan, masked, self._merged
        found, ids = self._plan_of(masked, rest)
        return (found, masked, self._merged) if ids is None else (found, ids, self._id_merged)

    def _id_plan(self, ids: bytes, rest: bytes, plans: dict[bytes, IdPlan]) -> IdPlan:
        plan: IdPlan = ()
        if len(rest) <= MEMO_MAX_CHARS and ids.isascii() and not any(u in ids for u in self._unsafe):
            text = rest.decode("ascii")
            rules, others = self._mapper.ids.plan(ids, text)
            if all(_quiet(r) for r in rules):
                block = None if any(word in ids for word in _BLOCK_WORDS) else opens_block(text)
                plan = rules, block, _orders(rules), self._proves(rules), others, None
        if len(plans) >= MEMO_ENTRIES:
            plans.clear()
        plans[ids] = plan
        return plan

    def _quiet_plan(self, key: bytes, rest: bytes) -> Plan:
        message = rest.decode("ascii")
        rules = self._mapper.blind_matches(message)
        if not all(_quiet(r) for r in rules):
            return ()
        # The other rules this text may match (searched line by line): those whose text it holds.
        others = tuple(rule for rule, texts in self._others if texts is None or any(t in key for t in texts))
        # A line no rule matches is its rank's sign of life, unless the profile's family vocabulary
        # reads a phase in it (asked once per masked text: only when no family pattern reads digits).
        plain = not rules and self._mapper.reads_no_phase(message)
        return rules, opens_block(message), _orders(rules), self._proves(rules), others, plain

    def _proves(self, rules: tuple[Rule, ...]) -> bool:
        return not self._tracker.proof_of_life_rules.isdisjoint(r.id for r in rules)

    @staticmethod
    def _found(candidates: tuple[Rule, ...], text: str) -> int:
        """Which of `candidates` `text` matches, as bits."""
        found = 0
        for bit, rule in enumerate(candidates):
            if rule.pattern.search(text):
                found |= 1 << bit
        return found

    def _with_others(self, key: bytes, rules: tuple[Rule, ...], candidates: tuple[Rule, ...], found: int,
                     merged_by: dict[tuple[bytes, int], Merged]) -> Merged:
        """`rules` and the `candidates` `found` says a line matches, in profile order, with their unit
        phases' places and whether one proves serving; (): one is not quiet."""
        merged = merged_by.get((key, found))
        if merged is None:
            others = [rule for bit, rule in enumerate(candidates) if found >> bit & 1]
            merged = ()
            if all(_quiet(r) for r in others):
                together = self._mapper.in_profile_order((*rules, *others))
                merged = together, _orders(together), self._proves(together)
            if len(merged_by) >= MEMO_ENTRIES:
                merged_by.clear()
            merged_by[key, found] = merged
        return merged

    def apply(self, message: bytes, ts: float, pid: int | None, invocation: str | None, run: UnitRun | None = None,
              after: int = 0) -> int:
        """Take the line if it qualifies (1: done); 0: nothing was changed. `run`: the C reader's run of
        the line, `after` the index of the next line there: the lines from there on (its writer's, the
        same up to their first ']' and two bytes more but for `run_time_digits`, and after but for digits
        and ids) are taken too as far as each would be taken alike (then 1 + how many is returned)."""
        prefix = self._find(message)
        if prefix is None or pid is None or prefix.header is not None or prefix.untagged_rank is not None:
            return 0
        key = (invocation, pid)
        stream = self._idle_writer(key)
        if stream is None:
            return 0
        rest = message[prefix.end:]
        plan, masked, merged_by = self._planned(rest)
        if not plan:
            return 0
        rules, block, orders, proves, others, plain = plan
        found = 0
        text = rest.decode("ascii") if others or plain is None else ""
        if others:  # (the rules that tell digits apart see each line's own)
            found = self._found(others, text)
            if found:
                merged = self._with_others(masked, rules, others, found, merged_by)
                if not merged:
                    return 0
                rules, orders, proves = merged
        # (a line with ids: asked line by line, and whether it opens a block where an id could change that)
        if plain is None:
            plain = not rules and self._mapper.reads_no_phase(text)
        if block is None:
            block = opens_block(text)
        if not rules and not plain:
            return 0
        inv = self._invocation(invocation)
        if inv is None:
            return 0
        ranks = self._ranks_met(inv, prefix, key, rules, orders)
        if ranks is None:
            return 0
        more = None
        if run is not None and after < len(run.messages) and prefix.end < _head_length(message):
            # The same prefix but for its time, which is not read here (`fast_prefix` reads no further
            # than the byte after it; `run_time_digits`), the same plan (the same rules), the same
            # state met: each of those lines would be taken, with these changes.
            if others or plan[5] is None:
                alike = self._alike_each(run, after, prefix.end, plan, others, found, block, bool(not rules and plain))
            else:
                alike = self._alike(run, after, prefix.end, plan)
            more = run.realtimes[after:after + alike] if alike else None
        # -- from here on: the full path's changes, made by the stages that own them --
        record_ids = self._took_line(key, stream, prefix, ts, block, more)
        self._took_records(invocation, record_ids, ranks[0].rank, prefix.rank is not None, prefix.anonymous)
        self._alive(inv, ranks, ts, proves, more)
        self.taken += len(record_ids)
        return len(record_ids)

    def _same_plan(self, rest: bytes, plan: Plan | IdPlan) -> bool:
        masked = rest.translate(_MASK_DIGITS)
        found: Plan | IdPlan | None = self._plans.get(masked)
        if found is None:
            found = self._plan_of(masked, rest)[0]
        return found is plan or found == plan

    def _alike(self, run: UnitRun, first: int, end: int, plan: Plan | IdPlan) -> int:
        """How many of the run's lines, from `first` on, have `plan` (that of the line before `first`)
        for their text after `end`: only a line whose digits have other widths than the one before
        (`run.shifts`) or whose ids differ from its (`run.ids`) can have another digit-masked text, and
        is looked up."""
        messages, shifts = run.messages, run.shifts
        if run.ids:
            shifts = sorted((*shifts, *run.ids))
        for index in shifts[bisect_left(shifts, first):]:
            if not self._same_plan(messages[index][end:], plan):
                return index - first
        return len(messages) - first

    def _alike_each(self, run: UnitRun, first: int, end: int, plan: Plan | IdPlan, others: tuple[Rule, ...],
                    found: int, block: bool, plain: bool) -> int:
        """`_alike` for a plan whose lines are asked one by one: the rules that tell digits apart (`found`:
        which of them the line before `first` matched) and, by ids, whether it is a plain sign of life
        (`plain`: no rule matches) and opens a block where an id could change that. A line whose ids
        differ from the one before (`run.ids`) has the same plan by ids."""
        messages, by_ids, blocks = run.messages, plan[5] is None, plan[1] is None  # type: ignore[misc]
        looked_up = run.shifts if by_ids or not run.ids else sorted((*run.shifts, *run.ids))
        at = bisect_left(looked_up, first)
        next_lookup = looked_up[at] if at < len(looked_up) else -1
        opens, reads_no_phase = opens_block, self._mapper.reads_no_phase
        for index in range(first, len(messages)):
            rest = messages[index][end:]
            if index == next_lookup:
                if not self._same_plan(rest, plan):
                    return index - first
                at += 1
                next_lookup = looked_up[at] if at < len(looked_up) else -1
            text = rest.decode("ascii")
            if others and self._found(others, text) != found:
                return index - first
            if (blocks and opens(text) != block) or (by_ids and plain and not reads_no_phase(text)):
                return index - first
        return len(messages) - first

    def _ranks_met(self, inv: InvocationState, prefix: Prefix, key: tuple[str | None, int], rules: tuple[Rule, ...],
                   orders: tuple[int, ...]) -> list[RankState] | None:
        """The rank of each event the line makes (its rank's plain activity when no rule matches),
        when the state it meets changes nothing else: each rank known, no unit phase to move on to,
        nothing to learn about a rank; else None."""
        untagged_rank = prefix.rank is None
        # The mapper's rank of a prefixed line without a tag (no c10d "[rank": no '[' after the prefix).
        rank: str = self._mapper.rank_of_untagged(*key) if untagged_rank else prefix.rank  # type: ignore[assignment]
        inv_ranks = inv.ranks
        if not rules:  # the mapper's plain activity event, of the line's rank
            state = inv_ranks.get(rank)
            return None if state is None else [state]
        ranks = []
        current = -2  # not yet looked up
        for rule, order in zip(rules, orders, strict=True):
            rule_rank = rank
            if untagged_rank:
                if rule.scope == "main":
                    rule_rank = MAIN
                elif rule.scope == "rank" and rank == MAIN and not self._mapper.tags_ranks(key[0]):
                    return None  # the mapper would learn a one-GPU scheduler here
            state = inv_ranks.get(rule_rank)
            if state is None:
                return None
            if order >= 0:
                if current == -2:
                    current = UNIT_PHASE_ORDER.index(inv.unit_phase) if inv.unit_phase is not None else -1
                if not (order <= current or (order == _SERVING_INDEX and current < _READY_INDEX)
                        or inv.state not in _OPEN_STATES):
                    return None  # the unit would move on
            ranks.append(state)
        return ranks


def _head_length(message: bytes) -> int:
    """How much of a run's lines is the same, byte for byte (_journal_lines.c `continues`)."""
    bracket = message.find(b"]")
    return len(message) if bracket < 0 else min(len(message), bracket + 3)
