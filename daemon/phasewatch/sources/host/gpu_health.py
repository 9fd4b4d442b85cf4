"""Source: the GPUs' own reports of faults, for the `gpu_fault` verdict (stages/s4_judge/gpu_fault.py).

- The driver's XID lines (`NVRM: Xid (PCI:0000:3b:00): 79, ...`) from the kernel's entries in the
  journal: a reader of its own matching the trusted `_TRANSPORT=kernel` (journald sets it for
  /dev/kmsg only; a unit's own line saying the same text has `_TRANSPORT=stdout` or `journal` and is
  never read here), from STARTUP_LOOKBACK before the daemon started, at most READ_LIMIT entries a
  step, the last MAX_XIDS kept.
- NVML's health of each GPU (the NVML worker's, sources/host/gpu.py) and its PCI addresses.
- Which rank uses which GPU: the vitals' GPU contexts of each rank's processes (signs_of_life.py).

Each step `collect` returns the faults seen (`GpuFaults`); the loop hands them to the judge, which
judges them with the start-up they fall in. Needs read access to the system journal's kernel entries (the
systemd-journal group, as for the unit's lines) and, for NVML, what gpu.py needs.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Sequence

from ...errors import JournalError
from ...profile.xid_table import XidLine, parse_xid, xid_table
from ...stages.s3_track.snapshot import InvocationView
from ...stages.s4_judge.gpu_fault import GpuFault, nvml_faults, xid_fault
from ..base import GpuFaults, Instant
from ..journal.journal_reader import INVALIDATE, _open_reader
from .gpu import NvmlSource
from .signs_of_life import SignsOfLifeSource

logger = logging.getLogger(__name__)

STARTUP_LOOKBACK = 3600.0  # kernel entries read back at the daemon's start
READ_LIMIT = 1000  # kernel entries looked at per step
MAX_XIDS = 256  # the last XIDs kept
MARK = b"NVRM: Xid"


class KernelXids:
    """The kernel's XID lines, followed in the journal (trusted `_TRANSPORT=kernel` only)."""

    def __init__(self, directory: str | None = None, since: float | None = None) -> None:
        self.directory = directory
        self.xids: collections.deque[tuple[float, XidLine]] = collections.deque(maxlen=MAX_XIDS)
        self.behind = False
        self.cursor: str | None = None
        self._reader: Any = None
        self._since = since

    def open(self) -> None:
        reader = _open_reader(self.directory)
        reader.data_threshold = 0
        reader.add_match("_TRANSPORT=kernel")
        if self.cursor is not None:
            reader.seek_cursor(self.cursor)
            reader._next()  # (the entry read last)
        elif self._since is not None:
            reader.seek_realtime(int(max(self._since, 0) * 1_000_000))
        else:
            reader.seek_tail()
        self._reader = reader

    def fileno(self) -> int | None:
        return self._reader.fileno() if self._reader is not None else None

    def read(self, readable: Sequence[int]) -> list[tuple[float, XidLine]]:
        """The XIDs logged since the last read (at most READ_LIMIT entries looked at)."""
        reader = self._reader
        if reader is None:
            return []
        try:
            if reader.fileno() in readable and reader.process() == INVALIDATE:
                reader.close()
                self.open()
                reader = self._reader
            return self._read(reader)
        except OSError as exc:  # a file rotated or vacuumed under it: reopened at the cursor next time
            logger.warning("kernel XID lines: %s; reopening the journal", exc)
            try:
                reader.close()
                self.open()
            except (OSError, JournalError):
                self._reader = None
            return []

    def _read(self, reader: Any) -> list[tuple[float, XidLine]]:
        found = []
        self.behind = True
        for _ in range(READ_LIMIT):
            if not reader._next():
                self.behind = False
                break
            self.cursor = reader._get_cursor()
            try:
                if reader._get("_TRANSPORT") != b"kernel":
                    continue
                message = reader._get("MESSAGE")
            except KeyError:
                continue
            if MARK not in message:
                continue
            line = parse_xid(message.decode("utf-8", "replace"))
            if line is not None:
                found.append((reader._get_realtime() / 1e6, line))
        self.xids.extend(found)
        return found


def gpu_ranks(signs: SignsOfLifeSource) -> Callable[[], dict[int, str]]:
    """NVML index -> the rank whose processes hold a context on it, as the last vitals saw it."""
    def ranks() -> dict[int, str]:
        vitals = signs.vitals
        return {r.gpu.index: r.rank for r in (vitals.ranks if vitals is not None else ()) if r.gpu is not None}
    return ranks


class GpuHealthSource:
    def __init__(self, current: Callable[[], InvocationView | None], gpu_ranks: Callable[[], dict[int, str]],
                 nvml: NvmlSource | None, kernel: KernelXids | None) -> None:
        self.current = current
        self.gpu_ranks = gpu_ranks  # NVML index -> rank, as the vitals last saw it
        self.nvml = nvml
        self.kernel = kernel
        self.ranks: dict[int, str] = {}  # kept over the start-up: a crashed rank's GPU is still its
        self.invocation: str | None = None
        self.said: str | None = None
        if kernel is not None:
            try:
                kernel.open()
            except (OSError, JournalError) as exc:
                logger.warning("kernel XID lines not read: %s", exc)
                self.kernel = None

    def carrying(self, old: GpuHealthSource | None) -> GpuHealthSource:
        """This source (built without `kernel`, for a reloaded config's vitals) with `old`'s kernel reader,
        open already, and the ranks' GPUs it knew."""
        if old is not None:
            self.kernel, self.ranks, self.invocation, self.said = old.kernel, old.ranks, old.invocation, old.said
        return self

    def fds(self) -> Sequence[int]:
        fd = self.kernel.fileno() if self.kernel is not None else None
        return (fd,) if fd is not None else ()

    def next_deadline(self, now: Instant) -> float | None:
        return now.monotonic if self.kernel is not None and self.kernel.behind else None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[GpuFaults]:
        if self.kernel is not None:
            for _, line in self.kernel.read(readable):
                logger.warning("GPU PCI %s: XID %d in the kernel's lines: %s", line.pci, line.code, line.text)
        inv = self.current()
        invocation = inv.invocation_id if inv is not None else None
        if invocation != self.invocation:
            self.invocation, self.ranks = invocation, {}
        self.ranks.update(self.gpu_ranks())
        return [GpuFaults(tuple(self.faults(now.wall)))]

    def faults(self, now: float) -> list[GpuFault]:
        pci = self.nvml.pci_addresses() if self.nvml is not None else {}
        by_pci = {address: index for index, address in pci.items()}
        table = xid_table()
        out = [xid_fault(line, at, table, by_pci, self.ranks)
               for at, line in (self.kernel.xids if self.kernel is not None else ())]
        for index, health in (self.nvml.health() if self.nvml is not None else {}).items():
            out.extend(nvml_faults(health, now, pci.get(index), self.ranks.get(index)))
        return out

    def gpu_of(self, rank: str) -> int | None:
        """The NVML index of the GPU `rank` holds in this start-up (a gpu_fault's `GPU 3` is GPU 3)."""
        if rank.startswith("GPU ") and rank[4:].isdigit():
            return int(rank[4:])
        return next((index for index, holder in self.ranks.items() if holder == rank), None)

    def xids_between(self, began: float | None, end: float | None) -> list[tuple[float, XidLine]]:
        """The XIDs logged within a start-up (the evidence's)."""
        if self.kernel is None:
            return []
        return [(at, x) for at, x in self.kernel.xids if (began is None or at >= began - 60)
                and (end is None or at <= end)]
