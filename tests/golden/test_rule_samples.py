"""Every rule and cause class of every profile has sample lines (tests/golden/rule_samples/<engine>.log),
and each sample makes its rule match (fail2ban's "Regex has no samples", as a generated test per rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phasewatch.config import Config
from phasewatch.pipeline import Pipeline
from phasewatch.profile import Profile, load_builtin_profile
from phasewatch.sources.formats import parse_source
from phasewatch.stages.ruletally import RuleTally

SAMPLES = Path(__file__).parent / "rule_samples"
PROFILES = Path(__file__).resolve().parents[2] / "daemon" / "phasewatch" / "profiles"
ENGINES = sorted(p.stem for p in PROFILES.glob("*.yaml"))
BLOCK_HEADER = re.compile(r"^# (rule|cause): (\S+)")


def sample_blocks(engine: str) -> dict[tuple[str, str], list[str]]:
    """(kind, id) -> the block's lines; `##` lines are the file's own comments."""
    blocks: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in (SAMPLES / f"{engine}.log").read_text("utf-8").splitlines():
        header = BLOCK_HEADER.match(line)
        if header:
            key = (header.group(1), header.group(2))
            assert key not in blocks, f"{engine}: two blocks for {key}"
            current = blocks[key] = []
        elif current is not None and line.strip() and not line.startswith("##"):
            current.append(line)
    return blocks


def profile_items(engine: str) -> list[tuple[str, str]]:
    profile = load_builtin_profile(engine)
    return [("rule", r.id) for r in profile.rules] + [("cause", c.id) for c in profile.causes]


CASES = [(engine, kind, ident) for engine in ENGINES for kind, ident in profile_items(engine)]


def rule_hits(profile_engine: str, lines: list[str]) -> RuleTally:
    records = parse_source(("\n".join(lines) + "\n").encode("utf-8"), default_year=2026).records
    tally = RuleTally()
    config = Config(unit="sample.service", engine=profile_engine)
    Pipeline(config, tally).feed_all(records, now=None)
    return tally


@pytest.mark.parametrize(("engine", "kind", "ident"), CASES, ids=[f"{e}-{k}-{i}" for e, k, i in CASES])
def test_rule_has_a_sample_that_it_matches(engine: str, kind: str, ident: str) -> None:
    blocks = sample_blocks(engine)
    lines = blocks.get((kind, ident))
    assert lines, f"no sample for {kind} {ident!r} of profile {engine} in rule_samples/{engine}.log"
    profile: Profile = load_builtin_profile(engine)
    if kind == "rule":
        tally = rule_hits(engine, lines)
        assert tally.hits[ident] > 0, f"{ident!r} matched none of its samples: {lines}"
    else:
        assert profile.classify_cause(lines) == ident


@pytest.mark.parametrize("engine", ENGINES)
def test_every_sample_names_a_rule_of_the_profile(engine: str) -> None:
    stale = set(sample_blocks(engine)) - set(profile_items(engine))
    assert not stale, f"samples for rules or causes that {engine}.yaml no longer has: {sorted(stale)}"


def test_replay_rules_prints_hits_and_unmatched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    log = tmp_path / "x.log"
    log.write_text("[2026-02-22 23:56:43] The server is fired up and ready to roll!\n"
                   "[2026-02-22 23:56:44] something no rule knows 12345\n"
                   "[2026-02-22 23:56:45] something no rule knows 67890\n", "utf-8")
    assert main(["replay", "--rules", str(log)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ready\s+phase_begin\s+1$", out, re.M)
    assert re.search(r"^decode_batch\s+phase_begin\s+0$", out, re.M)
    assert re.search(r"^\s+2  something no rule knows 00000$", out, re.M)
    assert "2 lines matched no rule" in out
