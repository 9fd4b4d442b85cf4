"""Signs of life beyond log lines: the pure stage (vitals.compare) over recorded samples, the /proc
reader over fixture trees, the stall window with progress events, the source (SignsOfLifeSource: a scripted
sampler, the NVML seam faked) and the daemon's wiring."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits, VitalsSampling, parse_config
from phasewatch.pipeline import Pipeline
from phasewatch.records import Event, EventKind, JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.base import Instant
from phasewatch.sources.host.gpu import NvmlSource
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.host.procstat import ProcSampler, parse_io_stat, parse_stat
from phasewatch.sources.host.signs_of_life import SignsOfLifeSource
from phasewatch.sources.host.unit_processes import UnitFactsReader
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s4_judge.gpu_vitals import GpuInfo, GpuReading
from phasewatch.stages.s4_judge.vitals import CgroupSample, ProcessSample, Sample, compare, document, progress_events
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

T0 = 1_800_000_000.0
INV = "0123456789abcdef0123456789abcdef"
UNIT = "sglang-kimi.service"
MAIN_PID, TP0_PID, TP1_PID = 100, 101, 102


def rank(pid: int, label: str, *, minflt: int = 1000, majflt: int = 0, cpu: int = 500, rchar: int | None = 10_000,
         read_bytes: int | None = 0, ppid: int = MAIN_PID) -> ProcessSample:
    return ProcessSample(pid, ppid, "python3", label, minflt, majflt, cpu, rchar, read_bytes)


def process(pid: int, ppid: int, comm: str, cpu: int = 0) -> ProcessSample:
    return ProcessSample(pid, ppid, comm, None, 10, 0, cpu)


MAIN = ProcessSample(MAIN_PID, 1, "python3", None, 5000, 3, 900, 1_000_000, 0)
BEFORE = Sample(T0, (MAIN, rank(TP0_PID, "TP0"), rank(TP1_PID, "TP1")))


def after(seconds: float, *processes: ProcessSample) -> Sample:
    return Sample(T0 + seconds, (MAIN, *processes))


# --- the pure stage ---------------------------------------------------------------------------------


def test_reading_a_file_is_progress_and_says_how_fast() -> None:
    now = after(5, rank(TP0_PID, "TP0", rchar=10_000 + 6_000_000_000), rank(TP1_PID, "TP1"))
    vitals = compare(BEFORE, now)
    tp0, tp1 = vitals.ranks
    assert (tp0.rank, tp0.alive, tp0.progress) == ("TP0", True, ("reading",))
    assert tp0.text() == "reading 1.2 GB/s"
    assert tp0.intake_bytes == 6_000_010_000
    assert not tp1.alive and tp1.text() == "no sign of life"


def test_cpu_time_alone_is_not_progress() -> None:
    # A rank spinning in an NCCL collective: a full core for 5 s, a few faults, a few KB from its sockets.
    spinning = rank(TP0_PID, "TP0", cpu=500 + 500, minflt=1000 + 12, rchar=10_000 + 4096)
    vitals = compare(BEFORE, after(5, spinning, rank(TP1_PID, "TP1")))
    tp0 = vitals.rank("TP0")
    assert tp0 is not None and not tp0.alive and tp0.progress == ()
    assert tp0.cpu_share == 1.0
    assert tp0.text() == "only CPU (100% of a core)"
    assert progress_events(vitals, INV) == []


def test_pages_faulted_in_through_mmap_are_progress_without_proc_pid_io() -> None:
    # Another user's rank: /proc/PID/io is not readable, /proc/PID/stat is.
    before = Sample(T0, (MAIN, rank(TP0_PID, "TP0", rchar=None, read_bytes=None)))
    mapped = rank(TP0_PID, "TP0", minflt=1000 + 2500, rchar=None, read_bytes=None)
    [tp0] = compare(before, after(5, mapped)).ranks
    assert tp0.progress == ("faulting",) and tp0.text() == "faulting in 500 pages/s"
    assert tp0.intake_bytes is None and tp0.read_rate is None


def test_a_few_faults_are_noise_and_major_faults_from_storage_are_not() -> None:
    few = compare(BEFORE, after(5, rank(TP0_PID, "TP0", minflt=1000 + 60))).ranks[0]
    cold = compare(BEFORE, after(5, rank(TP0_PID, "TP0", minflt=1000, majflt=40))).ranks[0]
    assert not few.alive
    assert cold.progress == ("faulting",)


def test_a_compiler_under_the_rank_is_progress() -> None:
    # DeepGEMM-style JIT: the rank runs a shell, the shell nvcc, nvcc its stages.
    now = after(5, rank(TP0_PID, "TP0"), rank(TP1_PID, "TP1"), process(200, TP0_PID, "sh"),
                process(201, 200, "nvcc", 30), process(202, 200, "nvcc", 5), process(203, 200, "nvcc"),
                process(204, 201, "ptxas", 40))
    vitals = compare(BEFORE, now)
    tp0 = vitals.rank("TP0")
    assert tp0 is not None and tp0.progress == ("compiling",)
    assert tp0.text() == "compiling: 3 nvcc, 1 ptxas"
    assert tp0.compilers == (("nvcc", 3), ("ptxas", 1))
    tp1 = vitals.rank("TP1")
    assert tp1 is not None and not tp1.alive  # the compilers are TP0's, not TP1's
    [event] = progress_events(vitals, INV)
    assert (event.kind, event.rank, event.ts, event.invocation_id) == (EventKind.RANK_PROGRESS, "TP0", T0 + 5, INV)


def test_a_compiler_that_used_no_cpu_since_the_last_sample_is_not_progress() -> None:
    stuck = (process(201, TP0_PID, "cc1plus", 300),)
    first = Sample(T0, (MAIN, rank(TP0_PID, "TP0"), *stuck))
    still = compare(first, after(5, rank(TP0_PID, "TP0"), *stuck)).ranks[0]
    working = compare(first, after(5, rank(TP0_PID, "TP0"), process(201, TP0_PID, "cc1plus", 420))).ranks[0]
    assert not still.alive and still.text() == "compiling: 1 cc1plus"
    assert working.progress == ("compiling",)


def test_a_process_without_a_previous_sample_has_no_period_yet() -> None:
    first = compare(None, BEFORE)
    assert [r.alive for r in first.ranks] == [False, False] and first.ranks[0].text() == "first sample"
    # TP1 restarted as a new pid that has read a lot since it began: not this period's intake.
    reborn = compare(BEFORE, after(5, rank(TP0_PID, "TP0"), rank(999, "TP1", rchar=5_000_000_000)))
    tp1 = reborn.rank("TP1")
    assert tp1 is not None and tp1.pid == 999 and not tp1.alive and tp1.seconds == 0


def test_a_reused_pid_is_not_compared_with_its_predecessor() -> None:
    before = Sample(T0, (MAIN, process(TP0_PID, MAIN_PID, "sh")))
    [tp0] = compare(before, after(5, rank(TP0_PID, "TP0", rchar=10**9))).ranks
    assert not tp0.alive


def test_a_forked_helper_keeps_the_title_but_is_not_a_second_rank() -> None:
    helper = rank(300, "TP0", ppid=TP0_PID, rchar=10**10)
    vitals = compare(Sample(T0, (MAIN, rank(TP0_PID, "TP0"), rank(300, "TP0", ppid=TP0_PID))),
                     after(5, rank(TP0_PID, "TP0"), helper))
    assert [(r.rank, r.pid) for r in vitals.ranks] == [("TP0", TP0_PID)]


def test_the_unit_cgroup_rates_and_the_status_document() -> None:
    before = replace(BEFORE, cgroup=CgroupSample(1_000, 50, 0))
    now = replace(after(2, rank(TP0_PID, "TP0", rchar=10_000 + 3_000_000), rank(TP1_PID, "TP1")),
                  cgroup=CgroupSample(1_000 + 400_000_000, 50 + 2_000, 0))
    vitals = compare(before, now)
    assert vitals.unit is not None and vitals.unit.text() == "reading 200.0 MB/s from storage; faulting in 1.0k pages/s"
    doc = document(vitals, T0 + 3)
    assert doc is not None and doc["sampled_seconds_ago"] == 1.0
    assert doc["ranks"]["TP0"]["text"] == "reading 1.5 MB/s" and doc["ranks"]["TP0"]["progress"] == ["reading"]
    assert doc["ranks"]["TP1"]["read_bytes_per_second"] == 0.0
    assert document(None, T0) is None


# --- the /proc reader (an edge, over fixture trees) -----------------------------------------------


def test_parse_stat_survives_parentheses_and_spaces_in_the_command_name() -> None:
    fields = "S 100 100 100 0 -1 4194304 4321 0 12 0 250 50 0 0 20 0 1 0 25372 3133440 415"
    assert parse_stat(f"101 (a) b (c) {fields}") == ("a) b (c", 100, 4321, 12, 300)
    assert parse_stat("garbage") is None
    assert parse_stat("101 (x) S 1") is None


def test_parse_io_stat_sums_rbytes_over_devices() -> None:
    assert parse_io_stat("8:0 rbytes=100 wbytes=7 rios=1\n259:0 rbytes=23 wbytes=0\n") == 123
    assert parse_io_stat("") is None


def _proc(root: Path, pid: int, title: bytes, comm: str, ppid: int, minflt: int, io: str | None) -> None:
    base = root / "proc" / str(pid)
    base.mkdir(parents=True, exist_ok=True)
    (base / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1 0 {minflt} 0 3 0 70 30 0 0 20 0 1 0 1 1 1\n")
    (base / "cmdline").write_bytes(title)
    if io is not None:
        (base / "io").write_text(io)


def test_sampler_reads_ranks_children_io_where_permitted_and_a_v2_cgroup(tmp_path: Path) -> None:
    group = tmp_path / "cg" / "system.slice" / UNIT
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("100\n101\n102\n200\n")
    (group / "io.stat").write_text("8:0 rbytes=4096 wbytes=0\n")
    (group / "memory.stat").write_text("anon 1\nfile 2\npgfault 77\npgmajfault 5\n")
    _proc(tmp_path, 100, b"python3\0-m\0sglang.launch_server\0", "python3", 1, 10, "rchar: 5\nread_bytes: 0\n")
    _proc(tmp_path, 101, b"sglang::scheduler_TP0\0", "python3", 100, 2000, "rchar: 123456\nread_bytes: 4096\n")
    _proc(tmp_path, 102, b"sglang::scheduler_TP1\0", "python3", 100, 3000, None)  # another user's: no io
    _proc(tmp_path, 200, b"/usr/local/cuda/bin/nvcc\0", "nvcc", 101, 1, None)
    sampler = ProcSampler(ProcessTable(str(tmp_path / "proc"), (str(tmp_path / "cg"),)), ticks=100)
    sample = sampler.sample(f"/system.slice/{UNIT}", T0)
    by_pid = {p.pid: p for p in sample.processes}
    assert (by_pid[101].rank, by_pid[101].rchar, by_pid[101].read_bytes, by_pid[101].cpu_ticks) == ("TP0", 123456,
                                                                                                   4096, 100)
    assert (by_pid[102].rank, by_pid[102].rchar, by_pid[102].minflt) == ("TP1", None, 3000)
    assert (by_pid[200].comm, by_pid[200].ppid, by_pid[200].rank) == ("nvcc", 101, None)
    assert sample.cgroup == CgroupSample(4096, 77, 5)
    (group / "io.stat").unlink()
    (group / "memory.stat").unlink()  # cgroup v1, or v2 without those controllers
    assert sampler.sample(f"/system.slice/{UNIT}", T0).cgroup is None
    assert sampler.sample("/no/such.service", T0).processes == ()


# --- the stall window: no log line and no progress signal ------------------------------------------

STALL_LIMITS = {**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(120, 30)}


def _loading(pipeline: Pipeline) -> None:
    for n in range(2):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
        pipeline.feed(JournalRecord(f"[{stamp} TP{n}] Load weight begin. avail mem=137.95 GB", T0, pid=101 + n,
                                    invocation_id=INV), T0)


def _alive(pipeline: Pipeline, rank_label: str, at: float) -> None:
    pipeline.tracker.apply(Event(EventKind.RANK_PROGRESS, at, rank=rank_label, invocation_id=INV), at)


def test_progress_signals_end_the_silence_per_rank_but_not_the_deadline() -> None:
    config = Config(unit=UNIT, phases=STALL_LIMITS)
    pipeline = Pipeline(config)
    _loading(pipeline)
    for t in range(5, 116, 5):  # TP0 takes in data all along, TP1 only spins
        _alive(pipeline, "TP0", T0 + t)
    inv = pipeline.snapshot().current
    assert inv is not None
    assert inv.last_ts == T0  # a sign of life is not a log line
    silent = [(v.rank, v.cause) for v in policy.evaluate(inv, T0 + 31, config)]
    assert silent == [("TP1", "no_progress")]
    assert policy.next_deadline(inv, T0 + 100, config) == T0 + 120  # TP0's deadline, before its silence ends at 145
    late = [(v.rank, v.cause) for v in policy.evaluate(inv, T0 + 121, config) if v.rank == "TP0"]
    assert late == [("TP0", "deadline")]


def test_a_progress_event_for_another_start_up_or_after_ready_changes_nothing() -> None:
    pipeline = Pipeline(Config(unit=UNIT, phases=STALL_LIMITS))
    _loading(pipeline)
    pipeline.tracker.apply(Event(EventKind.RANK_PROGRESS, T0 + 20, rank="TP0", invocation_id="other"), T0 + 20)
    inv = pipeline.snapshot().current
    assert inv is not None and all(r.last_vital is None for r in inv.ranks)


# --- config and the daemon's wiring -------------------------------------------------------------


def test_vitals_config_period_and_errors() -> None:
    assert parse_config("vitals:\n  period: 2s\n").vitals == VitalsSampling(2.0, True)
    assert parse_config("unit: x.service\n").vitals == VitalsSampling(5.0, True)
    for text, message in (("vitals:\n  period: 0.1s\n", "vitals.period: expected a duration of at least 0.5s"),
                          ("vitals:\n  every: 2s\n", "vitals.every: unknown setting"),
                          ("vitals:\n  enabled: maybe\n", "vitals.enabled: expected true or false")):
        try:
            parse_config(text, "x.yaml")
        except ValueError as exc:
            assert str(exc).startswith(message) and "line 2" in str(exc)
        else:
            raise AssertionError(text)


def test_daemon_samples_the_cgroup_and_a_loading_rank_is_not_stalled(tmp_path: Path) -> None:
    group = tmp_path / "cg" / "system.slice" / UNIT
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("100\n101\n102\n")
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=f"/system.slice/{UNIT}", started_at=T0))
    alerter = RecordingAlerter(UNIT)
    config = Config(unit=UNIT, phases=STALL_LIMITS, actions={"stalled": ("alert",)},  # (RAS asks on a thread:
                    vitals=VitalsSampling(period=5.0, ras=False))  # tests/integration/test_ras_client.py)
    app = compose(config, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
    journal.push(*(JournalRecord(f"[{stamp} TP{n}] Load weight begin. avail mem=137.95 GB", T0, pid=101 + n,
                                 invocation_id=INV) for n in range(2)))
    app.start()
    faults = 1000
    for _ in range(12):  # 60 s, twice the stall window: TP0 faults pages in, TP1 does not
        faults += 2000
        _proc(tmp_path, 100, b"python3\0", "python3", 1, 10, None)
        _proc(tmp_path, 101, b"sglang::scheduler_TP0\0", "python3", 100, faults, None)
        _proc(tmp_path, 102, b"sglang::scheduler_TP1\0", "python3", 100, 1000, None)
        clock.jump(5)
        app.step(max_wait=0)
    assert [(a["PHASEWATCH_VERDICT"], a["PHASEWATCH_RANK"]) for a in alerter.sent] == [("stalled", "TP1")]
    assert app.vitals is not None
    tp0 = app.vitals.rank("TP0")
    assert tp0 is not None and tp0.text() == "faulting in 400 pages/s"
    status = StateStore(tmp_path, UNIT).status_path.read_text()
    assert '"TP0": "faulting in 400 pages/s"' in status and '"TP1": "no sign of life"' in status


def test_status_table_lists_the_signs_of_life() -> None:
    from phasewatch.commands.status import render_table

    vitals = compare(BEFORE, after(5, rank(TP0_PID, "TP0", rchar=10_000 + 6_000_000_000),
                                   rank(TP1_PID, "TP1", cpu=500 + 490), process(201, TP1_PID, "nvcc")))
    text = render_table({"unit": UNIT, "invocation": {"outcome": "starting", "phase": "weight_load", "ranks": {}},
                         "vitals": document(vitals, T0 + 6)})
    assert "signs of life (sampled 1s ago):\n  TP0: reading 1.2 GB/s\n  TP1: compiling: 1 nvcc\n" in text


class _BrokenSampler(ProcSampler):
    def sample(self, control_group: str, now: float) -> Sample:
        raise OSError(5, "Input/output error")


def test_a_failing_sample_is_logged_and_the_loop_goes_on_and_sampling_ends_with_the_start_up(
        tmp_path: Path) -> None:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=f"/system.slice/{UNIT}", started_at=T0))
    alerter = RecordingAlerter(UNIT)
    config = Config(unit=UNIT, phases=STALL_LIMITS, actions={"stalled": ("alert",)}, vitals=VitalsSampling(ras=False))
    app = compose(config, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock),
                  Extras(sampler=_BrokenSampler(ProcessTable(str(tmp_path / "proc"), (str(tmp_path / "cg"),)))))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
    journal.push(JournalRecord(f"[{stamp} TP0] Load weight begin. avail mem=137.95 GB", T0, pid=101,
                               invocation_id=INV))
    app.start()
    for _ in range(7):
        clock.jump(5)
        app.step(max_wait=0)
    assert app.vitals is None
    assert [a["PHASEWATCH_RANK"] for a in alerter.sent] == ["TP0"]  # judged on its log lines, as before


def _sampling_daemon(tmp_path: Path, clock: FakeClock,
                     extras: Extras | None = None) -> tuple[Daemon, ScriptedJournal, str]:
    """A daemon whose unit is starting with TP0 (pid 101) in its cgroup, started and stepped once
    the period after TP0's first line: its vitals sampled. Returns it, its journal and the lines' stamp."""
    group = tmp_path / "cg" / "system.slice" / UNIT
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("101\n")
    _proc(tmp_path, 101, b"sglang::scheduler_TP0\0", "python3", 1, 10, None)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=f"/system.slice/{UNIT}", started_at=T0))
    app = compose(Config(unit=UNIT), World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT),
                        notifier=RecordingNotifier(), store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  extras or Extras())
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
    journal.push(JournalRecord(f"[{stamp} TP0] Load weight begin. avail mem=137.95 GB", T0, pid=101,
                               invocation_id=INV))
    app.start()
    clock.jump(5)
    app.step(max_wait=0)
    return app, journal, stamp


def test_signs_of_life_are_dropped_once_the_start_up_is_over(tmp_path: Path) -> None:
    clock = FakeClock(wall=T0)
    app, journal, stamp = _sampling_daemon(tmp_path, clock)
    assert app.vitals is not None and '"vitals"' in StateStore(tmp_path, UNIT).status_path.read_text()
    journal.push(JournalRecord(f"[{stamp}] The server is fired up and ready to roll!", T0 + 6, pid=100,
                               invocation_id=INV))
    clock.jump(5)
    app.step(max_wait=0)
    assert app.vitals is None and '"vitals"' not in StateStore(tmp_path, UNIT).status_path.read_text()


def test_status_keeps_the_last_vitals_over_a_new_start_up_until_its_first_sample(tmp_path: Path) -> None:
    """/status shows the vitals last said (Step.shown_vitals): a new start-up whose cgroup D-Bus has not
    told yet leaves them as they were, while the daemon's own vitals (and the status file's) are gone."""
    from prometheus_client import CollectorRegistry

    from phasewatch.sinks.metrics.exporter import Exporter

    clock = FakeClock(wall=T0)
    exporter = Exporter(Config(unit=UNIT), CollectorRegistry(), clock)
    app, journal, stamp = _sampling_daemon(tmp_path, clock, Extras(exporter=exporter))
    assert app.vitals is not None and exporter.status()["vitals"] is not None
    journal.push(JournalRecord(f"[{stamp} TP0] Load weight begin. avail mem=137.95 GB", T0 + 6, pid=201,
                               invocation_id="f" * 32))
    clock.jump(5)
    app.step(max_wait=0)
    assert app.vitals is None and '"vitals"' not in StateStore(tmp_path, UNIT).status_path.read_text()
    assert exporter.status()["vitals"] is not None and "TP0" in exporter.status()["vitals"]["ranks"]


# --- the source itself (sources/host/signs_of_life.py): a scripted sampler, the NVML seam faked ----------


class _ScriptedSampler(ProcSampler):
    """Hands out the samples it is given (an OSError is raised), and records what it was asked."""

    def __init__(self, *samples: Sample | OSError) -> None:
        super().__init__(ProcessTable("/nonexistent/proc", ()), ticks=100)
        self.samples = list(samples)
        self.asked: list[tuple[str, float]] = []

    def sample(self, control_group: str, now: float) -> Sample:
        self.asked.append((control_group, now))
        taken = self.samples.pop(0)
        if isinstance(taken, OSError):
            raise taken
        return replace(taken, at=now)


class _ScriptedNvml(NvmlSource):
    """The NVML seam: readings queued by the test, no worker thread."""

    def __init__(self) -> None:
        super().__init__(load=lambda: (_ for _ in ()).throw(AssertionError("NVML is not loaded in a unit test")))
        self.queued: list[GpuReading] = []
        self.wants: list[bool] = []
        self.takes = 0

    def want(self, wanted: bool) -> None:
        self.wants.append(wanted)

    def take(self) -> list[GpuReading]:
        self.takes += 1
        out, self.queued = self.queued, []
        return out

    def infos(self) -> dict[int, GpuInfo]:
        return {0: GpuInfo(0, "H200", 700_000)}

    def state(self) -> str:
        return "ok"

    def problem(self) -> str | None:
        return None


CGROUP = f"/system.slice/{UNIT}"


class _Unit:
    """A start-up loading its weights, as the tracker sees it, and the unit's facts as D-Bus told them."""

    def __init__(self, config: Config, control_group: str | None = CGROUP, invocation: str = INV) -> None:
        self.pipeline = Pipeline(config)
        _loading(self.pipeline)
        self.facts = UnitFactsReader(RecordingUnit(UnitFacts("activating", "start", INV)), UNIT)
        if control_group is not None:
            self.facts.known = UnitFacts("activating", "start", invocation, control_group=control_group)

    def current(self) -> InvocationView | None:
        return self.pipeline.snapshot().current

    def ready(self) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
        self.pipeline.feed(JournalRecord(f"[{stamp}] The server is fired up and ready to roll!", T0 + 30, pid=100,
                                         invocation_id=INV), T0 + 30)


def _signs(config: Config, sampler: ProcSampler, unit: _Unit, gpu: NvmlSource | None = None) -> SignsOfLifeSource:
    return SignsOfLifeSource(config, sampler, unit.facts, unit.current, gpu)


def at(seconds: float) -> Instant:
    """`seconds` into the start-up, on both clocks (the monotonic one starts at 1000)."""
    return Instant(T0 + seconds, 1000.0 + seconds)


NO_GPU = Config(unit=UNIT, vitals=VitalsSampling(period=5.0, gpu=False, ras=False))


def test_signs_of_life_are_sampled_while_the_unit_starts_and_its_cgroup_is_known() -> None:
    unit = _Unit(NO_GPU)
    signs = _signs(NO_GPU, _ScriptedSampler(BEFORE), unit)
    assert signs.sampling(unit.current()) and signs.next_deadline(at(0)) == -math.inf  # at once
    assert not signs.sampling(None)
    off = replace(NO_GPU, vitals=VitalsSampling(enabled=False))
    assert not _signs(off, _ScriptedSampler(), unit).sampling(unit.current())
    assert _signs(off, _ScriptedSampler(), unit).next_deadline(at(0)) is None
    for unknown in (_Unit(NO_GPU, control_group=None), _Unit(NO_GPU, invocation="f" * 32)):  # D-Bus not told yet
        assert not _signs(NO_GPU, _ScriptedSampler(), unknown).sampling(unknown.current())
    signs.collect(at(0), ())
    assert signs.next_deadline(at(0)) == 1005.0  # a period after the last sample, on the monotonic clock
    unit.ready()
    assert not signs.sampling(unit.current()) and signs.next_deadline(at(31)) is None


def test_each_period_what_moved_becomes_rank_progress_dated_at_the_sample() -> None:
    reading = after(5, rank(TP0_PID, "TP0", rchar=10_000 + 6_000_000_000), rank(TP1_PID, "TP1"))
    sampler = _ScriptedSampler(BEFORE, reading)
    unit = _Unit(NO_GPU)
    signs = _signs(NO_GPU, sampler, unit)
    assert signs.collect(at(0), ()) == []  # the first sample has no period yet
    assert signs.vitals is not None and signs.shown is signs.vitals
    assert signs.collect(at(4.9), ()) == [] and len(sampler.asked) == 1  # not a period yet
    assert signs.collect(at(4.96), ()) == [Event(EventKind.RANK_PROGRESS, T0 + 4.96, rank="TP0",
                                                 text="reading 1.2 GB/s", invocation_id=INV)]
    assert sampler.asked == [(CGROUP, T0), (CGROUP, T0 + 4.96)]
    tp0 = signs.vitals.rank("TP0")
    assert tp0 is not None and tp0.alive


def test_a_failing_sample_is_no_sign_of_life_and_the_next_period_samples_again(caplog: Any) -> None:
    sampler = _ScriptedSampler(OSError(5, "Input/output error"), BEFORE)
    unit = _Unit(NO_GPU)
    signs = _signs(NO_GPU, sampler, unit)
    assert signs.collect(at(0), ()) == [] and signs.vitals is None
    assert "cannot sample the unit's processes: [Errno 5] Input/output error" in caplog.text
    assert signs.collect(at(5), ()) == [] and signs.vitals is not None and len(sampler.asked) == 2


def test_the_vitals_are_dropped_once_the_start_up_is_over_and_a_new_one_starts_afresh() -> None:
    unit = _Unit(NO_GPU)
    signs = _signs(NO_GPU, _ScriptedSampler(BEFORE, BEFORE), unit)
    signs.collect(at(0), ())
    shown = signs.shown
    signs.new_startup()  # its first sample is at once, and has no period yet
    assert (signs.sample, signs.vitals, signs.shown) == (None, None, shown)
    assert signs.next_deadline(at(1)) == -math.inf
    signs.collect(at(1), ())
    assert signs.vitals is not None
    unit.ready()
    assert signs.collect(at(31), ()) == []
    assert (signs.sample, signs.vitals, signs.shown) == (None, None, None)


def _computing(at_s: float, pid: int = TP0_PID) -> list[GpuReading]:
    return [GpuReading(T0 + at_s + i, 0, 90.0, 0.0, (80 + 280 + d) * 1000, 500.0, 0.0, {pid: 1 << 30})
            for i, d in enumerate((0, 30, -20, 10, -30))]


def test_each_ranks_gpu_becomes_a_rank_gpu_event_and_since_when_it_is_in_its_state() -> None:
    config = Config(unit=UNIT, vitals=VitalsSampling(period=5.0, ras=False))
    nvml = _ScriptedNvml()
    unit = _Unit(config)
    signs = _signs(config, _ScriptedSampler(*[BEFORE] * 4), unit, nvml)  # (the host shows nothing moving)
    assert signs.gpu is nvml and signs.gpu_state() == ("ok", None)
    nvml.queued = _computing(-5)
    assert signs.collect(at(0), ()) == []  # the first sample: the readings only set the GPU's baseline
    assert nvml.wants == [True] and signs.baselines and signs.vitals is not None
    assert signs.vitals.gpu_source == "ok"
    nvml.queued = _computing(0)
    events = signs.collect(at(5), ())
    gpu = [e for e in events if e.kind is EventKind.RANK_GPU]
    assert [(e.rank, e.cause, e.ts, e.invocation_id) for e in gpu] == [("TP0", "computing", T0 + 5, INV)]
    assert [e.rank for e in events if e.kind is EventKind.RANK_PROGRESS] == ["TP0"]  # a computing GPU is alive
    assert signs.vitals.gpu_since == {"TP0": T0 + 5}
    nvml.queued = _computing(5)
    signs.collect(at(10), ())
    assert signs.vitals.gpu_since == {"TP0": T0 + 5}  # still computing: since the first period that said so
    nvml.queued = [GpuReading(T0 + 10 + i, 0, 100.0, 0.0, (80 + 140) * 1000, 500.0, 0.0, {TP0_PID: 1 << 30})
                   for i in range(5)]  # flat, a kernel resident: the waiting signature
    [waiting] = signs.collect(at(15), ())
    assert (waiting.kind, waiting.rank, waiting.cause) == (EventKind.RANK_GPU, "TP0", "waiting")
    assert signs.vitals.gpu_since == {"TP0": T0 + 15}
    signs.new_startup()  # the last start-up's readings are not this one's
    assert nvml.takes == 5 and signs.gpu_states == {}
    unit.ready()
    signs.collect(at(31), ())
    assert nvml.wants[-1] is False
    assert _signs(NO_GPU, _ScriptedSampler(), unit, nvml).gpu_state() == ("off", "vitals.gpu is false")
