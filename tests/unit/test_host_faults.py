"""A failing host and corrupt files in the state directory (issue 9, point 4): the daemon keeps
watching and acting with history and state in memory, never moves a healthy file aside, and drops
a corrupt stored value with a warning instead of dying of it. A full and a read-only file system
for real: tests/integration/test_host_faults_tmpfs.py."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from fakes import ScriptedJournal
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Adaptive, Config, PhaseLimits
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.history import History, PhaseRecord, StartupRecord
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.state.store import Saved, StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s4_judge.learn import limits_in_force
from phasewatch.stages.s5_act.respond import MESSAGE_IDS, Budget, BudgetState, Memory
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
STALL_CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})


def startup(n: int, load: float = 540.0) -> StartupRecord:
    phases = (PhaseRecord("dist_init", 12.0, 0.5, None, 3.0, "TP0"),
              PhaseRecord("weight_load", load, 4.0, 64, 30.0, "TP3"))
    spans = {"TP0": [("dist_init", T0 + n, T0 + n + 12.0), ("weight_load", T0 + n + 12.0, T0 + n + 12.0 + load)]}
    return StartupRecord(UNIT, f"inv-{n}", "fp", T0 + n * 1000, T0 + n * 1000 + 600, "ready", None, phases, spans,
                         (("stalled", "TP3", "weight_load", T0 + n + 60),))


# -- history -----------------------------------------------------------------------------------


class FailingWrites:
    """A connection whose writes fail as on a full disk (SQLite's SQLITE_FULL); reads pass through."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql.startswith(("BEGIN", "INSERT", "DELETE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def test_history_write_failure_degrades_in_memory_keeping_the_past(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    history.add(startup(1))
    history._db = FailingWrites(history._db)  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        assert history.add(startup(2))
    assert history.degraded is not None and "database or disk is full" in history.degraded
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-1", "inv-2"]  # the past, then the new one
    assert "kept in memory" in caplog.text
    assert not list(tmp_path.glob("*.corrupt-*"))
    assert [r.invocation_id for r in History(path).startups(UNIT)] == ["inv-1"]  # the file untouched


def test_history_on_unwritable_dir_degrades_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    history = History(blocker / "history.sqlite3")
    assert history.degraded is not None and "cannot open" in history.degraded
    assert history.add(startup(1))
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-1"]
    assert blocker.read_text() == "a file where the state directory should be"


def test_corrupt_history_is_still_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    history = History(path)
    assert history.degraded is None
    assert len(list(tmp_path.glob("history.sqlite3.corrupt-*"))) == 1


def test_history_text_duration_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    for n in range(6):
        history.add(startup(n, load=500.0 + n))
    raw = sqlite3.connect(path)
    of = "phase = 'weight_load' AND startup = (SELECT id FROM startups WHERE invocation = ?)"
    raw.execute(f"UPDATE phases SET duration = 'slow' WHERE {of}", ("inv-1",))
    raw.execute(f"UPDATE phases SET max_silence = 'x' WHERE {of}", ("inv-2",))
    raw.execute(f"UPDATE phases SET duration = -5 WHERE {of}", ("inv-3",))
    raw.commit()
    raw.close()
    with caplog.at_level(logging.WARNING):
        durations = history.durations(UNIT, "fp", "weight_load")
        silences = history.silences(UNIT, "fp", "weight_load")
    assert sorted(durations) == [500.0, 502.0, 504.0, 505.0]
    assert len(silences) == 5
    assert "are not durations: ignored" in caplog.text
    # Judging with them works: limits are learned from the valid samples (it raised TypeError before).
    config = Config(unit=UNIT, adaptive=Adaptive(enabled=True, k=1.5, min_samples=3, floor=0.25, ceiling=2.0))
    limits = limits_in_force(config, config.adaptive, {Phase.WEIGHT_LOAD: durations},
                             {Phase.WEIGHT_LOAD: silences})
    assert limits[Phase.WEIGHT_LOAD].source == "learned"
    stored = {r.invocation_id: r for r in history.startups(UNIT)}
    assert len(stored) == 6 and stored["inv-0"].phase("weight_load") is not None
    assert stored["inv-1"].phase("weight_load") is None  # the phase with a text duration left out
    assert stored["inv-1"].phase("dist_init") is not None


def test_history_invalid_rows_and_json_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    for n in range(4):
        history.add(startup(n))
    raw = sqlite3.connect(path)
    raw.execute("UPDATE startups SET started_at = 'yesterday' WHERE invocation = 'inv-0'")
    raw.execute("UPDATE startups SET spans = ? WHERE invocation = 'inv-1'", ("[" * 100_000 + "]" * 100_000,))
    raw.execute("UPDATE startups SET verdicts = '[[\"stalled\", 3, null, \"t\"]]' WHERE invocation = 'inv-2'")
    raw.commit()
    raw.close()
    stored = {r.invocation_id: r for r in history.startups(UNIT)}
    assert set(stored) == {"inv-1", "inv-2", "inv-3"}
    assert stored["inv-1"].spans == {} and stored["inv-1"].verdicts
    assert stored["inv-2"].verdicts == () and stored["inv-2"].spans
    assert stored["inv-3"] == startup(3)


def test_report_never_renames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    path = tmp_path / f"{UNIT}.history.sqlite3"
    garbage = b"this is not a database" * 100
    path.write_bytes(garbage)
    assert main(["report", UNIT, "--state-dir", str(tmp_path)]) == 65
    assert "not a readable history" in " ".join(capsys.readouterr().err.split())  # (wrapped to 100 columns)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing moved, nothing created


def test_report_reads_a_healthy_history_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    path = tmp_path / f"{UNIT}.history.sqlite3"
    history = History(path)
    history.add(startup(1))
    history.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["report", UNIT, "--state-dir", str(tmp_path), "--json"]) == 0
    assert [s["invocation_id"] for s in json.loads(capsys.readouterr().out)["startups"]] == ["inv-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- state --------------------------------------------------------------------------------------


def saved_document() -> dict[str, object]:
    return {"version": 1, "cursor": "s=abc;i=1", "invocation_id": INV,
            "alerted": [[INV, "stalled", "weight_load", "TP3"], [INV, "crashed", None, None]],
            "restarted": [INV],
            "budget": {"state": "armed", "failures": [[INV, T0]], "last_restart": T0, "restarts": 1}}


def load(tmp_path: Path, document: object) -> Saved:
    store = StateStore(tmp_path, UNIT)
    store.path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return store.load()


def test_state_short_alerted_entry_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    document = saved_document()
    document["alerted"] = [[INV], [INV, "stalled", "weight_load", "TP3"], "x", [1, 2, 3, 4]]
    with caplog.at_level(logging.WARNING):
        saved = load(tmp_path, document)
    assert saved.memory.alerted == frozenset({(INV, "stalled", "weight_load", "TP3")})
    assert saved.memory.restarted == frozenset({INV}) and saved.cursor == "s=abc;i=1"
    assert "invalid values dropped: an alerted entry" in caplog.text


def test_state_deep_nesting_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = json.dumps(saved_document()).replace('"restarted": [', '"restarted": ' + "[" * 100_000 + "[") \
        .replace(f'"{INV}"], "budget"', f'"{INV}"' + "]" * 100_001 + ', "budget"')
    with caplog.at_level(logging.WARNING):
        saved = load(tmp_path, text)
    assert saved == Saved(Memory(), None, None)
    assert "nested too deep" in caplog.text
    nested = saved_document()
    nested["cursor"] = {"a": [[[{}]]]}
    assert load(tmp_path, nested).cursor is None


def test_state_non_numeric_last_restart_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    document = saved_document()
    document["budget"] = {"state": "gave_up", "failures": [[INV, "noon"], [INV, T0]], "last_restart": "noon",
                          "restarts": "many"}
    with caplog.at_level(logging.WARNING):
        saved = load(tmp_path, document)
    assert saved.memory.budget == Budget(BudgetState.GAVE_UP, ((INV, T0),), None, 0)
    assert saved.memory.alerted and saved.memory.restarted
    assert "budget.last_restart" in caplog.text and "budget.restarts" in caplog.text


@pytest.mark.parametrize("document", [[], None, 7, {"budget": {"state": "sideways"}, "restarted": "x"},
                                      {"alerted": {"a": 1}, "budget": [1, 2]}, '"\\ud800"', "\x00\xff"])
def test_state_any_shape_loads_without_raising(tmp_path: Path, document: object) -> None:
    saved = load(tmp_path, document)
    assert saved.memory.budget.state is BudgetState.ARMED


def test_state_write_failure_keeps_the_old_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path, UNIT)
    store.save(Saved(Memory(restarted=frozenset({"old"})), "c1", "old"))
    before = store.path.read_bytes()
    store.path.with_suffix(".tmp").mkdir()  # the temporary cannot be written
    with pytest.raises(OSError):
        store.save(Saved(Memory(restarted=frozenset({"new"})), "c2", "new"))
    assert store.degraded is not None and store.path.read_bytes() == before
    store.path.with_suffix(".tmp").rmdir()
    store.save(Saved(Memory(), "c3", None))
    assert store.degraded is None


# -- the daemon -----------------------------------------------------------------------------------


def test_daemon_on_unwritable_state_dir_keeps_acting_and_alerts_once(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter = RecordingAlerter(UNIT)
    notifier = RecordingNotifier()
    registry = CollectorRegistry()
    app = compose(STALL_CONFIG, World(follower=journal, unit=unit, alerter=alerter, notifier=notifier,
                        store=StateStore(blocker, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(history=History(blocker / "h.sqlite3"), exporter=Exporter(STALL_CONFIG, registry, clock)))
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    app.start()
    degraded = [a for a in alerter.sent if a["PHASEWATCH_VERDICT"] == "state_degraded"]
    assert sorted(a["PHASEWATCH_CAUSE"] for a in degraded) == ["history", "state"]
    assert {a["MESSAGE_ID"] for a in degraded} == {MESSAGE_IDS["state_degraded"]}
    assert "in memory only" in notifier.sent[1]
    for _ in range(3):
        clock.jump(31)
        app.step(max_wait=0)
    assert unit.restarts == [INV]  # the hang caught and restarted once, memory kept in memory
    assert [a["PHASEWATCH_VERDICT"] for a in alerter.sent].count("state_degraded") == 2  # once each
    assert [a["PHASEWATCH_VERDICT"] for a in alerter.sent].count("stalled") == 1
    sample = registry.get_sample_value
    assert sample("phasewatch_state_degraded", {"unit": UNIT, "what": "history"}) == 1.0
    assert sample("phasewatch_state_degraded", {"unit": UNIT, "what": "state"}) == 1.0
    assert set(app.metrics.exporter.status()["degraded"]) == {"history", "state"}  # type: ignore[union-attr]
    # The directory comes back: state is saved again and the gauge goes back to 0; history stays in memory.
    blocker.unlink()
    blocker.mkdir()
    clock.jump(1)
    app.actor.save()
    app._report(app.judged())
    assert sample("phasewatch_state_degraded", {"unit": UNIT, "what": "state"}) == 0.0
    assert sample("phasewatch_state_degraded", {"unit": UNIT, "what": "history"}) == 1.0
    assert StateStore(blocker, UNIT).load().memory.restarted == frozenset({INV})


def test_healthy_state_dir_reports_nothing_degraded(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    clock = FakeClock(wall=T0)
    alerter = RecordingAlerter(UNIT)
    app = compose(STALL_CONFIG, World(
            follower=ScriptedJournal(), unit=RecordingUnit(UnitFacts("inactive", "dead", None)),
                        alerter=alerter, notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT), clock=clock),
                  Extras(history=History(tmp_path / "h.sqlite3"), exporter=Exporter(STALL_CONFIG, registry, clock)))
    app.start()
    assert alerter.sent == [] and app.actor.parts.host.degraded == {}
    assert registry.get_sample_value("phasewatch_state_degraded", {"unit": UNIT, "what": "state"}) == 0.0
