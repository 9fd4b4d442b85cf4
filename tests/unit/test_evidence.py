"""The `evidence` action: which processes, what the file says when a tool is missing or refused,
the shared deadline, rotation and the size cap; respond() orders evidence before alert and restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from phasewatch.config.load import DEFAULT_ACTIONS, Config, EvidenceCapture
from phasewatch.pipeline import Pipeline
from phasewatch.profile.xid_table import parse_xid
from phasewatch.records import JournalRecord
from phasewatch.sinks.actions import alert_fields
from phasewatch.sinks.evidence import EvidenceTaker, EvidenceWriter, Ran, Target, targets
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.respond import Action, Memory, UnitStatus, respond
from phasewatch.systemd_unit import UnitFacts

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
DEFAULT = EvidenceCapture()


class FakeTools:
    """A runner whose every call costs `cost` seconds on a fake monotonic clock."""

    def __init__(self, outputs: dict[str, Ran], cost: float = 1.0) -> None:
        self.outputs = outputs
        self.cost = cost
        self.now = 0.0
        self.calls: list[tuple[list[str], float]] = []

    def monotonic(self) -> float:
        return self.now

    def run(self, argv: Sequence[str], timeout: float) -> Ran:
        self.calls.append((list(argv), timeout))
        self.now += min(self.cost, timeout)
        if self.cost > timeout:
            return Ran(None, "")
        key = "native" if "--native" in argv else Path(argv[0]).name if len(argv) == 1 else "plain"
        return self.outputs.get(key, Ran(1, "no output"))


def proc_tree(tmp_path: Path, pid: int) -> str:
    (tmp_path / "proc" / str(pid)).mkdir(parents=True)
    (tmp_path / "proc" / str(pid) / "status").write_text("Name:\tpython3\nState:\tS (sleeping)\nThreads:\t3\n")
    (tmp_path / "proc" / str(pid) / "wchan").write_text("hrtimer_nanosleep")
    return str(tmp_path / "proc")


def writer(tmp_path: Path, tools: FakeTools, *, py_spy: str | None = "/usr/bin/py-spy",
           settings: EvidenceCapture = DEFAULT) -> EvidenceWriter:
    return EvidenceWriter(tmp_path / "state", UNIT, settings, run=tools.run, py_spy=lambda: py_spy,
                          nvidia_smi=lambda: None, proc=proc_tree(tmp_path, 4242), monotonic=tools.monotonic)


def test_the_named_rank_then_bounded_peers_in_the_same_phase() -> None:
    running = [("TP0", 10), ("TP3", 13), ("TP4", 14), ("TP5", 15), ("TP6", 16)]
    phases = {"TP0": "draft_cuda_graph_capture", "TP3": "draft_cuda_graph_capture", "TP4": "weight_load",
              "TP5": "draft_cuda_graph_capture", "TP6": "draft_cuda_graph_capture"}
    chosen = targets(["TP3"], "draft_cuda_graph_capture", phases, running, peers=2)
    assert chosen == [Target("TP3", 13, True), Target("TP0", 10, False), Target("TP5", 15, False)]


def test_stacks_and_process_state_go_into_one_file(tmp_path: Path) -> None:
    tools = FakeTools({"native": Ran(0, "Thread 4242 (idle): \"MainThread\"\n    simulated_hang_in_collective\n")})
    path = writer(tmp_path, tools).capture("inv-1", "stalled", "TP3 stalled", [Target("TP3", 4242, True)])
    assert path == tmp_path / "state" / "evidence" / f"{UNIT}-inv-1-stalled.txt"
    text = path.read_text()
    assert "=== TP3 pid 4242 (named by the verdict) ===" in text
    assert "State:\tS (sleeping)" in text and "wchan:\thrtimer_nanosleep" in text
    assert "simulated_hang_in_collective" in text
    assert "nvidia-smi: not found" in text


def test_without_ptrace_permission_the_file_says_why_and_still_has_the_process_state(tmp_path: Path) -> None:
    refused = Ran(1, "Error: Permission denied (os error 13)")
    tools = FakeTools({"native": refused, "plain": refused})
    path = writer(tmp_path, tools).capture("inv-1", "stalled", "TP3 stalled", [Target("TP3", 4242, True)])
    assert path is not None
    text = path.read_text()
    assert "ptrace not permitted: grant CAP_SYS_PTRACE" in text
    assert "State:\tS (sleeping)" in text


def test_without_py_spy_the_file_says_how_to_get_it(tmp_path: Path) -> None:
    tools = FakeTools({})
    path = writer(tmp_path, tools, py_spy=None).capture("inv-1", "stalled", "m", [Target("TP3", 4242, True)])
    assert path is not None
    assert "pip install 'phasewatch[evidence]'" in path.read_text()
    assert tools.calls == []


def test_the_whole_capture_shares_one_deadline(tmp_path: Path) -> None:
    tools = FakeTools({}, cost=4.0)  # every py-spy run hangs past what is left
    settings = EvidenceCapture(timeout=10.0)
    many = [Target(f"TP{n}", 4242, n == 3) for n in range(8)]
    path = writer(tmp_path, tools, settings=settings).capture("inv-1", "stalled", "m", many)
    assert tools.now <= settings.timeout
    assert all(timeout <= settings.timeout for _, timeout in tools.calls)
    assert path is not None and "evidence.timeout reached" in path.read_text()


def test_files_are_rotated_and_capped(tmp_path: Path) -> None:
    tools = FakeTools({"native": Ran(0, "x" * 5000)})
    settings = EvidenceCapture(keep=2, max_bytes=1000)
    w = writer(tmp_path, tools, settings=settings)
    paths = [w.capture(f"inv-{n}", "stalled", "m", [Target("TP3", 4242, True)]) for n in range(4)]
    kept = sorted(p.name for p in (tmp_path / "state" / "evidence").glob("*.txt"))
    assert len(kept) == 2
    assert all(p is not None and p.stat().st_size < 1100 for p in paths[-2:])
    assert "[truncated at evidence size cap]" in (paths[-1] or Path()).read_text()


def test_evidence_comes_before_the_alert_and_the_restart_and_once() -> None:
    config = Config(unit=UNIT, actions={**DEFAULT_ACTIONS, "stalled": ("evidence", "alert", "restart")})
    stall = Verdict("stalled", "inv-1", "draft_cuda_graph_capture", "TP3", "deadline", "TP3 stalled", T0)
    first = respond([stall], Memory(), UnitStatus("activating", "start", "inv-1"), T0, config)
    assert [a.kind for a in first.actions] == ["evidence", "alert", "restart"]
    again = respond([stall], first.memory, UnitStatus("activating", "start", "inv-1"), T0 + 5, config)
    assert again.actions == ()


def test_the_alert_carries_the_evidence_path() -> None:
    config = Config(unit=UNIT, actions={**DEFAULT_ACTIONS, "stalled": ("evidence", "alert")})
    stall = Verdict("stalled", "inv-1", "draft_cuda_graph_capture", "TP3", "deadline", "TP3 stalled", T0)
    alert = respond([stall], Memory(), UnitStatus("activating", "start", "inv-1"), T0, config).actions[1]
    fields = alert_fields(replace(alert, evidence="/var/lib/phasewatch/evidence/x.txt"), UNIT)
    assert fields["PHASEWATCH_EVIDENCE"] == "/var/lib/phasewatch/evidence/x.txt"


def test_the_start_ups_xids_and_nvidia_smi_q_of_the_culprits_gpu_go_in(tmp_path: Path) -> None:
    pipeline = Pipeline(Config(unit=UNIT))
    pipeline.feed(JournalRecord("[2026-11-29 08:00:00 TP3] Load weight begin. avail mem=137.95 GB", T0, pid=103,
                                invocation_id="inv-1"), T0)
    inv = pipeline.snapshot().current
    assert inv is not None
    tools = FakeTools({"nvidia-smi": Ran(0, "the summary"), "plain": Ran(0, "Pending Page Blacklist : Yes")})
    smi = EvidenceWriter(tmp_path / "state", UNIT, EvidenceCapture(timeout=10.0), run=tools.run, py_spy=lambda: None,
                         nvidia_smi=lambda: "/usr/bin/nvidia-smi", proc=proc_tree(tmp_path, 4242),
                         monotonic=tools.monotonic)
    xid = parse_xid("NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
    assert xid is not None
    asked: list[tuple[float | None, float | None]] = []
    taker = EvidenceTaker(smi, lambda group: [], xids=lambda began, end: asked.append((began, end)) or [(T0 + 5, xid)],
                          gpu_of={"TP3": 3}.get)
    stall = Action(kind="evidence", message="TP3 stalled", verdict_kind="stalled", priority=4, invocation_id="inv-1",
                   phase="weight_load", rank="TP3", cause="deadline")
    text = Path(taker.take(inv, [stall], UnitFacts("activating", "start", "inv-1")) or "").read_text()
    assert asked == [(inv.started_at, inv.stopped_at)]
    assert "=== XIDs of this start-up (the kernel's lines) ===" in text
    assert "PCI 0000:3b:00: XID 79, pid=4242, name=python3, GPU has fallen off the bus." in text
    assert "=== nvidia-smi ===\nthe summary" in text
    assert "=== nvidia-smi -q -i 3 (the culprit's GPU) ===\nPending Page Blacklist : Yes" in text
    assert [argv for argv, _ in tools.calls] == [["/usr/bin/nvidia-smi"], ["/usr/bin/nvidia-smi", "-q", "-i", "3"]]


def test_nvidia_smi_q_shares_the_deadline(tmp_path: Path) -> None:
    tools = FakeTools({}, cost=4.0)  # nvidia-smi hangs past what is left
    smi = EvidenceWriter(tmp_path / "state", UNIT, EvidenceCapture(timeout=6.0), run=tools.run, py_spy=lambda: None,
                         nvidia_smi=lambda: "/usr/bin/nvidia-smi", proc=proc_tree(tmp_path, 4242),
                         monotonic=tools.monotonic)
    path = smi.capture("inv-1", "stalled", "m", [], gpu=3)
    assert path is not None and tools.now <= 6.0
    assert [timeout for _, timeout in tools.calls] == [6.0, 2.0]
    assert "nvidia-smi -q -i 3 (the culprit's GPU): did not finish in time" in path.read_text()
