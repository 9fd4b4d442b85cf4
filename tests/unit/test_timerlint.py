"""Engine-timer lint: one test per timer that can end a start-up before phasewatch's limit does, the
learned-duration check, and the daemon's once-per-start-up alert (edges faked; the D-Bus read is the
RecordingUnit's `unit_timers`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from fakes import ScriptedJournal
from phasewatch.clock import FakeClock
from phasewatch.commands.status import render_table
from phasewatch.compose import World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s4_judge.timerlint import UnitTimers, engine_timers, lint
from phasewatch.stages.s5_act.respond import MESSAGE_IDS
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang.service"
QUIET = Config(unit=UNIT, rank_skew=300, phases={
    **DEFAULT_LIMITS, Phase.KV_CACHE_ALLOC: PhaseLimits(600, 300), Phase.CUDA_GRAPH_CAPTURE: PhaseLimits(1800, 500),
    Phase.DRAFT_CUDA_GRAPH_CAPTURE: PhaseLimits(1200, 500), Phase.DRAFT_WEIGHT_LOAD: PhaseLimits(600, 300),
    Phase.DIST_INIT: PhaseLimits(600, 300), Phase.WARMUP: PhaseLimits(540, 240)})


def codes(config: Config, args: dict[str, str] | None = None, unit: UnitTimers | None = None,
          healthy: dict[Phase, float] | None = None) -> list[str]:
    return [w.code for w in lint(config, args or {}, unit or UnitTimers(), healthy)]


def with_limit(phase: Phase, deadline: float | None, stall: float | None, **changes: float) -> Config:
    return Config(unit=UNIT, phases={**QUIET.phases, phase: PhaseLimits(deadline, stall)},
                  rank_skew=changes.get("rank_skew", QUIET.rank_skew))


def test_limits_inside_every_timer_give_no_warning() -> None:
    assert codes(QUIET) == []


def test_engine_defaults_and_overrides() -> None:
    assert engine_timers({}, {}) == {"post_load_barrier": 480, "nccl_collective": 600, "dist_rendezvous": 1800,
                                     "warmup": 600, "scheduler_watchdog": 300}
    timers = engine_timers({"dist_timeout": "120", "watchdog_timeout": "900.0", "soft_watchdog_timeout": "None",
                            "disaggregation_mode": "'prefill'"}, {"SGLANG_WARMUP_TIMEOUT": "-1"})
    assert timers["nccl_collective"] == timers["dist_rendezvous"] == 120 and timers["warmup"] == 1800
    assert timers["scheduler_watchdog"] == 900
    assert "scheduler_watchdog" not in engine_timers({"soft_watchdog_timeout": "300"}, {})


def test_post_load_barrier_480s_preempts_a_larger_rank_skew() -> None:
    assert codes(Config(unit=UNIT, phases=QUIET.phases, rank_skew=500)) == ["skew_after_barrier"]
    assert codes(Config(unit=UNIT, phases=QUIET.phases, rank_skew=math.inf)) == []  # no skew limit at all


def test_nccl_timeout_preempts_stall_windows_of_collective_phases() -> None:
    assert codes(QUIET, {"dist_timeout": "400"}) == ["stall_after_nccl", "stall_after_nccl",
                                                     "dist_init_deadline_after_rendezvous"]
    [warning] = lint(with_limit(Phase.CUDA_GRAPH_CAPTURE, 1800, 1200), {}, UnitTimers())
    assert (warning.code, warning.phase, warning.timer_seconds, warning.limit_seconds) == \
        ("stall_after_nccl", "cuda_graph_capture", 600, 1200)
    assert "NCCL timeout" in warning.message
    # --dist-timeout below the skew: the waiting ranks abort first
    assert "skew_after_nccl" in codes(QUIET, {"dist_timeout": "200"})


def test_dist_timeout_preempts_the_dist_init_deadline() -> None:
    assert codes(QUIET, {"dist_timeout": "500"}) == ["dist_init_deadline_after_rendezvous"]
    assert codes(with_limit(Phase.DIST_INIT, 2400, 300)) == ["dist_init_deadline_after_rendezvous"]


def test_warmup_timeout_from_the_units_environment() -> None:
    assert codes(QUIET, unit=UnitTimers(environment={"SGLANG_WARMUP_TIMEOUT": "300"})) == \
        ["warmup_deadline_after_engine"]
    assert codes(with_limit(Phase.WARMUP, 720, 240)) == ["warmup_deadline_after_engine"]
    assert codes(with_limit(Phase.WARMUP, 720, 240), {"disaggregation_mode": "decode"}) == []


def test_hard_scheduler_watchdog_preempts_a_long_warmup_stall() -> None:
    assert codes(with_limit(Phase.WARMUP, 540, 400)) == ["warmup_stall_after_watchdog"]
    assert codes(with_limit(Phase.WARMUP, 540, 400), {"soft_watchdog_timeout": "300"}) == []
    assert codes(with_limit(Phase.WARMUP, 540, 400), {"watchdog_timeout": "600"}) == []


def test_timeout_start_sec_counts_only_when_the_start_job_waits_for_the_start_up() -> None:
    short = UnitTimers(timeout_start=900, service_type="notify")
    [warning] = lint(QUIET, {}, short)  # launch 10m + dist_init 10m: past 15m
    assert warning.code == "deadline_after_timeout_start" and warning.phase == "dist_init"
    assert "TimeoutStartSec=15m" in warning.message and "add up to 20m" in warning.message
    assert codes(QUIET, unit=UnitTimers(timeout_start=900, service_type="simple")) == []
    assert codes(QUIET, unit=UnitTimers(timeout_start=900, service_type="simple", has_exec_start_post=True)) == \
        ["deadline_after_timeout_start"]
    assert codes(QUIET, unit=UnitTimers(timeout_start=math.inf, service_type="notify")) == []


def test_a_deadline_below_the_learned_healthy_duration() -> None:
    [warning] = lint(QUIET, {}, UnitTimers(), {Phase.WEIGHT_LOAD: 3000.0, Phase.KV_CACHE_ALLOC: 30.0})
    assert (warning.code, warning.phase, warning.limit_seconds) == ("deadline_below_healthy", "weight_load", 2700)


# -- in the daemon and in `status` ---------------------------------------------------------------

INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def test_the_daemon_warns_once_per_start_up_with_its_message_id(tmp_path: Path) -> None:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0),
                         unit_timers=UnitTimers(timeout_start=600, service_type="notify"))
    alerter = RecordingAlerter(UNIT)
    app = compose(QUIET, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    journal.push(JournalRecord("[2026-11-29 08:00:00] server_args=ServerArgs(model_path='m', tp_size=2, "
                               "dist_timeout=300, watchdog_timeout=300)", T0, pid=100, invocation_id=INV))
    app.start()
    journal.push(JournalRecord("[2026-11-29 08:00:05 TP0] Load weight begin. avail mem=137.95 GB", T0 + 5,
                               pid=101, invocation_id=INV))
    clock.jump(5)
    app.step(max_wait=0)
    [alert] = alerter.sent
    assert alert["MESSAGE_ID"] == MESSAGE_IDS["timer_lint"] and alert["PRIORITY"] == "4"
    assert alert["PHASEWATCH_CAUSE"] == "stall_after_nccl,stall_after_nccl,dist_init_deadline_after_rendezvous," \
        "deadline_after_timeout_start"
    assert "TimeoutStartSec=10m" in alert["MESSAGE"] and alert["PHASEWATCH_INVOCATION"] == INV
    status = json.loads(StateStore(tmp_path, UNIT).status_path.read_text())
    assert len(status["timer_warnings"]) == 4
    clock.jump(5)
    journal.push(JournalRecord("[2026-11-29 08:00:10 TP1] Load weight begin. avail mem=137.95 GB", T0 + 10,
                               pid=102, invocation_id=INV))
    app.step(max_wait=0)
    assert len(alerter.sent) == 1  # once per start-up


def test_status_shows_a_compiling_rank_and_the_cold_start() -> None:
    rank = {"phase": "weight_load", "phase_ended": False, "seen": True, "progress": None, "quiet_seconds": 3.0,
            "jit_compile": {"in": "weight_load", "compiling": True}}
    document = {"unit": UNIT, "now": "2026-02-22T23:52:00.000Z", "timer_warnings": [],
                "invocation": {"invocation_id": "x", "outcome": "starting", "phase": "weight_load", "cold": True,
                               "started_at": "2026-02-22T23:50:00.000Z", "ranks": {"TP0": rank}, "verdicts": []}}
    text = render_table(document)
    assert "weight_load + jit_compile" in text and "cold start (JIT compiling)" in text


def test_status_shows_the_timer_warnings() -> None:
    document = {"unit": UNIT, "invocation": None, "active_state": "activating",
                "timer_warnings": ["rank_skew 10m is longer than SGLang's post-load barrier"]}
    text = render_table(document)
    assert "timer warnings" in text and "rank_skew 10m is longer" in text
