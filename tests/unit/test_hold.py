"""Issue 12, point 5: `phasewatch hold` — verdicts alerted, nothing restarted, across a daemon
restart (the hold is a file in the state directory), and the hold ends by itself."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.hold import HoldFile
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Hold
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})


def daemon(tmp_path: Path, at: float) -> tuple[Daemon, ScriptedJournal, RecordingUnit, RecordingAlerter, FakeClock]:
    clock = FakeClock(wall=at)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter = RecordingAlerter(UNIT)
    app = compose(CONFIG, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    return app, journal, unit, alerter, clock


def test_a_hold_is_respected_across_a_daemon_restart_and_ends_by_itself(tmp_path: Path) -> None:
    HoldFile(tmp_path, UNIT).write(Hold(T0 + 600, "debugging NCCL by hand"))
    first, _, unit, alerter, clock = daemon(tmp_path, T0)
    first.start()
    clock.jump(61)
    first.step(max_wait=0)
    [alert] = alerter.sent
    assert "not restarting: held by the operator for 8m" in alert["MESSAGE"]
    assert "(debugging NCCL by hand)" in alert["MESSAGE"]
    assert unit.restarts == []
    status = json.loads((tmp_path / f"{UNIT}.status.json").read_text())
    assert status["hold"]["reason"] == "debugging NCCL by hand" and status["hold"]["until_seconds"] == T0 + 600
    # phasewatch itself restarts during the hold: the hold still stands, the alert is not repeated.
    again, _, unit2, alerter2, clock2 = daemon(tmp_path, T0 + 120)
    again.start()
    again.step(max_wait=0)
    assert unit2.restarts == [] and alerter2.sent == []
    clock2.jump(599 - 120)
    again.step(max_wait=0)
    assert unit2.restarts == []
    clock2.jump(2)  # the hold ended: the stall that still stands is acted on now
    again.step(max_wait=0)
    assert unit2.restarts == [INV]


def test_hold_and_release_from_the_command_line(tmp_path: Path, capsys: object) -> None:
    StateStore(tmp_path, UNIT).path.write_text("{}")  # the daemon watches it (H-5: else refused)
    assert main(["hold", UNIT, "--for", "1h", "--reason", "bisecting a driver", "--state-dir", str(tmp_path)]) == 0
    hold = HoldFile(tmp_path, UNIT).read(time.time())  # written for "now": in force now
    assert hold is not None and hold.reason == "bisecting a driver"
    assert main(["release", UNIT, "--state-dir", str(tmp_path)]) == 0
    assert HoldFile(tmp_path, UNIT).read(time.time()) is None


def test_a_hold_without_an_end_is_refused(tmp_path: Path) -> None:
    StateStore(tmp_path, UNIT).path.write_text("{}")
    assert main(["hold", UNIT, "--for", "never", "--reason", "x", "--state-dir", str(tmp_path)]) != 0
    assert not HoldFile(tmp_path, UNIT).path.exists()


def test_a_hold_file_that_is_not_ours_is_no_hold(tmp_path: Path) -> None:
    HoldFile(tmp_path, UNIT).path.write_text('{"until": "soon"}')
    assert HoldFile(tmp_path, UNIT).read(T0) is None


def test_status_table_shows_the_hold_and_why_the_current_start_up_exists() -> None:
    from phasewatch.commands.status import render_table

    document = {"unit": UNIT, "hold": {"until": "2027-01-15T08:00:00Z", "reason": "bisecting a driver"},
                "previous_startup": {"invocation_id": "aaaa", "verdict": "stalled", "message": "TP3 stalled",
                                     "evidence": "/var/lib/phasewatch/evidence/x-aaaa-stalled.txt"}}
    table = render_table(document)
    assert "bisecting a driver (verdicts alerted, nothing restarted)" in table
    assert "started by phasewatch: the previous start-up aaaa was stalled: TP3 stalled" in table
    assert "evidence: /var/lib/phasewatch/evidence/x-aaaa-stalled.txt" in table


def test_why_the_last_restart_happened_survives_a_daemon_restart(tmp_path: Path) -> None:
    first, _, unit, _, clock = daemon(tmp_path, T0)
    first.start()
    clock.jump(61)
    first.step(max_wait=0)
    assert unit.restarts == [INV]
    # phasewatch itself restarts while the new start-up runs: its status still says why it exists.
    new = "fedcba9876543210fedcba9876543210"
    again, journal, unit2, _, _ = daemon(tmp_path, T0 + 70)
    unit2.status = UnitFacts("activating", "start", new, control_group=None, started_at=T0 + 65)
    journal.push(JournalRecord("[2026-11-29 08:01:05 TP0] Load weight begin. avail mem=137.95 GB", T0 + 65,
                               pid=300, invocation_id=new))
    again.start()
    status = json.loads((tmp_path / f"{UNIT}.status.json").read_text())
    assert status["invocation_id"] == new
    assert (status["previous_startup"]["invocation_id"], status["previous_startup"]["verdict"]) == (INV, "stalled")


def test_a_broken_last_restart_in_the_state_file_is_dropped_not_fatal(tmp_path: Path) -> None:
    from phasewatch.sinks.state.store import decode

    assert decode({"last_restart": {"invocation_id": 7}}).last_restart is None
    kept = decode({"last_restart": {"invocation_id": "a", "verdict": "stalled", "message": "m", "evidence": None,
                                    "junk": [1]}}).last_restart
    assert kept == {"invocation_id": "a", "verdict": "stalled", "message": "m", "evidence": None, "quote": None}


def test_probe_h5_hold_takes_the_short_name_status_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PROBE-S3 H-5: `hold sglang-kimi` wrote sglang-kimi.hold.json; the daemon reads
    sglang-kimi.service.hold.json, so nothing was held."""
    StateStore(tmp_path, UNIT).path.write_text("{}")
    assert main(["hold", "sglang-kimi", "--for", "1h", "--reason", "bisecting", "--state-dir", str(tmp_path)]) == 0
    assert HoldFile(tmp_path, UNIT).read(time.time()) is not None  # the file the daemon reads
    assert not (tmp_path / "sglang-kimi.hold.json").exists()
    assert "sglang-kimi.service: held for 1h" in capsys.readouterr().out
    assert main(["release", "sglang-kimi", "--state-dir", str(tmp_path)]) == 0
    assert HoldFile(tmp_path, UNIT).read(time.time()) is None


@pytest.mark.parametrize("name", ["sglang-kmi.service", "sglang-kmi", "../../etc/x.service"])
def test_probe_h5_a_unit_nothing_names_is_refused(tmp_path: Path, name: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    StateStore(tmp_path, UNIT).path.write_text("{}")
    # A unit name nothing names is a typo (3, with the units phasewatch watches); no name at all, usage (64).
    expected = 64 if "/" in name else 3
    assert main(["hold", name, "--for", "1h", "--reason", "x", "--state-dir", str(tmp_path)]) == expected
    assert main(["release", name, "--state-dir", str(tmp_path)]) == expected
    err = capsys.readouterr().err
    assert f"name it\n  is the name right? units phasewatch watches: {UNIT}" in err or "is no unit name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{UNIT}.state.json"]


def test_probe_l1_a_symlink_is_not_followed_for_reading_or_writing(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"until": T0 + 60, "reason": "x"}))
    HoldFile(tmp_path, UNIT).path.symlink_to(target)
    assert HoldFile(tmp_path, UNIT).read(T0) is None
    HoldFile(tmp_path, UNIT).path.with_suffix(".tmp").symlink_to(tmp_path / "victim")
    HoldFile(tmp_path, UNIT).write(Hold(T0 + 60, "y"))
    assert not (tmp_path / "victim").exists() and HoldFile(tmp_path, UNIT).read(T0) == Hold(T0 + 60, "y")


@pytest.mark.parametrize("until", ["9" * 400, "9" * 4000, "1e308", "1e18", str(2**70), "true"])
def test_probe_l1_an_absurd_until_is_no_hold_and_no_crash(tmp_path: Path, until: str) -> None:
    HoldFile(tmp_path, UNIT).path.write_text(f'{{"until": {until}, "reason": "x"}}')
    assert HoldFile(tmp_path, UNIT).read(T0) is None


def test_a_hold_of_a_year_is_still_a_hold(tmp_path: Path) -> None:
    HoldFile(tmp_path, UNIT).write(Hold(T0 + 365 * 86400, "long"))
    assert HoldFile(tmp_path, UNIT).read(T0) is not None
