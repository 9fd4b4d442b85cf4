"""profile/pattern_tree.py: a pattern is parsed once for every analysis of it, and no analysis changes
the tree the next one reads."""

from __future__ import annotations

import re
from re import _parser  # type: ignore[attr-defined]

import pytest

from phasewatch.profile.load import load_builtin_profile
from phasewatch.profile.pattern_tree import parse_tree
from phasewatch.stages.s2_interpret.pattern_needles import digit_blind, id_blind, needles


def test_a_pattern_is_parsed_once_and_a_bad_one_raises_each_time() -> None:
    assert parse_tree(r"^Decode batch[.,\s\[]", 0) is parse_tree(r"^Decode batch[.,\s\[]", 0)
    assert parse_tree("x", 0) is not parse_tree("x", re.IGNORECASE)
    for _ in range(2):
        with pytest.raises(re.error):
            parse_tree("(unclosed", 0)


def test_the_analyses_read_the_tree_as_a_fresh_parse_gives_it() -> None:
    """Every rule of the built-in profiles: after the analyses ran (the profiles are loaded), the
    remembered tree is still what the parser makes of the pattern, and the analyses answer again alike."""
    for engine in ("sglang", "vllm"):
        for rule in load_builtin_profile(engine).rules:
            pattern = rule.pattern
            answers = (digit_blind(pattern), id_blind(pattern), needles(pattern))
            assert str(parse_tree(pattern.pattern, pattern.flags)) == str(_parser.parse(pattern.pattern, pattern.flags))
            assert (digit_blind(pattern), id_blind(pattern), needles(pattern)) == answers
