"""Issue 12, point 2: a restart as stop, leftovers check, start; survivors block the start (bounded)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from phasewatch.sinks.actions import RecordingUnit, UnitFacts
from phasewatch.sinks.leftovers import GuardedRestart, Survivor, survivors
from phasewatch.sources.procs import ProcessTable
from phasewatch.stages.respond import Action

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
GROUP = "/system.slice/sglang-kimi.service"
RESTART = Action("restart", f"{UNIT}: TP3 stalled", "stalled", 4, "inv-1", "draft_cuda_graph_capture", "TP3")
ESCAPED = Survivor(4711, "sglang::scheduler_TP3", 2048 * 1024, "/system.slice/run-r1.scope")


def setup(left: list[list[Survivor]]) -> tuple[GuardedRestart, RecordingUnit, list[Action]]:
    unit = RecordingUnit(UnitFacts("deactivating", "stop-sigterm", "inv-1", control_group=GROUP))
    alerts: list[Action] = []
    guarded = GuardedRestart(unit, lambda group: left.pop(0) if left else [], alerts.append, wait=600)
    guarded.begin(RESTART, GROUP, T0)
    return guarded, unit, alerts


def test_nothing_left_the_start_follows_the_stop() -> None:
    guarded, unit, alerts = setup([[]])
    guarded.tick(T0 + 1)
    assert unit.calls == ["stop"]  # still stopping
    unit.status = replace(unit.status, active_state="inactive", sub_state="dead")
    guarded.tick(T0 + 2)
    assert unit.calls == ["stop", "start"] and alerts == [] and guarded.pending is None


def test_a_survivor_blocks_the_start_until_it_is_gone_and_is_alerted_once() -> None:
    guarded, unit, alerts = setup([[ESCAPED], [ESCAPED], []])
    unit.status = replace(unit.status, active_state="inactive", sub_state="dead")
    guarded.tick(T0 + 1)
    guarded.tick(T0 + 2)
    assert unit.calls == ["stop"]
    [alert] = alerts
    assert (alert.verdict_kind, alert.priority) == ("restart_blocked", 2)
    assert "pid 4711 (sglang::scheduler_TP3, 2048 MiB resident, cgroup /system.slice/run-r1.scope)" in alert.message
    guarded.tick(T0 + 3)
    assert unit.calls == ["stop", "start"]


def test_the_wait_is_bounded_then_the_unit_stays_stopped() -> None:
    guarded, unit, alerts = setup([[ESCAPED]] * 5)
    unit.status = replace(unit.status, active_state="failed")
    guarded.tick(T0 + 1)
    guarded.tick(T0 + 600)
    assert unit.calls == ["stop"] and guarded.pending is None
    assert "gave up waiting" in alerts[-1].message and "the unit stays stopped" in alerts[-1].message
    assert guarded.next_deadline(T0 + 601) is None


def proc(root: Path, pid: int, title: str, cgroup: str) -> None:
    (root / "proc" / str(pid)).mkdir(parents=True)
    (root / "proc" / str(pid) / "cmdline").write_bytes(title.encode() + b"\0")
    (root / "proc" / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")
    (root / "proc" / str(pid) / "status").write_text("Name:\tpython3\nVmRSS:\t  1048576 kB\n")


def test_survivors_are_the_unit_cgroup_and_rank_titles_outside_other_services(tmp_path: Path) -> None:
    proc(tmp_path, 10, "python3 -m sglang.launch_server", GROUP)  # still in the stopped unit's cgroup
    proc(tmp_path, 11, "sglang::scheduler_TP3", "/system.slice/run-r1.scope")  # escaped
    proc(tmp_path, 12, "sglang::scheduler_TP0", "/system.slice/other-model.service")  # another server
    proc(tmp_path, 13, "bash", "/user.slice/user-0.slice/session-1.scope")
    (tmp_path / "cg" / GROUP.lstrip("/")).mkdir(parents=True)
    (tmp_path / "cg" / GROUP.lstrip("/") / "cgroup.procs").write_text("10\n")
    table = ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))
    found = survivors(table, GROUP)
    assert [(s.pid, s.rss_kb) for s in found] == [(10, 1048576), (11, 1048576)]


def test_the_cgroup_of_a_process_under_cgroup_v1_hybrid(tmp_path: Path) -> None:
    proc(tmp_path, 11, "sglang::scheduler_TP3", "/")
    (tmp_path / "proc" / "11" / "cgroup").write_text("4:memory:/x\n1:name=systemd:/system.slice/run-r1.scope\n0::/\n")
    table = ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))
    assert [s.where for s in survivors(table, GROUP)] == ["/system.slice/run-r1.scope"]
