"""Golden samples: every real start-up log in tests/golden/corpus (copied from the shared corpus)
replays, and is judged as tests/golden/expectations.yaml says; every difference from the case's own
label is explained there."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus_paths import corpus_dir
from phasewatch.cli import main

EXPECTATIONS: dict[str, dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "expectations.yaml").read_text("utf-8"))
LABEL_OUTCOMES = {"hung": "stalled", "crashed": "crashed", "ready": "ready", "unknown": None}
LABEL_PHASES = {"process_start": "launch"}
RANK_TOKEN = re.compile(r"^(DP\d+ TP\d+(?: EP\d+)?|TP\d+(?: EP\d+)?|[Rr]ank ?\d+)\b")

_found = corpus_dir()
CASES = sorted(p.stem for p in _found.glob("*.log")) if _found else []


def replay(corpus: Path, case: str, judge_at: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["replay", "--json", str(corpus / f"{case}.log")]
    if judge_at != "last":
        argv[1:1] = ["--now", judge_at]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document: dict[str, Any] = json.loads(captured.out)
    return document


def crashed(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for inv in document["invocations"] for v in inv["verdicts"] if v["kind"] == "crashed"]


def test_every_sample_has_an_expectation(corpus: Path) -> None:
    samples = {p.stem for p in corpus.glob("*.log")}
    assert samples, "no samples found"
    missing = sorted(samples - set(EXPECTATIONS))
    assert not missing, f"samples without an entry in tests/golden/expectations.yaml: {missing}"
    stale = sorted(set(EXPECTATIONS) - samples)
    assert not stale, f"expectations for samples that no longer exist: {stale}"


@pytest.mark.parametrize("case", CASES)
def test_sample_replays_as_expected(corpus: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = EXPECTATIONS.get(case)
    if expected is None:
        pytest.fail(f"{case}: no expectation in tests/golden/expectations.yaml")
    document = replay(corpus, case, expected.get("judge_at", "last"), capsys)
    if "unsupported" in expected:
        return  # replayed without error is all that is asked of it
    invocations = document["invocations"]
    assert len(invocations) == 1
    inv = invocations[0]
    if expected.get("outcome") is not None:
        assert inv["outcome"] == expected["outcome"]
    phases = {rank: view["phase"] for rank, view in inv["ranks"].items()}
    for rank, phase in expected.get("phases", {}).items():
        assert phases.get(rank) == phase, f"{rank}: {phases.get(rank)} != {phase} (all: {phases})"
    crashes = crashed(document)
    if "failing_rank" in expected:
        assert len(crashes) == 1
        rank = crashes[0]["rank"] or "unknown"
        assert rank == expected["failing_rank"]
    if "cause" in expected:
        assert crashes and crashes[0]["cause"] == expected["cause"]


def _label(corpus: Path, case: str) -> dict[str, Any]:
    label: dict[str, Any] = yaml.safe_load((corpus / f"{case}.yaml").read_text("utf-8"))["ground_truth"]
    return label


def _label_failing_rank(text: object, rank_map: dict[str, str]) -> str | None:
    match = RANK_TOKEN.match(str(text))
    if match is None:
        return None
    token = match.group(1)
    compact = token.replace(" ", "")
    if compact.lower().startswith("rank"):
        number = compact[4:]
        return rank_map.get(f"rank{number}") or rank_map.get(f"Rank{number}") or f"TP{number}"
    return rank_map.get(token, token)


@pytest.mark.parametrize("case", CASES)
def test_expectation_matches_label_or_explains_why(corpus: Path, case: str) -> None:
    expected = EXPECTATIONS[case]
    if "unsupported" in expected:
        assert expected["unsupported"].strip()
        return
    label = _label(corpus, case)
    rank_map: dict[str, str] = expected.get("rank_map", {})
    divergences: dict[str, str] = expected.get("divergences", {})
    differences: set[str] = set()

    label_outcome = LABEL_OUTCOMES[label["outcome"]]
    if label_outcome is not None and label_outcome != expected.get("outcome"):
        differences.add("outcome")
    for key, phase in (label.get("last_phase_reached") or {}).items():
        if phase == "unknown":
            continue
        ours = expected.get("phases", {}).get(rank_map.get(key, key))
        if ours != LABEL_PHASES.get(phase, phase):
            differences.add(f"phases.{key}")
    label_rank = _label_failing_rank(label.get("failing_rank"), rank_map)
    if label_rank is not None and label_rank != expected.get("failing_rank"):
        differences.add("failing_rank")

    unexplained = sorted(differences - set(divergences))
    assert not unexplained, f"{case}: differs from its label without a reason in divergences: {unexplained}"
    stale = sorted(set(divergences) - differences)
    assert not stale, f"{case}: divergences listed that agree with the label (remove them): {stale}"
    assert all(reason.strip() for reason in divergences.values())


@pytest.mark.parametrize("case", [c for c in CASES if "unsupported" not in EXPECTATIONS.get(c, {"unsupported": 1})])
def test_sample_goes_into_the_history(corpus: Path, case: str, tmp_path: Path) -> None:
    """A real (windowed) start-up is summarised and stored like any other, failed or not."""
    from phasewatch.config.load import Config
    from phasewatch.engines import detect_engine
    from phasewatch.pipeline import Pipeline
    from phasewatch.sinks.history import History, summarize
    from phasewatch.sources.journal.formats import parse_source

    expected = EXPECTATIONS[case]
    # the year a syslog line leaves out, as replay supplies it (else it is no date: nothing to store)
    records = parse_source((corpus / f"{case}.log").read_bytes(), default_year=2026).records
    engine = detect_engine(r.message for r in records if isinstance(r.message, str))
    # a saved log is complete, as replay judges it: no cause line is still to come
    pipeline = Pipeline(Config(unit="sglang.service", engine=engine, crash_cause_wait=0), default_year=2026)
    pipeline.feed_all(records, None)
    [inv] = pipeline.snapshot().invocations
    if inv.started_at is None:
        pytest.skip("an undated excerpt has no durations to learn")
    now = (inv.last_ts or 0.0) + (7200 if expected.get("judge_at") == "+2h" else 0)
    [judgement] = pipeline.judge(now)
    record = summarize("sglang.service", inv, judgement.outcome, None, now,
                       [(v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts])
    assert record is not None
    history = History(tmp_path / "history.sqlite3")
    assert history.add(record)
    [stored] = history.startups("sglang.service")
    assert stored == record
    assert stored.outcome == expected.get("outcome", stored.outcome)
    for phase in stored.phases:
        assert phase.duration >= 0 and phase.spread >= 0 and phase.max_silence >= 0


def test_corpus_is_inside_the_repository_with_labels_and_sources() -> None:
    corpus = corpus_dir()
    assert corpus is not None and len(CASES) >= 40, "a bare clone must carry the corpus (tests/golden/corpus)"
    for case in CASES:
        label = yaml.safe_load((corpus / f"{case}.yaml").read_text("utf-8"))
        assert label["source"]["url"].startswith("https://github.com/"), case
