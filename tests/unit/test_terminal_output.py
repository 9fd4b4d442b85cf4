"""What log content can do to a terminal: nothing. Control characters (C0 but tab, DEL, C1, ESC
sequences, BEL, backspace) reach `logs`, `status` and `replay` output only as visible escapes; times
past year 9999 or before 1970 are clamped with a warning, never an exit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fastpath_compare import fields_by_name_only
from phasewatch.cli import main
from phasewatch.commands.logs import TaggedLine
from phasewatch.commands.replay import TimeClamp
from phasewatch.commands.status import render_table
from phasewatch.config.load import Config
from phasewatch.errors import EX_OK
from phasewatch.output.render import MAX_TS, clock_text, iso, json_text, terminal_safe
from phasewatch.pipeline import Pipeline
from phasewatch.records import Entry, JournalRecord, UnitLine, UnitRun
from phasewatch.sources.journal.journal_source import RunShape, UnitRecords

UNIT = "sglang-kimi.service"
HOSTILE = "bell\x07 back\x08\x08 title\x1b]0;owned\x07 csi\x1b[2J c1-csi\x9b2J nel\x85 del\x7f cr\rend"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything but tab and newline


def assert_inert(text: str) -> None:
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))


def test_terminal_safe_escapes_every_control_but_tab() -> None:
    assert terminal_safe(HOSTILE) == ("bell\\x07 back\\x08\\x08 title\\x1b]0;owned\\x07 csi\\x1b[2J c1-csi\\x9b2J "
                                      "nel\\x85 del\\x7f cr\\x0dend")
    assert terminal_safe("a\tb\nc") == "a\tb\\x0ac"  # one output line stays one line
    assert terminal_safe("ünïcode ✓") == "ünïcode ✓"
    assert json.loads(json_text({"m": HOSTILE})) == {"m": HOSTILE}  # same data, inert text
    assert_inert(json_text({"m": HOSTILE}))


def _document() -> dict[str, Any]:
    rank = {"phase": "weight_load", "phase_ended": False, "seen": True, "elapsed_seconds": 5.0,
            "deadline_seconds": 60.0, "quiet_seconds": 1.0,
            "progress": {"n": 1, "total": 2, "bs": None, "phase": "weight_load"}}
    verdict = {"kind": "stalled", "rank": "TP0", "cause": f"c{HOSTILE}", "message": f"m{HOSTILE}"}
    return {"unit": UNIT, "now": "2026-11-30T08:20:00.000Z", "source": "daemon",
            "invocation": {"invocation_id": f"i{HOSTILE}", "outcome": "stalled", "phase": "weight_load",
                           "started_at": "2026-11-30T08:00:00.000Z", "last_line_at": "2026-11-30T08:19:58.000Z",
                           "elapsed_seconds": 1200.0, "ranks": {"TP0": rank}, "verdicts": [verdict]}}


def test_control_characters_escaped_in_status() -> None:
    table = render_table(_document(), "127.0.0.1:9877")
    assert_inert(table)
    assert "  stalled: mbell\\x07 back\\x08\\x08 title\\x1b]0;owned\\x07" in table
    assert "invocation ibell\\x07" in table


def test_control_characters_escaped_in_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = {"__REALTIME_TIMESTAMP": "1771804502000000", "_SYSTEMD_UNIT": UNIT, "_PID": "5",
             "_SYSTEMD_INVOCATION_ID": f"ab{HOSTILE}",
             "MESSAGE": f"[2026-01-01 00:00:01] server_args=ServerArgs(model_path='/m{HOSTILE}', tp_size=1)"}
    log = tmp_path / "hostile.json"
    log.write_text(json.dumps(entry) + "\n")
    assert main(["replay", str(log)]) == EX_OK
    table = capsys.readouterr().out
    assert_inert(table)
    assert "\\x1b]0;owned\\x07" in table
    assert main(["replay", "--json", str(log)]) == EX_OK
    document = capsys.readouterr().out
    assert_inert(document)
    assert "\\u009b" in document


class Batches(UnitRecords):
    """A journal's unit read in batches (`TimeClamp.feed`'s catch-up way), the batches given."""

    def __init__(self, batches: list[list[Entry]]) -> None:
        super().__init__(UNIT)
        self._batches = batches

    def batches(self, runs: RunShape = None) -> Any:
        return iter(self._batches)


def test_the_catch_up_clamps_lines_runs_and_records_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"[2026-01-01 00:00:00 TP0] Decode batch, #token: 1"
    batch: list[Entry] = [UnitLine(text, 1e12, 5, "a1"), UnitLine(text, 2.0, 5, "a1"),
                          UnitRun([text, text, text], [3.0, 1e12, -1.0], 5, "a1", [], []),
                          UnitRun([text, text], [4.0, 5.0], 5, "a1", [], []),
                          JournalRecord(text.decode(), realtime=1e12, pid=6, invocation_id="a1")]
    fed: list[Entry] = []
    pipeline = Pipeline(Config(unit=UNIT), default_year=2026)
    monkeypatch.setattr(pipeline, "feed_entries", lambda entries, now: fed.extend(entries))
    fields_by_name_only(monkeypatch)
    clamp = TimeClamp(Batches([batch]))
    clamp.feed(pipeline, None)
    assert [type(e) for e in fed] == [UnitLine, UnitLine, UnitRun, UnitRun, JournalRecord]
    assert fed == [UnitLine(text, MAX_TS, 5, "a1"), batch[1], UnitRun([text] * 3, [3.0, MAX_TS, 0.0], 5, "a1", [], []),
                   batch[3], JournalRecord(text.decode(), realtime=MAX_TS, pid=6, invocation_id="a1")]
    assert fed[1] is batch[1] and fed[3] is batch[3]  # (what is in range is handed on as it is)
    assert clamp.count == 4


def test_timestamp_past_9999_clamped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = "[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=1 GB"
    far = {"__REALTIME_TIMESTAMP": str(10**18), "_SYSTEMD_UNIT": UNIT, "_PID": "5", "_SYSTEMD_INVOCATION_ID": "a1",
           "MESSAGE": line}
    log = tmp_path / "far.json"
    log.write_text(json.dumps(far) + "\n")
    assert main(["replay", str(log)]) == EX_OK  # was: exit 64, "year 33658 is out of range"
    captured = capsys.readouterr()
    assert "9999-12-31T23:59:59" in captured.out
    assert "time stamp(s) outside years 1970..9999 clamped" in captured.err
    year_one = tmp_path / "year1.log"
    year_one.write_text("[0001-01-01 00:00:00 TP0] Load weight begin. avail mem=1 GB\n")
    assert main(["replay", "--json", str(year_one)]) == EX_OK
    captured = capsys.readouterr()
    # clamped to the epoch's start, which is not a date: no start date rather than 1970
    assert json.loads(captured.out)["invocations"][0]["started_at"] is None
    assert "clamped" in captured.err
    # every renderer clamps instead of raising
    assert iso(1e20) == iso(MAX_TS) and iso(-5.0) is None and iso(float("nan")) is None
    assert clock_text(1e20, utc=True) == "9999-12-31 23:59:59"
    assert TaggedLine(1e20, "TP0", "launch", "x", 1).format(utc=True).startswith("9999-12-31 23:59:59 TP0")
    assert TaggedLine(-1e20, "TP0", "launch", "x", 1).format().startswith("????-??-?? ")


def test_control_characters_escaped_in_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('"\\e]0;owned\\a\\x9b2J": 1\n')  # YAML escapes: ESC, BEL, C1 CSI in a key
    assert main(["check-config", str(bad)]) == 78
    err = capsys.readouterr().err
    assert_inert(err)
    assert err.startswith("phasewatch: config error: \\x1b]0;owned\\x07\\x9b2J: unknown setting")
