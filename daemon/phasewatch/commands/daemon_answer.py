"""`phasewatch status` asking the daemon: one bounded GET of /status (sinks/http.py serves it).

Whatever listens on `metrics.listen` may not be phasewatch (a local user can bind the port before
the daemon starts). So: the listening socket's owner (/proc/net/tcp) must be root, the phasewatch
user or the user asking (`check_owner`, after the answer's own checks); the whole exchange has one
deadline (not one per read: a peer trickling a byte every half second is cut off) and the answer a
size cap. A breach of any is ForeignDaemon (exit 4); nothing listening is None (the journal is read
instead).
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from ..config_trust import trusted_owners
from ..errors import ForeignDaemon
from ..sinks.peers import listener_owner

TOTAL_DEADLINE = 3.0  # seconds for connect, request and the whole answer
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a /status of 16384 ranks is a few MB

def check_owner(url: str, owners: set[int] | None = None) -> None:
    """ForeignDaemon when the socket listening at `url` belongs to an untrusted uid (a squatter can
    copy the unit's name and the daemon's InvocationID into its answer, not the socket's owner)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    owner = listener_owner(host, port)
    if owner is not None and owner not in (trusted_owners() if owners is None else owners):
        raise ForeignDaemon(f"{host}:{port} is held by a process of uid {owner}, not by phasewatch (or root)")


def get(url: str, deadline: float = TOTAL_DEADLINE, cap: int = MAX_ANSWER_BYTES) -> tuple[int, bytes] | None:
    """(HTTP status, body) of GET `url`; None when nothing listens there."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    end = time.monotonic() + deadline
    try:
        connection = socket.create_connection((host, port), timeout=deadline)
    except OSError:
        return None
    received = bytearray()
    with connection:
        try:
            connection.sendall(f"GET {parts.path or '/'} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
                               "Connection: close\r\n\r\n".encode("ascii"))
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise ForeignDaemon(f"{url} did not answer within {deadline:g}s: not a phasewatch daemon")
                connection.settimeout(left)
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
                if len(received) > cap + 65536:
                    raise ForeignDaemon(f"{url} answers more than {cap // (1024 * 1024)} MiB: not a phasewatch "
                                        "daemon")
        except TimeoutError:
            raise ForeignDaemon(f"{url} did not answer within {deadline:g}s: not a phasewatch daemon") from None
        except OSError:
            if not received:
                return None
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
    return status, body
