"""The /proc reader and the vitals stage over real processes: a child titled like an SGLang scheduler
does one thing on command (read() a page-cached file, touch its pages through mmap, start a
compiler, spin the CPU), and two samples around it must tell progress from CPU alone. No sleeps:
the child answers when done; the period between the samples is passed in."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.host.procstat import ProcSampler
from phasewatch.stages.s4_judge.vitals import RankVitals, compare

GROUP = "/phasewatch-test.service"
SIZE = 64 << 20

CHILD = r"""
import mmap, os, subprocess, sys, time
path, compiler = sys.argv[1], sys.argv[2]
started = []
for command in sys.stdin:
    command = command.strip()
    if command == "read":
        buffer = bytearray(1 << 20)
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
    elif command == "mmap":
        touched = 0
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for page in range(0, len(mapped), mmap.PAGESIZE):
                touched += mapped[page]
    elif command == "compile":
        started.append(subprocess.Popen([compiler, "60"]))
    elif command == "spin":
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
    print("done", flush=True)
for child in started:
    child.kill()
"""


class RankChild:
    """The child, and a fixture cgroup that holds it and its children (as the unit's would)."""

    def __init__(self, tmp_path: Path) -> None:
        weights = tmp_path / "weights.bin"
        weights.write_bytes(bytes(range(256)) * (SIZE // 256))  # just written: in the page cache
        compiler = tmp_path / "nvcc"  # a program whose command name is a compiler's
        shutil.copy(shutil.which("sleep") or "/bin/sleep", compiler)
        self.process = subprocess.Popen(["sglang::scheduler_TP0", "-c", CHILD, str(weights), str(compiler)],
                                        executable=sys.executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, start_new_session=True)
        self.group = tmp_path / "cg" / GROUP.lstrip("/")
        self.group.mkdir(parents=True)
        self.sampler = ProcSampler(ProcessTable("/proc", (str(tmp_path / "cg"),)))

    def _enlist(self) -> None:
        pids = [self.process.pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        (self.group / "cgroup.procs").write_text("\n".join(map(str, pids)) + "\n")

    def period(self, command: str) -> RankVitals:
        """Sample, have the child do `command`, sample again one (passed-in) second later."""
        self._enlist()
        before = self.sampler.sample(GROUP, 1000.0)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "done"
        self._enlist()
        [tp0] = compare(before, self.sampler.sample(GROUP, 1001.0)).ranks
        assert (tp0.rank, tp0.pid) == ("TP0", self.process.pid)
        return tp0


@pytest.fixture
def rank(tmp_path: Path) -> Iterator[RankChild]:
    child = RankChild(tmp_path)
    try:
        yield child
    finally:
        os.killpg(child.process.pid, signal.SIGKILL)  # with the compiler it started
        child.process.communicate()  # reaps it and closes its pipes


def test_reading_a_page_cached_file_shows_as_bytes_read(rank: RankChild) -> None:
    tp0 = rank.period("read")
    assert tp0.intake_bytes is not None  # our own child: /proc/PID/io is readable
    assert "reading" in tp0.progress and tp0.read_rate is not None and tp0.read_rate >= SIZE


def test_touching_mapped_pages_shows_as_page_faults(rank: RankChild) -> None:
    tp0 = rank.period("mmap")
    assert "faulting" in tp0.progress, tp0


def test_a_compiler_child_shows_as_compiling(rank: RankChild) -> None:
    tp0 = rank.period("compile")
    assert "compiling" in tp0.progress and tp0.compilers == (("nvcc", 1),)
    assert "compiling: 1 nvcc" in tp0.text()
    still = rank.period("nothing")  # the compiler runs on but uses no CPU (a sleep): not progress
    assert still.progress == () and still.compilers == (("nvcc", 1),)


def test_spinning_the_cpu_is_not_progress(rank: RankChild) -> None:
    rank.period("read")  # the interpreter's own start-up faults are behind
    tp0 = rank.period("spin")
    assert tp0.progress == (), tp0
    assert tp0.cpu_share >= 0.2 and tp0.text().startswith("only CPU")
