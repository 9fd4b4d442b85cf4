"""A judgement of a start-up (policy.py makes them; group_wait.py, respond.py and the sinks read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...records import VerdictKind
from ..s2_interpret.crashfacts import CrashFacts
from .remedies import Remedy


class MemoryKey(NamedTuple):
    """One thing done once about a verdict, as the responder's memory holds it and the state file
    keeps it (its four fields, a tuple: a state file's keys are read back as equal tuples): the
    start-up, what was done, and which verdict of its kind (`which`, `detail`: Verdict.key says how)."""

    invocation_id: str
    what: str  # the verdict's kind (its alert), `evidence:KIND`, `hook:NAME:KIND`, or `restart_refused`
    which: str | None
    detail: str | None

    def evidence(self) -> MemoryKey:
        """The verdict's evidence captured (of an alert's key)."""
        return self._replace(what=f"evidence:{self.what}")

    def of_hook(self, name: str) -> MemoryKey:
        """Hook `name` run for the verdict (of an alert's key)."""
        return self._replace(what=f"hook:{name}:{self.what}")

    @classmethod
    def refused_restart(cls, invocation_id: str) -> MemoryKey:
        """The alert that a restart of the start-up was refused (restart_gate.py)."""
        return cls(invocation_id, "restart_refused", None, None)


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    invocation_id: str
    phase: str | None
    rank: str | None
    cause: str | None
    message: str
    at: float
    episode: int = 0  # unhealthy: which run of failed probes
    facts: CrashFacts | None = None  # crashed: healthy, waiting and culprit ranks named in the lines
    remedy: Remedy | None = None  # what to do about it (remedies.py), when the facts say
    quote: str | None = None  # crashed: the log line the message quotes (credentials masked, stages/s4_judge/redact.py)
    gpu_action: str | None = None  # gpu_fault: what the GPU needs (xid_table.ACTIONS); the restart gate reads it
    gpu_blocks: bool = False  # gpu_fault: no restart onto that GPU (reset_gpu, reboot, drain; not the app's fault)
    gpu: str | None = None  # gpu_fault: the GPU (`GPU 3 (PCI 0000:3b:00)`), known before its rank may be

    @property
    def key(self) -> MemoryKey:
        """Same key, same verdict: a loop acts on a key once. A start-up crashes once, whichever
        rank later lines show to be the culprit. A GPU's fault once per GPU and cause, whether or not
        its rank is known yet and whatever phase the rank moves to; a worse fault later is a new one."""
        if self.kind in (VerdictKind.CRASHED, VerdictKind.LINES_LOST):
            return MemoryKey(self.invocation_id, self.kind, None, None)
        if self.kind == VerdictKind.UNHEALTHY:
            return MemoryKey(self.invocation_id, self.kind, None, f"episode {self.episode}")
        if self.kind == VerdictKind.GPU_FAULT:
            return MemoryKey(self.invocation_id, self.kind, self.gpu or self.rank, self.cause)
        return MemoryKey(self.invocation_id, self.kind, self.rank, self.phase)
