"""PROBE-S4 L-3: `phasewatch vitals replay` over malformed traces. Every one gets a one-line message
and exit 65 (EX_DATAERR), never a traceback; a line is read with a bound (memory stays bounded); a
last line cut short is skipped with a warning. Inputs are made here, one per row of the probe's table
(its 200 MB line scaled down to a line just over the cap)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from phasewatch.cli import main
from phasewatch.commands.vitals import bounded_lines
from phasewatch.stages.s4_judge import vitals_trace
from phasewatch.stages.s4_judge.vitals_trace import MAX_LINE

T0 = 1_800_000_000.0


def header(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"format": vitals_trace.FORMAT, "recorded_on": "test", "clock_ticks": 100,
                                "gpus": [{"index": 0, "name": "H200", "power_limit_mw": 700000,
                                          "memory_total_bytes": 1 << 30}],
                                "ranks": {"TP0": 731}, "windows": [], "note": ""}
    document.update(changes)
    return document


def sample(n: int, **proc: Any) -> dict[str, Any]:
    row = {"pid": 731, "ppid": 1, "comm": "python3", "minflt": 1000 + n, "majflt": 0, "cpu_ticks": 10 * n,
           "rchar": 0, "read_bytes": 0, **proc}
    return {"t": T0 + n, "procs": [row], "gpus": [{"index": 0, "power_mw": 300000.0}]}


def trace_text(head: dict[str, Any] | str, samples: list[Any]) -> str:
    lines = [head if isinstance(head, str) else json.dumps(head)]
    lines += [s if isinstance(s, str) else json.dumps(s) for s in samples]
    return "\n".join(lines) + "\n"


GOOD = [sample(n) for n in range(12)]


def replay(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, str, str]:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    status = main(["vitals", "replay", str(path), "--wide"])  # (each message on one line)
    out, err = capsys.readouterr()
    return status, out, err


def nested(depth: int) -> str:
    return '{"t": 1800000001.0, "procs": ' + "[" * depth + "]" * depth + "}"


ROWS = {
    "pid 1e400": (header(), [sample(0), '{"t": 1800000001.0, "procs": [{"pid": 1e400}]}'], "line 3: bad sample"),
    "cpu_ticks 1e400": (header(), [sample(0), '{"t": 1800000001.0, "procs": [{"pid": 731, "cpu_ticks": 1e400}]}'],
                        "line 3: bad sample"),
    "power_limit_mw 1e400": ('{"format": "phasewatch-vitals-trace/1", "gpus": [{"index": 0, "power_limit_mw": 1e400}]}',
                             GOOD, "line 1: bad header"),
    'clock_ticks "x"': (header(clock_ticks="x"), GOOD, "line 1: bad header"),
    "clock_ticks 0.0001": (header(clock_ticks=0.0001), GOOD, "line 1: bad header (clock_ticks"),
    "ranks [1, 2]": (header(ranks=[1, 2]), GOOD, "line 1: bad header"),
    "a sample nested 100,000 deep": (header(), [sample(0), nested(100_000)], "line 3: nested too deep"),
    "NaN times in every third sample": (header(), [{**s, "t": float("nan")} if n % 3 == 0 else s
                                                   for n, s in enumerate(GOOD)], "line 2: bad sample"),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_a_malformed_trace_is_one_line_and_exit_65(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   row: str) -> None:
    head, samples, said = ROWS[row]
    status, out, err = replay(tmp_path, capsys, trace_text(head, samples))
    assert status == 65, (row, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert said in err, err


def test_a_good_trace_still_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = replay(tmp_path, capsys, trace_text(header(), GOOD))
    assert status == 0 and "TP0" in out and err == ""


def test_a_trace_with_too_few_samples_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 65 with nothing printed."""
    status, _, err = replay(tmp_path, capsys, trace_text(header(), GOOD[:2]))
    assert status == 65 and "nothing to judge" in err


def test_a_last_line_cut_short_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorder killed mid-write: the whole trace was refused."""
    text = trace_text(header(), GOOD) + json.dumps(sample(12))[:40]
    status, out, err = replay(tmp_path, capsys, text)
    assert status == 0 and "TP0" in out
    assert f"line {len(GOOD) + 2}: cut short (a recording killed mid-write?): skipped" in err
    # Cut short but not last, or bad and complete: still refused.
    with pytest.raises(vitals_trace.TraceError, match="line 3: not JSON"):
        vitals_trace.parse([json.dumps(header()), json.dumps(sample(0)), '{"t": 18', json.dumps(sample(2))])
    with pytest.raises(vitals_trace.TraceError, match="line 3: not JSON"):
        vitals_trace.parse([json.dumps(header()) + "\n", json.dumps(sample(0)) + "\n", "{not json"])


def test_a_line_over_the_cap_is_refused_reading_a_bounded_chunk(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The probe's 200 MB line of small process objects (3.1 GB resident) scaled down: a line just
    over the cap is refused, and no more than the cap and one character of it is ever read at once."""
    procs = ",".join('{"pid": %d}' % n for n in range(MAX_LINE // 10))
    long_line = '{"t": 1800000001.0, "procs": [' + procs + "]}"
    assert MAX_LINE < len(long_line) < 2 * MAX_LINE
    status, _, err = replay(tmp_path, capsys, trace_text(header(), [sample(0), long_line, *GOOD[1:]]))
    assert status == 65 and f"line 3: longer than {MAX_LINE} characters: refused" in err

    class Counting(io.StringIO):
        largest = 0

        def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
            line = super().readline(size)
            Counting.largest = max(Counting.largest, len(line))
            return line

    handle = Counting(trace_text(header(), [sample(0), long_line + long_line, *GOOD[1:]]))
    with pytest.raises(vitals_trace.TraceError, match="line 3: longer than"):
        vitals_trace.parse(bounded_lines(handle))
    assert Counting.largest == MAX_LINE + 1
    assert handle.tell() < len(json.dumps(header())) + 2 * MAX_LINE  # the rest of the line was never read


def test_a_header_of_the_recorder_padded_to_its_4096_bytes_is_read() -> None:
    padded = vitals_trace.padded(json.dumps(header()))
    assert padded is not None and len(padded.encode()) == vitals_trace.HEADER_BYTES
    trace = vitals_trace.parse([padded, json.dumps(sample(0)) + "\n"])
    assert trace.ranks == {"TP0": 731}
    assert vitals_trace.padded("x" * vitals_trace.HEADER_BYTES) is None
