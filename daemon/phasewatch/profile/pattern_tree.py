"""A regular expression's parse tree (`re._parser`), parsed once per pattern and flags: the analyses of
a rule's pattern (its largest repeat, whether it tells digits or hex apart, the texts every match
holds) each read it, and no one changes it. Raises what the parser raises."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1024)
def parse_tree(pattern: str, flags: int) -> Any:
    from re import _parser  # type: ignore[attr-defined]

    return _parser.parse(pattern, flags)
