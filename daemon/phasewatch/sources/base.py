"""The shape every input of the daemon has, so that the loop (app.py) treats them alike.

A source names the file descriptors it waits on (`fds()`: none, one, or a pidfd per rank), says when
it wants to be asked next (`next_deadline(now)`, on the monotonic clock; None: only when an fd is
readable), and `collect(now, readable)` returns what it saw: the journal's entries (`JournalBatch`),
which the loop feeds through `Pipeline.feed`, tracker events, which it applies through
`Pipeline.apply` (no source touches the pipeline), the GPUs' faults and NCCL RAS's findings, which
it hands to the judge (judge.py: `Judge.saw_gpu_faults`, `saw_ras`), and the group's restart
requests and the health probe's times, which it puts in the step (`Step.requests`, `Step.probes`)
for the sinks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

from ..records import Event, GroupRestartRequest, JournalRecord, ProbeAnswered
from ..stages.s3_track.snapshot import InvocationView
from ..stages.s4_judge.gpu_fault import GpuFault
from ..stages.s4_judge.ras_culprit import RasFinding


@dataclass(frozen=True)
class Instant:
    """One moment on both clocks: `wall` for what is compared with journal times, `monotonic` for the
    loop's own timers (a wall clock stepped backwards must not delay them)."""

    wall: float
    monotonic: float


@dataclass(frozen=True)
class JournalBatch:
    """Entries read together from the journal (sources/journal/journal_feed.py), fed in order with
    the time they were read at; the loop looks for a new start-up after each batch."""

    records: Sequence[JournalRecord]
    wall: float


@dataclass(frozen=True)
class GpuFaults:
    """The GPUs' reports of faults as they stand at a step (sources/host/gpu_health.py): they replace
    the last ones; the judge judges the start-ups with them."""

    faults: tuple[GpuFault, ...]


Seen = Event | GroupRestartRequest | JournalBatch | GpuFaults | RasFinding | ProbeAnswered  # what collect returns
Current = Callable[[], "InvocationView | None"]  # the start-up the tracker sees now (read only)


class Source(Protocol):
    def fds(self) -> Sequence[int]: ...

    def next_deadline(self, now: Instant) -> float | None: ...

    def collect(self, now: Instant, readable: Sequence[int]) -> Iterable[Seen]: ...
