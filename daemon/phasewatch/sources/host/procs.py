"""Edge: which rank runs in which process, from the unit's cgroup and the process titles.

Engines title their rank processes (SGLang `sglang::scheduler_DP0_TP3`, vLLM `VLLM::Worker_TP3`;
engines/ reads them); the main process and others keep their command line. A rank whose
process vanishes while the unit is still starting is reported at once (pidfd readable), long
before the engine's own NCCL timeout.

A title costs nothing (`exec -a sglang::scheduler_TP3 sleep 900` as any user), so a title alone never
makes a process the unit's: a rank is a process of the unit's cgroup, or with `rank_processes: host`
one of the unit's own users (or root: container runtimes) that began after the start-up did and is the
only process with its title (`ProcessTable.ranks`). A process is told from a later one with its PID by
its start time (`Identity`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

logger = logging.getLogger(__name__)

CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
START_MARGIN = 2.0  # seconds: /proc/stat's btime is whole seconds, a process's start is in clock ticks


def rank_from_title(cmdline: bytes) -> str | None:
    """The rank a process title (argv[0]) names, as any engine module reads it
    (`sglang::scheduler_DP0_TP3` -> `DP0 TP3`, `VLLM::Worker_TP3` -> `TP3`); None for other processes."""
    from ...engines import rank_from_any_title

    return rank_from_any_title(cmdline.split(b"\0", 1)[0].decode("utf-8", "replace"))


@dataclass(frozen=True)
class RankProcess:
    rank: str
    pid: int


@dataclass(frozen=True)
class Identity:
    """One process, told from a later one with its PID: `started` is /proc/PID/stat's starttime (clock
    ticks since boot), `uid` its real uid."""

    pid: int
    started: int
    uid: int


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


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

    def identity(self, pid: int) -> Identity | None:
        """The process `pid` is now; None when it is gone or /proc does not say."""
        entry = self.proc / str(pid)
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
            started = int(stat.rpartition(")")[2].split()[19])  # field 22 of proc(5)
            uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        return Identity(pid, started, uid)

    def started_since(self, wall: float) -> int | None:
        """`wall` (a realtime start) as /proc/PID/stat's starttime, START_MARGIN early; None if unknown."""
        try:
            btime = next(int(line.split()[1]) for line in (self.proc / "stat").read_text().splitlines()
                         if line.startswith("btime "))
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        return max(int((wall - START_MARGIN - btime) * _clock_ticks()), 0)

    def ranks(self, control_group: str, host_wide: bool = False, since: float | None = None) -> list[RankProcess]:
        """The rank processes in the unit's cgroup; with `host_wide` (a unit that runs its server in a
        container: only the client is in the cgroup), when the cgroup holds none, the processes titled
        as ranks anywhere that are the unit's: of a uid of the cgroup's processes (its User=) or root (a
        container runtime), begun after `since` (the start-up's start, wall clock) and each the only one
        with its title. Any other user can title a process as a rank: never one of ours."""
        in_group = self.pids(control_group)
        found = self._titled(in_group)
        if found or not host_wide:
            return found
        owners = {0} | {i.uid for i in map(self.identity, in_group) if i is not None}
        floor = self.started_since(since) if since is not None else None
        believed: dict[str, list[RankProcess]] = {}
        for process in self._titled(self.host_pids()):
            who = self.identity(process.pid)
            if who is None or who.uid not in owners or floor is None or who.started < floor:
                continue
            believed.setdefault(process.rank, []).append(process)
        for rank, processes in believed.items():
            if len(processes) > 1:
                logger.warning("processes %s are all titled as rank %s: none is believed to be it",
                               ", ".join(str(p.pid) for p in processes), rank)
        return [processes[0] for processes in believed.values() if len(processes) == 1]

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
        """Watches the new ones; a process with the title of a rank that already has a live process is
        not that rank, nor is a later one after its death (ranks do not respawn within a start-up: a second
        one is someone's copy)."""
        for process in seen:
            if process.rank in self._known:
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
