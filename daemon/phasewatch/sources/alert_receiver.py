"""Alertmanager's webhook receiver (config `group.receiver`, off unless set): the group's decision
comes in here. Its own listener, in a thread of its own; each request is bounded in time and size.

Accepted: `POST /alertmanager` with `Authorization: Bearer <token>` (the token file's content,
Alertmanager's `http_config.authorization.credentials_file`), a JSON notification (version 4) with
at least one PhasewatchGroupRestart of this node's group. Everything else is refused and counted by
reason (phasewatch_group_webhook_refused_total): no_token, bad_token, method, path, too_large,
bad_payload, other_group, timeout, tls, busy, error. An accepted notification's firing alerts become
`GroupRestartRequest`s, handed to the loop through a pipe (`fds()`), taken by `take()`; the responder
decides (stages/s5_act/group_decision.py).
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import ssl
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..config import Config
from ..config_sections import Group, GroupReceiver
from ..errors import ConfigError
from ..records import Event, GroupRestartRequest
from ..stages.s5_act.group_decision import NotificationError, parse_notification
from .base import Instant

logger = logging.getLogger(__name__)

PATH = "/alertmanager"
MAX_BODY = 1 << 20  # a notification of hundreds of alerts is a few hundred KB
READ_TIMEOUT = 5.0
MAX_CONNECTIONS = 8


def read_token(receiver: GroupReceiver) -> bytes:
    """The bearer token: the file's first line (raises ConfigError: the daemon does not start without it,
    nor with a file others may read: config_trust.check_token_file)."""
    from ..config_trust import check_token_file

    check_token_file(receiver.token_file)
    try:
        with open(receiver.token_file, "rb") as handle:
            lines = handle.read(8192).splitlines()
    except OSError as exc:
        raise ConfigError("group.receiver.token_file", f"cannot read the token: {exc}") from None
    token = lines[0].strip() if lines else b""
    if len(token) < 16 or len(token) > 4096:
        raise ConfigError("group.receiver.token_file", "the token must be 16 to 4096 characters on the first line")
    return token


class AlertReceiver:
    """The listener and the requests it took in, for the daemon's loop."""

    def __init__(self, unit: str, group: Group, receiver: GroupReceiver, token: bytes) -> None:
        self.unit, self.group = unit, group
        self._token = token
        self._lock = threading.Lock()
        self._pending: list[GroupRestartRequest] = []
        self._counts: dict[str, dict[str, int]] = {"refused": {}, "accepted": {}, "acts": {}}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        host, _, port = receiver.listen.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0]
        context = None
        if receiver.tls_cert and receiver.tls_key:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(receiver.tls_cert, receiver.tls_key)
        self._httpd = _Server((host, int(port)), family, self, context)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 3600},
                                        name="phasewatch-alert-receiver", daemon=True)
        self._thread.start()
        logger.info("[%s] group %s: Alertmanager webhook on %s://%s%s", unit, group.name,
                    "https" if context else "http", receiver.listen, PATH)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    # -- the loop's side --------------------------------------------------------------------------
    def fds(self) -> Sequence[int]:
        return (self._wake_r,)

    def next_deadline(self, now: Instant) -> float | None:
        return None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        return []  # (no tracker events: the requests go to the responder, take())

    def take(self) -> list[GroupRestartRequest]:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            taken, self._pending = self._pending, []
        return taken

    def handled(self, act: str) -> None:
        self._count("acts", act)

    def counts(self) -> Mapping[str, Mapping[str, int]]:
        with self._lock:
            return {what: dict(by) for what, by in self._counts.items()}

    def close(self) -> None:
        threading.Thread(target=self._httpd.shutdown, daemon=True).start()
        self._httpd.server_close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- the server threads' side -----------------------------------------------------------------
    def _count(self, what: str, reason: str) -> None:
        with self._lock:
            self._counts[what][reason] = self._counts[what].get(reason, 0) + 1

    def refused(self, reason: str, peer: str) -> None:
        self._count("refused", reason)
        logger.warning("[%s] webhook request from %s refused: %s", self.unit, peer, reason)

    def authorized(self, header: str | None) -> str | None:
        """None when the header carries the token; else the refusal's reason."""
        if not header or not header.startswith("Bearer "):
            return "no_token"
        given = header[len("Bearer "):].strip().encode("utf-8", "replace")
        return None if hmac.compare_digest(given, self._token) else "bad_token"

    def accept(self, body: bytes) -> tuple[int, str]:
        try:
            notification = parse_notification(body, self.group.name)
        except NotificationError as exc:
            return 400, f"bad_payload: {exc}"
        if not notification.requests and notification.other_groups:
            return 403, "other_group"
        if notification.other_groups:
            self._count("refused", "other_group")
        self._count("accepted", "")
        if notification.requests:
            with self._lock:
                self._pending.extend(notification.requests)
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # (the loop is woken already)
        return 200, "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: AlertReceiver,
                 context: ssl.SSLContext | None) -> None:
        self.address_family = family
        self.owner, self.context = owner, context
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.owner.refused("busy", str(client_address[0]))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(READ_TIMEOUT)
            if self.context is not None:
                try:
                    request = self.context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    self.owner.refused("tls", str(client_address[0]))
                    request.close()
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.owner.refused("error", str(client_address[0]))  # (a reset, a read past READ_TIMEOUT)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"
    timeout = READ_TIMEOUT

    def _answer(self, status: int, text: str, reason: str | None = None) -> None:
        if reason is not None:
            self.server.owner.refused(reason, self.client_address[0])
        body = (text + "\n").encode()
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="phasewatch"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        owner = self.server.owner
        if self.path != PATH:
            return self._answer(404, "not found", "path")
        problem = owner.authorized(self.headers.get("Authorization"))
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
        except (TimeoutError, OSError):
            return self._answer(408, "timeout", "timeout")
        if len(body) != length:
            return self._answer(400, "short body", "bad_payload")
        status, text = owner.accept(body)
        reason = None if status == 200 else text.split(":", 1)[0]
        return self._answer(status, text, reason)

    def _refuse_method(self) -> None:
        self._answer(405, "method not allowed", "method")

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _refuse_method  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass


def start_receiver(config: Config) -> AlertReceiver | None:
    """The group's receiver when the config asks for one. A token that cannot be read stops the daemon
    (ConfigError); an address that cannot be bound is logged: the node runs on, judging and alerting,
    without group restarts."""
    group = config.group
    if group is None or group.receiver is None:
        return None
    token = read_token(group.receiver)
    try:
        return AlertReceiver(config.unit, group, group.receiver, token)
    except (OSError, ValueError, ssl.SSLError) as exc:
        logger.error("[%s] group %s: cannot listen for Alertmanager on %s (%s); no group restart on this node",
                     config.unit, group.name, group.receiver.listen, exc)
        return None
