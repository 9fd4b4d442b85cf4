"""Pure stage: the trace format `phasewatch-vitals-trace/1` (JSON Lines) and its offline judgement.

Line 1 is a header: the GPUs (index, name, power limit), which process plays which rank, and
labelled windows (ground truth: `progress` or `no_progress`). Every further line is one sample:
the unit's processes as /proc shows them and each GPU as NVML does (docs/operations.md, `vitals
record`). `replay` cuts the samples into periods as the daemon does (`vitals.period`), judges each
with the daemon's own stages (vitals.compare, vitals.with_gpus) and says, per period and rank,
alive or not and why. `header_line` and `sample_line` are the recorder's half; the recorder writes the
header first, padded to HEADER_BYTES, and rewrites it in place at the end (`padded`).

Any trace, however malformed, is a `TraceError` naming its line, never another exception: a line
longer than MAX_LINE is refused (the reader hands at most MAX_LINE + 1 characters of a line, so
memory stays bounded); a last line cut short (a recorder killed mid-write) is skipped with a warning
(`Trace.warnings`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ...engines import rank_from_any_title
from .gpu_vitals import GpuBaseline, GpuInfo, GpuReading, baselines_after
from .vitals import ProcessSample, Sample, Vitals, compare, with_gpus

FORMAT = "phasewatch-vitals-trace/1"
PERIOD_SLACK = 0.2  # a period ends at the first sample at least `period - slack` after it began
MAX_LINE = 1 << 20  # characters: a sample of a start-up's processes is a few KB
HEADER_BYTES = 4096  # the header line, padded with spaces, newline included
# What a value of the wrong shape or size raises on its way to a number, a dict, a rank.
BAD_VALUE = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError, RecursionError)


class TraceError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Window:
    name: str
    begin: float
    end: float
    expect: str  # progress | no_progress


@dataclass(frozen=True)
class TraceSample:
    at: float
    processes: tuple[ProcessSample, ...]
    gpus: tuple[GpuReading, ...]


@dataclass(frozen=True)
class Trace:
    gpus: Mapping[int, GpuInfo]
    ranks: Mapping[str, int]
    windows: tuple[Window, ...]
    samples: tuple[TraceSample, ...]
    clock_ticks: int = 100
    header: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # what was skipped (a last line cut short)


@dataclass(frozen=True)
class Period:
    begin: float
    end: float
    vitals: Vitals


def parse(lines: Iterable[str]) -> Trace:
    """A trace's lines -> Trace; TraceError names the first bad line."""
    header: dict[str, Any] | None = None
    samples: list[TraceSample] = []
    cut: TraceError | None = None  # a line cut short: fine only as the last one
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise TraceError(number, f"longer than {MAX_LINE} characters: refused (a sample is a few KB)")
        if not line.strip():
            continue
        if cut is not None:
            raise cut
        try:
            item = json.loads(line)
        except RecursionError:
            raise TraceError(number, "nested too deep") from None
        except ValueError as exc:
            error = TraceError(number, f"not JSON ({exc})")
            if _cut_short(line, exc):
                cut = error
                continue
            raise error from None
        if not isinstance(item, dict):
            raise TraceError(number, "expected a JSON object")
        if header is None:
            if item.get("format") != FORMAT:
                raise TraceError(number, f"not a {FORMAT} header (format: {_shown(item.get('format'))})")
            header = item
            continue
        samples.append(_sample(item, number))
    if header is None:
        raise cut or TraceError(1, "empty trace")
    warnings = (f"line {cut.line}: cut short (a recording killed mid-write?): skipped",) if cut else ()
    gpus, ranks, windows, ticks = _header(header)
    samples.sort(key=lambda s: s.at)
    return Trace(gpus, ranks, windows, tuple(samples), ticks, header, warnings)


def _cut_short(line: str, exc: ValueError) -> bool:
    """The end of a line the recorder did not finish writing: no newline, and JSON ran out of input."""
    if line.endswith("\n") or not isinstance(exc, json.JSONDecodeError):
        return False
    return exc.pos >= len(line.rstrip()) or exc.msg.startswith("Unterminated string")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _header(header: Mapping[str, Any]) -> tuple[dict[int, GpuInfo], dict[str, int], tuple[Window, ...], int]:
    try:
        gpus = {int(g["index"]): GpuInfo(int(g["index"]), str(g.get("name") or ""), _int(g.get("power_limit_mw")),
                                         _int(g.get("memory_total_bytes"))) for g in header.get("gpus") or ()}
        ranks = {str(k): int(v) for k, v in _object(header.get("ranks"), "ranks").items()}
        windows = tuple(Window(str(w["name"]), _finite(w["begin"]), _finite(w["end"]), str(w["expect"]))
                        for w in header.get("windows") or ())
        ticks = header.get("clock_ticks")
        clock_ticks = 100 if ticks is None else int(ticks)
    except BAD_VALUE as exc:
        raise TraceError(1, f"bad header ({_shown(exc)})") from None
    if clock_ticks < 1 or ticks != clock_ticks:
        raise TraceError(1, f"bad header (clock_ticks: expected a whole number of ticks a second, got {_shown(ticks)})")
    return gpus, ranks, windows, clock_ticks


def _object(value: Any, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{name}: expected an object, got {_shown(value)}")
    return value


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number of seconds, got {number}")
    return number


def _sample(item: Mapping[str, Any], number: int) -> TraceSample:
    try:
        at = _finite(item["t"])
        processes = tuple(ProcessSample(int(p["pid"]), int(p.get("ppid") or 0), str(p.get("comm") or ""),
                                        rank_from_any_title(p["title"]) if p.get("title") else None,
                                        int(p.get("minflt") or 0), int(p.get("majflt") or 0),
                                        int(p.get("cpu_ticks") or 0), _int(p.get("rchar")), _int(p.get("read_bytes")),
                                        _syscalls(p))
                          for p in item.get("procs") or ())
        gpus = tuple(GpuReading(at, int(g["index"]), _float(g.get("sm_util")), _float(g.get("mem_util")),
                                _float(g.get("power_mw")), _float(g.get("pcie_rx_kbps")),
                                _float(g.get("pcie_tx_kbps")),
                                {int(k): int(v) for k, v in _object(g.get("processes"), "processes").items()
                                 if v is not None},
                                {int(k): float(v) for k, v in _object(g.get("process_sm_util"),
                                                                      "process_sm_util").items() if v is not None})
                     for g in item.get("gpus") or ())
    except BAD_VALUE as exc:
        raise TraceError(number, f"bad sample ({_shown(exc)})") from None
    return TraceSample(at, processes, gpus)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _syscalls(row: Mapping[str, Any]) -> int | None:
    """`syscalls` (syscr + syscw, written since 2026-12-04), else the first recordings' `syscr` + `syscw`."""
    if row.get("syscalls") is not None:
        return int(row["syscalls"])
    if row.get("syscr") is None and row.get("syscw") is None:
        return None
    return int(row.get("syscr") or 0) + int(row.get("syscw") or 0)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _with_ranks(processes: Sequence[ProcessSample], ranks: Mapping[str, int]) -> tuple[ProcessSample, ...]:
    """The header's `ranks` name the rank processes where it has them (titles read by the recorder
    may be absent, or shared by a forked helper); without them the titles do."""
    if not ranks:
        return tuple(processes)
    by_pid = {pid: rank for rank, pid in ranks.items()}
    return tuple(replace(p, rank=by_pid.get(p.pid)) for p in processes)


def replay(trace: Trace, period: float = 5.0) -> list[Period]:
    """The trace judged period by period, as the daemon would sample it every `period` seconds
    (its GPU source samples each second in between)."""
    samples = trace.samples
    if not samples:
        return []
    out: list[Period] = []
    baselines: dict[int, GpuBaseline] = {}
    start = 0
    previous = _proc_sample(trace, samples[0])
    before: Vitals | None = None
    while True:
        end = next((i for i in range(start + 1, len(samples)) if samples[i].at >= samples[start].at + period
                    - PERIOD_SLACK), None)
        if end is None:
            break
        current = _proc_sample(trace, samples[end])
        readings = [g for s in samples[start + 1:end + 1] for g in s.gpus]
        vitals = with_gpus(compare(previous, current, before=before), current, readings, trace.gpus, baselines)
        before = vitals
        baselines = baselines_after(trace.gpus, readings, baselines)
        out.append(Period(samples[start].at, samples[end].at, vitals))
        previous, start = current, end
    return out


def _proc_sample(trace: Trace, sample: TraceSample) -> Sample:
    return Sample(sample.at, _with_ranks(sample.processes, trace.ranks), None, trace.clock_ticks)


def document(trace: Trace, periods: Sequence[Period]) -> dict[str, Any]:
    """`vitals replay --json`: per period and rank, alive or not and why."""
    rows = []
    for p in periods:
        ranks = {}
        for r in p.vitals.ranks:
            ranks[r.rank] = {"alive": r.alive, "why": list(r.progress) or [r.text()], "text": r.text(),
                             "gpu": r.gpu.state if r.gpu is not None else None}
        rows.append({"from": round(p.begin, 3), "to": round(p.end, 3), "ranks": ranks})
    windows = [{"name": w.name, "begin": w.begin, "end": w.end, "expect": w.expect} for w in trace.windows]
    return {"format": FORMAT, "windows": windows, "periods": rows}


def header_line(gpus: Sequence[GpuInfo], ranks: Mapping[str, int], windows: Sequence[Window], recorded_on: str,
                note: str, clock_ticks: int = 100) -> str:
    return json.dumps({"format": FORMAT, "recorded_on": recorded_on, "clock_ticks": clock_ticks,
                       "gpus": [{"index": g.index, "name": g.name, "power_limit_mw": g.power_limit_mw,
                                 "memory_total_bytes": g.memory_total_bytes} for g in gpus],
                       "ranks": dict(ranks),
                       "windows": [{"name": w.name, "begin": w.begin, "end": w.end, "expect": w.expect}
                                   for w in windows], "note": note})


def padded(header: str) -> str | None:
    """The header line as the recorder writes it, HEADER_BYTES with its newline (None: too long)."""
    if len(header) > HEADER_BYTES - 1:
        return None
    return header.ljust(HEADER_BYTES - 1) + "\n"


def sample_line(at: float, processes: Sequence[ProcessSample], titles: Mapping[int, str],
                readings: Sequence[GpuReading]) -> str:
    procs = []
    for p in processes:
        row: dict[str, Any] = {"pid": p.pid, "ppid": p.ppid, "comm": p.comm, "minflt": p.minflt, "majflt": p.majflt,
                               "cpu_ticks": p.cpu_ticks, "rchar": p.rchar, "read_bytes": p.read_bytes,
                               "syscalls": p.syscalls}
        if p.pid in titles:
            row["title"] = titles[p.pid]
        procs.append(row)
    gpus = [{"index": g.index, "sm_util": g.sm_util, "mem_util": g.mem_util, "power_mw": g.power_mw,
             "pcie_rx_kbps": g.pcie_rx_kbps, "pcie_tx_kbps": g.pcie_tx_kbps,
             "processes": {str(k): v for k, v in g.processes.items()},
             "process_sm_util": {str(k): v for k, v in g.process_sm_util.items()}} for g in readings]
    return json.dumps({"t": round(at, 3), "procs": procs, "gpus": gpus})
