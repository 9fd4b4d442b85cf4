"""Real journal files: the simulated start-up is written into a journal with systemd-journal-remote,
then read back by `replay --unit --directory` (python-systemd) and by `replay FILE` over every
output format of the real journalctl."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import export_bytes
from phasewatch.cli import main

UNIT = "sglang-kimi.service"
JOURNAL_REMOTE = next((p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
                       if os.path.exists(p)), None)


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if JOURNAL_REMOTE is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-journal-remote is missing in CI (scripts/setup.sh installs it)")
        pytest.skip("systemd-journal-remote not installed")
    directory = tmp_path_factory.mktemp("journal")
    entries = list(journal_json(build(faults=Faults(hang={3: "draft_cuda_graph_capture"})), unit=UNIT))
    # Another unit's lines in the same journal must not leak into the replay.
    entries.insert(3, {"__REALTIME_TIMESTAMP": entries[3]["__REALTIME_TIMESTAMP"], "_PID": "999",
                       "_SYSTEMD_UNIT": "other.service", "MESSAGE": "[2026-11-30 08:00:05 TP3] Load weight begin."})
    subprocess.run([JOURNAL_REMOTE, "-o", str(directory / "remote.journal"), "-"], input=export_bytes(entries),
                   check=True, capture_output=True)
    return directory


def run_replay(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document: dict[str, Any] = json.loads(captured.out)
    return document


def assert_stall_of_tp3(document: dict[str, Any], *, with_progress: bool = True) -> None:
    [inv] = document["invocations"]
    assert inv["invocation_id"] == "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
    assert inv["outcome"] == "stalled"
    assert set(inv["ranks"]) == {"main", *(f"TP{n}" for n in range(8))}
    assert {r: v["phase"] for r, v in inv["ranks"].items() if r != "main"} == {
        f"TP{n}": "draft_cuda_graph_capture" for n in range(8)}
    assert [v["rank"] for v in inv["verdicts"]] == ["TP3"]
    assert inv["verdicts"][0]["kind"] == "stalled"
    if with_progress:
        assert inv["ranks"]["TP0"]["progress"]["n"] == 23


def test_replay_unit_from_journal_directory(journal_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = run_replay(["replay", "--json", "--now", "+25m", "--unit", UNIT, "--directory", str(journal_dir)],
                          capsys)
    assert_stall_of_tp3(document)


@pytest.mark.parametrize("output", ["json", "json-seq", "json-pretty", "export"])
def test_replay_of_journalctl_output_with_all_fields(journal_dir: Path, output: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dump = subprocess.run(["journalctl", "-D", str(journal_dir), "-u", UNIT, "-o", output, "--all"],
                          check=True, capture_output=True).stdout
    path = tmp_path / f"dump.{output}"
    path.write_bytes(dump)
    assert_stall_of_tp3(run_replay(["replay", "--json", "--now", "+25m", str(path)], capsys))


def test_replay_of_journalctl_json_without_all_counts_elided_lines(journal_dir: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Without --all, journalctl prints fields with control characters as byte arrays and fields of
    # 4096 bytes or more as null: the capture bars (about 2 KB here) survive as arrays.
    dump = subprocess.run(["journalctl", "-D", str(journal_dir), "-u", UNIT, "-o", "json"],
                          check=True, capture_output=True).stdout
    path = tmp_path / "dump.json"
    path.write_bytes(dump)
    document = run_replay(["replay", "--json", "--now", "+25m", str(path)], capsys)
    [inv] = document["invocations"]
    assert inv["verdicts"][-1]["rank"] == "TP3"


@pytest.mark.parametrize("output", ["short-iso", "short-precise", "cat"])
def test_replay_of_journalctl_text_output(journal_dir: Path, output: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    dump = subprocess.run(["journalctl", "-D", str(journal_dir), "-u", UNIT, "-o", output, "--all"],
                          check=True, capture_output=True).stdout
    path = tmp_path / f"dump.{output}"
    path.write_bytes(dump)
    document = run_replay(["replay", "--json", "--now", "+25m", str(path)], capsys)
    [inv] = document["invocations"]
    assert inv["outcome"] == "stalled"
    assert inv["ranks"]["TP3"]["phase"] == "draft_cuda_graph_capture"
    assert [v["rank"] for v in inv["verdicts"] if v["kind"] == "stalled"] == ["TP3"]


def test_short_output_without_all_reads_blob_data_as_hidden_lines(journal_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    dump = subprocess.run(["journalctl", "-D", str(journal_dir), "-u", UNIT, "-o", "short-iso"],
                          check=True, capture_output=True).stdout
    assert b"blob data]" in dump
    path = tmp_path / "dump.short"
    path.write_bytes(dump)
    code = main(["replay", "--json", "--now", "+25m", str(path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "blob data" in captured.err and "not lost" in captured.err
    [inv] = json.loads(captured.out)["invocations"]
    assert inv["lines_lost"] == 0  # journald dropped nothing: journalctl did not print the bars
    assert not any(v["kind"] == "lines_lost" for v in inv["verdicts"])
    assert [v["rank"] for v in inv["verdicts"] if v["kind"] == "stalled"] == ["TP3"]
