"""Issue 22, part 1 (PROBE-S3 C-1, H-1, H-6, H-7, M-1, L-3): acting that survives the actor. The
daemon's loop with its edges faked (a scripted journal, a recording unit, a fake clock), the action
worker too where it matters (a daemon killed mid-action: its jobs never come back). The real worker
thread and real children: tests/integration/test_acting_children.py; the real systemd: tests/e2e."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_ACTIONS, DEFAULT_LIMITS, Config, Hook, Leftovers, PhaseLimits, load_config
from phasewatch.errors import ConfigError, UnitError
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.acting.runner import ActionRunner, Done, Job
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.hold import HoldFile
from phasewatch.sinks.hooks import HookRunner, env_safe, hook_env
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.state.store import StateStore
from phasewatch.sinks.unguarded_stops import UnguardedStops
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Action, Hold
from phasewatch.systemd_unit import EINTR_TRIES, RecordingUnit, SystemdUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
LOAD = {**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)}
HOOKED = Config(unit=UNIT, phases=LOAD, actions={**DEFAULT_ACTIONS, "stalled": ("alert", "hook:slow", "restart")},
                hooks={"slow": Hook(("/bin/sleep", "300"), 30.0)})


def make(tmp_path: Path, config: Config, *, worker: bool = False, unit: RecordingUnit | None = None,
         exporter: Exporter | None = None
         ) -> tuple[Daemon, ScriptedJournal, RecordingUnit, RecordingAlerter, RecordingNotifier, FakeClock]:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    (tmp_path / "proc").mkdir(exist_ok=True)
    unit = unit or RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter, notifier = RecordingAlerter(UNIT), RecordingNotifier()
    app = compose(config, World(follower=journal, unit=unit, alerter=alerter, notifier=notifier,
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(watchdog_interval=30.0, actions_off_the_loop=worker, exporter=exporter))
    return app, journal, unit, alerter, notifier, clock


def load_begins(journal: ScriptedJournal) -> None:
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))


class KilledMidAction:
    """The action worker of a daemon that is killed while it acts (in a slow hook, before the
    restart): jobs are taken and never come back."""

    busy = True

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def fds(self) -> list[int]:
        return []

    def submit(self, job: Job, runner: ActionRunner) -> None:
        self.jobs.append(job)

    def take_done(self) -> list[Done]:
        return []


def killed_mid_action(tmp_path: Path) -> None:
    """A daemon that judges the hang, hands the actions to its worker, and is killed meanwhile."""
    app, journal, unit, _, _, clock = make(tmp_path, HOOKED)
    app.actor.worker = KilledMidAction()  # type: ignore[assignment]
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    assert unit.restarts == []
    assert [a.kind for a in app.store.load().pending] == ["alert", "restart"]


def test_a_daemon_killed_mid_action_makes_the_pending_restart_when_it_starts_again(tmp_path: Path) -> None:
    """C-1: the memory said "restarted" before acting; a daemon killed in the hook never restarted."""
    killed_mid_action(tmp_path)
    again, journal, unit, alerter, _, clock = make(tmp_path, HOOKED)
    clock.jump(70)
    load_begins(journal)
    again.start()
    assert unit.restarts == [INV]
    assert [a["PHASEWATCH_VERDICT"] for a in alerter.sent] == ["stalled"]  # the alert it had not sent
    assert again.store.load().pending == ()
    again.step(max_wait=0)
    assert unit.restarts == [INV]  # once


def test_a_pending_restart_is_not_made_when_held(tmp_path: Path) -> None:
    killed_mid_action(tmp_path)
    HoldFile(tmp_path, UNIT).write(Hold(T0 + 3600, "bisecting"))
    held, journal, unit, _, _, _ = make(tmp_path, HOOKED)
    load_begins(journal)
    held.start()
    assert unit.restarts == [] and held.store.load().pending == ()


def test_a_pending_restart_of_a_start_up_that_ended_is_dropped(tmp_path: Path) -> None:
    """systemd had the job (the unit runs a new invocation): nothing is restarted twice."""
    killed_mid_action(tmp_path)
    other = RecordingUnit(UnitFacts("activating", "start", "f" * 32, control_group=None, started_at=T0 + 65))
    again, _, unit, _, _, _ = make(tmp_path, HOOKED, unit=other)
    again.start()
    assert unit.restarts == []


def test_a_refused_restart_is_tried_again_with_backoff_and_alerted_once(tmp_path: Path) -> None:
    """H-7: EINTR or a transient D-Bus/polkit error lost the restart for good."""
    config = Config(unit=UNIT, phases=LOAD)
    app, journal, unit, alerter, _, clock = make(tmp_path, config)
    unit.refuse_times = 2
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    assert unit.restarts == []
    assert [a["PHASEWATCH_VERDICT"] for a in alerter.sent].count("restart_failed") == 1
    assert any(a.kind == "restart" for a in app.store.load().pending)
    for _ in range(2):
        clock.jump(5)
        app.step(max_wait=0)
    assert unit.restarts == [INV]
    assert [a["PHASEWATCH_VERDICT"] for a in alerter.sent].count("restart_failed") == 1
    assert app.store.load().pending == ()


def test_a_restart_refused_every_time_is_not_restarted_and_decided_again(tmp_path: Path) -> None:
    config = Config(unit=UNIT, phases=LOAD)
    app, journal, unit, _, _, clock = make(tmp_path, config)
    unit.refuse_times = 4
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    for _ in range(3):
        clock.jump(5)
        app.step(max_wait=0)
    assert unit.restarts == [] and INV not in app.actor.memory.restarted
    clock.jump(config.restart_budget.backoff + 1)
    app.step(max_wait=0)
    assert unit.restarts == [INV]


class InterruptedBus:
    """pystemd's Unit whose Restart is cut by a signal twice (`[err -4]`), then answers."""

    def __init__(self, name: bytes) -> None:
        self.Unit = self
        self.calls = 0

    def Restart(self, mode: bytes) -> bytes:  # noqa: N802 (pystemd's name)
        self.calls += 1
        if self.calls <= 2:
            raise OSError("[err -4]: b'Interrupted system call'")
        return b"/org/freedesktop/systemd1/job/7"


def test_eintr_is_retried_inside_the_restart_call() -> None:
    bus: dict[str, Any] = {}
    unit = SystemdUnit(UNIT, lambda name: bus.setdefault("u", InterruptedBus(name)))
    assert unit.restart() == "/org/freedesktop/systemd1/job/7"
    assert bus["u"].calls == 3

    class Refusing(InterruptedBus):
        def Restart(self, mode: bytes) -> bytes:  # noqa: N802
            raise OSError("Access denied")

    with pytest.raises(UnitError):
        SystemdUnit(UNIT, Refusing).restart()


class InterruptedReads:
    """pystemd's Unit whose property reads are cut by a signal (`[err -4]`) `cut` times, then answer."""

    def __init__(self, cut: int) -> None:
        self.Unit, self.Service = self, self
        self.cut = cut
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        self.reads += 1
        if self.cut:
            self.cut -= 1
            raise OSError("[err -4]: b'Interrupted system call'")
        return {"InvocationID": bytes.fromhex(INV), "Job": (0, b"/"), "ControlGroup": b"/system.slice/x",
                "InactiveExitTimestamp": int(T0 * 1e6), "ActiveState": b"activating", "SubState": b"start",
                "LoadState": b"loaded"}[name]


def test_eintr_is_retried_inside_a_facts_read() -> None:
    """PROBE-S4 L-5: a facts read cut by a signal (a SIGHUP storm) failed at once; the verdict's alert
    then said "not restarting: the unit is unknown (stopped by the operator?)"."""
    bus = InterruptedReads(cut=3)
    unit = SystemdUnit(UNIT, lambda name: bus)
    facts = unit.facts()
    assert facts.invocation_id == INV and facts.active_state == "activating" and bus.cut == 0
    bus.cut = 2
    assert unit.load_state() == "loaded"
    bus.cut = 99  # a read that fails every time is still a UnitError, after EINTR_TRIES tries
    with pytest.raises(UnitError, match="cannot read sglang-kimi.service's state over D-Bus"):
        unit.facts()
    assert bus.cut == 99 - EINTR_TRIES


def test_nul_and_control_bytes_never_reach_a_hook_environment_raw() -> None:
    """H-1: `ValueError: embedded null byte` out of the spawn crashed the daemon."""
    assert env_safe("a\x00b\x1b[31m\tc\x7f") == "a\\x00b\\x1b[31m\tc\\x7f"
    action = Action(kind="hook", message="TP4 crashed: RuntimeError: bad\x00byte\r\n$(id)", verdict_kind="crashed",
                    priority=3, invocation_id=INV, hook="h")
    env = hook_env(action, UNIT)
    assert all("\x00" not in v and "\r" not in v for v in env.values())
    assert env["PHASEWATCH_MESSAGE"] == "TP4 crashed: RuntimeError: bad\\x00byte\\x0d\\x0a$(id)"


def test_an_unknown_hook_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert HookRunner(UNIT, {})(Action(kind="hook", message="m", verdict_kind="stalled", priority=4,
                                           invocation_id=INV, hook="gone")) is None
    assert "hook gone is not configured" in caplog.text


def test_reload_rebuilds_hooks_evidence_and_the_guarded_restart(tmp_path: Path) -> None:
    """M-1: reload said "config reloaded" and kept the start-up's hooks, evidence and leftovers."""
    path = tmp_path / "c.yaml"
    path.write_text(f"unit: {UNIT}\n")
    config = load_config(path)
    clock = FakeClock(wall=T0)
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    app = compose(config, World(follower=ScriptedJournal(), unit=unit, alerter=RecordingAlerter(UNIT),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(reload=lambda: load_config(path)))
    assert app.actor.guarded is None
    path.write_text(f"unit: {UNIT}\nhooks:\n  h:\n    exec: [/bin/true]\n    timeout: 3s\nleftovers:\n"
                    "  check: true\nevidence:\n  timeout: 3s\nrank_processes: host\n"
                    "actions:\n  stalled: [evidence, alert, hook:h, restart]\n")
    assert app.reload()
    runner = app.actor.runner
    assert isinstance(runner.run_hook, HookRunner) and runner.run_hook.hooks["h"].timeout == 3.0
    assert runner.evidence is not None and runner.evidence.writer.settings.timeout == 3.0  # type: ignore
    assert app.actor.guarded is not None and app.ranks.host_wide


def test_a_guarded_restart_waiting_for_leftovers_is_resumed_after_a_daemon_restart(tmp_path: Path) -> None:
    """H-6: GuardedRestart.pending lived in memory only: the server stayed stopped."""
    config = Config(unit=UNIT, phases=LOAD, leftovers=Leftovers(check=True, wait=600))
    app, journal, unit, _, _, clock = make(tmp_path, config)
    load_begins(journal)
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    assert unit.calls == ["stop"]
    assert app.store.load().guarded is not None
    # The daemon restarts while the start waits; then the unit is down and nothing survived.
    stopped = RecordingUnit(UnitFacts("inactive", "dead", INV, control_group=None, started_at=T0))
    again, journal2, unit2, _, _, clock2 = make(tmp_path, config, unit=stopped)
    clock2.jump(65)
    again.start()
    assert again.actor.guarded is not None and again.actor.guarded.pending is not None
    clock2.jump(2)
    again.step(max_wait=0)
    assert unit2.calls == ["start"] and unit2.restarts == []
    assert again.store.load().guarded is None


def test_the_check_after_a_stop_says_gpu_memory_was_not_checked(caplog: pytest.LogCaptureFixture) -> None:
    """L-3: "nothing of it survived" although nvidia-smi did not finish."""
    stops = UnguardedStops(UNIT, lambda old: [], lambda a: None, lambda: False)
    from phasewatch.sinks.unguarded_stops import Due
    stops.due.append(Due(INV, {}, T0))
    with caplog.at_level(logging.INFO):
        stops.tick(T0 + 1)
    assert "GPU memory not checked" in caplog.text


@pytest.mark.parametrize(("extra", "ok"), [
    ("evidence:\n  timeout: 10m\nhooks:\n  h:\n    exec: [/bin/true]\n    timeout: 1h\n"
     "actions:\n  stalled: [evidence, alert, hook:h, restart]\n", False),
    ("hooks:\n  h:\n    exec: [/bin/true]\n    timeout: 4m\n  g:\n    exec: [/bin/true]\n    timeout: 2m\n"
     "actions:\n  stalled: [alert, hook:h, hook:g, restart]\n", False),
    ("hooks:\n  h:\n    exec: [/bin/true]\n"
     "actions:\n  stalled: [evidence, alert, hook:h, restart]\n", True),
])
def test_config_refuses_an_action_chain_past_its_bound(tmp_path: Path, extra: str, ok: bool) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"unit: {UNIT}\n" + extra)
    if ok:
        load_config(path)
        return
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "actions.stalled" and "at most 300s" in str(info.value)


def test_pending_actions_in_a_hostile_state_file_are_dropped_not_fatal(tmp_path: Path) -> None:
    from phasewatch.sinks.state.store import decode

    saved = decode({"pending": [{"kind": "restart", "message": 1}, {"kind": "rm -rf", "message": "m"}, "x",
                                {"kind": "restart", "message": "m", "verdict_kind": "stalled", "priority": 4,
                                 "invocation_id": INV}],
                    "guarded": {"action": {"kind": "restart"}, "until": "later"}})
    assert [(a.kind, a.invocation_id) for a in saved.pending] == [("restart", INV)]
    assert saved.guarded is None


def test_a_restart_is_not_made_on_a_start_up_begun_while_its_hook_ran(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """PROBE-S4 H-1: the operator restarted the unit while the hook ran; the restart decided for the
    hung start-up killed the operator's new one. Not made, said, counted, and never tried again."""
    registry = CollectorRegistry()
    app, journal, unit, _, _, clock = make(tmp_path, HOOKED, exporter=Exporter(HOOKED, registry))
    new = "f" * 32

    def operator_restarts_meanwhile(action: Action) -> None:
        unit.status = UnitFacts("activating", "start", new, control_group=None, started_at=T0 + 62)

    app.actor.runner.run_hook = operator_restarts_meanwhile
    load_begins(journal)
    app.start()
    clock.jump(61)
    with caplog.at_level(logging.WARNING):
        app.step(max_wait=0)
    assert unit.restarts == [] and unit.calls == []
    assert f"the restart decided for {INV} (stalled) is not made: the unit was started again since" in caplog.text
    assert app.store.load().pending == () and app.actor.restart_tries == {}
    assert registry.get_sample_value("phasewatch_restarts_not_made_total",
                                     {"unit": UNIT, "why": "started_again"}) == 1.0
    assert app.actor.why(new, clock.wall())["previous_startup"] is None  # phasewatch did not start it
    for _ in range(3):
        clock.jump(10)
        app.step(max_wait=0)
    assert unit.restarts == []


def test_a_restart_is_made_as_decided_when_the_check_cannot_be_made(caplog: pytest.LogCaptureFixture) -> None:
    """The facts read fails (D-Bus): the stuck start-up is still restarted, and the log says so."""
    class Unreadable(RecordingUnit):
        def facts(self) -> UnitFacts:
            raise UnitError("cannot read sglang-kimi.service's state over D-Bus: timed out")

    unit = Unreadable(UnitFacts("activating", "start", INV))
    runner = ActionRunner(UNIT, unit, lambda action: None, wall=lambda: T0)
    restart = Action(kind="restart", message="stuck", verdict_kind="stalled", priority=4, invocation_id=INV)
    with caplog.at_level(logging.WARNING):
        done = runner.run(Job((restart,), None, UnitFacts("activating", "start", INV)))
    assert unit.restarts == [INV] and done.job_path is not None and done.restart_skipped is None
    assert f"cannot check that {INV} still runs before restarting it" in caplog.text


def test_the_guarded_restart_is_not_begun_on_a_start_up_begun_since() -> None:
    """The stop of a guarded restart (leftovers check) is checked the same way."""
    class Guard:
        begun: list[Action] = []

        def begin(self, action: Action, control_group: str | None, now: float) -> str:
            self.begun.append(action)
            return "/job/stop"

    guard = Guard()
    unit = RecordingUnit(UnitFacts("activating", "start", "f" * 32))
    runner = ActionRunner(UNIT, unit, lambda action: None, wall=lambda: T0, guarded=guard)
    done = runner.run(Job((Action(kind="restart", message="stuck", verdict_kind="stalled", priority=4,
                                  invocation_id=INV),), None, unit.status))
    assert guard.begun == [] and done.restart_skipped is not None and done.job_path is None
    same = runner.run(Job((Action(kind="restart", message="stuck", verdict_kind="stalled", priority=4,
                                  invocation_id="f" * 32),), None, unit.status))
    assert len(guard.begun) == 1 and same.job_path == "/job/stop"
