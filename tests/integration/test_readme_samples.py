"""Issue 36: the README's samples of `status`, `status --oneline` and `report` are what the commands
print here, over the simulator's journals of a start-up whose TP3 hangs in the draft model's CUDA
graph capture and of a healthy one, at real speed (tests/readme_samples.py compares them)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main
from readme_samples import check

UNIT = "sglang-kimi.service"


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("readme-journals")
    now = time.time()
    return {"hang": write_journal(root / "hang", journal_json(build(faults=Faults(
                hang={3: "draft_cuda_graph_capture"})), base=now - 40 * 60, unit=UNIT)),
            "healthy": write_journal(root / "healthy", journal_json(build(), base=now - 25 * 60, unit=UNIT))}


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.delenv("COLUMNS", raising=False)  # what a pipe gets: 100 columns
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert err == "", err
    return code, out


def test_status_of_a_hung_start_up(journals: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(["status", "sglang-kimi", "--directory", str(journals["hang"])], capsys, monkeypatch)
    assert code == 2
    check("status, hung", out)


def test_oneline_of_a_hung_and_a_healthy_start_up(journals: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    lines = []
    for name, status in (("hang", 2), ("healthy", 0)):
        code, out = run(["status", "sglang-kimi", "--oneline", "--directory", str(journals[name])], capsys,
                        monkeypatch)
        assert code == status
        lines.append(f"{out.rstrip()}   (exit status {code})")
    check("status --oneline", "\n".join(lines) + "\n")


def test_status_of_a_ready_start_up(journals: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(["status", "sglang-kimi", "--directory", str(journals["healthy"])], capsys, monkeypatch)
    assert code == 0
    check("status, ready", out)


def test_report(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from tests.unit.test_report_table import RECORDS

    from phasewatch.sinks.history import History

    history = History(tmp_path / f"{UNIT}.history.sqlite3")
    remedy = ("no progress in draft_cuda_graph_capture on TP3: its stack in `py-spy dump --pid <the rank's PID>` "
              "shows the kernel or collective it waits in")
    for record in (RECORDS[0], replace(RECORDS[1], remedy=remedy), RECORDS[2]):
        history.add(record)
    code, out = run(["report", "sglang-kimi", "--state-dir", str(tmp_path)], capsys, monkeypatch)
    assert code == 0
    check("report", out)
