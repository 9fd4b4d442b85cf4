"""Edge: which process listens on a TCP port, as phasewatch's user can see it (/proc/net/tcp and
tcp6 give the socket's inode, /proc/PID/fd the process holding it; another user's process shows
its listening socket but not its fds, so only "another user's process" is said of it). For the
port_in_use remedy (stages/s4_judge/remedies.py: the fact `host.port_holder`). Bounded: at most MAX_PIDS
processes are looked into."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"  # the state column of a listening socket
MAX_PIDS = 4096


def _listening_inodes(proc: Path, ports: set[int]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            rows = (proc / "net" / name).read_text("ascii", "replace").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            try:
                port = int(fields[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if port in ports:
                found[fields[9]] = port
    return found


def port_holders(ports: Iterable[int], proc: Path = Path("/proc")) -> dict[int, str]:
    """port -> "COMM (pid N)" of the process listening on it, or "another user's process"."""
    wanted = {p for p in ports if 0 < p < 65536}
    inodes = _listening_inodes(proc, wanted) if wanted else {}
    holders = {port: "another user's process" for port in inodes.values()}
    if not inodes:
        return holders
    sockets = {f"socket:[{inode}]": port for inode, port in inodes.items()}
    pids = [p for p in os.listdir(proc) if p.isdigit()][:MAX_PIDS]
    for pid in pids:
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:
            continue  # another user's, or gone
        for fd in fds:
            try:
                port = sockets.get(os.readlink(proc / pid / "fd" / fd))
            except OSError:
                continue
            if port is not None:
                try:
                    comm = (proc / pid / "comm").read_text("utf-8", "replace").strip()
                except OSError:
                    comm = "?"
                holders[port] = f"{comm} (pid {pid})"
    return holders
