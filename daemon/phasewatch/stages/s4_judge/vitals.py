"""Pure stage: two successive samples of a unit's processes -> signs of life per rank.

Some start-up phases print nothing for minutes while working (safetensors read from shared storage,
JIT compilation). Their work shows outside the log: data comes in (bytes read, pages faulted in)
and compiler processes run under the rank. Those are progress. The rank's own CPU time is not: a
rank waiting in an NCCL collective spins a whole core, and that is the classic hang.

`compare(previous, current)` -> `Vitals`: per rank, the rates over the period between the samples
and the reasons it counts as progress (none: no sign of life). Records in, records out; the /proc
reader is procstat.py, the daemon turns progress into RANK_PROGRESS events for the tracker.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ...durations import format_duration
from ...records import Event, EventKind
from .gpu_vitals import DEFAULT_THRESHOLDS as DEFAULT_GPU_THRESHOLDS
from .gpu_vitals import GpuBaseline, GpuInfo, GpuPeriod, GpuReading, GpuThresholds, judge_rank
from .gpu_vitals import summary as gpu_summary

# The command names (comm, at most 15 characters) of the compilers a JIT start-up runs: CUDA's
# driver and its stages, the host C/C++ compiler and its passes, the linkers and build drivers.
COMPILERS = frozenset({
    "nvcc", "ptxas", "cicc", "cudafe++", "fatbinary", "nvlink", "nvdisasm",
    "c++", "g++", "gcc", "cc", "cc1", "cc1plus", "clang", "clang++", "ld", "ld.lld", "as", "ninja",
})


@dataclass(frozen=True)
class Thresholds:
    """Below these rates per second a period is noise, not progress.

    An idle or spinning Python scheduler reads a few KB a period (its sockets, an occasional /proc
    file), faults rarely (allocator growth: measured 0 a second for an idle and a spinning simulated
    rank) and never from storage. Loading weights, even from slow shared storage, reads MB/s: a 5 GB
    shard that takes two minutes is 40 MB/s. Through mmap each fault maps more than a page: 16 pages
    (fault-around) for small pages, a whole large folio (measured about 1 MiB on ext4 here) where
    the file system has them; so 20 faults a second is at least 1.3 MB/s and usually 20 MB/s. From a
    cold disk each major fault waits for storage. So at the default 5 s period: 320 KiB read, or 100
    faults, or 10 faults from storage. A compiler counts when it is new since the last sample or used
    CPU in the period.
    """

    read_bytes_per_second: float = 64 * 1024
    faults_per_second: float = 20.0
    major_faults_per_second: float = 2.0


@dataclass(frozen=True)
class ProcessSample:
    """One process of the unit, as /proc shows it at a sample."""

    pid: int
    ppid: int
    comm: str
    rank: str | None  # from the process title (`sglang::scheduler_TP3` -> TP3); None for others
    minflt: int
    majflt: int
    cpu_ticks: int  # utime + stime, in clock ticks
    rchar: int | None = None  # /proc/PID/io: None where not permitted (another user's)
    read_bytes: int | None = None
    syscalls: int | None = None  # /proc/PID/io syscr + syscw: read and write calls, all threads

    @property
    def intake(self) -> int | None:
        """Bytes taken in: read() calls (page cache included) or storage reads (mmap read-ahead), the larger."""
        if self.rchar is None and self.read_bytes is None:
            return None
        return max(self.rchar or 0, self.read_bytes or 0)


@dataclass(frozen=True)
class CgroupSample:
    """The unit's cgroup v2 counters (None: the file or the key is absent, e.g. cgroup v1)."""

    read_bytes: int | None = None  # io.stat rbytes, summed over devices
    pgfault: int | None = None  # memory.stat
    pgmajfault: int | None = None


@dataclass(frozen=True)
class Sample:
    at: float
    processes: tuple[ProcessSample, ...]
    cgroup: CgroupSample | None = None
    ticks_per_second: int = 100


@dataclass(frozen=True)
class RankVitals:
    rank: str
    pid: int
    seconds: float  # the period the rates are over (0: first sample of this process)
    intake_bytes: int | None  # the process's total so far (None: /proc/PID/io not readable)
    faults: int  # minor + major page faults of the process so far
    read_rate: float | None  # bytes/s over the period
    fault_rate: float  # faults/s
    major_fault_rate: float
    cpu_share: float  # of one core, the rank itself: shown, never progress
    compilers: tuple[tuple[str, int], ...]  # (comm, how many) running under the rank
    progress: tuple[str, ...]  # why this period counts as progress: reading, faulting, compiling (+ the GPU's)
    gpu: GpuPeriod | None = None  # the rank's GPU over the period (None: not observed)
    # How long the process has touched nothing outside its own memory: no page fault, no byte read, no
    # read or write call, no compiler (0: it did in this period). A spin touches nothing (host_work).
    quiet_seconds: float = 0.0

    @property
    def alive(self) -> bool:
        return bool(self.progress)

    def text(self) -> str:
        """`reading 1.2 GB/s`, `faulting in 3.1k pages/s`, `compiling: 3 nvcc, 1 ptxas`, `only CPU (98%)`."""
        parts = []
        if "reading" in self.progress and self.read_rate is not None:
            parts.append(f"reading {human_bytes(self.read_rate)}/s")
        if "faulting" in self.progress:
            parts.append(f"faulting in {human_count(self.fault_rate)} pages/s")
        if self.compilers:
            parts.append("compiling: " + ", ".join(f"{n} {comm}" for comm, n in self.compilers))
        if "host_work" in self.progress:
            parts.append(f"host work: {self.cpu_share:.0%} of a core with the GPU idle")
        if self.gpu is not None and (self.gpu.alive or not parts):
            parts.append(self.gpu.text())
        if parts:
            return "; ".join(parts)
        if self.seconds <= 0:
            return "first sample"
        if self.cpu_share >= 0.05:
            return f"only CPU ({self.cpu_share:.0%} of a core)"
        return "no sign of life"


@dataclass(frozen=True)
class UnitVitals:
    """The whole unit, from its cgroup v2 counters (where present)."""

    seconds: float
    read_rate: float | None
    fault_rate: float | None

    def text(self) -> str:
        parts = []
        if self.read_rate is not None:
            parts.append(f"reading {human_bytes(self.read_rate)}/s from storage")
        if self.fault_rate is not None:
            parts.append(f"faulting in {human_count(self.fault_rate)} pages/s")
        return "; ".join(parts)


@dataclass(frozen=True)
class Vitals:
    at: float
    ranks: tuple[RankVitals, ...]
    unit: UnitVitals | None = None
    gpu_source: str = "off"  # off | ok | unavailable | stuck | failed (sources/host/gpu.py)
    gpu_problem: str | None = None  # why there are no GPU readings
    gpu_since: Mapping[str, float] = field(default_factory=dict)  # rank -> since when its GPU is in its state

    def rank(self, label: str) -> RankVitals | None:
        return next((r for r in self.ranks if r.rank == label), None)


def compare(previous: Sample | None, current: Sample, thresholds: Thresholds = Thresholds(),
            before: Vitals | None = None) -> Vitals:
    """The rates between two samples, per rank. A rank process new since `previous` (or with no
    previous sample) has no period yet: its counters since birth are not this period's. `before`
    (the previous period's vitals) carries how long each rank has been quiet."""
    earlier = {p.pid: p for p in previous.processes} if previous is not None else {}
    seconds = current.at - previous.at if previous is not None else 0.0
    children = _children(current.processes)
    ranks = []
    for process in _rank_processes(current.processes):
        old = earlier.get(process.pid)
        if old is not None and (old.comm != process.comm or old.rank != process.rank):
            old = None  # the pid was reused
        rank = _rank_vitals(process, old, seconds if old is not None else 0.0, children, earlier,
                            current.ticks_per_second, thresholds)
        if old is not None and not _touched(process, old, rank):
            was = before.rank(rank.rank) if before is not None else None
            carried = was.quiet_seconds if was is not None and was.pid == rank.pid else 0.0
            rank = replace(rank, quiet_seconds=carried + seconds)
        ranks.append(rank)
    unit = None
    if previous is not None and previous.cgroup is not None and current.cgroup is not None and seconds > 0:
        unit = UnitVitals(seconds, _rate(previous.cgroup.read_bytes, current.cgroup.read_bytes, seconds),
                          _rate(previous.cgroup.pgfault, current.cgroup.pgfault, seconds))
    return Vitals(current.at, tuple(sorted(ranks, key=lambda r: _rank_key(r.rank))), unit)


def _rank_vitals(process: ProcessSample, old: ProcessSample | None, seconds: float,
                 children: Mapping[int, list[ProcessSample]], before: Mapping[int, ProcessSample],
                 ticks: int, thresholds: Thresholds) -> RankVitals:
    compilers = [p for p in _descendants(process.pid, children) if p.comm in COMPILERS]
    counts: dict[str, int] = {}
    for compiler in compilers:
        counts[compiler.comm] = counts.get(compiler.comm, 0) + 1
    reasons = []
    read_rate = fault_rate = major_rate = cpu_share = 0.0
    rate: float | None = None
    if old is not None and seconds > 0:
        rate = _rate(old.intake, process.intake, seconds)
        fault_rate = max((process.minflt + process.majflt) - (old.minflt + old.majflt), 0) / seconds
        major_rate = max(process.majflt - old.majflt, 0) / seconds
        cpu_share = max(process.cpu_ticks - old.cpu_ticks, 0) / ticks / seconds
        read_rate = rate or 0.0
        if read_rate >= thresholds.read_bytes_per_second:
            reasons.append("reading")
        if fault_rate >= thresholds.faults_per_second or major_rate >= thresholds.major_faults_per_second:
            reasons.append("faulting")
    if old is not None and any(_compiled(c, before.get(c.pid)) for c in compilers):
        reasons.append("compiling")
    return RankVitals(process.rank or "", process.pid, seconds, process.intake, process.minflt + process.majflt,
                      rate, fault_rate, major_rate, cpu_share, tuple(sorted(counts.items(), key=lambda kv: -kv[1])),
                      tuple(reasons))


def _touched(process: ProcessSample, old: ProcessSample, rank: RankVitals) -> bool:
    """Anything outside the process's own memory in the period: a page fault, a byte read, a read or
    write call, a compiler. A loop spinning on the CPU does none of these."""
    return (process.minflt + process.majflt > old.minflt + old.majflt
            or (process.intake or 0) > (old.intake or 0)
            or (process.syscalls or 0) > (old.syscalls or 0) or "compiling" in rank.progress)


def _compiled(compiler: ProcessSample, old: ProcessSample | None) -> bool:
    """New since the last sample, or it used CPU since (a compiler waiting on a lock does not count)."""
    if old is None or old.comm != compiler.comm:
        return True
    return compiler.cpu_ticks > old.cpu_ticks


def _rank_processes(processes: Iterable[ProcessSample]) -> list[ProcessSample]:
    """The topmost process of each rank title (a forked helper keeps its parent's title)."""
    by_pid = {p.pid: p for p in processes}
    out: dict[str, ProcessSample] = {}
    for process in processes:
        if process.rank is None:
            continue
        parent = by_pid.get(process.ppid)
        if parent is not None and parent.rank == process.rank:
            continue
        if process.rank not in out or process.pid < out[process.rank].pid:
            out[process.rank] = process
    return list(out.values())


def _children(processes: Iterable[ProcessSample]) -> dict[int, list[ProcessSample]]:
    out: dict[int, list[ProcessSample]] = {}
    for process in processes:
        out.setdefault(process.ppid, []).append(process)
    return out


def _descendants(pid: int, children: Mapping[int, list[ProcessSample]]) -> list[ProcessSample]:
    out: list[ProcessSample] = []
    todo = list(children.get(pid, ()))
    seen = {pid}
    while todo:
        process = todo.pop()
        if process.pid in seen:
            continue
        seen.add(process.pid)
        out.append(process)
        todo.extend(children.get(process.pid, ()))
    return out


def _rate(old: int | None, new: int | None, seconds: float) -> float | None:
    if old is None or new is None or seconds <= 0:
        return None
    return max(new - old, 0) / seconds


def _rank_key(label: str) -> tuple[int, ...]:
    return tuple(int("".join(ch for ch in part if ch.isdigit()) or 0) for part in label.split())


def with_gpus(vitals: Vitals, sample: Sample, readings: Sequence[GpuReading], infos: Mapping[int, GpuInfo],
              baselines: Mapping[int, GpuBaseline], thresholds: GpuThresholds = DEFAULT_GPU_THRESHOLDS) -> Vitals:
    """`vitals` with each rank's GPU over the period (`readings`: NVML's samples in it), found by the
    GPU contexts of the rank's process and its descendants; a GPU that computes or moves data is a
    sign of life (gpu_vitals.py)."""
    if not readings:
        return vitals
    children = _children(sample.processes)
    ranks = []
    for rank in vitals.ranks:
        pids = [rank.pid, *(p.pid for p in _descendants(rank.pid, children))]
        gpu = gpu_summary(judge_rank(infos, readings, baselines, pids, thresholds))
        if gpu is None:
            ranks.append(rank)
            continue
        extra = tuple(r for r in gpu.reasons if r not in rank.progress)
        if host_work(rank, gpu, thresholds):
            extra += ("host_work",)
        ranks.append(replace(rank, gpu=gpu, progress=rank.progress + extra))
    return replace(vitals, ranks=tuple(ranks))


def host_work(rank: RankVitals, gpu: GpuPeriod, thresholds: GpuThresholds = DEFAULT_GPU_THRESHOLDS) -> bool:
    """The rank busy on the CPU while its GPU has no kernel resident, and touching the system now and
    then: host work (an in-process compiler such as NVRTC shows nothing else: no children, faults
    and reads only between kernels, measured at most 5 s apart). A rank spinning in host code (a
    Python loop, a livelock) touches nothing: past `host_quiet` seconds its CPU is not progress. A
    rank spinning while it waits on the GPU has a kernel resident (the waiting signature); one
    waiting in gloo or recv() uses no CPU. Only where the GPU is observed: without it CPU is never
    progress."""
    return (not gpu.alive and gpu.state == "idle" and gpu.sm_util is not None
            and gpu.sm_util <= thresholds.idle_sm_util and rank.cpu_share >= thresholds.host_cpu_share
            and rank.quiet_seconds <= thresholds.host_quiet)


def progress_events(vitals: Vitals, invocation_id: str) -> list[Event]:
    """One RANK_PROGRESS event per rank that showed a sign of life in the period, dated at the sample."""
    return [Event(EventKind.RANK_PROGRESS, vitals.at, rank=r.rank, text=r.text(), invocation_id=invocation_id)
            for r in vitals.ranks if r.alive]


def document(vitals: Vitals | None, now: float) -> dict[str, Any] | None:
    """The `vitals` part of `/status` and the status file."""
    if vitals is None:
        return None
    ranks = {}
    for r in vitals.ranks:
        ranks[r.rank] = {"pid": r.pid, "text": _status_text(r, vitals.gpu_since.get(r.rank), now),
                         "progress": list(r.progress),
                         "intake_bytes": r.intake_bytes, "page_faults": r.faults,
                         "read_bytes_per_second": None if r.read_rate is None else round(r.read_rate, 1),
                         "faults_per_second": round(r.fault_rate, 1), "cpu_share": round(r.cpu_share, 3),
                         "compilers": dict(r.compilers), "gpu": gpu_document(r.gpu)}
    return {"sampled_seconds_ago": round(max(now - vitals.at, 0.0), 3), "ranks": ranks,
            "unit": vitals.unit.text() if vitals.unit is not None else None,
            "gpu_source": {"state": vitals.gpu_source, "problem": vitals.gpu_problem}}


def _status_text(rank: RankVitals, since: float | None, now: float) -> str:
    """`GPU waiting 14m, 124 W flat: a kernel waits, likely a collective` for a waiting GPU; else text()."""
    gpu = rank.gpu
    if gpu is None or gpu.state != "waiting" or rank.alive or since is None:
        return rank.text()
    power = f"{gpu.power_w:.0f} W" if gpu.power_w is not None else "power"
    polls = ", polling host memory" if gpu.polling else ""
    return (f"GPU waiting {format_duration(max(now - since, 0.0))}, {power} flat{polls}: a kernel waits, "
            "likely a collective")


def gpu_document(gpu: GpuPeriod | None) -> dict[str, Any] | None:
    if gpu is None:
        return None
    return {"index": gpu.index, "state": gpu.state, "text": gpu.text(), "power_watts": _round(gpu.power_w),
            "power_swing_watts": _round(gpu.power_swing_w), "power_limit_watts": _round(gpu.limit_w),
            "floor_watts": _round(gpu.floor_w), "pcie_mb_per_second": _round(gpu.pcie_mbps),
            "sm_util": _round(gpu.sm_util), "memory_bytes": gpu.memory_bytes, "polling": gpu.polling}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def human_bytes(value: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if value < 999.5:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def human_count(value: float) -> str:
    if value < 999.5:
        return f"{value:.0f}"
    if value < 999_500:
        return f"{value / 1000:.1f}k"
    return f"{value / 1e6:.1f}M"
