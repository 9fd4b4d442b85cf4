"""History of start-ups, limits learned from it, and the ETA, on simulated Kimi-K2.5 start-ups
(tools/sglang_sim.py at real speed: weight loading about 9 minutes, the whole start about 19)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from sglang_sim import Faults, build, journal_json

from learn_startups import ADAPTIVE, BASE, CONFIG, LOADS, UNIT, finished, run
from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import Phase, record_from_fields
from phasewatch.sinks.history import History, StartupRecord
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s4_judge.learn import adapted, eta_seconds, limits_in_force, typical_durations


@pytest.fixture(scope="module")
def records() -> list[StartupRecord]:
    return [finished(n, load) for n, load in enumerate(LOADS)]


@pytest.fixture
def history(tmp_path: Path, records: list[StartupRecord]) -> History:
    store = History(tmp_path / "history.sqlite3")
    for record in records:
        assert store.add(record)
    return store


def learned(history: History, fingerprint: str) -> Config:
    phases = list(Phase)
    durations = {p: history.durations(UNIT, fingerprint, p.value) for p in phases}
    silences = {p: history.silences(UNIT, fingerprint, p.value) for p in phases}
    return adapted(CONFIG, limits_in_force(CONFIG, ADAPTIVE, durations, silences))


def test_summary_of_a_start_up(records: list[StartupRecord]) -> None:
    first = records[0]
    load = first.phase("weight_load")
    assert load is not None and load.progress_total == 64
    assert 64 * 8.4 <= load.duration <= 64 * 8.4 + 10
    assert 0 <= load.spread <= 3
    capture = first.phase("draft_cuda_graph_capture")
    assert capture is not None and capture.progress_total == 23
    assert set(first.spans) == {"main", *(f"TP{n}" for n in range(8))}
    assert first.outcome == "ready" and 1000 < first.duration < 1300


def test_history_keeps_each_start_up_once(history: History, records: list[StartupRecord]) -> None:
    assert not history.add(records[0])
    stored = history.startups(UNIT)
    assert [r.invocation_id for r in stored] == [r.invocation_id for r in records]
    assert stored[0] == records[0]
    assert len(history.durations(UNIT, records[0].fingerprint, "weight_load")) == len(LOADS)


def test_limits_stay_configured_before_m_samples(tmp_path: Path, records: list[StartupRecord]) -> None:
    store = History(tmp_path / "h.sqlite3")
    for record in records[:4]:
        store.add(record)
    limits = limits_in_force(CONFIG, ADAPTIVE, {Phase.WEIGHT_LOAD: store.durations(UNIT, records[0].fingerprint,
                                                                                     "weight_load")}, {})
    assert limits[Phase.WEIGHT_LOAD].source == "configured"
    assert limits[Phase.WEIGHT_LOAD].reason == "configured (4 of 5 samples)"
    assert limits[Phase.WEIGHT_LOAD].limits == CONFIG.limits(Phase.WEIGHT_LOAD)


def test_limits_adapt_after_m_samples_within_floor_and_ceiling(history: History, records: list[StartupRecord]) -> None:
    config = learned(history, records[0].fingerprint)
    load = config.limits(Phase.WEIGHT_LOAD)
    configured = CONFIG.limits(Phase.WEIGHT_LOAD)
    assert configured.deadline is not None and load.deadline is not None
    # 1.5 x p95 of about 9-11 minutes: well under the configured 45 minutes, above the floor.
    assert 0.25 * configured.deadline <= load.deadline <= 2.0 * configured.deadline
    assert 13 * 60 <= load.deadline <= 18 * 60
    # A phase so short that 1.5 x p95 is under the floor is held at the floor.
    kv = config.limits(Phase.KV_CACHE_ALLOC)
    assert kv.deadline == 0.25 * CONFIG.limits(Phase.KV_CACHE_ALLOC).deadline  # type: ignore[operator]
    # A phase configured without a limit stays without one.
    assert config.limits(Phase.READY).deadline is None


def test_ceiling_holds_when_history_is_slower_than_allowed() -> None:
    slow = {Phase.WEIGHT_LOAD: [4 * 3600.0] * 5}
    limit = limits_in_force(CONFIG, ADAPTIVE, slow, {})[Phase.WEIGHT_LOAD].limits
    assert limit.deadline == 2.0 * 2700


def test_a_stall_is_still_caught_and_sooner(history: History, records: list[StartupRecord]) -> None:
    config = learned(history, records[0].fingerprint)
    pipeline = run(50, Faults(hang={3: "draft_cuda_graph_capture"}), config)
    inv = pipeline.snapshot().current
    assert inv is not None
    tp3 = inv.rank("TP3")
    assert tp3 is not None and tp3.phase_start is not None
    learned_deadline = config.limits(Phase.DRAFT_CUDA_GRAPH_CAPTURE).deadline
    assert learned_deadline is not None and learned_deadline < 20 * 60
    at = tp3.phase_start + learned_deadline + 1
    assert [(v.kind, v.rank) for v in policy.evaluate(inv, at, config)] == [("stalled", "TP3")]
    assert policy.evaluate(inv, at - 2, config) == []


def test_slower_than_usual_but_progressing_is_not_killed(history: History, records: list[StartupRecord]) -> None:
    config = learned(history, records[0].fingerprint)
    deadline = config.limits(Phase.WEIGHT_LOAD).deadline
    assert deadline is not None
    # This weight load takes twice the usual 9 minutes: past the learned deadline, shards still arriving.
    pipeline = Pipeline(config)
    plan = build(1.0, Faults(slow_load=2.0))
    begin = None
    for entry in journal_json(plan, base=BASE, unit=UNIT, invocation="f" * 32):
        record = record_from_fields(entry)
        pipeline.feed(record, None)
        inv = pipeline.snapshot().current
        assert inv is not None and record.realtime is not None
        if begin is None and inv.rank("TP0") is not None and inv.rank("TP0").phase is Phase.WEIGHT_LOAD:  # type: ignore[union-attr]
            begin = record.realtime
        verdicts = policy.evaluate(inv, record.realtime, config)
        assert verdicts == [], verdicts
    assert begin is not None
    assert pipeline.snapshot().current.state.value == "ready"  # type: ignore[union-attr]


def test_a_hang_in_a_slow_phase_is_still_caught(history: History, records: list[StartupRecord]) -> None:
    config = learned(history, records[0].fingerprint)
    # TP0, which draws the shard bar, stops: no progress, so the learned deadline is firm.
    pipeline = run(60, Faults(hang={0: "weight_load"}), config)
    inv = pipeline.snapshot().current
    assert inv is not None
    tp0 = inv.rank("TP0")
    assert tp0 is not None and tp0.phase_start is not None
    deadline = config.limits(Phase.WEIGHT_LOAD).deadline
    assert deadline is not None
    verdicts = policy.evaluate(inv, tp0.phase_start + deadline + 1, config)
    assert ("stalled", "TP0") in [(v.kind, v.rank) for v in verdicts]


def eta_errors(history: History, fingerprint: str, slow_load: float) -> list[float]:
    """|ETA - actual time left| at 10%, 30%, 50%, 70% and 90% of a replayed start-up."""
    typical = typical_durations({p: history.durations(UNIT, fingerprint, p.value) for p in Phase})
    pipeline = Pipeline(CONFIG)
    entries = [record_from_fields(e) for e in journal_json(build(1.0, Faults(slow_load=slow_load)), base=BASE,
                                                           unit=UNIT, invocation="e" * 32)]
    start = entries[0].realtime
    ready = next(r.realtime for r in entries if isinstance(r.message, str) and "fired up" in r.message)
    assert start is not None and ready is not None
    checkpoints = [start + f * (ready - start) for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
    errors: list[float] = []
    for record in entries:
        assert record.realtime is not None
        while checkpoints and record.realtime > checkpoints[0]:
            inv = pipeline.snapshot().current
            assert inv is not None
            eta = eta_seconds(inv, checkpoints[0], typical)
            assert eta is not None
            errors.append(abs(eta - (ready - checkpoints[0])))
            checkpoints.pop(0)
        pipeline.feed(record, None)
    return errors


def test_eta_error_on_replayed_start_ups(history: History, records: list[StartupRecord],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    total = records[0].duration
    for load in (1.0, 1.15, 0.85):
        errors = eta_errors(history, records[0].fingerprint, load)
        mean = sum(errors) / len(errors)
        with capsys.disabled():
            print(f"\nETA error, weight load x{load}: mean {mean:.0f}s, max {max(errors):.0f}s "
                  f"of a {total:.0f}s start-up")
        assert max(errors) < 0.25 * total


def test_eta_is_none_without_history_or_once_ready(records: list[StartupRecord]) -> None:
    inv = run(70).snapshot().current
    assert isinstance(inv, InvocationView)
    assert eta_seconds(inv, BASE, {}) is None
    assert eta_seconds(inv, BASE, {Phase.WEIGHT_LOAD: 500.0}) is None  # ready


def test_corrupt_history_gives_a_warning_and_a_fresh_start(tmp_path: Path, records: list[StartupRecord],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING):
        history = History(path)
    assert "is unreadable" in caplog.text and "starting a fresh one" in caplog.text
    assert history.startups(UNIT) == []
    assert history.add(replace(records[0]))
    assert list(tmp_path.glob("history.sqlite3.corrupt-*"))


def test_report_command_table_json_and_plot(tmp_path: Path, records: list[StartupRecord],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    history = History(tmp_path / f"{UNIT}.history.sqlite3")
    for record in records[:3]:
        history.add(record)
    plot = tmp_path / "startups.svg"
    assert main(["report", UNIT, "--state-dir", str(tmp_path), "--json", "--last", "2", "--plot", str(plot)]) == 0
    document = __import__("json").loads(capsys.readouterr().out)
    assert [s["invocation_id"] for s in document["startups"]] == [r.invocation_id for r in records[1:3]]
    first = document["startups"][0]
    assert first["outcome"] == "ready" and first["slowest_rank"].startswith("TP")
    assert [p["name"] for p in first["phases"]][:3] == ["launch", "dist_init", "weight_load"]
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > 2 * 9 * 5
    assert main(["report", UNIT, "--state-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["STARTED", "UTC", "TOOK", "OUTCOME"]
    assert table.index("") == 1 + 3 and max(map(len, table)) <= 100
    assert main(["report", "other.service", "--state-dir", str(tmp_path)]) == 66


def test_report_points_to_each_startups_evidence(tmp_path: Path, records: list[StartupRecord],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    history = History(tmp_path / f"{UNIT}.history.sqlite3")
    for record in records[:2]:
        history.add(record)
    (tmp_path / "evidence").mkdir()
    hung = tmp_path / "evidence" / f"{UNIT}-{records[1].invocation_id}-stalled.txt"
    hung.write_text("=== TP3 pid 4711 ===\n")
    (tmp_path / "evidence" / f"other.service-{records[0].invocation_id}-stalled.txt").write_text("not ours\n")
    assert main(["report", UNIT, "--state-dir", str(tmp_path), "--json"]) == 0
    document = __import__("json").loads(capsys.readouterr().out)
    assert [s["evidence"] for s in document["startups"]] == [[], [str(hung)]]
    assert main(["report", UNIT, "--state-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "evidence captured before phasewatch acted:" in table
    # (a row wider than 100 columns: the path on a line of its own, under the start-up)
    assert f"{records[1].invocation_id[:12]}\n    {hung}" in table and "other.service" not in table


def test_limits_in_force_and_eta_are_exported(history: History, records: list[StartupRecord]) -> None:
    from prometheus_client import CollectorRegistry

    from phasewatch.clock import FakeClock
    from phasewatch.judge import Judge
    from phasewatch.sinks.metrics.exporter import Exporter
    from phasewatch.stages.s5_act.respond import Memory

    config = learned(history, records[0].fingerprint)
    pipeline = run(90, Faults(hang={3: "draft_cuda_graph_capture"}), config)
    registry = CollectorRegistry()
    now = BASE + 90 * 10_000 + 1000
    exporter = Exporter(CONFIG, registry, FakeClock(wall=now))
    reasons = {"weight_load": "learned: 1.5 x p95 9m7s of 6 start-ups, within 0.25-2 x configured"}
    step = Judge(config, pipeline).judge(now)
    exporter.publish(replace(step, eta=321.0, limit_reasons=reasons), Memory())
    sample = registry.get_sample_value
    assert sample("phasewatch_startup_eta_seconds", {"unit": UNIT}) == 321.0
    assert sample("phasewatch_phase_deadline_learned", {"unit": UNIT, "phase": "weight_load"}) == 1.0
    assert sample("phasewatch_phase_deadline_learned", {"unit": UNIT, "phase": "dist_init"}) == 0.0
    assert sample("phasewatch_phase_deadline_seconds", {"unit": UNIT, "phase": "weight_load"}) == \
        config.limits(Phase.WEIGHT_LOAD).deadline
    status = exporter.status()
    assert status["eta_seconds"] == 321.0
    assert status["limits"]["weight_load"]["why"] == reasons["weight_load"]
    assert status["limits"]["weight_load"]["deadline_seconds"] == config.limits(Phase.WEIGHT_LOAD).deadline
