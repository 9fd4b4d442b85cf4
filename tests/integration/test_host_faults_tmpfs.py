"""A full and a read-only state directory for real: a tiny tmpfs mounted over a temporary directory
(root only). The history and the state file must degrade to memory and never move a healthy file."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from phasewatch.sinks.history import History, PhaseRecord, StartupRecord
from phasewatch.sinks.state.store import Saved, StateStore
from phasewatch.stages.s5_act.respond import Memory

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0


def startup(n: int) -> StartupRecord:
    return StartupRecord(UNIT, f"inv-{n}", "fp", T0 + n * 1000, T0 + n * 1000 + 600, "ready", None,
                         (PhaseRecord("weight_load", 540.0, 4.0, 64, 30.0, "TP3"),),
                         {"TP0": [("weight_load", T0 + n, T0 + n + 540.0)]}, ())


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "state"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> None:
    subprocess.run(["dd", "if=/dev/zero", f"of={directory / 'filler'}", "bs=4k"], capture_output=True)
    assert os.statvfs(directory).f_bavail == 0


def remount_read_only(directory: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)


def healthy_history(directory: Path) -> tuple[Path, bytes]:
    path = directory / f"{UNIT}.history.sqlite3"
    history = History(path)
    for n in range(3):
        history.add(startup(n))
    history.close()  # checkpointed: the whole history is in the main file
    return path, path.read_bytes()


def test_history_on_full_disk_degrades_in_memory(state_dir: Path) -> None:
    path = state_dir / f"{UNIT}.history.sqlite3"
    history = History(path)
    history.add(startup(0))
    fill(state_dir)
    for n in range(1, 40):  # enough to outgrow any page the WAL had to spare
        assert history.add(startup(n))
    assert history.degraded is not None and "full" in history.degraded
    assert len(history.startups(UNIT)) == 40
    assert not list(state_dir.glob("*.corrupt-*"))


def test_full_disk_never_renames_healthy_history(state_dir: Path) -> None:
    path, before = healthy_history(state_dir)
    fill(state_dir)
    history = History(path)  # the daemon starting on a full disk
    assert history.add(startup(9))
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-0", "inv-1", "inv-2", "inv-9"]
    assert not list(state_dir.glob("*.corrupt-*"))
    assert path.read_bytes() == before


def test_read_only_state_dir_never_renames_healthy_history(state_dir: Path) -> None:
    path, before = healthy_history(state_dir)
    remount_read_only(state_dir)
    history = History(path)
    assert history.degraded is not None
    assert history.add(startup(9))
    assert [r.invocation_id for r in history.startups(UNIT)] == ["inv-0", "inv-1", "inv-2", "inv-9"]
    assert sorted(p.name for p in state_dir.iterdir()) == [path.name]
    assert path.read_bytes() == before


def test_report_on_read_only_state_dir(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phasewatch.cli import main

    healthy_history(state_dir)
    remount_read_only(state_dir)
    assert main(["report", UNIT, "--state-dir", str(state_dir)]) == 0
    assert capsys.readouterr().out.splitlines().index("") == 1 + 3  # header, 3 start-ups, then the legend


def test_state_on_full_disk_keeps_the_old_file(state_dir: Path) -> None:
    store = StateStore(state_dir, UNIT)
    old = Saved(Memory(restarted=frozenset({"inv-old"})), "c1", "inv-old")
    store.save(old)
    fill(state_dir)
    with pytest.raises(OSError):
        store.save(Saved(Memory(restarted=frozenset({"inv-old", "inv-new"})), "c2", "inv-new"))
    assert store.degraded is not None and "No space left" in store.degraded
    assert store.load() == old
    assert not store.path.with_suffix(".tmp").exists()


def test_state_on_read_only_dir_degrades(state_dir: Path) -> None:
    store = StateStore(state_dir, UNIT)
    store.save(Saved(Memory(), "c1", None))
    remount_read_only(state_dir)
    with pytest.raises(OSError):
        store.save(Saved(Memory(), "c2", None))
    assert store.degraded is not None and "Read-only" in store.degraded
    assert store.load().cursor == "c1"
