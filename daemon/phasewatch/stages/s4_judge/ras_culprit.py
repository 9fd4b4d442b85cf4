"""Who a collective hang waits for, from NCCL RAS's report (ras_report.py). Pure.

When to ask (`ask_at`): while the unit starts and a rank has been quiet for half its stall
window, or every rank's GPU shows the waiting signature. What the answer says (`find_culprit`): the
ranks of the unit's communicators that launched fewer operations of a collective than the others,
or that RAS has no data from; named by the unit's rank labels through their PIDs. Only PIDs in the
unit's cgroup count: a communicator or rank naming another PID is ignored and counted (another job on
the same port, or a local user's impostor server). `with_culprit` adds the finding's words to the
stall verdicts' messages: advice, never a verdict of its own, never a change of kind or time.

"No culprit from RAS" is an answer, with the blind spot that applies: RAS counts a collective when
it is launched, not inside CUDA graphs; a rank stuck inside a collective every rank launched shows
no lag; engines' custom all-reduce (CUDA IPC) and Gloo are outside NCCL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from ...config.load import Config
from ...records import VerdictKind
from ..s3_track.snapshot import InvocationView, UnitState
from .gpu_policy import stall_window
from .policy import _evaluated_ranks, _quiet_since
from .ras_report import RasReport
from .verdict import Verdict

ASK_SHARE = 0.5  # a rank quiet for this share of its stall window: RAS is asked
ASK_SPACING = 30.0  # while wanted, asked again after this many seconds
FRESH = 300.0  # a finding older than this is not told in a verdict
MAX_NAMED = 3
BLIND_SPOTS = ("RAS counts collectives when launched, not inside CUDA graphs; a rank stuck inside a collective "
               "every rank launched shows no lag; custom all-reduce and Gloo are outside NCCL")


@dataclass(frozen=True)
class Culprit:
    label: str  # the unit's rank label (TP5), or "pid N" for a process of the unit with no rank title
    nccl_rank: int
    pid: int | None
    gpu: int | None
    comm: str
    why: str  # "lag" or "missing"
    collective: str | None = None
    launched: int | None = None
    others: int | None = None
    detail: str = ""  # missing: unresponsive, considered dead, not in the communicator

    def words(self) -> str:
        who = ", ".join(p for p in (self.label, f"pid {self.pid}" if self.pid is not None else "",
                                     f"GPU {self.gpu}" if self.gpu is not None else "") if p)
        if self.why == "lag":
            did = (f"has launched {self.collective} up to op {self.launched}" if self.launched
                   else f"has not launched any {self.collective}")
            return f"{who}, {did} while the others are at {self.others}"
        return f"{who}, sent RAS no data for communicator {self.comm} ({self.detail})"


@dataclass(frozen=True)
class RasFinding:
    """One answer of RAS, judged: `culprits`, else `no_culprit` says why. `lags`: (rank label,
    collective, operations behind the furthest rank) for every rank of the unit RAS counted."""

    invocation_id: str
    at: float
    address: str
    culprits: tuple[Culprit, ...] = ()
    no_culprit: str | None = None
    lags: tuple[tuple[str, str, int], ...] = ()
    ignored_pids: tuple[int, ...] = ()
    format: str | None = None
    nccl_version: str | None = None
    report: str = ""  # the whole answer, for the evidence
    told: bool = True  # said in the verdicts; not when nobody listens (no NCCL 2.24+, RAS off): status only

    def words(self) -> str:
        ignored = (f" ({len(self.ignored_pids)} PID(s) in RAS's answer are not the unit's: ignored)"
                   if self.ignored_pids else "")
        if self.culprits:
            named = "; ".join(c.words() for c in self.culprits[:MAX_NAMED])
            more = f" (+{len(self.culprits) - MAX_NAMED} more)" if len(self.culprits) > MAX_NAMED else ""
            return f"culprit (NCCL RAS): {named}{more}{ignored}"
        return f"no culprit from RAS: {self.no_culprit}{ignored}"

    def document(self) -> dict[str, object]:
        return {"at": self.at, "address": self.address, "words": self.words(), "told": self.told, "format": self.format,
                "nccl_version": self.nccl_version, "no_culprit": self.no_culprit,
                "culprits": [{"rank": c.label, "nccl_rank": c.nccl_rank, "pid": c.pid, "gpu": c.gpu,
                              "communicator": c.comm, "why": c.why, "collective": c.collective,
                              "launched": c.launched, "others": c.others, "detail": c.detail} for c in self.culprits],
                "lags": [{"rank": r, "collective": c, "behind": n} for r, c, n in self.lags],
                "ignored_pids": list(self.ignored_pids)}


def ask_at(inv: InvocationView | None, now: float, config: Config) -> tuple[float, str] | None:
    """When RAS is worth asking (wall clock, maybe past) and why; None while the unit is not
    starting: when a rank will have been quiet for half its stall window, or now if every rank's
    GPU waits."""
    if inv is None or inv.state is not UnitState.STARTING:
        return None
    schedulers = [r for r in inv.scheduler_ranks if r.seen]
    if schedulers and all(r.gpu is not None and r.gpu.state == "waiting" for r in schedulers):
        return now, "every rank's GPU waits"
    due: tuple[float, str] | None = None
    for rank in _evaluated_ranks(inv):
        stall, gpu = stall_window(inv, rank, now, config.limits(rank.phase), config)
        quiet = _quiet_since(inv, rank, gpu)
        if stall is not None and quiet is not None and (due is None or quiet + stall * ASK_SHARE < due[0]):
            due = (quiet + stall * ASK_SHARE, f"{rank.rank} quiet in {rank.phase.value}")
    return due


def failed_finding(invocation_id: str, at: float, address: str, why: str, told: bool = True) -> RasFinding:
    return RasFinding(invocation_id, at, address, no_culprit=why, told=told)


def find_culprit(report: RasReport, invocation_id: str, at: float, address: str, labels: Mapping[int, str],
                 unit_pids: Iterable[int], raw: str = "") -> RasFinding:
    """The report judged for the unit whose processes are `unit_pids` (`labels`: pid -> rank label)."""
    ours = frozenset(unit_pids)
    ignored: set[int] = set()
    culprits: list[Culprit] = []
    lags: list[tuple[str, str, int]] = []
    crowded: list[str] = []
    seen_comm = False

    def label(pid: int | None, nccl_rank: int) -> str:
        return labels.get(pid, f"pid {pid}") if pid is not None else f"NCCL rank {nccl_rank}"

    for comm in report.comms:
        inside = [r for r in comm.ranks if r.pid in ours]
        ignored.update(r.pid for r in comm.ranks if r.pid is not None and r.pid not in ours)
        ignored.update(m.pid for m in comm.missing if m.pid is not None and m.pid not in ours)
        missing = [m for m in comm.missing if m.pid in ours]
        if not inside and not missing:
            continue
        seen_comm = True
        for m in missing:
            detail = ("considered dead" if m.dead else "its process did not answer" if m.unresponsive
                      else "its process answered without this communicator: never joined it, or left it")
            culprits.append(Culprit(label(m.pid, m.rank), m.rank, m.pid, m.gpu, comm.hash, "missing", detail=detail))
        size = comm.size or (len(comm.ranks) + len(comm.missing))
        for collective in sorted({c for r in inside for c in r.counts} | set(comm.majority)):
            counted = [(r, r.counts[collective]) for r in inside if collective in r.counts]
            top = max([n for _, n in counted] + [comm.majority.get(collective, 0)])
            behind = [(r, n) for r, n in counted if n < top]
            lags.extend((label(r.pid, r.rank), collective, top - n) for r, n in counted)
            if not behind:
                continue
            if len(behind) > max(size // 2, 1):
                crowded.append(f"{len(behind)} of {size} ranks are behind in {collective} (op {top} launched by "
                               "the others): no single culprit")
                continue
            culprits.extend(Culprit(label(r.pid, r.rank), r.rank, r.pid, r.gpu, comm.hash, "lag", collective, n, top)
                            for r, n in sorted(behind, key=lambda item: (item[1], item[0].rank)))
    for pid in (*report.dead_pids, *report.missing_pids):
        if pid not in ours:
            ignored.add(pid)
        elif not any(c.pid == pid for c in culprits):
            dead = pid in report.dead_pids
            culprits.append(Culprit(label(pid, -1), -1, pid, None, "any", "missing",
                                    detail="considered dead" if dead else "its process sent no communicator data"))
    if culprits:
        why = None
    elif crowded:
        why = "; ".join(crowded)
    elif seen_comm:
        why = f"every rank of the unit launched the same collectives ({BLIND_SPOTS})"
    elif ignored:
        why = "RAS's answer names no process of the unit"
    else:
        why = "RAS knows no communicator of the unit yet (a rank that never reached NCCL's init is not known to it)"
    return RasFinding(invocation_id, at, address, tuple(culprits), why, tuple(lags), tuple(sorted(ignored)),
                      report.format, report.nccl_version, raw)


def with_culprit(verdicts: list[Verdict], finding: RasFinding | None, now: float) -> list[Verdict]:
    """Stall verdicts' messages with the finding's words, when it is this start-up's, fresh and an
    answer (nobody listening is said in status and the log only: the verdict's words stay as they were)."""
    if finding is None or not finding.told or now - finding.at > FRESH:
        return verdicts
    return [replace(v, message=f"{v.message}; {finding.words()}")
            if v.kind is VerdictKind.STALLED and v.invocation_id == finding.invocation_id else v for v in verdicts]
