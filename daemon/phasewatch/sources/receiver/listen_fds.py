"""Edge: a listening socket passed by systemd (socket activation, sd_listen_fds(3)): the receiver's
port bound by PID 1 before any user can take it (units/phasewatch-receiver@.socket).

systemd passes the sockets as file descriptors 3, 4, ... with LISTEN_PID (this process),
LISTEN_FDS (how many) and LISTEN_FDNAMES (their FileDescriptorName=, colon-separated) in the
environment. The variables are removed once read, so that no child (a hook) takes them for its own.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

logger = logging.getLogger(__name__)

LISTEN_FDS_START = 3
RECEIVER_NAME = "receiver"  # FileDescriptorName= of the socket unit
VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def passed_fds(environ: MutableMapping[str, str], pid: int) -> dict[str, list[int]]:
    """The descriptors passed to process `pid`, by name ("unknown" when unnamed); {} when none.
    The variables are taken out of `environ`."""
    values = {name: environ.pop(name, None) for name in VARIABLES}
    listen_pid, count = values["LISTEN_PID"], values["LISTEN_FDS"]
    if not listen_pid or not count or not listen_pid.isdigit() or int(listen_pid) != pid or not count.isdigit():
        return {}
    names = (values["LISTEN_FDNAMES"] or "").split(":")
    fds: dict[str, list[int]] = {}
    for n in range(int(count)):
        name = names[n] if n < len(names) and names[n] else "unknown"
        fds.setdefault(name, []).append(LISTEN_FDS_START + n)
    return fds


def receiver_socket(environ: MutableMapping[str, str] | None = None, pid: int | None = None) -> socket.socket | None:
    """The listening TCP socket systemd passed for the receiver: named `receiver`, or the only one
    passed without a name; None when there is none (phasewatch then binds the address itself)."""
    fds = passed_fds(os.environ if environ is None else environ, os.getpid() if pid is None else pid)
    chosen = fds.get(RECEIVER_NAME) or (fds.get("unknown") if list(fds) == ["unknown"] else None)
    if not chosen:
        if fds:
            logger.warning("systemd passed sockets named %s; the receiver's is named %s: binding it instead",
                           ", ".join(sorted(fds)), RECEIVER_NAME)
        return None
    try:
        passed = socket.socket(fileno=chosen[0])
    except OSError as exc:
        logger.warning("systemd passed fd %d for the receiver, which is no socket (%s): binding instead",
                       chosen[0], exc)
        return None
    if passed.type != socket.SOCK_STREAM or not passed.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        logger.warning("systemd passed fd %d for the receiver, which is no listening stream socket: binding instead",
                       chosen[0])
        passed.detach()
        return None
    passed.set_inheritable(False)
    return passed
