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
    monkeypatch.setattr("phasewatch.sources.journal.current.CONFIG_DIRS", (str(tmp_path),))
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


def test_a_typo_in_a_copied_journal_is_unknown_with_the_names_it_holds(hang: Path, etc: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--directory` too: a unit the copied journal has nothing of is exit 3 with the names it holds,
    for every command that reads it (replay said "no invocations found", exit 0)."""
    for argv in (["status", "sglang-kimmi"], ["logs", "sglang-kimmi"], ["wait-ready", "sglang-kimmi"],
                 ["replay", "--unit", "sglang-kimmi"]):
        code, out, err = run([*argv, "--directory", str(hang)], capsys)
        assert (code, out) == (3, ""), (argv, err)
        assert f"units it knows like it: {UNIT}" in err, (argv, err)
        assert max(len(line) for line in err.splitlines()) <= 100, err


def test_empty_logs_say_why_and_exit_66(hang: Path, etc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`logs --rank TP9` on a TP=8 unit printed nothing and exited 0."""
    code, out, err = run(["logs", "sglang-kimi", "--rank", "TP9", "--directory", str(hang)], capsys)
    assert (code, out) == (66, "")
    assert err == f"phasewatch: {UNIT}: no rank TP9 in this start-up\n  its ranks: main, TP0–TP7\n"
    code, out, err = run(["logs", "sglang-kimi", "--rank", "TP3", "--phase", "warmup", "--directory", str(hang)],
                         capsys)
    assert (code, out) == (66, "")
    said = " ".join(err.split())
    assert f"{UNIT}: no line of this start-up matches --rank TP3 --phase warmup" in said
    assert "TP3 reached: launch, dist_init," in said and "draft_cuda_graph_capture" in said and "warmup" not in \
        said.split("reached:")[1]


def test_wait_ready_fits_100_columns(hang: Path, etc: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Its lines were 113 to 140 columns; --wide keeps them whole."""
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = run(["wait-ready", "sglang-kimi", "--directory", str(hang)], capsys)
    assert code == 2
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert "TP3 stalled in draft_cuda_graph_capture" in " ".join(out.split())
    code, out, _ = run(["wait-ready", "sglang-kimi", "--directory", str(hang), "--wide"], capsys)
    assert code == 2 and max(len(line) for line in out.splitlines()) > 100
