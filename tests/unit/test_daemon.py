"""The daemon's loop with its edges faked: a scripted journal, a recording unit, alerter and notifier,
a fake clock. (The real thing runs in tests/e2e.)"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.pipeline import Pipeline
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def line(text: str, at: float, pid: int = 100) -> JournalRecord:
    return JournalRecord(text, at, pid=pid, invocation_id=INV)


def daemon(tmp_path: Path, config: Config) -> tuple[Daemon, ScriptedJournal, RecordingUnit, RecordingAlerter,
                                                     RecordingNotifier, FakeClock]:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter = RecordingAlerter(UNIT)
    notifier = RecordingNotifier()
    app = compose(config, World(follower=journal, unit=unit, alerter=alerter, notifier=notifier,
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    return app, journal, unit, alerter, notifier, clock


STALL_CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})


def load_begins(journal: ScriptedJournal) -> None:
    journal.push(*(line(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0, pid=100 + n)
                   for n in range(8)))


def test_start_sends_ready_and_a_status_line(tmp_path: Path) -> None:
    app, journal, _, _, notifier, _ = daemon(tmp_path, STALL_CONFIG)
    load_begins(journal)
    app.start()
    assert notifier.sent[0] == "READY=1"
    assert notifier.sent[1] == "STATUS=sglang-kimi: weight_load 8/8 ranks, 0s of 1m"


def test_stall_is_alerted_and_restarted_once(tmp_path: Path) -> None:
    app, journal, unit, alerter, _, clock = daemon(tmp_path, STALL_CONFIG)
    load_begins(journal)
    app.start()
    clock.jump(59)
    app.step(max_wait=0)
    assert alerter.sent == [] and unit.restarts == []
    clock.jump(2)
    app.step(max_wait=0)
    # All eight ranks stuck alike: one alert naming them all, one restart.
    [alert] = alerter.sent
    assert alert["PHASEWATCH_RANK"] == ",".join(f"TP{n}" for n in range(8))
    assert alert["MESSAGE"].endswith("(and 7 more ranks alike: TP1, TP2, TP3, TP4, TP5, TP6, TP7)")
    assert unit.restarts == [INV]
    clock.jump(10)
    app.step(max_wait=0)
    assert unit.restarts == [INV] and len(alerter.sent) == 1


def test_restarted_daemon_does_not_act_twice(tmp_path: Path) -> None:
    app, journal, unit, _, _, clock = daemon(tmp_path, STALL_CONFIG)
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    again, journal2, unit2, alerter2, _, clock2 = daemon(tmp_path, STALL_CONFIG)
    clock2.jump(70)
    load_begins(journal2)
    again.start()
    again.step(max_wait=0)
    assert unit.restarts == [INV] and unit2.restarts == [] and alerter2.sent == []


def test_refused_restart_is_alerted(tmp_path: Path) -> None:
    app, journal, unit, alerter, _, clock = daemon(tmp_path, STALL_CONFIG)
    unit.refuse = "Interactive authentication required."
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    failed = [a for a in alerter.sent if a["PHASEWATCH_VERDICT"] == "restart_failed"]
    assert len(failed) == 1
    assert failed[0]["PRIORITY"] == "3"
    assert failed[0]["MESSAGE"] == f"{UNIT}: restart failed: Interactive authentication required."


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300) | st.text(max_size=300),
                          st.sampled_from([None, "line-max", "pid-change", "eof"]),
                          st.sampled_from([None, 1, 100, 101]),
                          st.sampled_from([None, "a" * 32, "b" * 32])), max_size=40))
def test_the_pipeline_never_dies_on_a_line_it_does_not_understand(
        entries: list[tuple[bytes | str, str | None, int | None, str | None]]) -> None:
    pipeline = Pipeline(Config(unit=UNIT))
    for n, (message, line_break, pid, invocation) in enumerate(entries):
        pipeline.feed(JournalRecord(message, T0 + n, pid=pid, invocation_id=invocation, line_break=line_break), T0)
    pipeline.flush(T0)
    for judgement in pipeline.judge(T0 + 10_000):
        assert judgement.outcome in ("starting", "ready", "serving", "stalled", "crashed", "stopped")
