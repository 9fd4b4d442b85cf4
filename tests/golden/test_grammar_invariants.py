"""Invariants of the line grammar over every real log of the corpus (SGLang and the others):
no rank ever moves backwards in the phase order, and no output ever shows a 1970 date."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus_paths import corpus_dir
from phasewatch.cli import main
from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import UNIT_PHASES, Phase
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s2_interpret.phaseorder import backwards

_found = corpus_dir()
CASES = sorted(p.stem for p in _found.glob("*.log")) if _found else []


@pytest.mark.parametrize("case", CASES)
def test_no_rank_moves_backwards(corpus: Path, case: str) -> None:
    """Every rank's phases, in the order it entered them, respect the partial order; and no
    transition the pipeline emits goes backwards."""
    pipeline = Pipeline(Config(unit="sglang.service"))
    records = parse_source((corpus / f"{case}.log").read_bytes(), default_year=2026).records
    transitions = pipeline.feed_all(records, None)
    for move in transitions:
        if move.subject == "unit" or move.source is None:
            continue
        assert not backwards(Phase(move.source), Phase(move.target)), move
    for inv in pipeline.snapshot().invocations:
        for rank in inv.ranks:
            visited = [s.phase for s in rank.spans if s.phase not in UNIT_PHASES]
            for index, later in enumerate(visited):
                for earlier in visited[:index]:
                    assert not backwards(earlier, later), (rank.rank, [p.value for p in visited])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("form", [["replay"], ["replay", "--json"], ["replay", "--rules"],
                                  ["replay", "--json", "--now", "+2h"]])
def test_replay_never_prints_1970(corpus: Path, case: str, form: list[str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*form, str(corpus / f"{case}.log")]) == 0
    out = capsys.readouterr().out
    assert "1970" not in out
