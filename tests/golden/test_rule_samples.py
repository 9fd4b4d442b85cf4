"""Every rule and cause class of every profile has sample lines (tests/golden/rule_samples/<engine>.log),
and each sample makes its rule match (fail2ban's "Regex has no samples", as a generated test per rule)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.profile.load import Profile, load_builtin_profile
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s2_interpret.ruletally import RuleTally
from phasewatch.stages.s4_judge.remedies import UnitSettings
from phasewatch.stages.s4_judge.verdict import Verdict

SAMPLES = Path(__file__).parent / "rule_samples"
PROFILES = Path(__file__).resolve().parents[2] / "daemon" / "phasewatch" / "profile" / "profiles"
ENGINES = sorted(p.stem for p in PROFILES.glob("*.yaml"))
BLOCK_HEADER = re.compile(r"^# (rule|cause|family|remedy): (\S+)")
META = re.compile(r"^## (judge|unit|env|argv|host): (.*)$")


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
    return ([("rule", r.id) for r in profile.rules] + [("cause", c.id) for c in profile.causes]
            + [("family", f.id) for f in profile.families.rules] + [("remedy", r.id) for r in profile.remedies])


# Remedies of verdicts a pasted log cannot bring (a rank's process gone from the unit's cgroup,
# journald's own count of lines dropped): tests/unit/test_remedies.py covers them.
NOT_FROM_A_LOG = {"rank_died", "lines_lost"}
CASES = [(engine, kind, ident) for engine in ENGINES for kind, ident in profile_items(engine)
         if not (kind == "remedy" and ident in NOT_FROM_A_LOG)]


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
    if kind in ("rule", "family"):
        tally = rule_hits(engine, lines)
        assert tally.hits[ident] > 0, f"{ident!r} matched none of its samples: {lines}"
    elif kind == "remedy":
        remedies = [v.remedy.id for v in remedied_verdicts(engine, ident) if v.remedy is not None]
        assert ident in remedies, f"remedy {ident!r} was not given for its sample (given: {remedies})"
    else:
        assert profile.classify_cause(lines) == ident


def remedied_verdicts(engine: str, ident: str) -> list[Verdict]:
    """A remedy's sample replayed: judged at its last line (or `## judge: +2h` after it), with the
    unit settings its `## unit:`, `## env:` and `## argv:` lines give."""
    text = (SAMPLES / f"{engine}.log").read_text("utf-8").split(f"# remedy: {ident}\n", 1)[1]
    block = re.split(r"^# (?:rule|cause|family|remedy): ", text, maxsplit=1, flags=re.M)[0]
    meta: dict[str, list[str]] = {}
    for line in block.splitlines():
        if found := META.match(line):
            meta.setdefault(found.group(1), []).append(found.group(2))
    lines = [x for x in block.splitlines() if x.strip() and not x.startswith("##")]
    records = parse_source(("\n".join(lines) + "\n").encode("utf-8"), default_year=2026).records
    pipeline = Pipeline(Config(unit="sample.service", engine=engine), default_year=2026)
    unit = UnitSettings(
        tuple(shlex.split(meta["argv"][0])) if "argv" in meta else (),
        dict(item.split("=", 1) for item in meta.get("env", [])),
        dict(item.split("=", 1) for item in meta.get("unit", [])),
        {int(port): holder for port, holder in (item.split("=", 1) for item in meta.get("host", []))})
    pipeline.feed_all(records, now=None)
    last = max((i.last_ts for i in pipeline.snapshot().invocations if i.last_ts is not None), default=0.0)
    later = float(meta["judge"][0].strip("+s")) if "judge" in meta else 5.0  # past crash_cause_wait
    return [v for j in pipeline.judge(last + later, unit=unit) for v in j.verdicts]


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
    assert re.search(r"^ready\s+phase_begin\s+1\s+exact\s+0$", out, re.M)
    assert re.search(r"^decode_batch\s+phase_begin\s+0\s+exact\s+0$", out, re.M)
    assert re.search(r"^family_graph_begin\s+phase_begin\s+0\s+family\s+0$", out, re.M)
    assert re.search(r"^\s+2  something no rule knows 00000$", out, re.M)
    assert "2 lines matched no rule" in out


def test_replay_rules_shows_family_hits_and_refused_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A family's hit is listed as such, and a line that would move a rank backwards is counted as
    refused against its rule, in the table and in the JSON."""
    from phasewatch.cli import main

    log = tmp_path / "x.log"
    log.write_text("[2026-02-22 23:56:01 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
                   "[2026-02-22 23:56:02 TP0] Load weight begin. avail mem=3 GB\n"  # the draft's: a move on
                   "[2026-02-22 23:56:03 TP0] Memory pool end. avail mem=2 GB\n"  # never entered, earlier: refused
                   "[2026-02-22 23:56:04 TP0] Starting graph capture for the decoder\n", "utf-8")
    assert main(["replay", "--rules", str(log)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^pool_end\s+phase_end\s+1\s+exact\s+1$", out, re.M)
    assert re.search(r"^family_graph_begin\s+phase_begin\s+1\s+family\s+0$", out, re.M)
    assert "TP0: draft_weight_load -> kv_cache_alloc (rule pool_end, exact)" in out
    assert main(["replay", "--rules", "--json", str(log)]) == 0
    document = json.loads(capsys.readouterr().out)
    pool_end = next(r for r in document["rules"] if r["id"] == "pool_end")
    assert (pool_end["hits"], pool_end["refused"], pool_end["confidence"]) == (1, 1, "exact")
    assert document["anomalies"][0]["rank"] == "TP0" and document["anomalies"][0]["to"] == "kv_cache_alloc"
