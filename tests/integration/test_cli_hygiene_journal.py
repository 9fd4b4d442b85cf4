"""Issue 13's CLI points over a real journal file: an unknown unit is a clear error (status 3) for
logs, status and wait-ready; `--json` on logs and wait-ready."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main

UNIT = "sglang-kimi.service"


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hygiene-journals")
    ago = time.time() - 3600
    return {"healthy": write_journal(root / "healthy", journal_json(build(), base=ago, unit=UNIT)),
            "hang": write_journal(root / "hang", journal_json(
                build(faults=Faults(hang={3: "draft_cuda_graph_capture"})), base=ago, unit=UNIT))}


@pytest.mark.parametrize("command", ["logs", "status", "wait-ready"])
def test_an_unknown_unit_is_a_clear_error(command: str, journals: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([command, "nothing-here.service", "--directory", str(journals["healthy"])], capsys)
    assert code == 3 and out == ""
    assert "nothing-here.service: no such unit" in err


def test_logs_json_is_one_object_per_line(journals: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["logs", UNIT, "--directory", str(journals["healthy"]), "--json", "--rank", "TP3"], capsys)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and {line["rank"] for line in lines} == {"TP3"}
    assert set(lines[0]) == {"ts", "rank", "phase", "text", "continuation"}
    assert any(line["phase"] == "weight_load" and "Load weight begin" in line["text"] for line in lines)


def test_wait_ready_json_answers_on_stdout(journals: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["wait-ready", UNIT, "--directory", str(journals["healthy"]), "--json"], capsys)
    document = json.loads(out)
    assert (code, document["answer"], document["exit_status"], document["unit"]) == (0, "ready", 0, UNIT)
    assert document["messages"][-1].startswith(f"phasewatch: {UNIT} is ready") and "is ready" in err
    code, out, _ = run(["wait-ready", UNIT, "--directory", str(journals["hang"]), "--json"], capsys)
    assert (code, json.loads(out)["answer"]) == (2, "will_not_be_ready")
