"""SIGHUP's work in the daemon's loop: the config file read again; a new limit judges from then on; a
config that does not load, or names another unit, is refused with the old one kept and the error
logged with key, file and line. (The signal itself and `systemctl reload`: tests/e2e.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import load_config
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
ONE_MINUTE = f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 1m}}\n"
TEN_MINUTES = f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 10m}}\n"


def started(tmp_path: Path, text: str) -> tuple[Daemon, Path, RecordingUnit, RecordingNotifier, FakeClock]:
    path = tmp_path / f"{UNIT}.yaml"
    path.write_text(text)
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    notifier = RecordingNotifier()
    app = compose(load_config(path), World(
            follower=journal, unit=unit, alerter=RecordingAlerter(UNIT), notifier=notifier,
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(reload=lambda: load_config(path)))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    app.start()
    return app, path, unit, notifier, clock


def test_a_reloaded_limit_judges_from_then_on(tmp_path: Path) -> None:
    app, path, unit, notifier, clock = started(tmp_path, ONE_MINUTE)
    path.write_text(TEN_MINUTES)
    app.reload_requested = True  # what the SIGHUP handler does
    clock.jump(30)
    app.step(max_wait=0)
    assert app.config.limits(Phase.WEIGHT_LOAD).deadline == 600
    assert notifier.sent[-1] == "STATUS=sglang-kimi: weight_load 8/8 ranks, 30s of 10m"
    clock.jump(31)  # past the old minute
    app.step(max_wait=0)
    assert unit.restarts == []
    clock.jump(600)
    app.step(max_wait=0)
    assert unit.restarts == [INV]


@pytest.mark.parametrize(("text", "key", "line"), [
    (f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 20x}}\n", "phases.weight_load.deadline", 3),
    (f"unit: {UNIT}\nphases: [\n", "config", None),
    (f"unit: {UNIT}\n\nnonsense: 1\n", "nonsense", 3),
    ("unit: other.service\n", "unit", None),
])
def test_a_bad_reload_keeps_the_old_config(tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, key: str,
                                           line: int | None) -> None:
    app, path, unit, notifier, clock = started(tmp_path, ONE_MINUTE)
    old = app.config
    path.write_text(text)
    with caplog.at_level(logging.ERROR, logger="phasewatch.app"):
        assert app.reload() is False
    assert app.config is old and app.pipeline.config.limits(Phase.WEIGHT_LOAD).deadline == 60
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "reload refused, the old config stays in force" in error
    assert f"{key}:" in error and str(path) in error
    if line is not None:
        assert f"line {line}" in error
    clock.jump(1)
    app.step(max_wait=0)
    status = [m for m in notifier.sent if m.startswith("STATUS=")][-1]
    assert "(reload refused, the old config stays in force: " in status and f"{key}:" in status  # issue 36
    clock.jump(60)
    app.step(max_wait=0)
    assert unit.restarts == [INV]  # judged by the minute still in force
    path.write_text(ONE_MINUTE)
    assert app.reload() is True
    app.step(max_wait=0)
    assert "reload refused" not in [m for m in notifier.sent if m.startswith("STATUS=")][-1]


def test_without_a_reader_there_is_nothing_to_reload(tmp_path: Path) -> None:
    app, _, _, notifier, _ = started(tmp_path, ONE_MINUTE)
    app.read_config = None
    sent = list(notifier.sent)
    assert app.reload() is False and notifier.sent == sent


def test_check_config_as_the_instance_reads_it_is_what_reload_runs_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36: `ExecReload=` runs `check-config --instance %i /etc/phasewatch/%i.yaml` before the
    signal: the file under either spelling, its unit: the instance's; a bad one fails the reload (78)."""
    from phasewatch.cli import main

    (tmp_path / f"{UNIT}.yaml").write_text(ONE_MINUTE)  # the older long spelling only
    assert main(["check-config", "--instance", "sglang-kimi", str(tmp_path / "sglang-kimi.yaml")]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / UNIT}.yaml: OK")
    assert main(["check-config", "--instance", "other", str(tmp_path / "other.yaml")]) == 78  # (no such file)
    (tmp_path / "other.yaml").write_text(ONE_MINUTE)
    assert main(["check-config", "--instance", "other", str(tmp_path / "other.yaml")]) == 78
    assert "is not this daemon's instance other" in capsys.readouterr().err
