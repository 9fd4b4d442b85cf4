"""Edge: which rank runs in which process, from the unit's cgroup and the process titles.

Engines title their rank processes (SGLang `sglang::scheduler_DP0_TP3`, vLLM `VLLM::Worker_TP3`;
stages/engines/ reads them); the main process and others keep their command line. A rank whose
process vanishes while the unit is still starting is reported at once (pidfd readable), long
before the engine's own NCCL timeout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


def rank_from_title(cmdline: bytes) -> str | None:
    """The rank a process title (argv[0]) names, as any engine module reads it
    (`sglang::scheduler_DP0_TP3` -> `DP0 TP3`, `VLLM::Worker_TP3` -> `TP3`); None for other processes."""
    from ..stages.engines import rank_from_any_title

    return rank_from_any_title(cmdline.split(b"\0", 1)[0].decode("utf-8", "replace"))


@dataclass(frozen=True)
class RankProcess:
    rank: str
    pid: int


class ProcessTable:
    """Reads a unit's cgroup; `/proc` and the cgroup roots are parameters (tests use fixture trees)."""

    def __init__(self, proc: str = "/proc", cgroup_roots: tuple[str, ...] = CGROUP_ROOTS) -> None:
        self.proc = Path(proc)
        self.cgroup_roots = cgroup_roots

    def pids(self, control_group: str) -> list[int]:
        for root in self.cgroup_roots:
            path = Path(root + control_group) / "cgroup.procs"
            try:
                text = path.read_text()
            except OSError:
                continue
            pids = [int(x) for x in text.split()]
            # Processes in sub-cgroups (a scope or service may nest) count too.
            for child in Path(root + control_group).rglob("cgroup.procs"):
                if child != path:
                    try:
                        pids.extend(int(x) for x in child.read_text().split())
                    except OSError:
                        pass
            return sorted(set(pids))
        return []

    def host_pids(self) -> list[int]:
        """Every process this PID namespace shows (a container sharing the host's namespace included)."""
        try:
            return sorted(int(entry.name) for entry in self.proc.iterdir() if entry.name.isdigit())
        except OSError:
            return []

    def ranks(self, control_group: str, host_wide: bool = False) -> list[RankProcess]:
        """The rank processes in the unit's cgroup; with `host_wide` (a unit that runs its server in a
        container: only the client is in the cgroup), those titled as ranks anywhere when the cgroup
        holds none."""
        found = self._titled(self.pids(control_group))
        if found or not host_wide:
            return found
        return self._titled(self.host_pids())

    def _titled(self, pids: list[int]) -> list[RankProcess]:
        out = []
        for pid in pids:
            try:
                cmdline = (self.proc / str(pid) / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
            rank = rank_from_title(cmdline)
            if rank is not None:
                out.append(RankProcess(rank, pid))
        return out


class RankWatch:
    """Keeps a pidfd per rank process; `fds()` go into the poll set, `dead()` says who exited."""

    def __init__(self) -> None:
        self._by_fd: dict[int, RankProcess] = {}
        self._known: dict[str, int] = {}

    def update(self, seen: list[RankProcess]) -> None:
        for process in seen:
            if self._known.get(process.rank) == process.pid:
                continue
            try:
                fd = os.pidfd_open(process.pid)
            except OSError:
                continue  # already gone: its death was not seen by us, the journal will tell
            self._known[process.rank] = process.pid
            self._by_fd[fd] = process

    def watching(self, ranks: tuple[str, ...]) -> bool:
        """Every one of `ranks` has a live process watched."""
        alive = {process.rank for process in self._by_fd.values()}
        return all(rank in alive for rank in ranks)

    def fds(self) -> list[int]:
        return list(self._by_fd)

    def watches_all(self, pids: Iterable[int]) -> bool:
        """Every one of `pids` is a rank process watched now."""
        watched = {process.pid for process in self._by_fd.values()}
        return all(pid in watched for pid in pids)

    def known_pids(self) -> dict[int, str]:
        """Every rank process seen in this start-up, alive or not: pid -> rank."""
        return {pid: rank for rank, pid in self._known.items()}

    def dead(self, readable: list[int]) -> list[RankProcess]:
        out = []
        for fd in readable:
            process = self._by_fd.pop(fd, None)
            if process is not None:
                os.close(fd)
                out.append(process)
        return out

    def forget(self) -> None:
        """A new invocation: the old processes are no one's concern any more."""
        for fd in self._by_fd:
            os.close(fd)
        self._by_fd.clear()
        self._known.clear()
