"""The catch-up fast path over real journal files (systemd-journal-remote): `replay --unit` reads the
unit's whole lines as UnitLines (`journal_source.unit_entries`) and lets the fast path take most of
them; the same replay with the records `read_unit` gives and no fast path must print the same bytes.
Serving-heavy and crash-heavy journals: simulated start-ups, Decode lines, access lines, ASGI
tracebacks, KB-long lines, fatal tracebacks, `_LINE_BREAK` pieces, PID 1's entries, another unit's
lines and a forged notice. Both journal readers: the C one (phasewatch._journal_lines, with its runs
of lines alike but for digits) and systemd-python's (the fallback when the package is built without C)."""

from __future__ import annotations

import gc
import os
import random
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sglang_sim import build, journal_json

from fastpath_compare import fields_by_name_only, runs_of, shifts_of
from journal_dirs import write_journal
from phasewatch import cli
from phasewatch.commands import replay as replay_command
from phasewatch.engines.sglang import TIME_DIGITS
from phasewatch.errors import JournalUnavailable
from phasewatch.pipeline import Pipeline
from phasewatch.records import MID_STOPPED, UnitLine, UnitRun
from phasewatch.sources.journal import journal_source
from phasewatch.sources.journal.journal_source import UnitRecords, reader_name, unit_entries

UNIT = "sglang-kimi.service"
STAMP = "2026-11-30 08:10:00"


def decode_line(n: int) -> str:
    return f"[{STAMP} TP0] Decode batch, #running-req: {n % 37}, #token: {48213 + 97 * n}, token usage: " \
           f"0.{n % 90 + 10}, gen throughput (token/s): {900 + n % 400}.{n % 97:02d}, #queue-req: {n % 3}"


def serving(n: int, crashy: bool, rng: random.Random) -> Iterator[tuple[str, str]]:
    """(writer, text): 'rank' is TP0's process, 'main' the HTTP server's."""
    for k in range(n):
        roll = rng.random()
        if crashy and roll < 0.04:
            yield "rank", f"[{STAMP} TP0] Batch dump: " + "{'rid': 7, 'len': 1024}, " * rng.randint(40, 300)
        elif roll < (0.06 if crashy else 0.005):
            yield "main", f"[{STAMP}] ERROR:    Exception in ASGI application"
            yield "main", "Traceback (most recent call last):"
            yield "main", '  File "/x/http_server.py", line 611, in generate_request'
            yield "main", "ValueError: The input (262401 tokens) is longer than the model's context length."
        elif roll < 0.12:
            yield "main", f'[{STAMP}] INFO:     127.0.0.1:{40000 + k} - "POST /generate HTTP/1.1" 200 OK'
        else:
            yield "rank", decode_line(k)
    if crashy:
        yield "rank", f"[{STAMP} TP0] Scheduler hit an exception: Traceback (most recent call last):"
        yield "rank", '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 100, in run'
        yield "rank", "torch.OutOfMemoryError: CUDA out of memory. " + "Including non-PyTorch memory, " * 40


def journal(crashy: bool, starts: int, lines: int) -> list[dict[str, Any]]:
    rng = random.Random(15)
    entries: list[dict[str, Any]] = []
    for turn in range(starts):
        invocation = f"{turn + 1:032x}"
        base = 1796025600.0 + turn * 3600
        entries.extend(journal_json(build(scale=0.001), base=base, unit=UNIT, invocation=invocation,
                                    main_pid=4711 + turn * 100))
        clock = base + 600
        for k, (writer, text) in enumerate(serving(lines, crashy, rng)):
            clock += 0.001
            # the prefix shows a server's clock (4 lines a second), not the journal's
            text = text.replace(STAMP, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(base + 600 + k / 4)), 1)
            pid = 4711 + turn * 100 + (10 if writer == "rank" else 0)
            entry = {"__REALTIME_TIMESTAMP": str(int(clock * 1e6)), "_PID": str(pid), "_SYSTEMD_UNIT": UNIT,
                     "_SYSTEMD_INVOCATION_ID": invocation, "SYSLOG_IDENTIFIER": "python3", "MESSAGE": text}
            if rng.random() < 0.01:  # journald cut the line where another process wrote
                entries.append({**entry, "MESSAGE": text[:30], "_LINE_BREAK": "pid-change"})
                entry = {**entry, "MESSAGE": text[30:]}
            entries.append(entry)
            if rng.random() < 0.002:
                entries.append({**entry, "_SYSTEMD_UNIT": "other.service", "_PID": "999", "MESSAGE": decode_line(1)})
            if rng.random() < 0.001:  # a notice in journald's words from a process that is not journald
                entries.append({**entry, "_SYSTEMD_UNIT": "evil.service", "_PID": "666", "_UID": "1000",
                                "OBJECT_SYSTEMD_UNIT": UNIT, "N_DROPPED": "99", "MESSAGE": "Suppressed 99 messages"})
        entries.append({"__REALTIME_TIMESTAMP": str(int((clock + 1) * 1e6)), "_PID": "1", "_UID": "0", "UNIT": UNIT,
                        "MESSAGE_ID": MID_STOPPED, "INVOCATION_ID": invocation, "JOB_TYPE": "restart",
                        "MESSAGE": f"Stopped {UNIT}."})
    return entries


@pytest.fixture(params=["C", "Python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The journal reader `unit_entries` uses: the C extension, or systemd-python's."""
    if request.param == "Python":
        monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
    elif journal_source.c_lines is None:
        if os.environ.get("PHASEWATCH_PURE_PYTHON"):
            pytest.skip("built without the C reader (PHASEWATCH_PURE_PYTHON)")
        pytest.fail("phasewatch._journal_lines is not built: pip install -e . builds it (setup.py)")
    else:
        monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
    assert reader_name() == request.param
    return str(request.param)


class Records:
    """A unit's records as `read_unit` gives them, not a UnitRecords (so replay feeds them one by one)."""

    def __init__(self, unit: str, directory: str | None = None, since: float | None = None) -> None:
        self._records = UnitRecords(unit, directory, since)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._records)

    @property
    def rejected(self) -> dict[str, int]:
        return self._records.rejected


def replay(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    code = cli.main(["replay", "--unit", UNIT, "--directory", str(directory), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err


@pytest.mark.parametrize("crashy", [False, True], ids=["serving-heavy", "crash-heavy"])
def test_replay_with_the_fast_path_prints_what_the_full_path_prints(
        crashy: bool, reader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    directory = write_journal(tmp_path / "journal", journal(crashy, starts=3, lines=1500))
    made: dict[bool, list[Pipeline]] = {True: [], False: []}

    def pipeline(fast: bool) -> Any:
        def make(*args: Any, **kwargs: Any) -> Pipeline:
            made[fast].append(Pipeline(*args, **kwargs, fast=fast))
            return made[fast][-1]
        return make

    monkeypatch.setattr(replay_command, "Pipeline", pipeline(True))
    fields_by_name_only(monkeypatch)  # (what takes the lines and runs reads their fields by name)
    fast_out, fast_err = replay(directory, capsys)
    [fast] = made[True]
    assert fast.fast is not None and fast.fast.taken > 3000  # most lines took the fast path

    monkeypatch.setattr(replay_command, "UnitRecords", Records)
    monkeypatch.setattr(replay_command, "Pipeline", pipeline(False))
    full_out, full_err = replay(directory, capsys)
    [full] = made[False]
    assert fast_out == full_out
    assert fast_err == full_err
    assert fast.snapshot() == full.snapshot()  # what `status` and the daemon's state are made of
    assert fast.entries == full.entries
    assert "ignored entries that claim" in full_err  # the forged notice was read past in both


def test_unit_entries_are_the_records_read_unit_gives(reader: str, tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", journal(True, starts=2, lines=400))
    records = list(UnitRecords(UNIT, str(directory)))
    rebuilt = []
    for batch in unit_entries(UNIT, str(directory)):
        for entry in batch:
            assert not isinstance(entry, UnitRun)  # (none asked for)
            if isinstance(entry, UnitLine):
                rebuilt.append((entry.message, entry.realtime, entry.pid, entry.invocation_id, None, None))
            else:
                rebuilt.append((entry.message, entry.realtime, entry.pid, entry.invocation_id, entry.line_break,
                                entry.message_id))
    assert rebuilt == [(r.message, r.realtime, r.pid, r.invocation_id, r.line_break, r.message_id) for r in records]
    assert any(r.line_break == "pid-change" for r in records)


def test_both_readers_give_the_same_named_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without runs the C reader gives what systemd-python's gives, entry for entry and type for type
    (a UnitLine equals the plain tuple of its fields: the types are compared too), its lines built as
    records.UnitLine is, read here by name only."""
    if journal_source.c_lines is None:
        pytest.skip("built without the C reader")
    directory = write_journal(tmp_path / "journal", journal(True, starts=2, lines=1500))

    def read(pure: bool) -> list[Any]:
        if pure:
            monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
        else:
            monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
        return [entry for batch in unit_entries(UNIT, str(directory)) for entry in batch]

    fields_by_name_only(monkeypatch)
    c_entries, python_entries = read(False), read(True)
    assert [type(e) for e in c_entries] == [type(e) for e in python_entries]
    assert c_entries == python_entries
    lines = [e for e in c_entries if type(e) is UnitLine]
    assert len(lines) > 3000 and not any(isinstance(e, UnitRun) for e in c_entries)
    assert all(type(e.message) is bytes and type(e.realtime) is float and type(e.pid) is int
               and type(e.invocation_id) is str for e in lines)
    assert lines[0]._fields == ("message", "realtime", "pid", "invocation_id")
    # the C reader's lines are left alone by the garbage collector, as plain tuples of them would be
    assert not any(gc.is_tracked(e) for e in c_entries if type(e) is UnitLine)


@pytest.mark.parametrize("shape", [(0, 0), TIME_DIGITS], ids=["same-head", "time-free"])
def test_the_c_reader_gives_runs_as_the_model_of_them_says(reader: str, shape: tuple[int, int], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With `runs`, the same entries, consecutive lines alike but for digits joined as tests/unit's model
    of the C reader joins them (`fastpath_compare.runs_of`); systemd-python's reader joins none."""
    # (no forged notices: the C reader ends a run at one, and read_unit leaves them out)
    entries = [e for e in journal(False, starts=2, lines=3000) if e.get("_SYSTEMD_UNIT") != "evil.service"]
    # the same line from two processes, then from two start-ups: no run joins two writers
    last = float(entries[-1]["__REALTIME_TIMESTAMP"]) / 1e6
    for k, (pid, invocation) in enumerate([("5000", "a" * 32), ("5001", "a" * 32)] * 3 + [("5000", "b" * 32)] * 2):
        entries.append({"__REALTIME_TIMESTAMP": str(int((last + k) * 1e6)), "_PID": pid, "_SYSTEMD_UNIT": UNIT,
                        "_SYSTEMD_INVOCATION_ID": invocation, "MESSAGE": decode_line(10 + k)})
    directory = write_journal(tmp_path / "journal", entries)
    records = list(UnitRecords(UNIT, str(directory)))
    fields_by_name_only(monkeypatch)
    shapes, flat, shifts = [], [], []  # (shifts: each run's (shifts, ids))
    for batch in unit_entries(UNIT, str(directory), runs=shape):
        for entry in batch:
            if isinstance(entry, UnitRun):
                assert len(entry.messages) == len(entry.realtimes) > 1
                shapes.append(len(entry.messages))
                shifts.append((entry.shifts, entry.ids))
                flat += [(m, t, entry.pid, entry.invocation_id) for m, t in zip(entry.messages, entry.realtimes,
                                                                                strict=True)]
            else:
                shapes.append(1)
                flat.append((entry.message, entry.realtime, entry.pid, entry.invocation_id))
    assert flat == [(r.message, r.realtime, r.pid, r.invocation_id) for r in records]
    if reader == "Python":
        assert shapes == [1] * len(records)
        return
    # the model, batch by batch (a run ends with its batch of entries read)
    expected, expected_shifts = [], []
    for start in range(0, len(records), journal_source.BATCH):
        model = runs_of(records[start:start + journal_source.BATCH], shape)
        expected += [len(e) if isinstance(e, list) else 1 for e in model]
        expected_shifts += [shifts_of([r.message for r in e], shape)  # type: ignore[misc]
                            for e in model if isinstance(e, list)]
    assert shapes == expected
    assert shifts == expected_shifts
    assert any(s for s, _ in shifts)  # (numbers of other widths: `#token: 9813` -> `10240`)
    assert sum(n for n in shapes if n > 1) > 3000  # most Decode lines came in runs
    if shape == TIME_DIGITS:  # across the prefix's seconds (4 lines a second): longer ones
        assert max(shapes) > 12


def id_shaped_lines(rng: random.Random, count: int) -> Iterator[bytes]:
    """Lines of hex runs, '-' and other bytes, each mostly the line before with some of its hex characters
    changed (inside an id or not, of another width now and then): what `mask_ids` decides joins."""
    pieces = ["0", "a", "f", "-", "g", " ", "0000", "beef", "1234abcd", "x", "-dead", "=", "7"]
    line = ""
    for _ in range(count):
        if not line or rng.random() < 0.1:
            line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        else:
            chars = list(line)
            for k, char in enumerate(chars):
                if char in "0123456789abcdef" and rng.random() < 0.3:
                    chars[k] = rng.choice("0123456789abcdef")
            if rng.random() < 0.1:
                chars.insert(rng.randint(0, len(chars)), rng.choice("0a-"))
            line = "".join(chars)
        yield f"[{STAMP} TP0] {line}".encode() if rng.random() < 0.9 else f"[{STAMP} TP0]{line}".encode()


def test_the_c_reader_joins_lines_alike_but_for_their_ids_as_the_model_does(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The C reader's copy of `mask_ids` (runs of hex of 8 or more, hex joined by '-') decides runs,
    their `shifts` and `ids` exactly as the model with pattern_needles.mask_ids does; and the access
    lines of a server that logs request ids come as runs whose lines are all in `ids`."""
    if journal_source.c_lines is None:
        pytest.skip("built without the C reader")
    rng = random.Random(39)
    texts = list(id_shaped_lines(rng, 6000))
    texts += [f'[{STAMP}] INFO:     10.0.{n % 250}.{n % 7}:{40000 + n} - "POST /v1/chat/completions HTTP/1.1" 200 OK '
              f"request_id={(n * 0x9E3779B97F4A7C15) & ((1 << 128) - 1):032x}".encode() for n in range(1000)]
    entries = [{"__REALTIME_TIMESTAMP": str(1_780_000_000_000_000 + k * 1000), "_PID": "5000", "_SYSTEMD_UNIT": UNIT,
                "_SYSTEMD_INVOCATION_ID": "a" * 32, "MESSAGE": list(text)} for k, text in enumerate(texts)]
    directory = write_journal(tmp_path / "journal", entries)
    records = list(UnitRecords(UNIT, str(directory)))
    assert [r.message for r in records] == texts
    fields_by_name_only(monkeypatch)
    got = [(len(e.messages), e.shifts, e.ids) if isinstance(e, UnitRun) else 1
           for batch in unit_entries(UNIT, str(directory), runs=TIME_DIGITS) for e in batch]
    expected = []
    for start in range(0, len(records), journal_source.BATCH):
        expected += [(len(e), *shifts_of([r.message for r in e])) if isinstance(e, list) else 1  # type: ignore[misc]
                     for e in runs_of(records[start:start + journal_source.BATCH])]
    assert got == expected
    runs = [entry for entry in got if isinstance(entry, tuple)]
    assert sum(len(ids) for _, _, ids in runs) > 1000  # (joined by their ids only: both kinds of lines)
    assert sum(len(shifts) for _, shifts, _ in runs) > 20
    assert max(n for n, _, _ in runs) >= 990  # the access lines: one run, past the address's widths


def test_both_readers_start_at_since_and_name_a_journal_they_cannot_open(reader: str, tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "journal", journal(True, starts=2, lines=200))
    records = list(UnitRecords(UNIT, str(directory)))
    since = records[len(records) // 2].realtime
    assert since is not None
    later = [entry for batch in unit_entries(UNIT, str(directory), since=since) for entry in batch]
    assert not any(isinstance(e, UnitRun) for e in later)  # (none asked for)
    assert [e.realtime for e in later] == [
        r.realtime for r in records if r.realtime is not None and r.realtime >= since]
    missing = tmp_path / "nothing-here"
    with pytest.raises(JournalUnavailable, match=f"cannot open the journal in {missing}: No such file or directory"):
        next(unit_entries(UNIT, str(missing)))


def test_both_readers_take_odd_entries_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fields given twice (the first value counts, as `_get` gives it), a PID with leading zeros, a
    unit's line under another unit too: the C reader gives what systemd-python's gives."""
    if journal_source.c_lines is None:
        pytest.skip("built without the C reader")
    base = [("__REALTIME_TIMESTAMP", "1796025600000000"), ("_SYSTEMD_INVOCATION_ID", "a" * 32)]
    line = f"[{STAMP} TP0] Decode batch, #token: 1"
    entries: list[list[tuple[str, Any]]] = [
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", line)],
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", "first"), ("MESSAGE", line)],
        [*base, ("_PID", "004711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", line)],
        [*base, ("_PID", "0000000004711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", line)],  # past C's 9 digits
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT), ("_SYSTEMD_UNIT", "other.service"), ("MESSAGE", line)],
        [*base, ("_PID", "4711"), ("_PID", "4712"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", line)],
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT)],  # no MESSAGE
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", line), ("_LINE_BREAK", "line-max")],
        [*base, ("_PID", "4711"), ("_SYSTEMD_UNIT", UNIT), ("MESSAGE", [0xFF, 0x0A, 0x41])],  # binary-safe form
    ]
    directory = write_journal(tmp_path / "journal", entries)

    def read(pure: bool) -> list[Any]:
        if pure:
            monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
        else:
            monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
        return [entry for batch in unit_entries(UNIT, str(directory), runs=TIME_DIGITS) for entry in batch]

    c_entries, python_entries = read(False), read(True)
    assert c_entries == python_entries
    assert [type(e) for e in c_entries] == [type(e) for e in python_entries]  # (a UnitLine == its tuple)
    assert len(c_entries) == len(entries)
    # (the journal keeps an entry's fields in the order of their data objects: "first" is not first)
    assert [type(e).__name__ for e in c_entries] == ["UnitLine", "JournalRecord", "UnitLine", "UnitLine",
                                                     "JournalRecord", "JournalRecord", "JournalRecord",
                                                     "JournalRecord", "UnitLine"]
    assert isinstance(c_entries[3], UnitLine) and c_entries[3].pid == 4711
    assert c_entries[2] == UnitLine(message=line.encode(), realtime=1796025600.0, pid=4711, invocation_id="a" * 32)
