"""Every sink told a `Step` built by hand (judge.py): the actor, the history, the group's restarts,
systemd's status and the metrics read nothing but the step (and what the actor reports it did)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from fakes import INV, UNIT, Journal, up_to_capture, up_to_ready
from phasewatch.clock import FakeClock
from phasewatch.config.load import Config, Group
from phasewatch.config.sections import GroupReceiver
from phasewatch.judge import Acted, JournalState, Step
from phasewatch.pipeline import Judgement
from phasewatch.records import GroupRestartRequest
from phasewatch.sinks.acting.actor import ActorParts, ActorSink
from phasewatch.sinks.acting.group import GroupRestartsSink
from phasewatch.sinks.acting.runner import ActionRunner
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.history import History
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.metrics.sink import PUBLISH_SPACING, MetricsSink
from phasewatch.sinks.state.history_sink import HistorySink
from phasewatch.sinks.state.host import DegradedHost
from phasewatch.sinks.state.store import StateStore
from phasewatch.sinks.state.systemd_status import SystemdStatusSink
from phasewatch.stages.s3_track.snapshot import InvocationView, Snapshot
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.respond import Memory
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

RESTARTING = Config(unit=UNIT, actions={"stalled": ("alert", "restart")})


def stalled(inv: InvocationView, at: float) -> Verdict:
    return Verdict("stalled", inv.invocation_id, "cuda_graph_capture", "TP3", "deadline",
                   f"{UNIT}: TP3 stalled in cuda_graph_capture", at)


def step_of(inv: InvocationView, at: float, config: Config, *verdicts: Verdict, **fields: object) -> Step:
    """A step that judged `inv` (the current start-up) to `verdicts`, by hand."""
    judgement = Judgement(inv, verdicts, "stalled" if verdicts else "starting", verdicts)
    return Step(at, Snapshot((inv,)), {inv.invocation_id: judgement}, config, **fields)  # type: ignore[arg-type]


def capturing() -> Journal:
    j = Journal()
    up_to_capture(j)
    return j


def actor_for(tmp_path: Path, config: Config, clock: FakeClock) -> tuple[ActorSink, RecordingUnit, RecordingAlerter]:
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=clock.wall()))
    alerter = RecordingAlerter(UNIT)
    store = StateStore(tmp_path, UNIT)
    host = DegradedHost(UNIT, alerter.alert, None, store)
    parts = ActorParts(unit.facts, alerter, store, clock, lambda: None, lambda now: None, host)
    return ActorSink(config, parts, ActionRunner(UNIT, unit, alerter.alert, wall=clock.wall)), unit, alerter


def test_the_actor_alerts_and_restarts_once_and_reports_what_it_did(tmp_path: Path) -> None:
    j = capturing()
    inv = j.invocation()
    actor, unit, alerter = actor_for(tmp_path, RESTARTING, j.clock)
    step = step_of(inv, j.now, RESTARTING, stalled(inv, j.now))
    actor.tell(step)
    actor.tell(step)  # the same news again: remembered, not acted on twice
    assert unit.restarts == [INV] and [a["PHASEWATCH_VERDICT"] for a in alerter.sent] == ["stalled"]
    acted = actor.report(INV, j.now)
    assert acted.restarts == ("stalled",) and INV in acted.memory.restarted
    assert [v.kind for v in acted.verdicts] == ["stalled", "stalled"]
    assert StateStore(tmp_path, UNIT).load().memory.restarted == frozenset({INV})  # remembered first
    assert actor.report(INV, j.now).restarts == ()  # each report says what was done since the last


def test_the_actor_alerts_the_timer_check_the_step_carries(tmp_path: Path) -> None:
    from phasewatch.judge import TimerLint

    j = capturing()
    actor, _, alerter = actor_for(tmp_path, Config(unit=UNIT), j.clock)
    actor.tell(step_of(j.invocation(), j.now, Config(unit=UNIT),
                       timer_lint=TimerLint(INV, f"{UNIT}: 1 limit(s) will not fire as configured", "watchdog")))
    [alert] = alerter.sent
    assert (alert["PHASEWATCH_VERDICT"], alert["PHASEWATCH_CAUSE"], alert["PRIORITY"]) == (
        "timer_lint", "watchdog", "4")


def test_the_history_records_a_ready_start_up_once_and_the_judge_forgets_its_limits(tmp_path: Path) -> None:
    j = Journal()
    up_to_ready(j)
    history = History(tmp_path / "h.sqlite3")
    forgotten: list[str] = []
    sink = HistorySink(UNIT, history, DegradedHost(UNIT, RecordingAlerter(UNIT).alert, history,
                                                   StateStore(tmp_path, UNIT)),
                       forgotten.append, {INV: "restarted by the group"}.get)
    step = step_of(j.invocation(), j.now, Config(unit=UNIT))
    sink.tell(step)
    sink.tell(step)
    [record] = history.startups(UNIT)
    assert (record.invocation_id, record.outcome, record.ended_by) == (INV, "ready", "restarted by the group")
    assert forgotten == [record.fingerprint]


def test_the_group_sink_restarts_on_the_groups_decision_through_the_actor(tmp_path: Path) -> None:
    group = Group("kimi-tp16", 2, receiver=GroupReceiver("127.0.0.1:9", "/t"))
    config = Config(unit=UNIT, group=group)
    j = capturing()
    actor, unit, alerter = actor_for(tmp_path, config, j.clock)
    sink = GroupRestartsSink(config, actor, None, lambda now: None, actor.parts.read_facts)
    inv = j.invocation()
    request = GroupRestartRequest("kimi-tp16", "1", "stalled", j.now, "fp", "TP12", "cuda_graph_capture")
    j.wait(10)
    sink.tell(step_of(inv, j.now, config, requests=(request,)))
    assert unit.restarts == [INV] and [a["PHASEWATCH_VERDICT"] for a in alerter.sent] == ["group_restart"]
    assert sink.ended_by == {INV: "restarted by the group: node 1 TP12 stalled in cuda_graph_capture"}


def test_systemd_is_told_the_steps_line_and_the_status_file_its_state(tmp_path: Path) -> None:
    j = capturing()
    notifier = RecordingNotifier()
    store = StateStore(tmp_path, UNIT)
    sink = SystemdStatusSink(Config(unit=UNIT), notifier, store, 10.0, j.clock)
    acted = Acted(Memory(restarted=frozenset({"old"})), {"history": "disk full"}, {"hold": None})
    journal = JournalState(entries=42, rejected={"line_not_from_unit": 2}, document={"behind_seconds": 0})
    sink.tell(step_of(j.invocation(), j.now, Config(unit=UNIT), eta=60.0, journal=journal, acted=acted))
    [sent] = notifier.sent
    assert sent.startswith("STATUS=sglang: kv_cache_alloc 8/8 ranks, 0s of 10m; ready in about 1m")
    assert "WATCHDOG=1" in sent
    assert "(history in memory only: state directory not writable)" in sent
    status = json.loads((tmp_path / f"{UNIT}.status.json").read_text())
    assert (status["entries"], status["restarted"], status["entries_rejected"], status["eta_seconds"]) == (
        42, ["old"], {"line_not_from_unit": 2}, 60.0)
    assert status["journal"] == {"behind_seconds": 0} and status["hold"] is None and status["ras"] is None


def test_the_metrics_count_what_the_actor_did_and_publish_at_most_every_spacing(tmp_path: Path) -> None:
    j = capturing()
    registry = CollectorRegistry()
    sink = MetricsSink(Exporter(Config(unit=UNIT), registry, j.clock), j.clock)
    inv = j.invocation()
    acted = Acted(Memory(), {"state": "read-only"}, {}, (stalled(inv, j.now),), ("stalled",), ("started_again",))
    step = step_of(inv, j.now, Config(unit=UNIT), stalled(inv, j.now), acted=acted)
    sink.tell(step)
    value = registry.get_sample_value
    assert value("phasewatch_restarts_total", {"unit": UNIT, "reason": "stalled"}) == 1
    assert value("phasewatch_state_degraded", {"unit": UNIT, "what": "state"}) == 1
    assert sink.exporter.published.now == j.now and sink.next_deadline(None) is None  # type: ignore[arg-type]
    sink.tell(replace(step, at=j.now + 0.1, acted=Acted()))  # within the spacing: counted, published later
    assert sink.exporter.published.now == j.now
    assert sink.next_deadline(None) == sink.last_publish + PUBLISH_SPACING  # type: ignore[arg-type]


def test_the_metrics_take_the_sources_side_news_from_the_step(tmp_path: Path) -> None:
    """What the sources saw for the metrics comes in the step: the health probes answered, NCCL RAS's
    findings, the vitals last said (kept over a new start-up until its first sample)."""
    from phasewatch.records import ProbeAnswered
    from phasewatch.stages.s4_judge.ras_culprit import failed_finding
    from phasewatch.stages.s4_judge.vitals import ProcessSample, Sample, compare

    j = capturing()
    registry = CollectorRegistry()
    sink = MetricsSink(Exporter(Config(unit=UNIT), registry, j.clock), j.clock)
    inv = j.invocation()
    sample = Sample(j.now, (ProcessSample(11, 1, "python3", "TP0", 10, 0, 0, 100, 0),))
    vitals = compare(None, sample)
    finding = failed_finding(inv.invocation_id, j.now, "localhost:28028", "no answer from RAS")
    sink.tell(step_of(inv, j.now, Config(unit=UNIT), probes=(ProbeAnswered(0.2, True), ProbeAnswered(3.0, False)),
                      ras_found=(finding,), shown_vitals=vitals))
    value = registry.get_sample_value
    assert value("phasewatch_health_probe_seconds_count", {"unit": UNIT}) == 2
    assert value("phasewatch_health_probe_failures_total", {"unit": UNIT}) == 1
    status = sink.exporter.status()
    assert status["vitals"] is not None and "TP0" in status["vitals"]["ranks"]
    sink.tell(step_of(inv, j.now + 1, Config(unit=UNIT)))  # (no vitals said any more: none shown)
    assert sink.exporter.status()["vitals"] is None
    assert value("phasewatch_health_probe_seconds_count", {"unit": UNIT}) == 2  # (each probe counted once)
