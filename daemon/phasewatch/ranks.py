"""Rank labels (`TP3`, `DP0 TP3`, `main`): their order and the numbers in them."""

from __future__ import annotations

from functools import lru_cache

from .prefixes import bounded_int
from .records import MAIN


@lru_cache(maxsize=4096)  # every view sorts its ranks; a start-up has a few labels
def rank_sort_key(label: str) -> tuple[int, tuple[int, ...], str]:
    if label == MAIN:
        return (0, (), label)
    numbers = tuple(_label_number(part) for part in label.split())
    return (1, numbers, label)


def _label_number(part: str) -> int:
    number = bounded_int("".join(ch for ch in part if ch.isdigit()))
    return number if number is not None else 10 ** 18  # a label from content with a huge number: last


def tp_index(label: str) -> int | None:
    for part in label.split():
        if part.startswith("TP") and part[2:].isdigit():
            return bounded_int(part[2:])
    return None
