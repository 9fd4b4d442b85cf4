"""Issue 12, point 2: a restart as stop, leftovers check, start; survivors block the start (bounded)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from phasewatch.sinks.gpu_memory import GpuHolder
from phasewatch.sinks.leftovers import GuardedRestart, LeftoverScan, Survivor, survivors
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Action
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
GROUP = "/system.slice/sglang-kimi.service"
RESTART = Action(kind="restart", message=f"{UNIT}: TP3 stalled", verdict_kind="stalled", priority=4,
                 invocation_id="inv-1", phase="draft_cuda_graph_capture", rank="TP3")
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


def proc(root: Path, pid: int, title: str, cgroup: str, started: int = 1000, uid: int = 0) -> None:
    (root / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / "proc" / str(pid) / "cmdline").write_bytes(title.encode() + b"\0")
    (root / "proc" / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")
    (root / "proc" / str(pid) / "stat").write_text(f"{pid} (x) S {' '.join(['0'] * 18)} {started} 0 0\n")
    (root / "proc" / str(pid) / "status").write_text(f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                                     "VmRSS:\t  1048576 kB\n")


def in_group(root: Path, *pids: int) -> None:
    (root / "cg" / GROUP.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "cg" / GROUP.lstrip("/") / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))


def test_survivors_are_the_unit_cgroup_and_the_old_startups_processes_wherever_they_went(tmp_path: Path) -> None:
    proc(tmp_path, 10, "python3 -m sglang.launch_server", GROUP)  # still in the stopped unit's cgroup
    proc(tmp_path, 11, "sglang::scheduler_TP3", GROUP)  # escapes to a scope after before_stop
    proc(tmp_path, 12, "sglang::scheduler_TP0", "/system.slice/other-model.service")  # another server
    proc(tmp_path, 13, "bash", "/user.slice/user-0.slice/session-1.scope")
    in_group(tmp_path, 10, 11)
    table = ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))
    scan = LeftoverScan(table)
    scan.before_stop(GROUP)
    (tmp_path / "proc" / "11" / "cgroup").write_text("0::/system.slice/run-r1.scope\n")
    in_group(tmp_path, 10)
    found = scan(GROUP)
    assert [(s.pid, s.rss_kb, s.where) for s in found] == [(10, 1048576, GROUP),
                                                           (11, 1048576, "/system.slice/run-r1.scope")]


def test_probe_c2_a_rank_title_in_another_users_session_is_no_survivor(tmp_path: Path) -> None:
    """PROBE-S3 C-2: `exec -a sglang::scheduler_TP3 sleep 900` in uid 65534's login scope blocked every
    guarded restart. A title is not a process of the old start-up."""
    proc(tmp_path, 10, "python3 -m sglang.launch_server", GROUP, uid=987)
    proc(tmp_path, 20, "sglang::scheduler_TP3", "/user.slice/user-65534.slice/session-9.scope", uid=65534)
    in_group(tmp_path, 10)
    scan = LeftoverScan(ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),)))
    scan.before_stop(GROUP)
    in_group(tmp_path)
    shutil.rmtree(tmp_path / "proc" / "10")  # the old start-up ended
    assert scan(GROUP) == []


def test_a_reused_pid_is_another_process_not_a_survivor(tmp_path: Path) -> None:
    proc(tmp_path, 11, "sglang::scheduler_TP3", GROUP, started=1000)
    in_group(tmp_path, 11)
    scan = LeftoverScan(ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),)))
    scan.before_stop(GROUP)
    in_group(tmp_path)
    proc(tmp_path, 11, "sglang::scheduler_TP3", "/user.slice/user-65534.slice/session-9.scope", started=5000,
         uid=65534)  # the rank ended; its PID went to someone's copy
    assert scan(GROUP) == []


def test_the_cgroup_of_a_process_under_cgroup_v1_hybrid(tmp_path: Path) -> None:
    proc(tmp_path, 11, "sglang::scheduler_TP3", "/")
    (tmp_path / "proc" / "11" / "cgroup").write_text("4:memory:/x\n1:name=systemd:/system.slice/run-r1.scope\n0::/\n")
    in_group(tmp_path, 11)
    table = ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))
    assert [s.where for s in survivors(table, GROUP)] == ["/system.slice/run-r1.scope"]


class Holders:
    def __init__(self, *holders: GpuHolder) -> None:
        self.list = list(holders)

    def holders(self) -> list[GpuHolder]:
        return self.list


def test_gpu_holders_of_the_units_user_are_survivors_other_users_and_root_are_not(tmp_path: Path) -> None:
    proc(tmp_path, 10, "python3 -m sglang.launch_server", GROUP, uid=987)
    proc(tmp_path, 30, "python3 stray.py", "/user.slice/user-987.slice/session-2.scope", uid=987)
    proc(tmp_path, 31, "sglang::scheduler_TP3", "/user.slice/user-65534.slice/session-9.scope", uid=65534)
    proc(tmp_path, 32, "other-model", "/system.slice/other.service", uid=0)
    in_group(tmp_path, 10)
    gpus = Holders(GpuHolder(30, "3", 81920), GpuHolder(31, "3", 10), GpuHolder(32, "5", 70000))
    scan = LeftoverScan(ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),)),
                        gpus)  # type: ignore[arg-type]
    scan.before_stop(GROUP)
    shutil.rmtree(tmp_path / "proc" / "10")
    in_group(tmp_path)
    assert [(s.pid, s.gpu) for s in scan(GROUP)] == [(30, (("3", 81920),))]
