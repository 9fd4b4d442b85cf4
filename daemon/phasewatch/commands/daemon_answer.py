"""`phasewatch status` asking the daemon: one bounded GET of /status (sinks/http.py serves it).

Whatever listens on `metrics.listen` may not be phasewatch (a local user can bind the port before
the daemon starts). So: the listening socket's owner (/proc/net/tcp) must be root, the phasewatch
user or the user asking (`check_owner`, after the answer's own checks); the whole exchange has one
deadline (not one per read: a peer trickling a byte every half second is cut off) and the answer a
size cap. A breach of any is ForeignDaemon (exit 4); nothing listening is None (the journal is read
instead).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from ..config.file_trust import trusted_owners
from ..config.instances import watcher_names, watcher_of
from ..config.load import Config
from ..durations import shown
from ..errors import ForeignDaemon
from ..sinks.peers import listener_owner

TOTAL_DEADLINE = 3.0  # seconds for connect, request and the whole answer
DAEMON_TIMEOUT = 1.0
LIVE_STATES = frozenset({"activating", "active", "reloading"})
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


def status_url(listen: str) -> str:
    """`http://HOST:PORT/status`; a wildcard listen address is asked on loopback."""
    host, _, port = listen.rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}.get(host, host)
    return f"http://{host}:{port}/status"


def daemon_invocation(unit: str) -> str | None:
    """The InvocationID of systemd's phasewatch@NAME.service while it runs (NAME: the unit's name
    without `.service`, or with it in the older form); None when it does not, or
    when systemd cannot be asked (a daemon started by hand is then checked by its document only)."""
    from ..errors import UnitError
    from ..systemd_unit import SystemdUnit

    for watcher in watcher_names(unit):  # phasewatch@sglang-kimi.service, or the older long form
        try:
            facts = SystemdUnit(watcher).facts()
        except UnitError:
            return None
        if facts.active_state in LIVE_STATES:
            return facts.invocation_id
    return None


def ask_daemon(config: Config, timeout: float = DAEMON_TIMEOUT,
               expected_invocation: Callable[[str], str | None] = daemon_invocation) -> dict[str, Any] | None:
    """The daemon's `/status` document; None when nothing answers on metrics.listen. ForeignDaemon
    when something answers that is not this unit's daemon (another unit's, another user's process
    that took the port first, one too slow or too big: commands/daemon_answer.py): its document is
    never shown as this unit's state."""
    url = status_url(config.metrics_listen)
    answer = get(url, deadline=max(timeout, TOTAL_DEADLINE))
    if answer is None:
        return None
    status_code, body = answer
    try:
        document = json.loads(body) if status_code == 200 else None
    except ValueError:
        document = None
    if not isinstance(document, dict) or not isinstance(document.get("daemon"), dict):
        raise ForeignDaemon(f"{url} answers (HTTP {status_code}), but not with a phasewatch /status")
    if document.get("unit") != config.unit:
        raise ForeignDaemon(f"{url} is the phasewatch daemon of {shown(document.get('unit'))}, not of {config.unit}")
    claimed = document["daemon"].get("invocation_id")
    expected = expected_invocation(config.unit)
    if expected is not None and claimed != expected:
        raise ForeignDaemon(f"{url} names daemon invocation {shown(claimed)}, but "
                            f"{watcher_of(config.unit)} runs as invocation {expected}")
    check_owner(url)  # last: an answer that copies both the unit and the invocation passes the above
    document.setdefault("source", "daemon")
    return document
