"""Issue 39: a step of the daemon that read a line changing more than a rank's last activity (a
progress step, a phase) shows it in /status at once; lines that only say a rank is alive (the fast
path's) are published at most every PUBLISH_SPACING (sinks/metrics/sink.py, MetricsSink.tell). The
daemon's loop with its edges faked (a scripted journal, a recording unit, a fake clock); the real
follow latency, journal to /status over HTTP, is the bench's follow row (docs/performance.md)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import Config
from phasewatch.records import JournalRecord
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.sinks.metrics.sink import PUBLISH_SPACING
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def make(tmp_path: Path) -> tuple[Daemon, ScriptedJournal, FakeClock, Exporter]:
    config = Config(unit=UNIT)
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    (tmp_path / "proc").mkdir(exist_ok=True)
    exporter = Exporter(config, CollectorRegistry())
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    app = compose(config, World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT),  # type: ignore[arg-type]
                                notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT), clock=clock,
                                processes=ProcessTable(proc=str(tmp_path / "proc"),
                                                       cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(watchdog_interval=30.0, exporter=exporter))
    return app, journal, clock, exporter


def line(text: str, at: float, rank: int = 0) -> JournalRecord:
    return JournalRecord(f"[2026-11-29 08:00:00 TP{rank}] {text}", at, pid=100 + rank, invocation_id=INV)


def tp0_step(exporter: Exporter) -> int | None:
    progress = exporter.status()["invocation"]["ranks"]["TP0"]["progress"]
    return None if progress is None else int(progress["n"])


def test_a_progress_step_is_in_status_at_the_step_that_read_it(tmp_path: Path) -> None:
    app, journal, clock, exporter = make(tmp_path)
    journal.push(*(line("Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB", T0, n)
                   for n in range(8)))
    app.start()
    app.step(max_wait=0)
    for n in range(1, 6):  # 10 steps a second: each within PUBLISH_SPACING of the one before
        clock.jump(0.1)
        journal.push(JournalRecord(f"\rCapturing batches (bs={512 - n} avail_mem=24.50 GB): {n * 10:3d}%|#  "
                                   f"      | {n}/10 [00:0{n}<00:05,  1.00it/s]\n", clock.wall(), pid=100,
                                   invocation_id=INV))
        app.step(max_wait=0)
        assert tp0_step(exporter) == n


def test_lines_that_only_say_a_rank_is_alive_are_published_at_most_every_spacing(tmp_path: Path) -> None:
    app, journal, clock, exporter = make(tmp_path)
    journal.push(*(line("Load weight begin. avail mem=137.95 GB", T0, n) for n in range(8)))
    app.start()
    app.step(max_wait=0)
    journal.push(line("request scheduler tick 1", T0))
    app.step(max_wait=0)
    published = exporter.published.now
    fast = app.pipeline.fast
    assert fast is not None
    for k in range(3):  # a line no rule matches, again: the fast path's, a sign of life only
        clock.jump(PUBLISH_SPACING / 5)
        taken = fast.taken
        journal.push(line(f"request scheduler tick {k + 2}", clock.wall()))
        app.step(max_wait=0)
        assert fast.taken == taken + 1
        assert exporter.published.now == published  # put off: a deadline, not a publish per step
    assert app.metrics is not None and app.metrics.publish_due
