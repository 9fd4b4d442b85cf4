"""The catch-up fast path over the real corpus: every log, as journal entries (a PID per rank, the
journal's time on every line, as `replay --unit` reads them), goes through a pipeline with the fast
path and one without; outputs and state must be the same. And the literal texts a rule's match must
hold (`events.needles`, which lets long lines skip most rules) are in every corpus line it matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus_paths import corpus_dir
from fastpath_compare import as_journal, assert_same
from phasewatch.config.load import Config
from phasewatch.engines import detect_engine
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s1_read.lines import decode
from phasewatch.stages.s2_interpret.events import needles

_found = corpus_dir()
CASES = sorted(p.stem for p in _found.glob("*.log")) if _found else []


def messages(path: Path) -> list[str]:
    """The log's lines (a pasted log is one record of many lines; tqdm's \\r frames stay in theirs)."""
    parsed = parse_source(path.read_bytes(), default_year=2026)
    return [line for r in parsed.records if r.message is not None for line in decode(r.message).split("\n")]


@pytest.mark.parametrize("case", CASES)
def test_fast_and_full_paths_agree_on_the_sample(corpus: Path, case: str) -> None:
    lines = messages(corpus / f"{case}.log")
    engine = detect_engine(lines)
    assert_same(as_journal(lines), engine)


def test_the_corpus_takes_the_fast_path_somewhere(corpus: Path) -> None:
    """The comparison above reaches the fast path: the corpus is start-ups (475 lines), few of
    whose lines change nothing but last activity; the generated journals of tests/unit and
    tests/integration/test_fastpath_journal.py are where most lines take it."""
    taken = sum(assert_same(as_journal(lines), detect_engine(lines))
                for lines in (messages(corpus / f"{case}.log") for case in CASES))
    assert taken >= 10


def test_a_rules_needles_are_in_every_corpus_line_it_matches(corpus: Path) -> None:
    lines = [line for case in CASES for line in messages(corpus / f"{case}.log")]
    for engine in ("sglang", "vllm"):
        profile = Config(unit="u", engine=engine).engine_profile()
        for rule in profile.rules:
            texts = needles(rule.pattern)
            if texts is None:
                continue
            for line in lines:
                if rule.pattern.search(line):
                    assert any(t in line for t in texts), (rule.id, texts, line)
