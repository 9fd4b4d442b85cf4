"""SIGHUP's work in the daemon's loop: the config file read again; a new limit judges from then on; a
config that does not load, or names another unit, is refused with the old one kept and the error
logged with key, file and line. (The signal itself and `systemctl reload`: tests/e2e.)"""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import Config, load_config
from phasewatch.records import Event, EventKind, JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.history import History
from phasewatch.sinks.hooks import HookRunner
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.gpu import NvmlSource
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


INV2 = "fedcba9876543210fedcba9876543210"
BEFORE = (f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 1m}}\nhealth:\n  failures: 3\n"
          "metrics:\n  listen: 127.0.0.1:9877\n")
AFTER = (f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 10m}}\nhealth:\n  url: http://127.0.0.1:1/h\n"
         "  failures: 5\nrank_processes: host\nhooks:\n  h:\n    exec: [/bin/true]\n    timeout: 3s\n"
         "actions:\n  stalled: [alert, hook:h, restart]\nvitals:\n  gpu: false\nmetrics:\n  listen: 127.0.0.1:9878\n")
# What each part made again on a reload takes from the new config or from the parts it is wired to; every
# other attribute is the old part's own (its state carried over, the very object).
MADE_AGAIN = {"health": {"config"}, "signs": {"config", "gpu"}, "faults": {"gpu_ranks", "nvml"},
              "actor": {"config", "parts", "runner"}, "group": {"config", "actor", "hold", "read_facts"},
              "history": {"unit", "forget", "ended_by", "leftovers_seen"}, "systemd": {"config"}}


def no_nvml() -> ModuleType:
    raise ImportError("no pynvml here")


def same(new: object, old: object) -> bool:
    """The very object (a method: of the very object)."""
    if isinstance(new, types.MethodType) and isinstance(old, types.MethodType):
        return new.__self__ is old.__self__ and new.__func__ is old.__func__
    return new is old


def configs_in(root: object) -> Iterator[tuple[str, Config]]:
    """Every `Config` the parts hold (their attributes, and what those hold, within phasewatch's own
    objects; closures' cells and bound methods' owners too)."""
    seen: set[int] = set()
    todo: list[tuple[str, object]] = [("parts", root)]
    while todo:
        path, item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Config):
            yield path, item
            continue
        if isinstance(item, (list, tuple, set, frozenset)):
            todo += [(f"{path}[]", x) for x in item]
        elif isinstance(item, dict):
            todo += [(f"{path}[{k!r}]", v) for k, v in item.items()]
        elif isinstance(item, types.MethodType):
            todo.append((f"{path}.__self__", item.__self__))
        elif isinstance(item, (types.FunctionType, functools.partial)):
            function = item.func if isinstance(item, functools.partial) else item
            cells = [c.cell_contents for c in getattr(function, "__closure__", None) or () if c.cell_contents]
            todo += [(f"{path}<cell>", c) for c in cells]
        elif type(item).__module__.startswith("phasewatch") and hasattr(item, "__dict__"):
            todo += [(f"{path}.{name}", value) for name, value in vars(item).items()]
        elif dataclasses.is_dataclass(item) and type(item).__module__.startswith("phasewatch"):
            todo += [(f"{path}.{f.name}", getattr(item, f.name)) for f in dataclasses.fields(item)]


def test_a_reload_makes_the_parts_again_from_the_new_config_and_carries_their_state(tmp_path: Path) -> None:
    """Issue 37: a reload builds the parts from the new config (none holds the old one) and carries
    over the start-up tracked mid-phase, the restart budget used, the health probes failed in a row,
    the pidfds' and the probe's owners, the exporter (its HTTP server and registry)."""
    path = tmp_path / f"{UNIT}.yaml"
    path.write_text(BEFORE)
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    notifier = RecordingNotifier()
    config = load_config(path)
    exporter = Exporter(config, clock=clock)
    app = compose(config, World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT), notifier=notifier,
                                store=StateStore(tmp_path, UNIT), clock=clock,
                                processes=ProcessTable(proc=str(tmp_path / "proc"),
                                                       cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(reload=lambda: load_config(path), exporter=exporter, history=History(tmp_path / "h.db"),
                         gpu=NvmlSource(load=no_nvml)))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    assert unit.restarts == [INV]  # the budget's first restart
    unit.status = UnitFacts("activating", "start", INV2, control_group=None, started_at=T0 + 62)
    clock.jump(2)
    journal.push(JournalRecord("[2026-11-29 08:01:02] server_args=ServerArgs(host='0.0.0.0', port=30000, tp_size=1)",
                               T0 + 63, pid=200, invocation_id=INV2),
                 JournalRecord("[2026-11-29 08:01:02] Load weight begin. avail mem=70.00 GB", T0 + 63, pid=200,
                               invocation_id=INV2))
    app.step(max_wait=0)
    old = app.parts
    old.health.last_probe = T0 + 65
    used = app.actor.memory.budget
    assert used.restarts == 1 and app.signs.gpu is not None

    path.write_text(AFTER)
    assert app.reload()

    new = app.parts
    # (the exporter's published view is the last step's record, published again within PUBLISH_SPACING)
    assert [path for path, c in configs_in(new) if c is old.config and "._published." not in path] == []
    assert [path for path, c in configs_in(old.health) if c is old.config] == ["parts.config"]  # (the walk finds)
    assert new.config.limits(Phase.WEIGHT_LOAD).deadline == 600 and new.config.health.failures == 5
    current = app.pipeline.current()
    assert current is not None and current.invocation_id == INV2
    assert current.rank("TP0") is not None and current.rank("TP0").phase is Phase.WEIGHT_LOAD  # type: ignore
    assert app.actor.memory.budget is used and app.actor.memory.restarted == frozenset({INV})
    assert app.actor.watched_invocation == INV2
    assert new.health.url(current) == "http://127.0.0.1:1/h" and new.health.last_probe == T0 + 65
    assert new.ranks.host_wide and new.signs.gpu is None and new.faults.nvml is None  # vitals.gpu: false
    assert isinstance(new.actor.runner.run_hook, HookRunner) and set(new.actor.runner.run_hook.hooks) == {"h"}
    assert new.actor.worker is old.actor.worker and new.history is not None and old.history is not None
    assert new.history.recorded is old.history.recorded and new.group.ended_by is old.group.ended_by
    for kept in ("pipeline", "journal", "facts", "ranks", "judge", "ras", "host", "metrics", "follower", "store"):
        assert getattr(new, kept) is getattr(old, kept), kept
    assert new.metrics is not None and new.metrics.exporter is exporter and exporter.config is new.config
    assert new.health.probe is old.health.probe and new.signs.sampler is old.signs.sampler
    assert new.faults.kernel is old.faults.kernel and new.ras.ranks is new.ranks
    for name in MADE_AGAIN:
        assert getattr(new, name) is not getattr(old, name), name

    clock.jump(120)  # past the old minute: the new ten minutes judge
    app.step(max_wait=0)
    assert unit.restarts == [INV]

    again = new.rebuild(load_config(path), new)  # (what a reload does, without its step after)
    for name, made in MADE_AGAIN.items():
        before, after = getattr(new, name), getattr(again, name)
        changed = {k for k, v in vars(after).items() if not same(v, vars(before).get(k))}
        assert changed <= made, (name, changed - made)


def test_a_reload_carries_the_health_probes_failed_in_a_row(tmp_path: Path) -> None:
    """The count goes on under the new `health.failures`: 2 failed before the reload, 2 after, 4 make it."""
    app, path, unit, notifier, clock = started(tmp_path, BEFORE)
    ready = "[2026-11-29 08:00:09] The server is fired up and ready to roll!"
    app.journal.follower.push(JournalRecord(ready, T0 + 9, pid=100, invocation_id=INV))  # type: ignore[attr-defined]
    clock.jump(10)
    app.step(max_wait=0)

    def failed(at: float) -> None:  # (as the health probe's answers come)
        app.pipeline.apply(Event(EventKind.PROBE_FAILED, at, text="HTTP 503", invocation_id=INV), None)

    failed(T0 + 20)
    failed(T0 + 30)
    path.write_text(BEFORE.replace("failures: 3", "failures: 4"))
    assert app.reload()
    assert app.parts.health.config.health.failures == 4
    failed(T0 + 40)
    app.step(max_wait=0)
    assert "unhealthy" not in str(app.actor.memory.alerted)
    failed(T0 + 50)
    current = app.pipeline.current()
    assert current is not None and current.health_failures == 4
    app.step(max_wait=0)
    assert "unhealthy" in str(app.actor.memory.alerted)
