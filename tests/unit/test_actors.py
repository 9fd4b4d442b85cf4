"""The acting parts a config shapes (sinks/actors.py): built from a config, carried over a reload
(a start that waits for leftovers goes on, whatever the new config says), resumed at the daemon's
start from the state file."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from phasewatch.config.load import Config
from phasewatch.config.sections import Leftovers
from phasewatch.sinks.actors import ActorInputs, Actors, build_actors, carry_over, resume_guarded
from phasewatch.sinks.state.store import Saved
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Action, ActionKind, Memory
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
RESTART = Action(kind=ActionKind.RESTART, message="TP3 stalled", verdict_kind="stalled", priority=2,
                 invocation_id="inv-1", phase="cuda_graph_capture", rank="TP3")
ALERT = Action(kind=ActionKind.ALERT, message="TP3 stalled", verdict_kind="stalled", priority=2,
               invocation_id="inv-1")


def actors(tmp_path: Path, leftovers: Leftovers, unit: RecordingUnit | None = None) -> Actors:
    config = Config(unit=UNIT, leftovers=leftovers)
    return build_actors(config, ActorInputs(unit or RecordingUnit(UnitFacts("active", "running", "inv-1")),
                                            lambda action: None, ProcessTable(), tmp_path))


def test_the_config_says_which_actors_there_are(tmp_path: Path) -> None:
    both = actors(tmp_path, Leftovers(check=True, wait=60, after_any_stop=True))
    assert both.guarded is not None and both.guarded.wait == 60
    assert both.unguarded is not None and both.hooks.unit == UNIT
    neither = actors(tmp_path, Leftovers(check=False, after_any_stop=False))
    assert (neither.guarded, neither.unguarded) == (None, None)


def test_a_start_waiting_for_leftovers_goes_on_when_the_new_config_turns_the_check_off(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = actors(tmp_path, Leftovers(check=True))
    assert old.guarded is not None
    old.guarded.begin(RESTART, "/system.slice/sglang-kimi.service", T0)
    new = carry_over(old, actors(tmp_path, Leftovers(check=False)))
    assert new.guarded is old.guarded and new.guarded.pending is not None
    assert "the start that waits for leftovers goes on" in caplog.text


def test_a_reload_carries_what_the_old_actors_were_doing(tmp_path: Path) -> None:
    old = actors(tmp_path, Leftovers(check=True, wait=60))
    assert old.guarded is not None and old.unguarded is not None
    old.guarded.begin(RESTART, "/system.slice/sglang-kimi.service", T0)
    old.guarded.stopped = True
    old.unguarded.checked = {"inv-0"}
    made = actors(tmp_path, Leftovers(check=True, wait=900))
    new = carry_over(old, made)
    assert new is made and new.guarded is not old.guarded and new.guarded is not None
    assert new.guarded.wait == 900  # the new config's
    assert (new.guarded.pending, new.guarded.stopped) == (old.guarded.pending, True)
    assert new.unguarded is not None and new.unguarded.checked == {"inv-0"}


def test_nothing_guarded_in_the_state_file_leaves_the_pending_actions_as_saved(tmp_path: Path) -> None:
    unit = RecordingUnit(UnitFacts("inactive", "dead", "inv-1"))
    saved = Saved(Memory(), None, "inv-1", pending=(ALERT, RESTART))
    assert resume_guarded(None, saved, unit, unit.facts(), UNIT) == (ALERT, RESTART)
    assert unit.calls == []


@pytest.mark.parametrize("state, started", [("inactive", True), ("failed", True), ("active", False)])
def test_a_saved_start_waiting_for_leftovers_with_the_check_now_off_starts_a_stopped_unit(
        tmp_path: Path, state: str, started: bool) -> None:
    unit = RecordingUnit(UnitFacts(state, "dead", "inv-1"))
    record = {"action": asdict(RESTART), "control_group": None, "until": T0 + 600}
    saved = Saved(Memory(), None, "inv-1", pending=(ALERT, RESTART), guarded=record)
    assert resume_guarded(None, saved, unit, unit.facts(), UNIT) == (ALERT,)  # its stop was made
    assert (unit.calls == ["start"]) is started


def test_a_saved_start_waiting_for_leftovers_waits_again(tmp_path: Path) -> None:
    unit = RecordingUnit(UnitFacts("inactive", "dead", "inv-1"))
    guarded = actors(tmp_path, Leftovers(check=True), unit).guarded
    assert guarded is not None
    record = {"action": asdict(RESTART), "control_group": "/system.slice/sglang-kimi.service", "until": T0 + 600}
    saved = Saved(Memory(), None, "inv-1", pending=(RESTART,), guarded=record)
    assert resume_guarded(guarded, saved, unit, unit.facts(), UNIT) == ()
    assert guarded.pending is not None and guarded.pending.action == RESTART and guarded.pending.until == T0 + 600
    assert unit.calls == []
