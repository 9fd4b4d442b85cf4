"""Issue 22, part 1 (PROBE-S3 C-1, H-1, M-6, M-7, L-1): children run with every resource bounded,
the action worker off the loop, evidence files never written through what an attacker left. Real
processes and the real worker thread; the daemon's other edges faked (tests/unit/test_acting.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from fakes import ScriptedJournal
from phasewatch.clock import FakeClock
from phasewatch.compose import Extras, World, compose
from phasewatch.config.load import DEFAULT_ACTIONS, DEFAULT_LIMITS, Config, EvidenceCapture, Hook, PhaseLimits
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.children import run_child
from phasewatch.sinks.evidence import EvidenceWriter
from phasewatch.sinks.gpu_memory import GpuMemory
from phasewatch.sinks.hooks import HookRunner
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.stages.s5_act.respond import Action
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def alive(pid: int) -> bool:
    """Running (a zombie that init has not reaped yet is dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_flood_of_output_is_capped_while_read() -> None:
    """C-1/M-6: `yes` as a hook, py-spy or nvidia-smi was collected whole: OOM at MemoryMax."""
    started = time.monotonic()
    ran = run_child(["/usr/bin/yes"], 1.0, cap=4096)
    assert ran.returncode is None and ran.truncated and len(ran.output) == 4096
    assert time.monotonic() - started < 5


def test_a_hook_that_exits_while_its_background_child_holds_the_pipe_has_exited() -> None:
    """C-1/M-7: waited for EOF to its timeout, logged "killed after its timeout", child left behind."""
    started = time.monotonic()
    ran = run_child(["/bin/sh", "-c", "sleep 600 & echo bg-started $!; exit 0"], 20.0)
    assert ran.returncode == 0 and "bg-started" in ran.output
    assert time.monotonic() - started < 5
    child = int(ran.output.split()[-1])
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # killed with the hook's group, not left in phasewatch's cgroup


def test_a_timed_out_child_is_killed_with_its_group() -> None:
    ran = run_child(["/bin/sh", "-c", "sleep 600 & echo $$; exec sleep 600"], 0.5)
    assert ran.returncode is None and not ran.abandoned
    pgid = int(ran.output.split()[0])
    deadline = time.monotonic() + 5
    while not gone(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pgid)


def test_a_spawn_that_cannot_be_made_is_a_result() -> None:
    assert run_child(["/nonexistent/tool"], 1.0).returncode == 127
    assert run_child(["/bin/true"], 1.0, env={"X": "a\x00b"}).returncode == 127  # ValueError, not raised


def test_a_hook_gets_nul_and_control_bytes_escaped() -> None:
    """H-1: a NUL in a crash line crashed the daemon at the hook's spawn."""
    action = Action(kind="hook", message="TP4 crashed: bad\x00byte\x1b[2J", verdict_kind="crashed", priority=3,
                    invocation_id=INV, hook="h")
    ran = HookRunner(UNIT, {"h": Hook(("/usr/bin/env",), 10.0)})(action)
    assert ran is not None and ran.returncode == 0
    assert "PHASEWATCH_MESSAGE=TP4 crashed: bad\\x00byte\\x1b[2J" in ran.output


def test_evidence_is_never_written_through_a_symlink_or_a_fifo(tmp_path: Path) -> None:
    """L-1: a symlink at the .tmp was followed (it overwrote the state file); a FIFO blocked."""
    writer = EvidenceWriter(tmp_path, UNIT, EvidenceCapture(keep=2), py_spy=lambda: None, nvidia_smi=lambda: None)
    victim = tmp_path / "state.json"
    victim.write_text("the state")
    (tmp_path / "evidence").mkdir()
    temporary = writer.path_for(INV, "stalled").with_suffix(".tmp")
    temporary.symlink_to(victim)
    assert writer.capture(INV, "stalled", "m", []) is not None
    assert victim.read_text() == "the state"
    os.mkfifo(temporary)
    assert writer.capture(INV, "stalled", "m", []) is not None  # (returns: no open blocks on the FIFO)
    (tmp_path / "evidence" / "dangling.txt").symlink_to(tmp_path / "nowhere")
    path = writer.capture(INV, "crashed", "m", [])
    assert path is not None and path.read_text().startswith("phasewatch evidence")


class BlockingHook:
    """A hook that runs until released (a hung `sleep 300`)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs = 0

    def __call__(self, action: Action) -> None:
        self.runs += 1
        self.started.set()
        self.release.wait(20)


def test_a_hung_hook_runs_off_the_loop_which_keeps_judging_and_pinging(tmp_path: Path) -> None:
    """C-1: a hook at its timeout stalled the loop past WatchdogSec; now the loop steps and pings."""
    config = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)},
                    actions={**DEFAULT_ACTIONS, "stalled": ("alert", "hook:slow", "restart")},
                    hooks={"slow": Hook(("/bin/sleep", "300"), 30.0)})
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    notifier = RecordingNotifier()
    (tmp_path / "proc").mkdir()
    app = compose(config, World(follower=journal, unit=unit, alerter=RecordingAlerter(UNIT), notifier=notifier,
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))),
                  Extras(watchdog_interval=30.0, actions_off_the_loop=True))
    hook = BlockingHook()
    app.actor.runner.run_hook = hook
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                 pid=100 + n, invocation_id=INV) for n in range(8)))
    app.start()
    clock.jump(61)
    app.step(max_wait=0)
    assert hook.started.wait(5)
    pings = sum("WATCHDOG=1" in s for s in notifier.sent)
    for _ in range(3):
        clock.jump(20)  # the loop's watchdog deadlines pass while the hook still runs
        app.step(max_wait=0)
    assert sum("WATCHDOG=1" in s for s in notifier.sent) >= pings + 3
    assert unit.restarts == [] and any(a.kind == "restart" for a in app.store.load().pending)
    hook.release.set()
    for _ in range(200):
        app.step(max_wait=0.05)
        if not app.actor.worker.busy:
            break
    assert unit.restarts == [INV] and hook.runs == 1
    assert app.store.load().pending == ()


def test_a_flooding_nvidia_smi_is_capped_in_the_gpu_check(tmp_path: Path) -> None:
    """M-6: the after-stop check read nvidia-smi's output whole: OOM-killed in its 5 s."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec /usr/bin/yes 0, GPU-0\n")
    smi.chmod(0o755)
    started = time.monotonic()
    assert GpuMemory(lambda: str(smi), timeout=1.0).holders() is None  # not checked, never "free"
    assert time.monotonic() - started < 5
