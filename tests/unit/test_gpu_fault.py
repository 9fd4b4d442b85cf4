"""Issue 38: a GPU's faults (kernel XIDs, NVML health) as the gpu_fault verdict, the cause of a crash
on that GPU, and the restart gate (a broken GPU, the same failure again). Pure: records and `now`."""

from __future__ import annotations

from dataclasses import replace

from phasewatch.config.load import Config, RestartBudget
from phasewatch.judge import Judge
from phasewatch.pipeline import Pipeline
from phasewatch.profile.xid_table import parse_xid, xid_table
from phasewatch.records import JournalRecord, VerdictKind
from phasewatch.sources.base import GpuFaults, Instant
from phasewatch.sources.host.gpu_health import GpuHealthSource
from phasewatch.stages.s4_judge.gpu_fault import GpuHealth, nvml_faults, with_gpu_faults, xid_fault
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.respond import Memory, UnitStatus, respond
from phasewatch.stages.s5_act.restart_gate import fingerprint, same_in_a_row

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
CONFIG = Config(unit=UNIT, restart_budget=RestartBudget(max=3, window=6 * 3600, backoff=0),
                actions={"crashed": ("alert", "restart"), "stalled": ("alert", "restart"), "gpu_fault": ("alert",)})
GPUS = {"0000:3b:00": 3, "0000:1a:00": 0}  # PCI -> NVML index
RANKS = {3: "TP3", 0: "TP0"}  # NVML index -> rank


def fault(code: int, pci: str = "0000:3b:00", at: float = T0 + 30):
    line = parse_xid(f"NVRM: Xid (PCI:{pci}): {code}, pid=4242, name=python3, the driver's words")
    assert line is not None
    return xid_fault(line, at, xid_table(), GPUS, RANKS)


def startup():
    pipeline = Pipeline(CONFIG)
    for n in range(8):
        pipeline.feed(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                    pid=100 + n, invocation_id=INV), T0)
    inv = pipeline.snapshot().current
    assert inv is not None
    return inv


def crash(rank: str = "TP3", invocation: str = INV) -> Verdict:
    return Verdict(VerdictKind.CRASHED, invocation, "weight_load", rank, "python_exception",
                   f"{UNIT}: {rank} crashed in weight_load (python_exception): RuntimeError: CUDA error", T0 + 40,
                   quote="RuntimeError: CUDA error: unspecified launch failure")


def test_an_xid_is_mapped_by_its_pci_address_to_the_gpu_and_its_rank() -> None:
    found = fault(79)
    assert (found.gpu, found.rank, found.code, found.action, found.blocks) == (3, "TP3", 79, "reboot", True)
    assert "GPU has fallen off the bus" in found.evidence and "pid=4242" in found.evidence
    unknown = fault(79, pci="0000:99:00")
    assert (unknown.gpu, unknown.rank) == (None, None) and "PCI 0000:99:00" in unknown.where


def test_nvml_health_says_what_the_gpu_needs() -> None:
    said = nvml_faults(GpuHealth(3, retired_pages_pending=True, remap_failed=True, recovery_action=2), T0,
                       "0000:3b:00", "TP3")
    assert {f.action for f in said} == {"reset_gpu", "drain", "reboot"}
    assert all(f.rank == "TP3" and f.gpu == 3 and f.blocks for f in said)
    assert nvml_faults(GpuHealth(3, False, False, False, 0), T0, None, None) == []


def test_a_fault_is_a_verdict_while_the_ranks_lines_look_healthy() -> None:
    [verdict] = with_gpu_faults([], startup(), [fault(79)], UNIT)
    assert verdict.kind is VerdictKind.GPU_FAULT and verdict.rank == "TP3" and verdict.gpu_blocks
    assert verdict.phase == "weight_load" and verdict.cause == "xid_79" and verdict.gpu_action == "reboot"
    assert "GPU 3 (PCI 0000:3b:00) (TP3's GPU) reported XID 79" in verdict.message
    assert verdict.remedy is not None and "reboot the node" in verdict.remedy.text


def test_a_fault_before_the_start_up_or_an_informational_one_is_no_verdict() -> None:
    inv = startup()
    assert with_gpu_faults([], inv, [fault(79, at=T0 - 3600)], UNIT) == []
    assert with_gpu_faults([], inv, [fault(92)], UNIT) == []  # corrected errors: nothing to do now


def test_the_crash_on_a_faulted_gpu_names_the_fault_and_takes_its_remedy() -> None:
    crashed, gpu = with_gpu_faults([crash()], startup(), [fault(13), fault(79)], UNIT)
    assert "on a faulted GPU: GPU 3 (PCI 0000:3b:00) reported XID 79" in crashed.message
    assert crashed.remedy is not None and crashed.remedy.id == "gpu_reboot"
    assert gpu.kind is VerdictKind.GPU_FAULT and gpu.cause == "xid_79"  # the worst of the GPU's faults
    [other, _] = with_gpu_faults([crash("TP5")], startup(), [fault(79)], UNIT)
    assert "faulted GPU" not in other.message  # TP5's GPU is not the faulted one


def test_the_restart_onto_a_broken_gpu_is_refused_and_alerted_at_a_paging_priority() -> None:
    verdicts = with_gpu_faults([crash()], startup(), [fault(79)], UNIT)
    response = respond(verdicts, Memory(), UnitStatus("failed", "failed", INV), T0 + 60, CONFIG)
    assert not any(a.kind == "restart" for a in response.actions)
    [refused] = [a for a in response.actions if a.verdict_kind == "restart_refused"]
    assert refused.priority <= 2 and refused.cause == "gpu_fault"
    assert "not restarting onto a faulted GPU: TP3 needs reboot (xid_79)" in refused.message
    assert refused.remedy is not None and "reboot the node" in refused.remedy
    again = respond(verdicts, response.memory, UnitStatus("failed", "failed", INV), T0 + 70, CONFIG)
    assert not any(a.verdict_kind == "restart_refused" or a.kind == "restart" for a in again.actions)


def test_a_fault_is_alerted_once_as_its_rank_moves_on_and_a_worse_one_later_again() -> None:
    line = parse_xid("NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, the driver's words")
    assert line is not None
    [unmapped] = with_gpu_faults([], startup(), [xid_fault(line, T0 + 30, xid_table(), GPUS, {})], UNIT)
    [early] = with_gpu_faults([], startup(), [fault(13)], UNIT)
    assert (unmapped.rank, early.rank) == ("GPU 3", "TP3")  # the vitals saw TP3 on GPU 3 a moment later
    moved = replace(early, phase="cuda_graph_capture")
    [worse] = with_gpu_faults([], startup(), [fault(13), fault(79, at=T0 + 50)], UNIT)
    first = respond([unmapped], Memory(), UnitStatus("activating", "start", INV), T0 + 31, CONFIG)
    mapped = respond([early], first.memory, UnitStatus("activating", "start", INV), T0 + 32, CONFIG)
    assert [a for a in mapped.actions if a.kind == "alert"] == []
    again = respond([moved], mapped.memory, UnitStatus("activating", "start", INV), T0 + 40, CONFIG)
    later = respond([worse], again.memory, UnitStatus("activating", "start", INV), T0 + 51, CONFIG)
    assert [a.cause for a in first.actions if a.kind == "alert"] == ["xid_13"]
    assert [a for a in again.actions if a.kind == "alert"] == []
    assert [a.cause for a in later.actions if a.kind == "alert" and a.verdict_kind == "gpu_fault"] == ["xid_79"]


def test_an_application_xid_does_not_hold_the_restart() -> None:
    verdicts = with_gpu_faults([crash()], startup(), [fault(13), fault(43), fault(45)], UNIT)
    response = respond(verdicts, Memory(), UnitStatus("failed", "failed", INV), T0 + 60, CONFIG)
    assert [a.kind for a in response.actions if a.kind == "restart"] == ["restart"]
    assert not any(a.verdict_kind == "restart_refused" for a in response.actions)


def test_a_fault_whose_action_is_unknown_is_alerted_but_does_not_hold_the_restart() -> None:
    verdicts = with_gpu_faults([crash()], startup(), [fault(74), fault(9999)], UNIT)  # a workflow; not listed
    assert [v.gpu_action for v in verdicts if v.kind is VerdictKind.GPU_FAULT] == ["unknown"]
    response = respond(verdicts, Memory(), UnitStatus("failed", "failed", INV), T0 + 60, CONFIG)
    assert [a.kind for a in response.actions if a.kind == "restart"] == ["restart"]
    assert not any(a.verdict_kind == "restart_refused" for a in response.actions)


def test_fingerprints_are_equal_for_the_same_failure_and_differ_otherwise() -> None:
    assert fingerprint(crash()) == fingerprint(crash(invocation="other")) == \
        "crashed in weight_load (python_exception) on TP3 RuntimeError"
    assert fingerprint(crash("TP5")) != fingerprint(crash())
    stall = Verdict(VerdictKind.STALLED, INV, "draft_cuda_graph_capture", "TP3", "no_progress", "m", T0)
    assert fingerprint(stall) == "stalled in draft_cuda_graph_capture (no_progress) on TP3"
    assert same_in_a_row([("a", "x"), ("b", "y"), ("c", "y")]) == 2 and same_in_a_row([]) == 0


def stalled(invocation: str, rank: str = "TP3") -> Verdict:
    return Verdict(VerdictKind.STALLED, invocation, "draft_cuda_graph_capture", rank, "no_progress",
                   f"{UNIT}: {rank} stalled in draft_cuda_graph_capture", T0)


def test_the_same_failure_twice_is_refused_and_a_different_one_restarted() -> None:
    first = respond([stalled("inv-1")], Memory(), UnitStatus("activating", "start", "inv-1"), T0, CONFIG)
    assert any(a.kind == "restart" for a in first.actions)
    second = respond([stalled("inv-2")], first.memory, UnitStatus("activating", "start", "inv-2"), T0 + 10, CONFIG)
    assert not any(a.kind == "restart" for a in second.actions)
    [refused] = [a for a in second.actions if a.verdict_kind == "restart_refused"]
    assert "the same failure twice: stalled in draft_cuda_graph_capture (no_progress) on TP3" in refused.message
    assert refused.cause == "same_failure"
    third = respond([stalled("inv-3", "TP5")], second.memory, UnitStatus("activating", "start", "inv-3"),
                    T0 + 20, CONFIG)
    assert any(a.kind == "restart" for a in third.actions)  # a different failure is restarted


def test_same_failure_is_configurable() -> None:
    config = Config(unit=UNIT, restart_budget=RestartBudget(max=5, window=6 * 3600, backoff=0, same_failure=3),
                    actions=CONFIG.actions)
    memory = Memory()
    for n in (1, 2):
        response = respond([stalled(f"inv-{n}")], memory, UnitStatus("activating", "start", f"inv-{n}"), T0 + n,
                           config)
        assert any(a.kind == "restart" for a in response.actions)
        memory = response.memory
    third = respond([stalled("inv-3")], memory, UnitStatus("activating", "start", "inv-3"), T0 + 3, config)
    assert not any(a.kind == "restart" for a in third.actions)
    assert any("the same failure 3 times in a row" in a.message for a in third.actions)


def test_the_faults_a_source_returns_are_judged_by_the_judge_the_pipeline_holds_none() -> None:
    """GpuHealthSource returns what it saw (`GpuFaults`); the loop hands it to the judge, whose step
    judges the start-up with it: no source writes into the pipeline."""
    pipeline = Pipeline(CONFIG)
    for n in range(8):
        pipeline.feed(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0,
                                    pid=100 + n, invocation_id=INV), T0)
    source = GpuHealthSource(pipeline.current, lambda: RANKS, None, None)
    source.faults = lambda now: [fault(79)]  # type: ignore[method-assign]  # (NVML and the kernel's lines: seams)
    [seen] = source.collect(Instant(T0 + 31, 1000.0), [])
    assert isinstance(seen, GpuFaults) and not hasattr(pipeline, "gpu_faults")
    judge = Judge(CONFIG, pipeline)
    assert [v.kind for v in judge.judge(T0 + 31).current.verdicts] == []  # type: ignore[union-attr]
    judge.saw_gpu_faults(seen.faults)
    step = judge.judge(T0 + 31)
    assert [v.kind for v in step.current.verdicts] == [VerdictKind.GPU_FAULT]  # type: ignore[union-attr]
