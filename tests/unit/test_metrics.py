"""Metrics and /status: a fresh CollectorRegistry per test, a pipeline fed with real SGLang lines (the
v0.5.9 start-up of test_policy), values read with `registry.get_sample_value`; one HTTP round trip
on an ephemeral loopback port; `promtool check metrics` on the exposition."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fakes import (
    INV,
    TP8,
    UNIT,
    Journal,
    MetricsFixture,
    ScriptedJournal,
    capture_bar,
    cuda_graph_capture,
    dist_init,
    draft_capture_begin,
    draft_capture_end,
    draft_weight_load,
    http_server_start,
    kv_cache_alloc,
    launch,
    ready,
    up_to_draft_capture,
    up_to_ready,
    warmup,
    weight_load,
)
from phasewatch import __version__
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_LIMITS, VERDICT_KINDS, Config, PhaseLimits, RestartBudget
from phasewatch.judge import JournalState, Judge, Step
from phasewatch.pipeline import Judgement, Pipeline
from phasewatch.records import MAIN, MID_STARTED, MID_SUPPRESSED, PHASE_NAMES, GroupRestartRequest, JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.http import parse_listen
from phasewatch.sinks.metric_families import Probes, Published, families
from phasewatch.sinks.metrics.exporter import PHASE_BUCKETS, Exporter
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge.remedies import NO_UNIT, UnitSettings
from phasewatch.stages.s4_judge.vitals import Vitals
from phasewatch.stages.s5_act.respond import Budget, BudgetState, Memory
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

RANKS = (MAIN, *TP8)


@pytest.fixture
def m() -> MetricsFixture:
    return MetricsFixture()


def phase_of(m: MetricsFixture, rank: str) -> list[str]:
    return [p for p in PHASE_NAMES if m.value("phasewatch_rank_phase", rank=rank, phase=p) == 1]


# --- state of the current start-up ---------------------------------------------------------------


def test_nothing_published_yet_exports_the_unit_and_its_limits_only(m: MetricsFixture) -> None:
    assert m.value("phasewatch_rank_phase", rank="TP0", phase="launch") is None
    assert m.value("phasewatch_unit_ready") == 0
    assert m.value("phasewatch_phase_deadline_seconds", phase="weight_load") == DEFAULT_LIMITS[
        Phase.WEIGHT_LOAD].deadline
    assert m.value("phasewatch_phase_deadline_seconds", phase="ready") is None  # no limit: no series
    assert m.value("phasewatch_journal_entries_total") == 0
    assert m.value("phasewatch_restarts_total", reason="stalled") == 0


def test_rank_phase_is_a_state_set_that_follows_every_rank(m: MetricsFixture) -> None:
    launch(m.journal)
    dist_init(m.journal)
    m.publish()
    assert {r: phase_of(m, r) for r in RANKS} == {MAIN: ["launch"], **{r: ["dist_init"] for r in TP8}}
    assert sum(m.value("phasewatch_rank_phase", rank="TP3", phase=p) or 0 for p in PHASE_NAMES) == 1
    up_to_draft_capture_rest(m.journal)
    m.publish()
    assert {r: phase_of(m, r) for r in TP8} == {r: ["draft_cuda_graph_capture"] for r in TP8}
    assert m.value("phasewatch_rank_phase", rank="TP3", phase="weight_load") == 0


def up_to_draft_capture_rest(j: Journal) -> None:
    weight_load(j)
    kv_cache_alloc(j)
    cuda_graph_capture(j)
    draft_weight_load(j)
    j.wait(1)
    draft_capture_begin(j)


def test_elapsed_is_measured_at_scrape_time_not_at_publish_time(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    m.publish()
    assert m.value("phasewatch_phase_elapsed_seconds", rank="TP3") == 0
    m.journal.wait(95)  # the daemon sleeps (a silent capture): the age still grows
    assert m.value("phasewatch_phase_elapsed_seconds", rank="TP3") == 95
    began = m.journal.invocation().started_at
    assert began is not None
    assert m.value("phasewatch_startup_elapsed_seconds") == m.journal.now - began


def test_deadline_and_stall_per_phase_come_from_the_config() -> None:
    config = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(6, None)})
    m = MetricsFixture(config)
    assert m.value("phasewatch_phase_deadline_seconds", phase="draft_cuda_graph_capture") == 6
    assert m.value("phasewatch_phase_stall_seconds", phase="draft_cuda_graph_capture") is None
    assert m.value("phasewatch_phase_stall_seconds", phase="weight_load") == DEFAULT_LIMITS[Phase.WEIGHT_LOAD].stall


def test_progress_ratio_is_the_bar_n_over_total(m: MetricsFixture) -> None:
    launch(m.journal)
    dist_init(m.journal)
    m.journal.every("Load weight begin. avail mem=137.95 GB")
    for n in range(16):
        m.journal.raw("TP0", f"\rLoading safetensors checkpoint shards: {100 * n // 30:3d}% Completed | "
                             f"{n}/30 [00:{n:02d}<00:46,  1.62s/it]\n")
        m.journal.wait(1.6)
    m.publish()
    assert m.value("phasewatch_phase_progress_ratio", rank="TP0", phase="weight_load") == 15 / 30
    assert m.value("phasewatch_phase_progress_ratio", rank="TP1", phase="weight_load") is None  # no bar there


def test_capture_bar_progress_is_exported_for_its_phase(m: MetricsFixture) -> None:
    launch(m.journal)
    dist_init(m.journal)
    weight_load(m.journal)
    kv_cache_alloc(m.journal)
    m.journal.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    capture_bar(m.journal, 12)
    m.publish()
    assert m.value("phasewatch_phase_progress_ratio", rank="TP0", phase="cuda_graph_capture") == 12 / 23


def test_waiting_ranks_and_the_main_process_waiting_for_them(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    others = tuple(r for r in TP8 if r != "TP3")
    m.journal.every("Capture draft cuda graph end. Time elapsed: 12.04 s. mem usage=0.38 GB. avail mem=17.14 GB.",
                    others)
    m.publish()
    assert m.value("phasewatch_rank_waiting", rank="TP3") == 0
    assert m.value("phasewatch_rank_waiting", rank="TP0") == 1
    assert m.value("phasewatch_rank_waiting", rank=MAIN) == 1  # in launch while the ranks work
    assert m.value("phasewatch_rank_phases_entered", rank="TP3") == 7  # launch .. draft_cuda_graph_capture
    assert m.value("phasewatch_rank_phases_entered", rank=MAIN) is None


def test_last_activity_is_the_ranks_last_line(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    m.publish()
    assert m.value("phasewatch_last_activity_timestamp_seconds", rank="TP3") == m.journal.now


def test_unit_ready_and_state_after_fired_up(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    m.publish()
    assert m.value("phasewatch_unit_ready") == 0
    assert m.value("phasewatch_unit_state", state="starting") == 1
    up_to_ready_rest(m.journal)
    m.publish()
    assert m.value("phasewatch_unit_ready") == 1
    assert m.value("phasewatch_unit_state", state="ready") == 1
    assert m.value("phasewatch_unit_state", state="starting") == 0
    assert {r: phase_of(m, r) for r in RANKS} == {r: ["ready"] for r in RANKS}
    assert m.value("phasewatch_startup_elapsed_seconds") is None  # no longer starting


def up_to_ready_rest(j: Journal) -> None:
    j.wait(12)
    draft_capture_end(j)
    http_server_start(j)
    warmup(j)
    ready(j)


# --- histograms: each completed span once ---------------------------------------------------------


def test_phase_durations_observe_each_completed_span_once(m: MetricsFixture) -> None:
    up_to_ready(m.journal)
    for _ in range(3):
        m.publish()
    assert m.value("phasewatch_phase_duration_seconds_count", phase="dist_init") == 8  # one per rank
    assert m.value("phasewatch_phase_duration_seconds_sum", phase="dist_init") == 8 * 2
    assert m.value("phasewatch_phase_duration_seconds_bucket", phase="dist_init", le="1.0") == 0
    assert m.value("phasewatch_phase_duration_seconds_bucket", phase="dist_init", le="2.5") == 8
    assert m.value("phasewatch_phase_duration_seconds_bucket", phase="dist_init", le="+Inf") == 8
    weight = m.value("phasewatch_phase_duration_seconds_sum", phase="weight_load")
    assert weight is not None and weight == pytest.approx(8 * 31 * 1.6)
    # The main process's phases once per start-up, not once per rank; ready never completes.
    assert m.value("phasewatch_phase_duration_seconds_count", phase="http_server_start") == 1
    assert m.value("phasewatch_phase_duration_seconds_count", phase="warmup") == 1
    assert m.value("phasewatch_phase_duration_seconds_count", phase="ready") is None
    assert len(PHASE_BUCKETS) < 20


def test_a_phase_in_progress_is_not_observed(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    m.publish()
    assert m.value("phasewatch_phase_duration_seconds_count", phase="draft_cuda_graph_capture") == 0
    assert m.value("phasewatch_phase_duration_seconds_count", phase="cuda_graph_capture") == 8


def test_startup_duration_once_per_invocation(m: MetricsFixture) -> None:
    up_to_ready(m.journal)
    m.publish()
    m.journal.wait(100)
    m.publish()
    inv = m.journal.invocation()
    ready_at = next(s.start for s in inv.rank(MAIN).spans if s.phase is Phase.READY)  # type: ignore[union-attr]
    assert m.value("phasewatch_startup_duration_seconds_count") == 1
    assert m.value("phasewatch_startup_duration_seconds_sum") == ready_at - inv.started_at  # type: ignore[operator]


# --- counters -------------------------------------------------------------------------------------


def stalled_journal() -> MetricsFixture:
    config = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(6, None)})
    m = MetricsFixture(config)
    up_to_draft_capture(m.journal)
    m.journal.wait(7)
    return m


def test_verdicts_are_counted_once_per_key_and_shown_while_held() -> None:
    m = stalled_journal()
    assert m.value("phasewatch_verdicts_total", kind="stalled", phase="draft_cuda_graph_capture") == 0
    for _ in range(3):
        m.exporter.saw_verdicts(m.journal.verdicts())
        m.publish()
    assert m.value("phasewatch_verdicts_total", kind="stalled", phase="draft_cuda_graph_capture") == 8
    assert m.value("phasewatch_active_verdicts", kind="stalled") == 8
    assert m.value("phasewatch_active_verdicts", kind="crashed") == 0
    assert m.value("phasewatch_verdicts_total", kind="lines_lost", phase="") == 0


def test_verdict_seen_keeps_rank_and_phase_and_stays_recent_while_held() -> None:
    m = stalled_journal()
    verdicts = m.journal.verdicts()
    m.exporter.saw_verdicts(verdicts)
    first = {v.rank: v.at for v in verdicts}
    assert m.value("phasewatch_verdict_seen_timestamp_seconds", kind="stalled", rank="TP3",
                   phase="draft_cuda_graph_capture") is None  # nothing published yet
    m.publish()
    held_at = m.value("phasewatch_verdict_seen_timestamp_seconds", kind="stalled", rank="TP3",
                      phase="draft_cuda_graph_capture")
    assert held_at is not None and held_at >= first["TP3"]
    m.journal.wait(30)
    m.exporter.saw_verdicts(m.journal.verdicts())
    m.publish()  # still held: refreshed to the time of this step
    later = m.value("phasewatch_verdict_seen_timestamp_seconds", kind="stalled", rank="TP3",
                    phase="draft_cuda_graph_capture")
    assert later is not None and later >= held_at + 30
    assert {r for r in (f"TP{i}" for i in range(8))
            if m.value("phasewatch_verdict_seen_timestamp_seconds", kind="stalled", rank=r,
                       phase="draft_cuda_graph_capture") is not None} == {f"TP{i}" for i in range(8)}


def test_restarts_and_the_budget(m: MetricsFixture) -> None:
    config = replace(m.journal.config, restart_budget=RestartBudget(max=3, window=3600, backoff=60))
    m = MetricsFixture(config)
    up_to_draft_capture(m.journal)
    m.exporter.restarted("stalled")
    now = m.journal.now
    memory = Memory(restarted=frozenset({INV}), budget=Budget(failures=((INV, now),), last_restart=now, restarts=1))
    m.publish(memory)
    assert m.value("phasewatch_restarts_total", reason="stalled") == 1
    assert m.value("phasewatch_restarts_total", reason="crashed") == 0
    assert m.value("phasewatch_restart_budget_remaining") == 2
    assert m.value("phasewatch_restart_budget_gave_up") == 0
    m.publish(replace(memory, budget=replace(memory.budget, state=BudgetState.GAVE_UP)))
    assert m.value("phasewatch_restart_budget_remaining") == 0
    assert m.value("phasewatch_restart_budget_gave_up") == 1


def test_counters_appear_only_when_published(m: MetricsFixture) -> None:
    """The server threads read the published object only: what the loop does in between is not seen."""
    m.publish()
    m.exporter.restarted("stalled")
    assert m.value("phasewatch_restarts_total", reason="stalled") == 0
    m.publish()
    assert m.value("phasewatch_restarts_total", reason="stalled") == 1


def test_journal_entries_and_lost_lines(m: MetricsFixture) -> None:
    launch(m.journal)
    dist_init(m.journal)
    m.journal.record("Suppressed 1234 messages from sglang.service", None, message_id=MID_SUPPRESSED,
                     object_unit=UNIT, n_dropped=1234)
    m.publish()
    m.publish()
    assert m.value("phasewatch_journal_entries_total") == m.journal.pipeline.entries > 20
    assert m.value("phasewatch_journal_lines_lost_total") == 1234


def test_health_probes(m: MetricsFixture) -> None:
    m.exporter.observe_probe(0.03, True)
    m.exporter.observe_probe(30.0, False)
    assert m.value("phasewatch_health_probe_seconds_count") == 2
    assert m.value("phasewatch_health_probe_seconds_sum") == pytest.approx(30.03)
    assert m.value("phasewatch_health_probe_seconds_bucket", le="0.05") == 1
    assert m.value("phasewatch_health_probe_failures_total") == 1


def test_info_names_phasewatch_version_and_the_servers_layout(m: MetricsFixture) -> None:
    assert m.value("phasewatch_info", engine="sglang", version=__version__, tp="", dp="", pp="", nnodes="",
                   node_rank="", speculative="") == 1
    launch(m.journal)
    m.publish()
    assert m.value("phasewatch_info", engine="sglang", version=__version__, tp="8", dp="1", pp="1", nnodes="1",
                   node_rank="0", speculative="EAGLE3") == 1


def test_label_cardinality_is_ranks_times_phases(m: MetricsFixture) -> None:
    up_to_ready(m.journal)
    m.publish()
    families = {f.name: f for f in m.registry.collect()}
    assert len(families["phasewatch_rank_phase"].samples) == len(RANKS) * len(PHASE_NAMES)
    assert len(families["phasewatch_verdicts"].samples) <= len(VERDICT_KINDS) * (len(PHASE_NAMES) + 1)


def test_every_family_is_the_units_and_the_info_comes_last() -> None:
    journal = Journal()
    up_to_ready(journal)
    published = Published(now=journal.now, invocation=journal.pipeline.current())
    made = families(published, Probes(), journal.now, journal.config)
    assert [f.name for f in made[:3]] == ["phasewatch_rank_phase", "phasewatch_phase_elapsed_seconds",
                                          "phasewatch_rank_waiting"]
    assert made[-1].name == "phasewatch" and made[-1].samples[0].labels["unit"] == UNIT
    assert len({f.name for f in made}) == len(made)  # each family made once
    for family in made[:-1]:
        assert all(next(iter(s.labels)) == "unit" and s.labels["unit"] == UNIT for s in family.samples), family.name
    assert len(made[0].samples) == len(RANKS) * len(PHASE_NAMES)


def test_a_second_start_up_replaces_the_first_ranks(m: MetricsFixture) -> None:
    up_to_draft_capture(m.journal)
    m.publish()
    second = "7" * 32
    m.journal.record("Started sglang.service - SGLang server.", 1, message_id=MID_STARTED, unit=UNIT,
                     extra={"JOB_TYPE": "start", "INVOCATION_ID": second})
    m.journal.pipeline.feed(JournalRecord("[2026-02-22 23:59:00 TP0] Init torch distributed begin.", m.journal.now,
                                          pid=9000, invocation_id=second), m.journal.now)
    m.publish()
    assert phase_of(m, "TP0") == ["dist_init"]
    assert m.value("phasewatch_rank_phase", rank="TP3", phase="draft_cuda_graph_capture") is None


# --- the daemon feeds the exporter ---------------------------------------------------------------


def test_daemon_publishes_and_counts_its_restart(tmp_path: Path) -> None:
    config = Config(unit="sglang-kimi.service", phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})
    journal = ScriptedJournal()
    clock = FakeClock(wall=1_800_000_000.0)
    unit = RecordingUnit(UnitFacts("activating", "start", "0123456789abcdef0123456789abcdef", control_group=None,
                                   started_at=clock.wall()))
    registry = CollectorRegistry()
    exporter = Exporter(config, registry, clock)
    app = compose(config, World(follower=journal, unit=unit, alerter=RecordingAlerter(config.unit),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, config.unit), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(exporter=exporter))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", clock.wall(),
                                 pid=100 + n, invocation_id="0123456789abcdef0123456789abcdef") for n in range(8)))
    app.start()
    labels = {"unit": config.unit}
    assert registry.get_sample_value("phasewatch_rank_phase", {**labels, "rank": "TP5", "phase": "weight_load"}) == 1
    assert registry.get_sample_value("phasewatch_journal_entries_total", labels) == 8
    clock.jump(61)
    app.step(max_wait=0)
    assert unit.restarts
    assert registry.get_sample_value("phasewatch_restarts_total", {**labels, "reason": "stalled"}) == 1
    assert registry.get_sample_value("phasewatch_verdicts_total",
                                     {**labels, "kind": "stalled", "phase": "weight_load"}) == 8
    assert registry.get_sample_value("phasewatch_restart_budget_remaining", labels) == 2
    status = exporter.status()
    assert status["restart_budget"] == {"state": "armed", "remaining": 2, "max": 3, "window_seconds": 21600.0,
                                        "backoff_seconds": 300.0, "restarts": 1}
    clock.jump(10)
    app.step(max_wait=0)
    assert registry.get_sample_value("phasewatch_restarts_total", {**labels, "reason": "stalled"}) == 1



def test_one_judgement_per_step_read_by_every_sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge judges each start-up once a step; the metrics publish that same judgement and
    judge nothing themselves (a second judge call per step was the metrics sink's own)."""
    config = Config(unit="sglang-kimi.service", phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})
    journal = ScriptedJournal()
    clock = FakeClock(wall=1_800_000_000.0)
    invocation = "0123456789abcdef0123456789abcdef"
    unit = RecordingUnit(UnitFacts("activating", "start", invocation, control_group=None, started_at=clock.wall()))
    exporter = Exporter(config, CollectorRegistry(), clock)
    app = compose(config, World(follower=journal, unit=unit, alerter=RecordingAlerter(config.unit),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, config.unit), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(exporter=exporter))
    judged: list[Step] = []
    judge_one, judge = Pipeline.judge_one, Judge.judge
    calls: list[str] = []

    def counted(self: Pipeline, inv: InvocationView, now: float, config: Config | None = None,
                unit: UnitSettings = NO_UNIT, *rest: Any) -> Judgement:
        calls.append(inv.invocation_id)
        return judge_one(self, inv, now, config, unit, *rest)

    def kept(self: Judge, now: float, journal: JournalState | None = None, vitals: Vitals | None = None,
             requests: tuple[GroupRestartRequest, ...] = (), *rest: Any) -> Step:
        judged.append(judge(self, now, journal, vitals, requests, *rest))
        return judged[-1]

    monkeypatch.setattr(Pipeline, "judge_one", counted)
    monkeypatch.setattr(Judge, "judge", kept)
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", clock.wall(),
                                 pid=100 + n, invocation_id=invocation) for n in range(8)))
    app.start()
    for _ in range(3):
        clock.jump(31)
        app.step(max_wait=0)
    assert len(judged) == 4 and calls == [invocation] * 4  # one start-up, judged once in each step
    published = exporter.published
    assert published.judgement is judged[-1].current
    assert published.now == judged[-1].at
    assert [v.kind for v in published.judgement.verdicts if v.rank == "TP5"] == ["stalled"]


# --- HTTP -----------------------------------------------------------------------------------------


def test_status_before_any_start_up(m: MetricsFixture) -> None:
    status = m.exporter.status()
    assert status["unit"] == UNIT and status["invocation"] is None and status["published_at"] is None


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:9877") == ("127.0.0.1", 9877)
    assert parse_listen("[::1]:9877") == ("::1", 9877)
    assert parse_listen("localhost:0") == ("localhost", 0)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_listen("9877")


def test_registry_is_injected_never_the_global_one() -> None:
    from prometheus_client import REGISTRY

    MetricsFixture()
    assert REGISTRY.get_sample_value("phasewatch_unit_ready", {"unit": UNIT}) is None


# --- promtool -------------------------------------------------------------------------------------


def test_vitals_families_per_rank_while_sampled(m: MetricsFixture) -> None:
    from phasewatch.stages.s4_judge.vitals import ProcessSample, Sample, compare

    def tp(pid: int, label: str, faults: int, rchar: int | None) -> ProcessSample:
        return ProcessSample(pid, 1, "python3", label, faults, 0, 0, rchar, 0 if rchar is not None else None)

    before = Sample(1000.0, (tp(11, "TP0", 10, 100), tp(12, "TP1", 10, None)))
    now = Sample(1005.0, (tp(11, "TP0", 10, 100 + 50_000_000), tp(12, "TP1", 5000, None)))
    m.exporter.saw_vitals(compare(before, now))
    assert m.value("phasewatch_rank_intake_bytes_total", rank="TP0") == 50_000_100
    assert m.value("phasewatch_rank_intake_bytes_total", rank="TP1") is None  # /proc/PID/io not readable
    assert m.value("phasewatch_rank_page_faults_total", rank="TP1") == 5000
    assert m.value("phasewatch_rank_progress", rank="TP0") == 1 and m.value("phasewatch_rank_progress", rank="TP1") == 1
    assert m.value("phasewatch_rank_compilers", rank="TP0") == 0
    assert m.exporter.status()["vitals"]["ranks"]["TP0"]["text"] == "reading 10.0 MB/s"
    m.exporter.saw_vitals(None)
    assert m.value("phasewatch_rank_page_faults_total", rank="TP1") is None
    assert m.exporter.status()["vitals"] is None
