"""Pure stage: the GPUs' own reports -> `gpu_fault` verdicts, and the crash or stall on a faulted
GPU said to be its doing.

A fault is an XID the driver logged in the kernel's lines (profile/xid_table.py reads them) or what NVML says
of a GPU's health: retired pages or remapped rows pending (a reset activates them), a row remap that
failed, the recovery action current drivers give, a GPU that answers "lost". Each is mapped to its
GPU (PCI address -> NVML index) and the rank using that GPU (the vitals' GPU contexts). A start-up's
faults are those from LOOKBACK before it began until it stopped; the worst per GPU is one verdict,
raised whatever the rank's lines say.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from ...profile.xid_table import ACTION_WORDS, BLOCKING, RECOVERY_ACTIONS, UNKNOWN, XidLine, XidTable
from ...records import STUCK, VerdictKind
from ..s3_track.snapshot import InvocationView
from .remedies import Remedy
from .verdict import Verdict

LOOKBACK = 60.0  # seconds before a start-up began whose faults still count for it (logged as it starts)
# How bad an action is: the worst of a GPU's faults is its verdict.
SEVERITY = {"none": 0, UNKNOWN: 1, "restart_app": 2, "reset_gpu": 3, "reboot": 4, "drain": 5}


@dataclass(frozen=True)
class GpuHealth:
    """NVML's health answers of one GPU (None: not answered, e.g. NOT_SUPPORTED)."""

    index: int
    retired_pages_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    recovery_action: int | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    lost: bool = False  # a call answered GPU_IS_LOST


@dataclass(frozen=True)
class GpuFault:
    at: float
    source: str  # "xid" or "nvml"
    action: str  # xid_table.ACTIONS or UNKNOWN
    evidence: str  # `XID 79 (GPU has fallen off the bus): pid=4242, ...`
    pci: str | None = None
    gpu: int | None = None  # NVML index
    rank: str | None = None
    code: int | None = None  # the XID
    application: bool = False

    @property
    def blocks(self) -> bool:
        return self.action in BLOCKING and not self.application

    @property
    def where(self) -> str:
        """`GPU 3 (PCI 0000:3b:00)`."""
        gpu = f"GPU {self.gpu}" if self.gpu is not None else "a GPU"
        return f"{gpu} (PCI {self.pci})" if self.pci else gpu

    @property
    def cause(self) -> str:
        return f"xid_{self.code}" if self.code is not None else f"nvml_{self.evidence.split(':')[0].replace(' ', '_')}"


def xid_fault(line: XidLine, at: float, table: XidTable, gpus: Mapping[str, int],
              ranks: Mapping[int, str]) -> GpuFault:
    """One XID line as a fault: its GPU by PCI address (`gpus`: PCI -> NVML index), its rank (`ranks`)."""
    entry = table.entry(line.code, line.text)
    gpu = gpus.get(line.pci)
    process = ", ".join(p for p in (f"pid={line.pid}" if line.pid else "", f"name={line.name}" if line.name else "")
                        if p)
    evidence = f"XID {line.code} ({entry.meaning})" + (f", {process}" if process else "")
    return GpuFault(at, "xid", entry.action, evidence, line.pci, gpu, ranks.get(gpu) if gpu is not None else None,
                    line.code, entry.application)


def nvml_faults(health: GpuHealth, at: float, pci: str | None, rank: str | None) -> list[GpuFault]:
    """What NVML's answers say the GPU needs."""
    said: list[tuple[str, str]] = []
    if health.lost:
        said.append(("reboot", "GPU lost: NVML answers GPU_IS_LOST"))
    if health.recovery_action:
        action = RECOVERY_ACTIONS.get(health.recovery_action, UNKNOWN)
        said.append((action, f"recovery action: NVML's GPU recovery action is {health.recovery_action} ({action})"))
    if health.remap_failed:
        said.append(("drain", "row remap failed: NVML reports a row remapping failure"))
    if health.remap_pending:
        said.append(("reset_gpu", "row remap pending: remapped rows wait for a GPU reset"))
    if health.retired_pages_pending:
        said.append(("reset_gpu", "page retirement pending: retired pages wait for a GPU reset"))
    return [GpuFault(at, "nvml", action, words, pci, health.index, rank) for action, words in said]


def faults_of(inv: InvocationView, faults: Iterable[GpuFault]) -> list[GpuFault]:
    """The faults of this start-up: from LOOKBACK before it began until it stopped."""
    began = inv.started_at
    end = inv.stopped_at
    return [f for f in faults if (began is None or f.at >= began - LOOKBACK) and (end is None or f.at <= end)]


def _worst(faults: Sequence[GpuFault]) -> list[GpuFault]:
    """The worst fault per GPU (the first of equals), in the order the GPUs first had one."""
    by_gpu: dict[object, GpuFault] = {}
    for fault in faults:
        key = fault.gpu if fault.gpu is not None else fault.pci
        kept = by_gpu.get(key)
        if kept is None or SEVERITY.get(fault.action, 1) > SEVERITY.get(kept.action, 1):
            by_gpu[key] = fault
    return list(by_gpu.values())


def remedy(fault: GpuFault) -> Remedy:
    words = ACTION_WORDS.get(fault.action, ACTION_WORDS[UNKNOWN])
    if fault.gpu is not None:
        words = words.replace("<gpu>", str(fault.gpu))
    return Remedy(f"gpu_{fault.action}", f"{fault.where}: {words}", {})


def fault_verdicts(inv: InvocationView, faults: Sequence[GpuFault], unit: str) -> list[Verdict]:
    out = []
    for fault in _worst(faults):
        if fault.action == "none":
            continue
        rank = inv.rank(fault.rank) if fault.rank is not None else None
        on = f" ({fault.rank}'s GPU)" if fault.rank else ""
        verdict_rank = fault.rank if fault.rank is not None else (f"GPU {fault.gpu}" if fault.gpu is not None
                                                                  else fault.pci)
        blocks = " (the restart is held back: the GPU needs it first)" if fault.blocks else ""
        out.append(Verdict(VerdictKind.GPU_FAULT, inv.invocation_id, rank.phase.value if rank else None, verdict_rank,
                           fault.cause, f"{unit}: {fault.where}{on} reported {fault.evidence}; recommended action: "
                           f"{fault.action}{blocks}", fault.at, remedy=remedy(fault), gpu_action=fault.action,
                           gpu_blocks=fault.blocks, gpu=fault.where))
    return out


def with_gpu_faults(verdicts: Sequence[Verdict], inv: InvocationView, faults: Iterable[GpuFault],
                    unit: str) -> list[Verdict]:
    """`verdicts` and this start-up's gpu_fault verdicts; a crash, a death or a stall on a faulted GPU
    (or a crash whose rank is unknown while a GPU's fault blocks) names the fault as its cause and
    takes its remedy."""
    mine = faults_of(inv, faults)
    if not mine:
        return list(verdicts)
    worst = _worst([f for f in mine if f.action != "none"])
    out = []
    for verdict in verdicts:
        fault = _fault_for(verdict, worst)
        if fault is not None:
            verdict = replace(verdict, message=f"{verdict.message}; on a faulted GPU: {fault.where} reported "
                              f"{fault.evidence} (recommended action: {fault.action})", remedy=remedy(fault))
        out.append(verdict)
    return out + fault_verdicts(inv, mine, unit)


def _fault_for(verdict: Verdict, faults: Sequence[GpuFault]) -> GpuFault | None:
    if verdict.kind not in (*STUCK, VerdictKind.CRASHED, VerdictKind.RANK_DIED):
        return None
    on_rank = [f for f in faults if f.rank is not None and f.rank == verdict.rank]
    if on_rank:
        return max(on_rank, key=lambda f: SEVERITY.get(f.action, 1))
    if verdict.kind is VerdictKind.CRASHED and verdict.rank in (None, "main"):
        blocking = [f for f in faults if f.blocks]
        return blocking[0] if blocking else None
    return None


def blocking_faults(verdicts: Iterable[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.kind is VerdictKind.GPU_FAULT and v.gpu_blocks]
