"""`phasewatch wait-ready` over real journal files, with a fake clock: ready -> 0 at once; a hang ->
2 exactly at the phase's deadline; a crash, a stop -> 2; a timeout -> 1; where the start-up begins."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.commands.waitready import ReadyWaiter, rank_list
from phasewatch.config.load import Config, parse_config
from phasewatch.errors import NoSuchUnit
from phasewatch.records import MID_STARTED, MID_STOPPED, MID_STOPPING
from phasewatch.sources.journal.current import (
    MID_STARTING,
    CurrentStartup,
    StartPoint,
    find_start,
    journal_start,
    wait_for_journal,
)
from phasewatch.sources.journal.follow import JournalFollower

UNIT = "sglang-kimi.service"
INVOCATION = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
BASE = 1796025600.0


def at(entry: dict[str, Any]) -> float:
    return int(str(entry["__REALTIME_TIMESTAMP"])) / 1e6


def text(entry: dict[str, Any]) -> str:
    message = entry["MESSAGE"]
    return bytes(message).decode() if isinstance(message, list) else str(message)


def pid1(ts: float, message_id: str, text: str, invocation: str = INVOCATION, **more: str) -> dict[str, Any]:
    return {"__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "_PID": "1", "_UID": "0", "UNIT": UNIT,
            "MESSAGE_ID": message_id, "INVOCATION_ID": invocation, "MESSAGE": text, **more}


def waiter(directory: Path, clock: FakeClock, config: Config, timeout: float | None = None
           ) -> tuple[ReadyWaiter, io.StringIO, JournalFollower]:
    start = find_start(UNIT, str(directory))
    follower = JournalFollower(UNIT, str(directory))
    out = io.StringIO()
    startup = CurrentStartup(config, follower, start)
    return ReadyWaiter(config, startup, clock, out, timeout, wait=clock.jump), out, follower


def run_waiter(directory: Path, clock: FakeClock, config: Config | None = None,
               timeout: float | None = None) -> tuple[int, list[str]]:
    ready_waiter, out, follower = waiter(directory, clock, config or Config(unit=UNIT), timeout)
    try:
        code = ready_waiter.run()
    finally:
        follower.close()
    return code, out.getvalue().splitlines()


def test_healthy_start_up_is_ready_with_a_line_per_phase(tmp_path: Path) -> None:
    entries = list(journal_json(build(), base=BASE, unit=UNIT))
    directory = write_journal(tmp_path / "j", entries)
    clock = FakeClock(wall=at(entries[-1]) + 1)
    code, lines = run_waiter(directory, clock)
    assert code == 0
    assert lines == [
        f"phasewatch: waiting for {UNIT} to be ready (invocation {INVOCATION})",
        "TP0..TP7: dist_init (6s)",
        "TP0..TP7: weight_load (9s)",
        "TP0..TP7: kv_cache_alloc (9m12s)",
        "TP0..TP7: cuda_graph_capture (9m15s)",
        "TP0..TP7: draft_weight_load (14m8s)",
        "TP0..TP7: draft_cuda_graph_capture (14m21s)",
        "main, TP0..TP7: http_server_start (18m41s)",
        "main, TP0..TP7: warmup (18m41s)",
        f"phasewatch: {UNIT} is ready, 18m43s after its start",
    ]


def test_hang_ends_exactly_at_the_phase_deadline(tmp_path: Path) -> None:
    entries = list(journal_json(build(faults=Faults(hang={3: "draft_cuda_graph_capture"})), base=BASE, unit=UNIT))
    directory = write_journal(tmp_path / "j", entries)
    begin = next(at(e) for e in entries if "TP3] Capture draft cuda graph begin" in str(e["MESSAGE"]))
    clock = FakeClock(wall=at(entries[-1]) + 1)
    config = parse_config(f"unit: {UNIT}\nphases:\n  draft_cuda_graph_capture: {{deadline: 10m}}\nrank_skew: 1h\n")
    code, lines = run_waiter(directory, clock, config)
    assert code == 2  # will not become ready
    assert lines[-2] == "TP0..TP7: draft_cuda_graph_capture (14m21s)"
    assert lines[-1].startswith(f"phasewatch: stalled: {UNIT}: TP3 stalled in draft_cuda_graph_capture for 10m ")
    # It slept until the deadline (and a hair), not in polling steps past it.
    assert begin + 600 < clock.wall() < begin + 601


def test_crash_ends_it(tmp_path: Path) -> None:
    entries = list(journal_json(build(faults=Faults(oom={5: "cuda_graph_capture"})), base=BASE, unit=UNIT))
    directory = write_journal(tmp_path / "j", entries)
    code, lines = run_waiter(directory, FakeClock(wall=at(entries[-1]) + 1))
    assert code == 2  # will not become ready
    assert lines[-1].startswith(f"phasewatch: crashed: {UNIT}: TP5 crashed in cuda_graph_capture (oom)")


def test_a_stop_before_ready_ends_it(tmp_path: Path) -> None:
    entries = list(journal_json(build(), base=BASE, unit=UNIT))
    cut = next(i for i, e in enumerate(entries) if "Load weight end" in str(e["MESSAGE"]))
    ts = at(entries[cut])
    kept = entries[:cut] + [pid1(ts + 1, MID_STOPPING, f"Stopping {UNIT}...", JOB_TYPE="stop"),
                            pid1(ts + 2, MID_STOPPED, f"Stopped {UNIT}.")]
    directory = write_journal(tmp_path / "j", kept)
    code, lines = run_waiter(directory, FakeClock(wall=ts + 3))
    assert code == 2  # will not become ready
    assert lines[-1] == f"phasewatch: {UNIT} was stopped (stop job) in weight_load before it was ready"


def test_a_stop_after_ready_is_told_as_what_happened(tmp_path: Path) -> None:
    """Issue 36: it was ready, then stopped: said so (not "stopped in ready before it was ready"), with
    the status of a start-up that will not become ready by itself (2: stopped)."""
    entries = list(journal_json(build(), base=BASE, unit=UNIT))
    ts = at(entries[-1])
    kept = entries + [pid1(ts + 300, MID_STOPPING, f"Stopping {UNIT}...", JOB_TYPE="stop"),
                      pid1(ts + 301, MID_STOPPED, f"Stopped {UNIT}.")]
    directory = write_journal(tmp_path / "j", kept)
    code, lines = run_waiter(directory, FakeClock(wall=ts + 3600))
    assert code == 2
    assert "before it was ready" not in lines[-1]
    assert re.fullmatch(rf"phasewatch: {UNIT} was ready, \S+ after its start, then stopped \(stop job\) "
                        r"5m\d*s? later: not serving now", lines[-1]), lines[-1]


def test_timeout_while_still_loading(tmp_path: Path) -> None:
    entries = list(journal_json(build(), base=BASE, unit=UNIT))
    cut = next(i for i, e in enumerate(entries) if "10/64" in text(e))
    directory = write_journal(tmp_path / "j", entries[:cut])
    clock = FakeClock(wall=at(entries[cut - 1]) + 0.5)
    began = clock.monotonic()
    code, lines = run_waiter(directory, clock, timeout=60)
    assert code == 1  # still starting when --timeout passed
    assert clock.monotonic() - began == pytest.approx(60)
    assert lines[-1] == f"phasewatch: {UNIT} is not ready after 1m (--timeout): TP0..TP7 in weight_load for 2m17s"


def test_waits_for_lines_that_are_not_there_yet(tmp_path: Path) -> None:
    """The oneshot starts right after PID 1's "Started": nothing of the server is in the journal yet."""
    entries = list(journal_json(build(), base=BASE, unit=UNIT))
    directory = write_journal(tmp_path / "j", entries[:1])
    clock = FakeClock(wall=at(entries[0]) + 0.1)
    ready_waiter, out, follower = waiter(directory, clock, Config(unit=UNIT), timeout=3600)
    rest = iter(entries[1:])

    def wait(seconds: float) -> None:  # the server writes a few lines per wake-up
        batch = [e for _, e in zip(range(150), rest, strict=False)]
        if batch:
            write_journal(directory, batch)
            wait_for_journal(follower, 1.0)  # the reader learns of the new file through its fd
            clock.jump(max(at(batch[-1]) - clock.wall(), 0.0))
        else:
            clock.jump(seconds)

    ready_waiter.wait = wait
    try:
        assert ready_waiter.run() == 0, out.getvalue()
    finally:
        follower.close()
    assert out.getvalue().splitlines()[-1] == f"phasewatch: {UNIT} is ready, 18m43s after its start"


def test_cli_exit_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ago = time.time() - 3600
    healthy = write_journal(tmp_path / "healthy", journal_json(build(), base=ago, unit=UNIT))
    assert main(["wait-ready", "sglang-kimi", "--directory", str(healthy), "--timeout", "10s"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"phasewatch: {UNIT} is ready, ")
    hang = write_journal(tmp_path / "hang", journal_json(
        build(faults=Faults(hang={3: "draft_cuda_graph_capture"})), base=ago, unit=UNIT))
    assert main(["wait-ready", UNIT, "--directory", str(hang)]) == 2
    assert "TP3 stalled in draft_cuda_graph_capture" in capsys.readouterr().out
    assert main(["wait-ready", UNIT, "--directory", str(hang), "--timeout", "soon"]) == 64
    assert "--timeout: expected a duration" in capsys.readouterr().err


# -- where the current start-up begins -------------------------------------------------------------

def test_start_is_the_last_starting_entry_with_its_invocation(tmp_path: Path) -> None:
    first, second = "a" * 32, "b" * 32
    entries = [pid1(BASE, MID_STARTING, f"Starting {UNIT}...", first),
               pid1(BASE + 1, MID_STARTED, f"Started {UNIT}.", first),
               pid1(BASE + 100, MID_STOPPING, f"Stopping {UNIT}...", first),
               pid1(BASE + 101, MID_STOPPED, f"Stopped {UNIT}.", first),
               pid1(BASE + 102, MID_STARTING, f"Starting {UNIT}...", second)]
    directory = write_journal(tmp_path / "j", entries)
    # ExecStartPost= is still running: no "Started" yet.
    assert journal_start(UNIT, str(directory)) == StartPoint(BASE + 102, second, "journal")
    write_journal(directory, [pid1(BASE + 103, MID_STARTED, f"Started {UNIT}.", second)])
    assert journal_start(UNIT, str(directory)) == StartPoint(BASE + 102, second, "journal")
    assert journal_start(UNIT, str(directory), before=BASE + 50) == StartPoint(BASE, first, "journal")
    assert find_start(UNIT, str(directory)) == StartPoint(BASE + 102, second, "journal")
    with pytest.raises(NoSuchUnit):  # a copied journal with nothing of the unit: a wrong name
        find_start("other.service", str(directory))


def test_a_started_entry_without_its_starting_entry(tmp_path: Path) -> None:
    directory = write_journal(tmp_path / "j", [pid1(BASE + 5, MID_STOPPED, f"Stopped {UNIT}.", "a" * 32),
                                               pid1(BASE + 10, MID_STARTED, f"Started {UNIT}.")])
    assert journal_start(UNIT, str(directory)) == StartPoint(BASE + 10, INVOCATION, "journal")


def test_dbus_facts_come_first(tmp_path: Path) -> None:
    from phasewatch.systemd_unit import UnitFacts

    facts = UnitFacts("activating", "start-post", INVOCATION, started_at=BASE + 3)
    assert find_start(UNIT, None, lambda unit: facts) == StartPoint(BASE + 2, INVOCATION, "dbus", "activating")


def test_rank_list() -> None:
    assert rank_list(["TP3", "TP0", "TP1", "TP2", "main"]) == "main, TP0..TP3"
    assert rank_list(["TP0", "TP1", "TP3", "TP5", "TP6", "TP7"]) == "TP0, TP1, TP3, TP5..TP7"
    assert rank_list(["DP0 TP0", "DP1 TP0"]) == "DP0 TP0, DP1 TP0"


def test_inside_the_unit_its_own_invocation_id_is_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ExecStartPost= without D-Bus: $INVOCATION_ID, when /proc/self/cgroup says we run in the unit."""
    import phasewatch.sources.journal.current as current

    cgroup = tmp_path / "cgroup"
    cgroup.write_text(f"0::/system.slice/{UNIT}\n")
    real_path = current.Path
    monkeypatch.setattr(current, "Path", lambda p: cgroup if p == "/proc/self/cgroup" else real_path(p))
    monkeypatch.setenv("INVOCATION_ID", "c" * 32)
    directory = write_journal(tmp_path / "j", [pid1(BASE, MID_STARTING, f"Starting {UNIT}...", "c" * 32)])
    assert find_start(UNIT, None, lambda unit: None).invocation_id == "c" * 32
    assert find_start(UNIT, str(directory)) == StartPoint(BASE, "c" * 32, "journal")  # a directory: not ours
    cgroup.write_text("0::/system.slice/other.service\n")
    assert current._own_invocation(UNIT) is None
