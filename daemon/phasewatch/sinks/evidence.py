"""Edge: the `evidence` action. Before phasewatch acts on a hung start-up, the stacks and state of
the ranks the verdict names (and, bounded, their peers in the same phase) go into one text file
under the state directory: `evidence/<unit>-<invocation>-<verdict>.txt`.

The file also has the start-up's XIDs (the driver's kernel lines, sources/gpu_health.py) and, where
nvidia-smi exists, its summary and `nvidia-smi -q -i <gpu>` of the culprit's GPU (the GPU its rank
holds, as the vitals saw it).

Everything is bounded by one deadline (`evidence.timeout`): each tool gets what is left of it, and
what could not be captured (no py-spy, no ptrace permission, out of time) is said in the file.
Files are rotated (at most `keep`) and each is capped at `max_bytes`.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..config.load import EvidenceCapture
from ..profile.xid_table import XidLine
from ..stages.s3_track.snapshot import InvocationView
from ..stages.s4_judge.ras_culprit import RasFinding
from ..stages.s5_act.respond import Action
from ..systemd_unit import UnitFacts
from .children import Ran, run_child

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    rank: str
    pid: int
    named: bool  # named by the verdict (else: a peer in the same phase)


Runner = Callable[[Sequence[str], float], Ran]


def run_bounded(argv: Sequence[str], timeout: float) -> Ran:
    """A tool run with a timeout, in its own process group, its output capped while read (a py-spy
    or nvidia-smi that floods), abandoned when it cannot be killed (sinks/children.py)."""
    return run_child(argv, timeout)


def find_py_spy() -> str | None:
    """py-spy on PATH, or beside phasewatch's own interpreter (a venv install of the extra)."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def proc_state(proc: Path, pid: int) -> str:
    """State, threads and wchan of one process from /proc."""
    lines = []
    try:
        status = (proc / str(pid) / "status").read_text(errors="replace")
    except OSError as exc:
        return f"/proc/{pid}/status: unreadable ({exc.strerror or exc})"
    for line in status.splitlines():
        if line.split(":", 1)[0] in ("Name", "State", "Threads", "VmRSS", "voluntary_ctxt_switches",
                                     "nonvoluntary_ctxt_switches"):
            lines.append(line)
    try:
        wchan = (proc / str(pid) / "wchan").read_text(errors="replace").strip() or "0"
    except OSError as exc:
        wchan = f"unreadable ({exc.strerror or exc})"
    lines.append(f"wchan:\t{wchan}")
    return "\n".join(lines)


class EvidenceWriter:
    def __init__(self, directory: str | Path, unit: str, settings: EvidenceCapture, *,
                 run: Runner = run_bounded, py_spy: Callable[[], str | None] = find_py_spy,
                 nvidia_smi: Callable[[], str | None] = lambda: shutil.which("nvidia-smi"),
                 proc: str = "/proc", monotonic: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory) / "evidence"
        self.unit = unit
        self.settings = settings
        self.run = run
        self.py_spy = py_spy
        self.nvidia_smi = nvidia_smi
        self.proc = Path(proc)
        self.monotonic = monotonic

    def path_for(self, invocation: str | None, verdict: str) -> Path:
        return self.directory / f"{self.unit}-{invocation or 'unknown'}-{verdict}.txt"

    def capture(self, invocation: str | None, verdict: str, message: str, targets: Sequence[Target],
                gpu: int | None = None) -> Path | None:
        """Writes the file; returns its path (None if the state directory refused it). `gpu`: the
        culprit's GPU (NVML index), whose `nvidia-smi -q -i` goes in too."""
        deadline = self.monotonic() + self.settings.timeout
        sections = [f"phasewatch evidence for {self.unit}, start-up {invocation}, verdict {verdict}",
                    f"captured at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}", message, ""]
        if not targets:
            sections.append("no rank process found in the unit's cgroup: nothing to dump")
        py_spy = self.py_spy()
        if py_spy is None:
            sections.append("py-spy: not installed (pip install 'phasewatch[evidence]', or put py-spy on PATH); "
                            "Python stacks not captured")
        for target in targets:
            role = "named by the verdict" if target.named else "peer in the same phase"
            sections.append(f"=== {target.rank} pid {target.pid} ({role}) ===")
            sections.append(proc_state(self.proc, target.pid))
            if py_spy is not None:
                sections.append(self._stacks(py_spy, target.pid, deadline))
            sections.append("")
        smi = self.nvidia_smi()
        if smi is None:
            sections.append("nvidia-smi: not found; GPU state not captured")
        else:
            runs = [([smi], "nvidia-smi")]
            if gpu is not None:
                runs.append(([smi, "-q", "-i", str(gpu)], f"nvidia-smi -q -i {gpu} (the culprit's GPU)"))
            for argv, title in runs:
                left = deadline - self.monotonic()
                if left <= 0:
                    sections.append(f"{title}: skipped, evidence.timeout reached")
                    continue
                ran = self.run(argv, left)
                sections.append(f"=== {title} ===\n" + (ran.output if ran.returncode is not None
                                                        else f"{title}: did not finish in time"))
        return self._write(self.path_for(invocation, verdict), "\n".join(sections) + "\n")

    def _stacks(self, py_spy: str, pid: int, deadline: float) -> str:
        out = []
        for argv in ([py_spy, "dump", "--native", "--pid", str(pid)], [py_spy, "dump", "--pid", str(pid)]):
            left = deadline - self.monotonic()
            if left <= 0:
                out.append(f"py-spy: skipped for pid {pid}, evidence.timeout reached")
                break
            ran = self.run(argv, left)
            if ran.returncode == 0:
                out.append(f"$ {' '.join(argv[1:])}\n{ran.output}")
                break
            why = "did not finish in time" if ran.returncode is None else f"exit status {ran.returncode}"
            hint = (" (ptrace not permitted: grant CAP_SYS_PTRACE, see docs/operations.md)"
                    if "ermission" in ran.output or "EPERM" in ran.output else "")
            out.append(f"$ {' '.join(argv[1:])}: failed, {why}{hint}\n{ran.output.strip()}")
        return "\n".join(out)

    def _write(self, path: Path, text: str) -> Path | None:
        data = text.encode()
        if len(data) > self.settings.max_bytes:
            data = data[: self.settings.max_bytes] + b"\n[truncated at evidence size cap]\n"
        try:
            self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            _write_new(temporary, data)
            os.replace(temporary, path)
            self._rotate()
        except OSError as exc:
            logger.error("[%s] cannot write evidence %s: %s", self.unit, path, exc)
            return None
        return path

    def _rotate(self) -> None:
        """Regular files only, by lstat: a dangling link or a directory named *.txt is not evidence."""
        files = []
        for candidate in self.directory.glob("*.txt"):
            try:
                info = candidate.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files.append((info.st_mtime, candidate))
        files.sort()
        for _, old in files[: max(len(files) - self.settings.keep, 0)]:
            try:
                old.unlink()
            except OSError as exc:
                logger.warning("[%s] cannot remove old evidence %s: %s", self.unit, old, exc.strerror or exc)


def _write_new(path: Path, data: bytes) -> None:
    """A fresh file, never through what is already at `path` (a symlink is not followed, a FIFO never
    blocks: both are removed first, and O_EXCL|O_NOFOLLOW refuses one made meanwhile)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def targets(named: Sequence[str], phase: str | None, rank_phases: dict[str, str], processes: Sequence[tuple[str, int]],
            peers: int) -> list[Target]:
    """The processes of the ranks named, then at most `peers` other ranks in the same phase."""
    out = [Target(rank, pid, True) for rank, pid in processes if rank in named]
    others = [Target(rank, pid, False) for rank, pid in processes
              if rank not in named and phase is not None and rank_phases.get(rank) == phase]
    return out + others[:peers]


class EvidenceTaker:
    """The `evidence` action for the actor: which processes, then one file."""

    def __init__(self, writer: EvidenceWriter, processes: Callable[[str], Sequence[tuple[str, int]]],
                 ras: Callable[[str], RasFinding | None] = lambda invocation: None,
                 xids: Callable[[float | None, float | None], Sequence[tuple[float, XidLine]]] = lambda b, e: (),
                 gpu_of: Callable[[str], int | None] = lambda rank: None) -> None:
        self.writer = writer
        self.processes = processes  # control group -> (rank, pid) of its rank processes
        self.ras = ras  # invocation -> NCCL RAS's last finding (sources/ras.py)
        self.xids = xids  # the kernel's XID lines within a start-up (began, end)
        self.gpu_of = gpu_of  # rank -> the NVML index of the GPU it holds

    def take(self, inv: InvocationView, actions: list[Action], facts: UnitFacts) -> str | None:
        first = actions[0]
        named = [r for a in actions if a.rank for r in a.rank.split(",")]
        running = self.processes(facts.control_group) if facts.control_group else []
        phases = {r.rank: r.phase.value for r in inv.ranks}
        chosen = targets(named, first.phase, phases, running, self.writer.settings.peers)
        message = "\n".join(dict.fromkeys(a.message for a in actions))
        gpus = [f"{r.rank}: GPU {r.gpu.state} since {time.strftime('%H:%M:%S', time.gmtime(r.gpu.since))} UTC "
                f"(last seen {time.strftime('%H:%M:%S', time.gmtime(r.gpu.seen))}): {r.gpu.text}"
                for r in inv.ranks if r.gpu is not None]
        if gpus:  # what each rank's GPU did, as NVML last showed it (sources/gpu.py)
            message += "\n=== GPUs ===\n" + "\n".join(gpus)
        finding = self.ras(inv.invocation_id)
        if finding is not None:  # the whole report, as RAS sent it
            message += (f"\n=== NCCL RAS at {finding.address}, asked at "
                        f"{time.strftime('%H:%M:%S', time.gmtime(finding.at))} UTC ===\n{finding.words()}\n"
                        f"{finding.report or '(no report)'}")
        xids = self.xids(inv.started_at, inv.stopped_at)
        if xids:
            message += "\n=== XIDs of this start-up (the kernel's lines) ===\n" + "\n".join(
                f"{time.strftime('%H:%M:%S', time.gmtime(at))} UTC PCI {x.pci}: XID {x.code}, {x.text}"
                for at, x in xids)
        culprit = next((gpu for rank in named if (gpu := self.gpu_of(rank)) is not None), None)
        path = self.writer.capture(inv.invocation_id, first.verdict_kind, message, chosen, culprit)
        return str(path) if path is not None else None
