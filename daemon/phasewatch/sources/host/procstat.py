"""Edge: one sample of a unit's processes and cgroup, from /proc and /sys/fs/cgroup (for vitals.py).

What each file needs (phasewatch runs as its own user, the server as another):
- /proc/PID/stat (comm, ppid, minflt, majflt, utime, stime): readable by any user;
- /proc/PID/cmdline (the rank's title): readable by any user;
- /proc/PID/io (rchar, read_bytes): mode 0400 of the process's owner, then a ptrace check: the
  same user, or CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE; without it the sample says None and only
  page faults and compilers tell progress (docs/operations.md);
- cgroup v2 io.stat and memory.stat of the unit: readable by any user, absent on cgroup v1.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...stages.s4_judge.vitals import CgroupSample, ProcessSample, Sample
from .procs import CGROUP_ROOTS, ProcessTable, rank_from_title

MAX_PROCESSES = 4096  # a unit with more is sampled in part (pids in order), never for unbounded time


def clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def parse_stat(text: str) -> tuple[str, int, int, int, int] | None:
    """`/proc/PID/stat` -> (comm, ppid, minflt, majflt, utime + stime); None if malformed.
    The comm is in parentheses and may itself hold spaces and parentheses: split at the last ')'."""
    head, paren, tail = text.rpartition(")")
    if not paren or "(" not in head:
        return None
    comm = head.split("(", 1)[1]
    fields = tail.split()
    try:
        # fields[0] is the state (field 3 of proc(5)); ppid 4, minflt 10, majflt 12, utime 14, stime 15.
        return comm, int(fields[1]), int(fields[7]), int(fields[9]), int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def parse_keyed(text: str, separator: str = ":") -> dict[str, int]:
    """`rchar: 123` lines (/proc/PID/io) or `pgfault 123` lines (memory.stat) -> {key: value}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(separator) if separator else line.partition(" ")
        try:
            out[key.strip()] = int(value.strip())
        except ValueError:
            continue
    return out


def parse_io_stat(text: str) -> int | None:
    """cgroup v2 `io.stat` (`8:0 rbytes=1 wbytes=2 ...` per device) -> rbytes summed; None if none."""
    total, seen = 0, False
    for line in text.splitlines():
        for item in line.split()[1:]:
            key, _, value = item.partition("=")
            if key == "rbytes" and value.isdigit():
                total += int(value)
                seen = True
    return total if seen else None


class ProcSampler:
    """Reads one `vitals.Sample` of a unit; /proc and the cgroup roots come from the process table."""

    def __init__(self, table: ProcessTable | None = None, ticks: int | None = None) -> None:
        self.table = table or ProcessTable()
        self.ticks = ticks or clock_ticks()

    def sample(self, control_group: str, now: float) -> Sample:
        return Sample(now, self._processes(self.table.pids(control_group)), self._cgroup(control_group), self.ticks)

    def sample_pids(self, pids: list[int], now: float) -> Sample:
        """These processes, without a cgroup (`vitals record --pid`)."""
        return Sample(now, self._processes(pids), None, self.ticks)

    def _processes(self, pids: list[int]) -> tuple[ProcessSample, ...]:
        processes = []
        for pid in pids[:MAX_PROCESSES]:
            process = self._process(pid)
            if process is not None:
                processes.append(process)
        return tuple(processes)

    def _process(self, pid: int) -> ProcessSample | None:
        base = self.table.proc / str(pid)
        try:
            stat = parse_stat((base / "stat").read_text("utf-8", "replace"))
            cmdline = (base / "cmdline").read_bytes()
        except OSError:
            return None  # gone meanwhile
        if stat is None:
            return None
        comm, ppid, minflt, majflt, cpu = stat
        try:
            io = parse_keyed((base / "io").read_text())
        except OSError:
            io = {}  # EACCES: another user's process without CAP_SYS_PTRACE
        return ProcessSample(pid, ppid, comm, rank_from_title(cmdline), minflt, majflt, cpu,
                             io.get("rchar"), io.get("read_bytes"), _syscalls(io))

    def _cgroup(self, control_group: str) -> CgroupSample | None:
        for root in self.table.cgroup_roots:
            directory = Path(root + control_group)
            if not (directory / "cgroup.procs").exists():
                continue
            read_bytes = memory = None
            try:
                read_bytes = parse_io_stat((directory / "io.stat").read_text())
            except OSError:
                pass
            try:
                memory = parse_keyed((directory / "memory.stat").read_text(), "")
            except OSError:
                pass
            if read_bytes is None and memory is None:
                continue  # a v1 or unified hierarchy without those controllers: try the next root
            memory = memory or {}
            return CgroupSample(read_bytes, memory.get("pgfault"), memory.get("pgmajfault"))
        return None


__all__ = ["CGROUP_ROOTS", "ProcSampler", "parse_io_stat", "parse_keyed", "parse_stat"]


def _syscalls(io: dict[str, int]) -> int | None:
    """Read and write calls so far (/proc/PID/io syscr + syscw), None where not readable."""
    if "syscr" not in io and "syscw" not in io:
        return None
    return io.get("syscr", 0) + io.get("syscw", 0)
