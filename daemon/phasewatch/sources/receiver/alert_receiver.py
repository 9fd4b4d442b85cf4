"""Alertmanager's webhook receiver (config `group.receiver`, off unless set): the group's decision
comes in here. Its own listener, in a thread of its own (sources/receiver/receiver_http.py); each connection
is bounded in time (CONNECTION_DEADLINE for the whole request) and in size, and their number is
bounded per peer, with slots kept for the peers that presented the token (sources/receiver/receiver_gate.py).

Accepted: `POST /alertmanager` with `Authorization: Bearer <token>` (the token file's content,
Alertmanager's `http_config.authorization.credentials_file`), a JSON notification (version 4) with
at least one PhasewatchGroupRestart of this node's group. Everything else is refused and counted by
reason (phasewatch_group_webhook_refused_total), and logged at most once a minute per reason:
no_token, bad_token, method, path, too_large, bad_payload, other_group, timeout, tls, busy (answered
503), error. An accepted notification's firing alerts become `GroupRestartRequest`s, handed to the
loop through a pipe (`fds()`), taken by `take()`; the group sink (sinks/acting/group.py) decides
(stages/s5_act/group_decision.py).

The listening socket is the one systemd passed (units/phasewatch-receiver@.socket: bound by PID 1
before any user can), else `group.receiver.listen` bound here. When that cannot be bound (a local
user may hold the port), `start_receiver` says so once (the receiver_unbound alert), the receiver
is down (phasewatch_group_receiver_up 0) and binding is tried again every REBIND_SPACING; still
unbound after GIVE_UP_AFTER, the daemon's loop gets UnavailableError: exit 69, and systemd starts it
again.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...clock import Clock, SystemClock
from ...config.load import Config
from ...config.sections import Group, GroupReceiver
from ...errors import ConfigError, UnavailableError
from ...records import GroupRestartRequest
from ...stages.s5_act.group_decision import NotificationError, parse_notification
from ..base import Instant
from .listen_fds import receiver_socket
from .receiver_gate import Gate, RefusalLog
from .receiver_http import CONNECTION_DEADLINE, PATH, Server

logger = logging.getLogger(__name__)

REBIND_SPACING = 5.0  # seconds between tries to bind group.receiver.listen after it failed
GIVE_UP_AFTER = 300.0  # still unbound after this long: the daemon exits 69 (systemd restarts it)
PeerOf = Callable[[Any], str]


def read_token(receiver: GroupReceiver) -> bytes:
    """The bearer token: the file's first line (raises ConfigError: the daemon does not start without it,
    nor with a file others may read: file_trust.check_token_file)."""
    from ...config.file_trust import check_token_file

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


def tls_context(receiver: GroupReceiver) -> ssl.SSLContext | None:
    """The receiver's TLS context (None: plain HTTP); a pair that does not load is a ConfigError."""
    if not (receiver.tls_cert and receiver.tls_key):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(receiver.tls_cert, receiver.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("group.receiver.tls_cert", f"cannot load the certificate and key: {exc}") from None
    return context


def by_address(address: Any) -> str:
    return f"host {address[0]}"


class AlertReceiverSource:
    """The listener (or the tries to bind it) and the requests it took in, for the daemon's loop."""

    def __init__(self, unit: str, group: Group, receiver: GroupReceiver, token: bytes, *,
                 clock: Clock | None = None, peer_of: PeerOf = by_address,
                 deadline: float = CONNECTION_DEADLINE, gate: Gate | None = None) -> None:
        self.unit, self.group, self.receiver = unit, group, receiver
        self.deadline, self.peer_of = deadline, peer_of
        self._token = token
        self._clock = clock or SystemClock()
        self.gate = gate or Gate()
        self._log = RefusalLog()
        self._lock = threading.Lock()
        self._pending: list[GroupRestartRequest] = []
        self._counts: dict[str, dict[str, int]] = {"refused": {}, "accepted": {}, "acts": {}}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._context = tls_context(receiver)
        self._httpd: Server | None = None
        self._stop = threading.Event()
        self._rebinder: threading.Thread | None = None
        self.gave_up: str | None = None  # (it serves once `listen` or `listen_later` is called)

    def listen(self, listening: socket.socket | None = None) -> None:
        """Serve on `listening` (passed by systemd) or on the configured address; raises OSError."""
        host, _, port = self.receiver.listen.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0] if listening is None \
            else listening.family
        httpd = Server((host, int(port)), family, self, self._context, listening)
        with self._lock:
            self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 3600},
                         name="phasewatch-alert-receiver", daemon=True).start()
        where = "socket passed by systemd, " if listening is not None else ""
        logger.info("[%s] group %s: Alertmanager webhook on %s%s://%s%s", self.unit, self.group.name, where,
                    "https" if self._context else "http", self.receiver.listen if listening is None else
                    "%s:%s" % self.address, PATH)

    def listen_later(self, spacing: float = REBIND_SPACING, give_up_after: float = GIVE_UP_AFTER) -> None:
        """Try `listen()` every `spacing` in a thread; past `give_up_after`, wake the loop to give up."""
        self._rebinder = threading.Thread(target=self._rebind, args=(spacing, give_up_after),
                                          name="phasewatch-receiver-rebind", daemon=True)
        self._rebinder.start()

    def _rebind(self, spacing: float, give_up_after: float) -> None:
        began = self._clock.monotonic()
        problem: OSError | None = None
        while not self._stop.wait(spacing):
            try:
                self.listen()
                return
            except OSError as exc:
                problem = exc
            if self._clock.monotonic() - began >= give_up_after:
                self.gave_up = (f"{self.unit}: group {self.group.name}: cannot listen for Alertmanager on "
                                f"{self.receiver.listen} for {give_up_after:g}s ({problem}); exiting so that "
                                "systemd starts phasewatch again")
                self._wake()
                return

    @property
    def up(self) -> bool:
        with self._lock:
            return self._httpd is not None

    @property
    def address(self) -> tuple[str, int]:
        if self._httpd is None:
            raise OSError(f"not listening on {self.receiver.listen}")
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    # -- the loop's side --------------------------------------------------------------------------
    def fds(self) -> Sequence[int]:
        return (self._wake_r,)

    def next_deadline(self, now: Instant) -> float | None:
        return None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[GroupRestartRequest]:
        """The requests taken in since the last step (no tracker events): the loop puts them in the
        step for the group's sink (sinks/acting/group.py)."""
        if self.gave_up is not None:
            raise UnavailableError(self.gave_up)
        return self.take()

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
            return {**{what: dict(by) for what, by in self._counts.items()},
                    "up": {"": int(self._httpd is not None)}}

    def close(self) -> None:
        self._stop.set()
        if self._rebinder is not None:
            self._rebinder.join(timeout=5)
        with self._lock:
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            threading.Thread(target=httpd.shutdown, daemon=True).start()
            httpd.server_close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- the server threads' side -----------------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # (the loop is woken already, or closed)

    def _count(self, what: str, reason: str) -> None:
        with self._lock:
            self._counts[what][reason] = self._counts[what].get(reason, 0) + 1

    def admit(self, peer: str) -> bool:
        return self.gate.take(peer, self._clock.monotonic())

    def release(self, peer: str) -> None:
        self.gate.give_back(peer)

    def refused(self, reason: str, peer: str) -> None:
        self._count("refused", reason)
        line = self._log.line(reason, peer, self._clock.monotonic())
        if line is not None:
            logger.warning("[%s] %s", self.unit, line)

    def authorized(self, header: str | None, peer: str) -> str | None:
        """None when the header carries the token (the peer is then trusted); else the refusal's reason."""
        if not header or not header.startswith("Bearer "):
            return "no_token"
        given = header[len("Bearer "):].strip().encode("utf-8", "replace")
        if not hmac.compare_digest(given, self._token):
            return "bad_token"
        self.gate.trust(peer, self._clock.monotonic())
        return None

    def accept(self, body: bytes) -> tuple[int, str]:
        try:
            notification = parse_notification(body, self.group.name, self._clock.wall())
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
            self._wake()
        return 200, "ok"


def start_receiver(config: Config, unbound: Callable[[str], None], peer_of: PeerOf = by_address,
                   clock: Clock | None = None, spacing: float = REBIND_SPACING,
                   give_up_after: float = GIVE_UP_AFTER) -> AlertReceiverSource | None:
    """The group's receiver when the config asks for one, on the socket systemd passed or else bound
    here. A token or TLS pair that cannot be read stops the daemon (ConfigError). An address that
    cannot be bound is said through `unbound(why)` (the receiver_unbound alert) and tried again in
    the background (`listen_later`)."""
    group = config.group
    if group is None or group.receiver is None:
        return None
    token = read_token(group.receiver)
    receiver = AlertReceiverSource(config.unit, group, group.receiver, token, clock=clock, peer_of=peer_of)
    passed = receiver_socket()
    if passed is not None:
        receiver.listen(passed)
        return receiver
    try:
        receiver.listen()
    except (OSError, ValueError) as exc:
        unbound(f"{config.unit}: group {group.name}: cannot listen for Alertmanager on {group.receiver.listen} "
                f"({exc}; another process may hold the port): no group restart on this node until it can; "
                f"trying again every {spacing:g}s, and phasewatch exits (status 69, restarted by systemd) "
                f"if it still cannot after {give_up_after:g}s")
        receiver.listen_later(spacing, give_up_after)
    return receiver
