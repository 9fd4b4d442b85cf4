"""systemd time spans on the command line of commands that read journal files: `wait-ready --timeout`
and `replay --now +SPAN`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sglang_sim import build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main

UNIT = "sglang-kimi.service"


def test_replay_now_and_wait_ready_timeout_take_spans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ago = time.time() - 3600
    healthy = write_journal(tmp_path / "healthy", journal_json(build(), base=ago, unit=UNIT))
    assert main(["wait-ready", UNIT, "--directory", str(healthy), "--timeout", "1min 30s"]) == 0
    capsys.readouterr()
    log = Path(__file__).resolve().parents[1] / "golden" / "corpus" / "008-sglang-pd-decode-stuck-in-dist-init.log"
    assert main(["replay", str(log), "--json", "--now", "+1h 30min"]) == 0
    later = capsys.readouterr().out
    assert main(["replay", str(log), "--json", "--now", "+90m"]) == 0
    assert capsys.readouterr().out == later
