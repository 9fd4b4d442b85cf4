"""What a rule's regular expression needs of a line, read from its parsed form (`re._parser`): whether
it can tell one digit from another (`digit_blind`: then lines that differ only in digits match
alike, and the mapper remembers them by their digits masked) and the texts every match contains
(`needles`: a line without any of them is not searched). Pure; any doubt answers "unknown"."""

from __future__ import annotations

import re
from typing import Any, Callable, Generic, Protocol, TypeVar

from ...profile.pattern_tree import parse_tree


class _Searched(Protocol):
    @property
    def pattern(self) -> re.Pattern[str]: ...


R = TypeVar("R", bound=_Searched)  # a profile's Rule


def digit_blind(pattern: re.Pattern[str]) -> bool:
    """True when `pattern` cannot tell one ASCII digit from another (no digit literal, no set with
    some digits but not all, no back-reference), so it matches a text exactly when it matches the
    text with every digit replaced by 0. Unknown constructs: False."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = parse_tree(pattern.pattern, pattern.flags)
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


def needles(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Texts of which every match of `pattern` contains at least one: the longest run of literal
    characters at its top level, or one such run per branch of a top-level alternation. None when
    unknown (a branch without literals, a pattern that ignores case)."""
    if pattern.flags & re.IGNORECASE:
        return None
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = parse_tree(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - a private module: any doubt means "unknown"
        return None
    return _needles(list(tree), _parser)


def _needles(items: list[Any], c: Any) -> tuple[str, ...] | None:
    """Of a sequence: its longest literal run, else the texts of a group it cannot skip."""
    best, run = "", ""
    for op, av in items:
        if op is c.LITERAL:
            run += chr(av)
            best = max(best, run, key=len)
        else:
            run = ""
    if best:
        return (best,)
    for op, av in items:
        inner = None
        if op is c.SUBPATTERN and not av[1] & re.IGNORECASE:  # (?i:...) matches other cases too
            inner = _needles(list(av[-1]), c)
        elif op is c.ATOMIC_GROUP:
            inner = _needles(list(av), c)
        elif op is c.BRANCH:
            found: list[str] = []
            for branch in av[1]:
                texts = _needles(list(branch), c)
                if texts is None:
                    break
                found.extend(texts)
            else:
                inner = tuple(found)
        if inner:
            return inner
    return None


def needled_search(rules: tuple[tuple[R, tuple[str, ...] | None], ...], message: str) -> tuple[R, ...]:
    """The rules `message` matches, each (rule, texts) only searched when it holds one of the texts
    (a substring test is far cheaper than a search through kilobytes)."""
    holds = message.__contains__
    return tuple(r for r, texts in rules if (texts is None or any(map(holds, texts))) and r.pattern.search(message))


_MASK_DIGITS = bytes.maketrans(b"123456789", b"000000000")

# -- ids: runs of lowercase hex digits (request ids, hashes, UUIDs), in a line's digit-masked bytes --
HEX = frozenset(b"0123456789abcdef")
_DASH = frozenset(b"-")
# (the lookahead: both need 4 hex characters in a row, and the search tries far fewer places)
_ID_RUN = re.compile(rb"(?=[0a-f]{4})(?:[0a-f]{8,}(?:-[0a-f]{4,})*|[0a-f]{4,}(?:-[0a-f]{4,}){2,})")
_HEX_TO_ZERO = bytes.maketrans(b"abcdef", b"000000")


def _zeros(run: re.Match[bytes]) -> bytes:
    return run[0].translate(_HEX_TO_ZERO)


# Every hex character as 'h', '-' as itself, anything else as ' ': a text holds a run `_ID_RUN` takes
# only where this holds 8 'h' in a row or 4 'h', '-', 4 'h' (two substring tests, in C, where the
# search tries its lookahead at every place: 7 µs for a line of 180 characters, 1 µs this way).
_HEX_SHAPE = bytes(ord("h") if c in b"0123456789abcdef" else c if c == ord("-") else ord(" ") for c in range(256))


def mask_ids(masked: bytes) -> bytes:
    """`masked` (a text with its digits masked) with the hex letters of its ids masked too: runs of
    8 or more of `[0-9a-f]`, or of hex joined by '-' (a UUID). A rule that is `id_blind` matches a
    text exactly when it matches this (it cannot tell one of those characters from another, and
    only they change). The same object when there is no such run."""
    shape = masked.translate(_HEX_SHAPE)
    if b"hhhhhhhh" not in shape and b"hhhh-hhhh" not in shape:
        return masked
    return _ID_RUN.sub(_zeros, masked)


def id_blind(pattern: re.Pattern[str]) -> bool:
    """True when `pattern` is `digit_blind` and matches a text exactly when it matches `mask_ids` of
    it (the text digit-masked): every piece of it that can match a hex letter of an id matches a
    '0' there too and the other way round (`\\w`, `.`, `[^"]`, not `\\d` or `[a-z]`), and each of its
    literal hex characters stands between literal characters that no id holds (neither hex nor
    '-'), with fewer than 4 hex ones in a row between them (`Decode batch`: no id can reach into
    it, in the text or in the masked text). Unknown constructs: False."""
    if not digit_blind(pattern):
        return False
    from re import _parser  # type: ignore[attr-defined]

    return _id_blind(parse_tree(pattern.pattern, pattern.flags), _parser, bool(pattern.flags & re.IGNORECASE))


def _cased(code: int, folded: bool) -> set[int]:
    char = chr(code)
    return {code, ord(char.lower()[0]), ord(char.upper()[0])} if folded else {code}


def _fenced(word: list[set[int]]) -> bool:
    """Whether each hex character of a run of literals stands between characters no id holds."""
    kinds = ["h" if chars & HEX else "-" if chars & _DASH else "f" for chars in word]
    text = "".join(kinds)
    return all(not run or (0 < start and start + len(run) < len(text) and "hhhh" not in run)
               for start, run in ((m.start(), m[0]) for m in re.finditer(r"[h-]*h[h-]*", text)))


def _id_blind(tree: Any, c: Any, folded: bool) -> bool:
    word: list[set[int]] = []
    for op, av in tree:
        if op is c.LITERAL:
            word.append(_cased(av, folded))
            continue
        if not _fenced(word):
            return False
        word = []
        if op is c.NOT_LITERAL:
            if _cased(av, folded) & HEX:
                return False
        elif op is c.IN:
            if _covered(av, c, folded) not in (set(), HEX):
                return False
        elif op is c.SUBPATTERN:
            _group, add, drop, inner = av
            if not _id_blind(inner, c, (folded or bool(add & re.IGNORECASE)) and not drop & re.IGNORECASE):
                return False
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            if not _id_blind(av[2], c, folded):
                return False
        elif op is c.BRANCH:
            if not all(_id_blind(branch, c, folded) for branch in av[1]):
                return False
        elif op in (c.ASSERT, c.ASSERT_NOT):
            if not _id_blind(av[1], c, folded):
                return False
        elif op is c.ATOMIC_GROUP:
            if not _id_blind(av, c, folded):
                return False
        elif op not in (c.AT, c.ANY):  # (a boundary: hex letters and '0' are word characters alike)
            return False
    return _fenced(word)


def _covered(items: Any, c: Any, folded: bool) -> set[int] | None:
    """Which of HEX a set matches (negated or not: all or none stays all or none); None: unknown."""
    every, digits = set(HEX), set(range(48, 58))
    categories = {c.CATEGORY_DIGIT: digits, c.CATEGORY_NOT_DIGIT: every - digits, c.CATEGORY_WORD: every,
                  c.CATEGORY_NOT_SPACE: every, c.CATEGORY_SPACE: set(), c.CATEGORY_NOT_WORD: set()}
    covered: set[int] = set()
    for op, av in items:
        if op is c.LITERAL:
            covered |= _cased(av, folded) & HEX
        elif op is c.RANGE:
            covered |= {h for h in HEX if any(av[0] <= k <= av[1] for k in _cased(h, folded))}
        elif op is c.CATEGORY and av in categories:
            covered |= categories[av]
        elif op is not c.NEGATE:
            return None
    return covered


def id_needles(texts: tuple[str, ...] | None) -> tuple[bytes, ...] | None:
    """`texts` (the `needles` of a rule) as texts one of which `mask_ids` of the digit-masked line
    holds whenever the line holds one of `texts`: each without the hex characters at its ends (an
    id may run into them), digit-masked; None when one of them is no such text (it is all hex, or
    holds an id itself)."""
    if texts is None:
        return None
    out = []
    for text in texts:
        inner = text.encode("utf-8", "surrogatepass").strip(bytes(HEX) + b"-").translate(_MASK_DIGITS)
        if not inner or _ID_RUN.search(inner) is not None:
            return None
        out.append(inner)
    return tuple(out)


class IdMemo(Generic[R]):
    """Which rules a line with ids matches, remembered by its `mask_ids` text: a line with its own request
    id has a digit-masked text of its own. The rules that are `id_blind` are remembered; the others are
    searched line by line, each only when the masked text holds one of its `id_needles`."""

    def __init__(self, needled: tuple[tuple[R, tuple[str, ...] | None], ...],
                 in_order: Callable[[tuple[R, ...]], tuple[R, ...]], entries: int) -> None:
        blind = [id_blind(r.pattern) for r, _texts in needled]
        self.blind_rules = tuple(r for (r, _texts), b in zip(needled, blind, strict=True) if b)
        self._blind_needled = tuple(pair for pair, b in zip(needled, blind, strict=True) if b)
        self.others = tuple((r, id_needles(texts)) for (r, texts), b in zip(needled, blind, strict=True) if not b)
        self._in_order, self._entries = in_order, entries
        self._memo: dict[bytes, tuple[tuple[R, ...], tuple[R, ...]]] = {}

    def plan(self, id_key: bytes, message: str) -> tuple[tuple[R, ...], tuple[R, ...]]:
        """The `id_blind` rules `message` (`id_key` its `mask_ids` text) matches, and the other rules it
        may match, to be searched line by line."""
        plan = self._memo.get(id_key)
        if plan is None:
            if len(self._memo) >= self._entries:
                self._memo.clear()
            plan = self._memo[id_key] = (needled_search(self._blind_needled, message), tuple(
                r for r, texts in self.others if texts is None or any(t in id_key for t in texts)))
        return plan

    def matching(self, id_key: bytes, message: str) -> tuple[R, ...]:
        """The rules `message` matches, in the profile's order."""
        found, candidates = self.plan(id_key, message)
        others = tuple(r for r in candidates if r.pattern.search(message))
        return self._in_order((*found, *others)) if others else found
