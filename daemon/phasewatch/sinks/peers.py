"""Edge: who is at the other end of a TCP connection to the metrics listener, for the per-peer limit
(sinks/http.py) and for whether /status may show it the log lines it quotes (may_read_journal). A
loopback peer is a local user: its socket's owner, from /proc/net/tcp (or tcp6) of this network
namespace, the line whose local address is the peer's address. A remote peer is its address. So one
local user (every local user connects from 127.0.0.1) cannot take every slot.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from pathlib import Path

PROC_NET = Path("/proc/net")


def kernel_address(host: str, port: int) -> str:
    """`127.0.0.1`, 40000 -> `0100007F:9C40`, as /proc/net/tcp writes a socket's address (each 32-bit
    word of the address in host byte order, here little-endian)."""
    packed = socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    words = "".join(packed[i:i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def socket_owner(host: str, port: int, proc_net: Path = PROC_NET) -> int | None:
    """The uid owning the local socket bound to host:port; None when not found."""
    wanted = kernel_address(host, port)
    for name in ("tcp6", "tcp") if ":" in host else ("tcp", "tcp6"):
        try:
            with open(proc_net / name, encoding="ascii", errors="replace") as table:
                next(table, None)
                for line in table:
                    fields = line.split()
                    if len(fields) > 7 and fields[1] == wanted and fields[7].isdigit():
                        return int(fields[7])
        except OSError:
            continue
    return None


Address = tuple[str, int] | tuple[str, int, int, int]


def peer_uid(address: Address, proc_net: Path = PROC_NET) -> int | None:
    """The uid of a loopback peer whose socket is found; None for any other peer."""
    host, port = str(address[0]), int(address[1])
    try:
        loopback = ipaddress.ip_address(host.split("%", 1)[0]).is_loopback or host.startswith("::ffff:127.")
    except ValueError:
        loopback = False
    return socket_owner(host, port, proc_net) if loopback else None


def key_of(address: Address, uid: int | None) -> str:
    """`uid 65534` for a peer whose uid is known (peer_uid), else `host 10.0.0.7`."""
    return f"uid {uid}" if uid is not None else f"host {address[0]}"


def peer_key(address: Address, proc_net: Path = PROC_NET) -> str:
    """`uid 65534` for a loopback peer whose socket is found, else `host 10.0.0.7`."""
    return key_of(address, peer_uid(address, proc_net))


# Who may read the unit's journal, so may read the log lines /status quotes: root, phasewatch itself, and
# the groups journald's files grant: `systemd-journal` (their group) and `adm` (the ACL that systemd's
# tmpfiles.d/systemd.conf sets on Debian and Ubuntu; upstream adds `wheel`, a group Debian does not have).
JOURNAL_GROUPS = frozenset({"systemd-journal", "adm"})


def groups_of(uid: int) -> frozenset[str]:
    """The names of the groups of the user `uid` in the user database (its own and supplementary);
    empty for a uid without a passwd entry."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
        gids = os.getgrouplist(user.pw_name, user.pw_gid)
    except (KeyError, OSError):
        return frozenset()
    names = set()
    for gid in gids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return frozenset(names)


def may_read_journal(uid: int | None, own_uid: int,
                     groups: Callable[[int], frozenset[str]] = groups_of) -> bool:
    """Whether the peer `uid` (None: remote, or not found) may read what the unit's journal says:
    root, the daemon's own user, or a member of a JOURNAL_GROUPS group."""
    if uid is None:
        return False
    return uid in (0, own_uid) or bool(groups(uid) & JOURNAL_GROUPS)


LISTEN = "0A"  # /proc/net/tcp's state of a listening socket


def listener_owner(host: str, port: int, proc_net: Path = PROC_NET) -> int | None:
    """The uid owning the socket that listens on host:port (or on the wildcard address with that
    port) in this network namespace; None when none is found."""
    v6 = ":" in host
    wanted = {kernel_address(host, port), kernel_address("::" if v6 else "0.0.0.0", port)}
    if not v6:  # an IPv6 wildcard socket takes IPv4 connections too
        wanted.add(kernel_address("::", port))
    for name in ("tcp", "tcp6"):
        try:
            with open(proc_net / name, encoding="ascii", errors="replace") as table:
                next(table, None)
                for line in table:
                    fields = line.split()
                    if len(fields) > 7 and fields[3] == LISTEN and fields[1] in wanted and fields[7].isdigit():
                        return int(fields[7])
        except OSError:
            continue
    return None
