"""The HTTP side of the Alertmanager webhook receiver (sources/receiver/alert_receiver.py): one listening
socket, one thread per connection, each connection bounded.

A connection gets a slot from the receiver's gate (sources/receiver/receiver_gate.py) or is answered
`503 Service Unavailable` with `Retry-After` at once (TLS: closed, a handshake would need a thread of
its own). It then has READ_TIMEOUT for each read and CONNECTION_DEADLINE for the whole request,
TLS handshake included: at the deadline one thread of the listener (`Deadlines`) cuts it off,
however slowly its bytes trickle in.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

logger = logging.getLogger(__name__)

PATH = "/alertmanager"
MAX_BODY = 1 << 20  # a notification of hundreds of alerts is a few hundred KB
READ_TIMEOUT = 5.0
CONNECTION_DEADLINE = 10.0  # a notification arrives in milliseconds; 10 s is ample
RETRY_AFTER = 5
BUSY = (f"HTTP/1.0 503 Service Unavailable\r\nRetry-After: {RETRY_AFTER}\r\nContent-Type: text/plain; charset=utf-8"
        f"\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n").encode()
BUSY_LINGER = 1.0  # a refused connection is closed this long after its answer (its request may still come)
MAX_LINGERING = 64  # refused connections waiting to be closed (beyond: closed at once)


class Owner(Protocol):
    """What the listener asks of the receiver."""

    deadline: float

    def peer_of(self, address: Any) -> str: ...

    def admit(self, peer: str) -> bool: ...

    def release(self, peer: str) -> None: ...

    def refused(self, reason: str, peer: str) -> None: ...

    def authorized(self, header: str | None, peer: str) -> str | None: ...

    def accept(self, body: bytes) -> tuple[int, str]: ...


class Deadlines:
    """One thread that runs each `what` at its time (monotonic) unless cancelled first."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._due: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="phasewatch-receiver-deadlines", daemon=True)
        self._thread.start()

    def add(self, at: float, what: Callable[[], None]) -> int:
        """`what` runs at `at`; once stopped, at once (nothing would run it later: a socket handed in
        while the listener closes is closed, not left to the collector)."""
        with self._wake:
            if not self._stopped:
                key = next(self._keys)
                self._due[key] = what
                heapq.heappush(self._heap, (at, key))
                self._wake.notify()
                return key
        try:
            what()
        except OSError:
            pass
        return -1

    def cancel(self, key: int) -> None:
        with self._wake:
            self._due.pop(key, None)

    def pending(self) -> int:
        with self._wake:
            return len(self._due)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._wake.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    due = list(self._due.values())
                    self._due.clear()
                else:
                    _, key = heapq.heappop(self._heap)
                    what = self._due.pop(key, None)
                    due = [what] if what is not None else []
            for what in due:
                try:
                    what()
                except OSError:
                    pass
            if self._stopped:
                return


@dataclass
class Connection:
    """One connection being served: its socket (the TLS one once wrapped), for the deadline to cut."""

    sock: socket.socket
    peer: str
    cut: bool = False
    answered: bool = False
    counted: bool = field(default=False)

    def cut_off(self) -> None:
        self.cut = True
        socket.socket.shutdown(self.sock, socket.SHUT_RDWR)  # (also the SSLSocket's own descriptor)


def unmapped(address: tuple[Any, ...]) -> tuple[Any, ...]:
    """An IPv4 peer of a dual-stack socket (`::ffff:127.0.0.1`, as systemd's ListenStream=9878 gives)
    as IPv4: /proc/net/tcp, not tcp6, holds its socket."""
    host = str(address[0])
    if host.lower().startswith("::ffff:") and "." in host:
        return (host[7:], *address[1:2])
    return address


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: Owner,
                 context: ssl.SSLContext | None, listening: socket.socket | None = None) -> None:
        self.address_family = listening.family if listening is not None else family
        self.owner, self.context = owner, context
        self.deadlines = Deadlines()
        super().__init__(address, _Handler, bind_and_activate=listening is None)
        if listening is not None:  # passed by systemd: bound and listening already
            self.socket.close()
            self.socket = listening
            self.server_address = listening.getsockname()

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.stop()

    def process_request(self, request: Any, client_address: Any) -> None:
        peer = self.owner.peer_of(unmapped(client_address)) if isinstance(client_address, tuple) else "unknown"
        if not self.owner.admit(peer):
            self.owner.refused("busy", peer)
            self._busy(request)
            return
        try:
            super().process_request(request, (client_address, Connection(request, peer)))
        except BaseException:
            self.owner.release(peer)
            raise

    def _busy(self, request: socket.socket) -> None:
        if self.context is not None or self.deadlines.pending() >= MAX_LINGERING:
            self.shutdown_request(request)
            return
        try:
            request.setblocking(False)
            request.send(BUSY)  # (a fresh socket's send buffer takes it whole)
            request.shutdown(socket.SHUT_WR)
        except OSError:
            self.shutdown_request(request)
            return
        self.deadlines.add(time.monotonic() + BUSY_LINGER, request.close)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        address, conn = client_address
        key = self.deadlines.add(time.monotonic() + self.owner.deadline, conn.cut_off)
        try:
            request.settimeout(READ_TIMEOUT)
            if self.context is not None:
                try:
                    request = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                    conn.sock = request
                    request.do_handshake()
                except (ssl.SSLError, OSError):
                    self._count(conn, "timeout" if conn.cut else "tls")
                    return
            try:
                _Handler(request, (address[0], conn), self)
            except TimeoutError:
                self._count(conn, "timeout")
            except OSError:
                self._count(conn, "timeout" if conn.cut else "error")
            except Exception as exc:  # a bug must not end the listener
                self._count(conn, "error")
                logger.error("webhook: a request failed: %r", exc)
            if conn.cut and not conn.answered:
                self._count(conn, "timeout")
        finally:
            self.deadlines.cancel(key)
            self.shutdown_request(request)
            self.owner.release(conn.peer)

    def _count(self, conn: Connection, reason: str) -> None:
        if not conn.counted:
            conn.counted = True
            self.owner.refused(reason, conn.peer)


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.0"
    timeout = READ_TIMEOUT

    def setup(self) -> None:
        given: Any = self.client_address  # (host, Connection): see process_request_thread
        self.conn: Connection = given[1]
        super().setup()

    def address_string(self) -> str:
        return self.conn.peer

    def _answer(self, status: int, text: str, reason: str | None = None) -> None:
        if reason is not None:
            self.conn.counted = True
            self.server.owner.refused(reason, self.conn.peer)
        body = (text + "\n").encode()
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="phasewatch"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.conn.answered = True

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        owner = self.server.owner
        if self.path != PATH:
            return self._answer(404, "not found", "path")
        problem = owner.authorized(self.headers.get("Authorization"), self.conn.peer)
        if problem is not None:
            return self._answer(401, "unauthorized", problem)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._answer(411, "length required", "bad_payload")
        if length < 0 or length > MAX_BODY:
            return self._answer(413, "too large", "too_large")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            return self._answer(408, "timeout", "timeout")
        if len(body) != length:
            if self.conn.cut:
                return None  # (counted as timeout)
            return self._answer(400, "short body", "bad_payload")
        status, text = owner.accept(body)
        reason = None if status == 200 else text.split(":", 1)[0]
        return self._answer(status, text, reason)

    def _refuse_method(self) -> None:
        self._answer(405, "method not allowed", "method")

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _refuse_method  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass
