"""Issue 12, stops phasewatch did not ask for: a start-up that ended before ready is checked for
leftovers once (alert only: phasewatch cannot hold systemd's own start), and an OOM of a start-up right
after leftovers is recorded as such, not as the model's."""

from __future__ import annotations

from pathlib import Path

from sglang_sim import Faults, build, journal_json

from fakes import ScriptedJournal
from learn_startups import BASE, UNIT, run
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import Config
from phasewatch.records import record_from_fields
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.history import History
from phasewatch.sinks.leftovers import LeftoverScan, Survivor
from phasewatch.sinks.state.store import StateStore
from phasewatch.sinks.unguarded_stops import GRACE, UnguardedStops
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Action
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

OOM = Faults(oom={3: "cuda_graph_capture"})
ESCAPED = Survivor(4711, "sglang::scheduler_TP3", 2048, "/system.slice/run-r1.scope")


def checker(left: list[Survivor]) -> tuple[UnguardedStops, list[Action], list[dict[int, str]]]:
    alerts: list[Action] = []
    asked: list[dict[int, str]] = []

    def scan(old: dict[int, str]) -> list[Survivor]:
        asked.append(old)
        return left

    return UnguardedStops(UNIT, scan, alerts.append), alerts, asked


def test_a_startup_that_failed_before_ready_is_checked_once_and_survivors_are_critical() -> None:
    crashed = run(1, OOM).snapshot().current
    assert crashed is not None and crashed.state.value == "failed"
    stops, alerts, asked = checker([ESCAPED])
    stops.observe([crashed], lambda inv: {4711: "TP3"}, lambda inv: False, 100.0)
    stops.tick(100.0 + GRACE - 0.1)
    assert asked == [] and stops.next_deadline() == 100.0 + GRACE
    stops.tick(100.0 + GRACE)
    [alert] = alerts
    assert (alert.verdict_kind, alert.priority, alert.invocation_id) == ("restart_blocked", 2, crashed.invocation_id)
    assert "pid 4711 (sglang::scheduler_TP3" in alert.message and "cannot hold a start" in alert.message
    assert asked == [{4711: "TP3"}] and stops.survivors_seen_at == 100.0 + GRACE
    stops.observe([crashed], lambda inv: {}, lambda inv: False, 200.0)
    stops.tick(300.0)
    assert len(alerts) == 1 and stops.next_deadline() is None


def test_not_checked_when_ready_when_phasewatch_guarded_the_stop_or_before_the_daemon_ran() -> None:
    ready = run(1).snapshot().current
    crashed = run(2, OOM).snapshot().current
    assert ready is not None and crashed is not None
    stops, alerts, asked = checker([ESCAPED])
    stops.observe([ready, crashed], lambda inv: {}, lambda inv: inv == crashed.invocation_id, 0.0)
    earlier, _, _ = checker([ESCAPED])
    earlier.known_already([crashed])
    earlier.observe([crashed], lambda inv: {}, lambda inv: False, 0.0)
    assert stops.next_deadline() is None and earlier.next_deadline() is None


def test_a_startup_followed_by_a_newer_one_is_over_even_if_its_end_was_not_seen() -> None:
    starting = run(1, Faults(hang={3: "cuda_graph_capture"})).snapshot().current
    newer = run(2).snapshot().current
    assert starting is not None and newer is not None and starting.state.value == "starting"
    stops, alerts, _ = checker([])
    stops.observe([starting], lambda inv: {}, lambda inv: False, 0.0)
    assert stops.next_deadline() is None  # still running
    stops.observe([starting, newer], lambda inv: {}, lambda inv: False, 10.0)
    stops.tick(10.0 + GRACE)
    assert alerts == [] and stops.survivors_seen_at is None  # checked: nothing survived


def proc(root: Path, pid: int, title: str, cgroup: str, started: int = 1000) -> None:
    (root / "proc" / str(pid)).mkdir(parents=True)
    (root / "proc" / str(pid) / "cmdline").write_bytes(title.encode() + b"\0")
    (root / "proc" / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")
    (root / "proc" / str(pid) / "stat").write_text(f"{pid} (x) S {' '.join(['0'] * 18)} {started} 0 0\n")
    (root / "proc" / str(pid) / "status").write_text("Uid:\t0\t0\t0\t0\n")


def test_unguarded_survivors_are_old_ranks_still_alive_never_a_title_elsewhere(tmp_path: Path) -> None:
    """PROBE-S3 M-2: a rank title in another user's scope raised a critical `restart_blocked`."""
    group = "/system.slice/sglang-kimi.service"
    proc(tmp_path, 10, "sglang::scheduler_TP0", group)  # the new start-up's TP0 in the unit's cgroup
    proc(tmp_path, 11, "sglang::scheduler_TP3", "/system.slice/run-r1.scope")  # escaped
    proc(tmp_path, 12, "sglang::scheduler_TP5", group)  # the old TP5, left in the cgroup
    proc(tmp_path, 13, "python3 worker", group)  # the old TP6's pid, reused by another process
    scan = LeftoverScan(ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),)))
    proc(tmp_path, 15, "sglang::scheduler_TP4", group, started=9000)  # the old TP4's pid, reused by a copy
    old = {12: "TP5", 13: "TP6", 14: "TP7", 15: "TP4"}
    assert [s.pid for s in scan.unguarded(old, {12: 1000, 15: 1000})] == [12]


def daemon_with_history(tmp_path: Path) -> tuple[Daemon, ScriptedJournal, History]:
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("failed", "failed", f"{1:032x}", control_group=None, started_at=BASE))
    history = History(tmp_path / "h.sqlite3")
    app = compose(Config(unit=UNIT), World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT),
                        clock=FakeClock(wall=BASE + 600),
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(history=history))
    for n, faults in ((1, OOM), (2, Faults())):  # the OOM start-up is recorded once a newer one began
        journal.push(*(record_from_fields(e) for e in journal_json(build(0.01, faults), base=BASE + (n - 1) * 300,
                                                                   unit=UNIT, invocation=f"{n:032x}")))
    return app, journal, history


def test_an_oom_right_after_leftovers_is_recorded_as_such(tmp_path: Path) -> None:
    app, _, history = daemon_with_history(tmp_path)
    app.history.leftovers_seen = lambda: BASE - 5  # a guarded start waited for survivors until then
    app.start()
    record = history.startups(UNIT)[0]
    assert (record.invocation_id, record.outcome, record.cause) == (f"{1:032x}", "crashed", "oom after leftovers")


def test_an_oom_without_leftovers_is_the_models(tmp_path: Path) -> None:
    app, _, history = daemon_with_history(tmp_path)
    app.history.leftovers_seen = lambda: BASE - 3600  # an old episode
    app.start()
    record = history.startups(UNIT)[0]
    assert (record.invocation_id, record.outcome, record.cause) == (f"{1:032x}", "crashed", "oom")


def test_a_failed_start_up_is_recorded_with_its_failures_fingerprint_a_ready_one_without(tmp_path: Path) -> None:
    app, _, history = daemon_with_history(tmp_path)
    app.history.leftovers_seen = lambda: BASE - 3600
    app.start()
    failed, *later = history.startups(UNIT)
    assert failed.failure is not None and failed.failure.startswith("crashed in ") and "(oom)" in failed.failure
    assert all(r.failure is None for r in later if r.outcome == "ready")
