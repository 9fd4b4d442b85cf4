"""Issue 36: one answer to "which unit, which config" for every command (commands/target.py), over a
real journal file: the short and the long name are one unit, /etc/phasewatch/NAME.yaml is read by
replay as by status, a typo is exit 3 with the names phasewatch knows."""

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
def hang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("target-journals")
    return write_journal(root / "hang", journal_json(build(faults=Faults(hang={3: "draft_cuda_graph_capture"})),
                                                     base=time.time() - 3600, unit=UNIT))


@pytest.fixture
def etc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An /etc/phasewatch of this test's own."""
    monkeypatch.setattr("phasewatch.commands.target.CONFIG_DIRS", (str(tmp_path),))
    monkeypatch.setattr("phasewatch.sources.current.CONFIG_DIRS", (str(tmp_path),))
    monkeypatch.setattr("phasewatch.commands.hold.CONFIG_DIRS", (str(tmp_path),))
    return tmp_path


def invocations(out: str) -> list[str]:
    return [inv["invocation_id"] for inv in json.loads(out)["invocations"]]


def test_replay_takes_the_short_name_as_every_command_does(hang: Path, etc: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, long_out, _ = run(["replay", "--unit", UNIT, "--directory", str(hang), "--json"], capsys)
    assert code == 0 and invocations(long_out)
    code, short_out, err = run(["replay", "--unit", "sglang-kimi", "--directory", str(hang), "--json"], capsys)
    assert code == 0, err
    assert invocations(short_out) == invocations(long_out)


def test_replay_judges_with_the_units_config_as_status_does(hang: Path, etc: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (etc / "sglang-kimi.yaml").write_text(f"unit: {UNIT}\nphases: {{draft_cuda_graph_capture: {{deadline: 2s}}}}\n")
    code, out, err = run(["replay", "--unit", "sglang-kimi", "--directory", str(hang), "--json"], capsys)
    assert code == 0, err
    [inv] = json.loads(out)["invocations"]
    assert [(v["kind"], v["rank"]) for v in inv["verdicts"]] == [("stalled", "TP3")]
    code, out, _ = run(["status", "sglang-kimi", "--json", "--directory", str(hang)], capsys)
    assert json.loads(out)["invocation"]["ranks"]["TP3"]["deadline_seconds"] == 2


def test_status_without_a_unit_takes_the_one_configured(hang: Path, etc: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (etc / "sglang-kimi.service.yaml").write_text(f"unit: {UNIT}\n")  # the older long spelling
    code, out, err = run(["status", "--json", "--directory", str(hang)], capsys)
    assert json.loads(out)["unit"] == UNIT, err
    (etc / "other.yaml").write_text("unit: other.service\n")
    code, out, err = run(["status", "--directory", str(hang)], capsys)
    assert (code, out) == (64, "")
    assert f"name the UNIT, or give --config (configured: other.service, {UNIT})" in err


def test_hold_on_a_typo_is_an_unknown_unit_with_the_names(etc: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (etc / "sglang-kimi.yaml").write_text(f"unit: {UNIT}\n")
    code, out, err = run(["hold", "sglang-kimmi", "--for", "1h", "--reason", "x", "--state-dir", str(tmp_path)],
                         capsys)
    assert (code, out) == (3, "")
    assert f"units phasewatch watches: {UNIT}" in err
