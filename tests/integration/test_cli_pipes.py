"""`phasewatch ... | head`: a reader that goes away ends every command quietly (exit 141, no
traceback), and the bash completion is installed by `make install-data` and names every command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STALL = REPO / "examples" / "sglang-kimi-stall-draft-capture.json"
CONFIG = REPO / "config" / "phasewatch.yaml"


def run_into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        return subprocess.run([sys.executable, "-m", "phasewatch.cli", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, timeout=60, check=False, cwd=REPO)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [
    ["replay", "--json", str(STALL)],
    ["replay", str(STALL)],
    ["replay", "--rules", str(STALL)],
    ["check-config", str(CONFIG), "--json"],
    ["--help"],
    ["replay", "--help"],
    ["--version"],
])
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    done = run_into_a_closed_pipe(argv)
    assert done.returncode in (0, 141), done.stderr
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr, done.stderr


def test_replay_into_head_is_141_and_silent() -> None:
    done = run_into_a_closed_pipe(["replay", "--json", str(STALL)])
    assert (done.returncode, done.stderr) == (141, b"")


def test_make_install_data_ships_the_bash_completion(tmp_path: Path) -> None:
    subprocess.run(["make", "-s", "install-data", f"DESTDIR={tmp_path}", "PREFIX=/usr"], cwd=REPO, check=True,
                   capture_output=True, timeout=60)
    completion = tmp_path / "usr/share/bash-completion/completions/phasewatch"
    text = completion.read_text()
    for command in ("replay", "run", "report", "check-config", "status", "logs", "wait-ready", "--privileges"):
        assert command in text
    subprocess.run(["bash", "-n", str(completion)], check=True, timeout=10)
