"""`phasewatch vitals record` and `phasewatch vitals replay`: what the vitals sources see, kept and judged.

    phasewatch vitals record --pid 4711 --out startup.jsonl        # a process and its descendants
    phasewatch vitals record --unit sglang.service --out startup.jsonl --duration 30m
    phasewatch vitals replay startup.jsonl [--json] [--period 5s]

`record` writes phasewatch-vitals-trace/1 (stages/s4_judge/vitals_trace.py): a header (the GPUs, which process
plays which rank, from the titles or --rank, and --window labels), then one sample a second of the
processes (/proc) and GPUs (NVML, when there). `replay` cuts a trace into periods as the daemon
does and prints, per period and rank, alive or not and why: record one healthy start-up on new
hardware and check it before trusting short GPU stall windows (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Iterable, Iterator, TextIO

from ..durations import parse_duration
from ..errors import EX_OK, InputError, UsageError
from ..sources.host.gpu import NvmlSource
from ..sources.host.procs import ProcessTable, rank_from_title
from ..sources.host.procstat import ProcSampler, parse_stat
from ..stages.s4_judge import vitals_trace
from ..stages.s4_judge.gpu_vitals import GpuReading
from ..stages.s4_judge.vitals import ProcessSample
from ..stages.s4_judge.vitals_trace import Window


def add_parser(sub: Any) -> None:
    vitals = sub.add_parser("vitals", help="record a start-up's signs of life (/proc, NVML), or judge a recording")
    inner = vitals.add_subparsers(dest="vitals_command", required=True)
    record = inner.add_parser("record", help="write what the vitals sources see to a trace file")
    who = record.add_mutually_exclusive_group(required=True)
    who.add_argument("--unit", help="the processes of this systemd unit (its cgroup)")
    who.add_argument("--pid", type=int, action="append", help="this process and its descendants (repeatable)")
    record.add_argument("--out", required=True, help="the trace file to write (phasewatch-vitals-trace/1)")
    record.add_argument("--duration", help="stop after this long (default: when the processes are gone, or ^C)")
    record.add_argument("--interval", default="1s", help="time between samples (default 1s)")
    record.add_argument("--rank", action="append", default=[], metavar="LABEL=PID",
                        help="this process plays this rank (default: from the process titles)")
    record.add_argument("--window", action="append", default=[], metavar="NAME:EXPECT:BEGIN:END",
                        help="a labelled window (EXPECT progress or no_progress; BEGIN, END unix seconds)")
    record.add_argument("--note", default="", help="what was recorded")
    record.add_argument("--no-gpu", action="store_true", help="do not ask NVML")
    record.set_defaults(func=cmd_record)
    replay = inner.add_parser("replay", help="judge a trace period by period, as the daemon would")
    replay.add_argument("trace", help="a phasewatch-vitals-trace/1 file, or - for standard input")
    replay.add_argument("--json", action="store_true", help="print the JSON document")
    replay.add_argument("--period", default="5s", help="the daemon's vitals.period (default 5s)")
    replay.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    period = _duration(args.period, "--period")
    if period < 0.5:
        raise UsageError(f"--period: expected at least 0.5s, got {args.period!r}")
    try:
        if args.trace == "-":
            trace = vitals_trace.parse(bounded_lines(sys.stdin))
        else:
            with open(args.trace, encoding="utf-8", errors="replace") as handle:
                trace = vitals_trace.parse(bounded_lines(handle))
    except vitals_trace.TraceError as exc:
        raise InputError(f"{args.trace}: {exc}") from None
    for warning in trace.warnings:
        print(f"phasewatch: {args.trace}: {warning}", file=sys.stderr)
    try:
        periods = vitals_trace.replay(trace, period)
        document = vitals_trace.document(trace, periods)
    except vitals_trace.BAD_VALUE as exc:  # values parse accepted and the judgement cannot use
        raise InputError(f"{args.trace}: cannot be judged ({type(exc).__name__}: {exc})") from None
    if args.json:
        print(json.dumps(document, indent=1))
        return EX_OK
    if not periods:  # (it exited 65 unsaid)
        raise InputError(f"{args.trace}: fewer than two samples a period ({args.period}) apart: nothing to judge")
    t0 = periods[0].begin if periods else 0.0
    for window in trace.windows:
        print(f"window {window.name} ({window.expect}): +{window.begin - t0:.1f}s .. +{window.end - t0:.1f}s")
    for p in periods:
        labels = ",".join(w.name for w in trace.windows if p.begin < w.end and p.end > w.begin)
        for r in p.vitals.ranks:
            mark = "alive" if r.alive else "DEAD "
            print(f"+{p.begin - t0:6.1f}s +{p.end - t0:6.1f}s {r.rank:<8} {mark} {labels:<18} {r.text()}")
    return EX_OK


def bounded_lines(handle: TextIO) -> Iterator[str]:
    """The lines of `handle`, each read with a bound (MAX_LINE + 1 characters): a longer line is handed
    on cut at the bound, for `parse` to refuse, and nothing after it is read."""
    while True:
        line = handle.readline(vitals_trace.MAX_LINE + 1)
        if not line:
            return
        yield line
        if len(line) > vitals_trace.MAX_LINE:
            return


def _duration(text: str, name: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
    if value is None:
        raise UsageError(f"{name}: expected a duration, got {text!r}")
    return value


def _windows(specs: list[str]) -> list[Window]:
    out = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) != 4 or parts[1] not in ("progress", "no_progress"):
            raise UsageError(f"--window: expected NAME:progress|no_progress:BEGIN:END, got {spec!r}")
        try:
            out.append(Window(parts[0], float(parts[2]), float(parts[3]), parts[1]))
        except ValueError:
            raise UsageError(f"--window: BEGIN and END are unix seconds, got {spec!r}") from None
    return out


class _Stop:
    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True


def cmd_record(args: argparse.Namespace) -> int:
    interval = _duration(args.interval, "--interval")
    duration = _duration(args.duration, "--duration") if args.duration else None
    windows = _windows(args.window)
    ranks = _ranks_given(args.rank)
    table = ProcessTable()
    sampler = ProcSampler(table)
    cgroup = _control_group(args.unit) if args.unit else None
    gpu = None if args.no_gpu else NvmlSource(interval=interval)
    if gpu is not None:
        gpu.want(True)
        _wait_for_gpus(gpu)
    stop = _Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    began = time.monotonic()
    out = Path(args.out)
    written = 0
    titles: dict[int, str] = {}

    def header() -> str:
        infos = sorted((gpu.infos() if gpu is not None else {}).values(), key=lambda g: g.index)
        return vitals_trace.header_line(infos, ranks, windows, _recorded_on(gpu), args.note, sampler.ticks)

    with out.open("w", encoding="utf-8") as handle:
        # The header first (a recording killed at any time is a trace), padded: rewritten in place at
        # the end, with the ranks seen since.
        first = vitals_trace.padded(header()) or vitals_trace.padded(_without_ranks(header()))
        handle.write(first or "\n")  # (a header too long for any pad: prepended at the end)
        while not stop.stopped and (duration is None or time.monotonic() - began < duration):
            pids = table.pids(cgroup) if cgroup is not None else _with_descendants(table, args.pid)
            if not pids and time.monotonic() - began > 2 * interval:
                break
            sample = sampler.sample_pids(pids, time.time())
            _note_processes(sample.processes, table, titles, None if args.rank else ranks)
            readings: list[GpuReading] = gpu.take() if gpu is not None else []
            latest = {r.index: r for r in readings}
            line = vitals_trace.sample_line(sample.at, sample.processes, titles, list(latest.values()))
            handle.write(line + "\n")
            handle.flush()
            written += 1
            time.sleep(max(interval - (time.monotonic() - began) % interval, 0.01))
        final = header()
        fits = vitals_trace.padded(final) if first is not None else None
        if fits is not None:
            handle.seek(0)
            handle.write(fits)
    if fits is None:
        _prepend(out, final)
    problem = gpu.problem() if gpu is not None else None
    gpus = len(gpu.infos()) if gpu is not None else 0
    print(f"phasewatch: {written} samples of {len(titles) or len(ranks)} process(es) to {out}"
          + (f"; GPU: {problem}" if problem else f"; {gpus} GPU(s)"), file=sys.stderr)
    return EX_OK


def _ranks_given(specs: list[str]) -> dict[str, int]:
    """--rank LABEL=PID, each."""
    ranks: dict[str, int] = {}
    for spec in specs:
        label, _, pid = spec.partition("=")
        if not label or not pid.isdigit():
            raise UsageError(f"--rank: expected LABEL=PID, got {spec!r}")
        ranks[label] = int(pid)
    return ranks


def _note_processes(processes: Iterable[ProcessSample], table: ProcessTable, titles: dict[int, str],
                    ranks: dict[str, int] | None) -> None:
    """Each new process's title into `titles`; its rank into `ranks` (None: the ranks were given)."""
    for process in processes:
        if process.pid not in titles:
            title = _title(table, process.pid)
            if title is not None:
                titles[process.pid] = title
        if process.rank is not None and ranks is not None:
            ranks.setdefault(process.rank, process.pid)


def _without_ranks(header: str) -> str:
    """A first header too long to fit its pad (many --rank): the ranks come with the final one."""
    document = json.loads(header)
    document["ranks"] = {}
    return json.dumps(document)


def _prepend(path: Path, header: str) -> None:
    """A final header longer than the pad (hundreds of ranks or GPUs): the file is copied behind it,
    line by line, and put in its place."""
    part = path.with_name(path.name + ".part")
    with path.open(encoding="utf-8") as source, part.open("w", encoding="utf-8") as target:
        source.readline()
        target.write(header + "\n")
        for line in source:
            target.write(line)
    part.replace(path)


def _wait_for_gpus(gpu: NvmlSource) -> None:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not gpu.infos() and gpu.problem() is None:
        time.sleep(0.05)


def _recorded_on(gpu: NvmlSource | None) -> str:
    names = sorted({g.name for g in (gpu.infos() if gpu is not None else {}).values()})
    return f"{socket.gethostname()}: {', '.join(names) or 'no GPU seen'}"


def _title(table: ProcessTable, pid: int) -> str | None:
    try:
        cmdline = (table.proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    if rank_from_title(cmdline) is None:
        return None
    return cmdline.split(b"\0", 1)[0].decode("utf-8", "replace")


def _with_descendants(table: ProcessTable, roots: list[int]) -> list[int]:
    parents: dict[int, list[int]] = {}
    for pid in table.host_pids():
        try:
            stat = parse_stat((table.proc / str(pid) / "stat").read_text("utf-8", "replace"))
        except OSError:
            continue
        if stat is not None:
            parents.setdefault(stat[1], []).append(pid)
    out, todo = set(), [p for p in roots if (table.proc / str(p)).exists()]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(parents.get(pid, ()))
    return sorted(out)


def _control_group(unit: str) -> str:
    try:
        shown = subprocess.run(["systemctl", "show", "--property=ControlGroup", "--value", unit],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot ask systemd for {unit}'s cgroup: {exc}") from None
    group = shown.stdout.strip()
    if shown.returncode != 0 or not group:
        raise InputError(f"{unit} has no cgroup (not running?): {shown.stderr.strip()}")
    return group
