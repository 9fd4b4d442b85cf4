"""On the GPU machine: the daemon's own path live (NvmlSource's worker thread, ProcSampler,
vitals.compare + with_gpus every period) against workloads.py, printing each period's verdict.
`PYTHONPATH=daemon python3 tools/gpu_workloads/live_verdicts.py MODE [MODE...]`"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from phasewatch.sources.host.gpu import NvmlSource
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.host.procstat import ProcSampler
from phasewatch.stages.s4_judge.gpu_vitals import baselines_after
from phasewatch.stages.s4_judge.vitals import ProcessSample, Sample, compare, with_gpus

HERE = os.path.dirname(os.path.abspath(__file__))
PERIOD = 5.0


def descendants(table: ProcessTable, root: int) -> list[int]:
    out, todo = [], [root]
    parents: dict[int, list[int]] = {}
    for pid in table.host_pids():
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, ()))
    return out


def as_rank(sample: Sample, root: int) -> Sample:
    return Sample(sample.at, tuple(ProcessSample(p.pid, p.ppid, p.comm, "TP0" if p.pid == root else None, p.minflt,
                                                 p.majflt, p.cpu_ticks, p.rchar, p.read_bytes)
                                   for p in sample.processes), None, sample.ticks_per_second)


def live(mode: str, source: NvmlSource, seconds: float) -> None:
    work = subprocess.Popen([sys.executable, os.path.join(HERE, "workloads.py"), mode, "--marks", f"/tmp/live-{mode}",
                             "--seconds", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    table, sampler = ProcessTable(), ProcSampler()
    previous, baselines, began = None, {}, time.time()
    source.take()
    print(f"== live {mode} (pid {work.pid})")
    while work.poll() is None and time.time() - began < seconds + 20:
        sample = as_rank(sampler.sample_pids(descendants(table, work.pid), time.time()), work.pid)
        readings, infos = source.take(), source.infos()
        vitals = compare(previous, sample)
        if previous is not None:
            vitals = with_gpus(vitals, sample, readings, infos, baselines)
        baselines = baselines_after(infos, readings, baselines)
        for rank in vitals.ranks:
            print(f"  +{time.time() - began:5.1f}s {'alive' if rank.alive else 'DEAD '} {rank.text()[:150]}")
        sys.stdout.flush()
        previous = sample
        time.sleep(PERIOD)
    if work.poll() is None:
        work.kill()
    work.wait()


if __name__ == "__main__":
    source = NvmlSource()
    source.want(True)
    for mode in sys.argv[1:]:
        live(mode, source, 30)
    print("source:", source.state(), source.problem(), source.infos())
