"""What a rule's regular expression needs of a line, read from its parsed form (`re._parser`): whether
it can tell one digit from another (`digit_blind`: then lines that differ only in digits match
alike, and the mapper remembers them by their digits masked) and the texts every match contains
(`needles`: a line without any of them is not searched). Pure; any doubt answers "unknown"."""

from __future__ import annotations

import re
from typing import Any, Protocol, TypeVar


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


def needles(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Texts of which every match of `pattern` contains at least one: the longest run of literal
    characters at its top level, or one such run per branch of a top-level alternation. None when
    unknown (a branch without literals, a pattern that ignores case)."""
    if pattern.flags & re.IGNORECASE:
        return None
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern.pattern, pattern.flags)
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
