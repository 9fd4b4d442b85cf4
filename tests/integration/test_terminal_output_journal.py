"""What log content can do to a terminal: nothing. Control characters (C0 but tab, DEL, C1, ESC
sequences, BEL, backspace) reach `logs`, `status` and `replay` output only as visible escapes; times
past year 9999 or before 1970 are clamped with a warning, never an exit."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from sglang_sim import build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main
from phasewatch.errors import EX_OK

UNIT = "sglang-kimi.service"
HOSTILE = "bell\x07 back\x08\x08 title\x1b]0;owned\x07 csi\x1b[2J c1-csi\x9b2J nel\x85 del\x7f cr\rend"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything but tab and newline


def assert_inert(text: str) -> None:
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))


def test_control_characters_escaped_in_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = list(journal_json(build(), base=time.time() - 3600, unit=UNIT))
    at = next(i for i, e in enumerate(entries) if "Load weight begin" in str(e["MESSAGE"]))
    entries.insert(at + 1, {**entries[at], "MESSAGE": f"[2026-11-29 12:00:00 TP2] {HOSTILE}"})
    journal = write_journal(tmp_path / "journal", entries)
    assert main(["logs", UNIT, "--directory", str(journal)]) == EX_OK
    out = capsys.readouterr().out
    assert_inert(out)
    [line] = [line for line in out.splitlines() if "bell" in line]
    # ESC sequences are dropped by the decoder (lines.strip_ansi); what is left is shown, escaped
    assert line.endswith("| bell\\x07 back\\x08\\x08 title csi c1-csi\\x9b2J nel\\x85 del\\x7f cr")
