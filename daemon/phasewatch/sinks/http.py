"""The daemon's HTTP server: /metrics by prometheus_client's own WSGI app (gzip when asked,
OpenMetrics when the scraper prefers it) and /status (JSON) beside it, from the exporter's latest
published snapshot; HEAD is answered like GET without the body. Its threads only read that
snapshot; every connection is bounded in time and their number is bounded. /status holds the log
lines its verdicts quote only for a peer that may read the unit's journal (sinks/peers.py
may_read_journal): any other local user, and every remote peer, gets them withheld.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from .. import __version__
from ..clock import Clock
from ..config.load import Config
from ..errors import ListenError
from .metrics.exporter import Exporter
from .peers import key_of, may_read_journal, peer_uid

logger = logging.getLogger(__name__)

# A scrape or a `phasewatch status` takes milliseconds; a client that has not sent its request within
# READ_TIMEOUT of a read, or is not done within CONNECTION_DEADLINE, is cut off. At most
# MAX_CONNECTIONS are served at once, at most MAX_PER_PEER of them for one peer (a local user by
# its uid, sinks/peers.py; a remote one by its address); more are closed at once (counted as `busy`).
READ_TIMEOUT = 5.0
CONNECTION_DEADLINE = 15.0
MAX_CONNECTIONS = 16
MAX_PER_PEER = 4
CONNECTION_REASONS = ("reset", "timeout", "busy", "error")
TEXT = "text/plain; charset=utf-8"
INDEX = (b'<html><body><h1>phasewatch</h1><p><a href="/metrics">/metrics</a> '
         b'<a href="/status">/status</a></p></body></html>\n')

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Answer = tuple[str, list[tuple[str, str]], bytes]
MayRead = Callable[[int | None], bool]  # a peer's uid (None: remote or not found) -> may read the journal
PEER_UID = "phasewatch.peer_uid"  # the WSGI environ's key for it


def _may_read(uid: int | None) -> bool:
    return may_read_journal(uid, os.geteuid())


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, exporter: Exporter) -> None:
        self.address_family = family
        self.exporter = exporter
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.per_peer: dict[str, int] = {}  # connections being served, by peer (under _counts_lock)
        self._counts_lock = threading.Lock()
        self.connection_errors: dict[str, int] = {}
        super().__init__(address, _Handler)
        self.set_app(phasewatch_app(exporter))

    def count(self, reason: str) -> None:
        with self._counts_lock:
            self.connection_errors = {**self.connection_errors, reason: self.connection_errors.get(reason, 0) + 1}

    def _take(self, peer: str) -> bool:
        with self._counts_lock:
            if self.per_peer.get(peer, 0) >= MAX_PER_PEER:
                return False
            self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
            return True

    def _give_back(self, peer: str) -> None:
        with self._counts_lock:
            left = self.per_peer.get(peer, 1) - 1
            if left > 0:
                self.per_peer[peer] = left
            else:
                self.per_peer.pop(peer, None)

    def process_request(self, request: Any, client_address: Any) -> None:
        uid = peer_uid(client_address) if isinstance(client_address, tuple) else None
        peer = key_of(client_address, uid) if isinstance(client_address, tuple) else "unknown"
        if not self._take(peer):
            self.count("busy")
            self.shutdown_request(request)
            return
        if not self.slots.acquire(blocking=False):
            self._give_back(peer)
            self.count("busy")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, (client_address, peer, uid))  # a thread, which releases both
        except BaseException:
            self.slots.release()
            self._give_back(peer)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        address, peer, uid = client_address
        deadline = threading.Timer(CONNECTION_DEADLINE, _cut_off, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, (address, uid))
        finally:
            deadline.cancel()
            self.slots.release()
            self._give_back(peer)

    def finish_request(self, request: Any, client_address: Any) -> None:
        address, uid = client_address
        _Handler(request, address, self, uid)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is a counter, not a traceback in the journal."""
        error = sys.exc_info()[1]
        if isinstance(error, TimeoutError):
            self.count("timeout")
        elif isinstance(error, OSError):  # reset, broken pipe, cut off at the deadline
            self.count("reset")
        else:
            self.count("error")
            logger.error("metrics: a request failed: %s", error, exc_info=logger.isEnabledFor(logging.DEBUG))


def _cut_off(request: socket.socket) -> None:
    try:
        request.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _ServerCollector:
    """`phasewatch_http_connection_errors_total{reason}`: the listener's own troubles."""

    def __init__(self, httpd: _Server) -> None:
        self.httpd = httpd

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("phasewatch_http_connection_errors", "Connections to /metrics and /status "
                                     "that ended badly: reset by the client, timed out, refused as busy (more than "
                                     f"{MAX_CONNECTIONS} at once, or {MAX_PER_PEER} from one peer), or failed",
                                     labels=["unit", "reason"])
        counts = self.httpd.connection_errors
        for reason in CONNECTION_REASONS:
            family.add_metric([self.httpd.exporter.config.unit, reason], counts.get(reason, 0))
        yield family


def _call(app: WSGIApp, environ: dict[str, Any]) -> Answer:
    answered: list[Any] = []
    body = b"".join(app(environ, lambda status, headers, exc_info=None: answered.extend((status, headers))))
    return str(answered[0]), list(answered[1]), body


def _status_json(exporter: Exporter, quotes: bool) -> Answer:
    return "200 OK", [("Content-Type", "application/json")], \
        json.dumps(exporter.status(quotes), indent=1).encode() + b"\n"


def phasewatch_app(exporter: Exporter, may_read: MayRead = _may_read) -> WSGIApp:
    """/metrics (prometheus_client's app), /status, / and 404; GET and HEAD. /status quotes log lines
    only when `may_read` the uid of the peer (environ[PEER_UID]; absent: not known)."""
    metrics_app = make_wsgi_app(exporter.registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO") or "/"
        if method not in ("GET", "HEAD"):
            answer: Answer = ("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", TEXT)],
                              b"only GET and HEAD\n")
        elif path == "/metrics":
            as_get = {**environ, "REQUEST_METHOD": "GET"}
            answer = _guarded("collecting the metrics", lambda: _call(metrics_app, as_get))
        elif path == "/status":
            answer = _guarded("building the status", lambda: _status_json(exporter, may_read(environ.get(PEER_UID))))
        elif path == "/":
            answer = ("200 OK", [("Content-Type", "text/html; charset=utf-8")], INDEX)
        else:
            answer = ("404 Not Found", [("Content-Type", TEXT)], b"not found: try /metrics or /status\n")
        status, headers, body = answer
        start_response(status, [h for h in headers if h[0].lower() != "content-length"]
                       + [("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]

    return app


def _guarded(what: str, answer: Callable[[], Answer]) -> Answer:
    try:
        return answer()
    except Exception:  # a bug must not kill the daemon's listener
        logger.exception("metrics: %s failed", what)
        return "500 Internal Server Error", [("Content-Type", TEXT)], f"{what} failed\n".encode()


class _ResponseWriter(ServerHandler):
    """wsgiref's, but a client gone while the answer is written is counted (wsgiref drops it
    silently), and nothing is ever printed to stderr."""

    server_software = f"phasewatch/{__version__}"

    def finish_response(self) -> None:
        try:
            super().finish_response()
        except OSError:
            handler = getattr(self, "request_handler", None)
            if handler is not None and isinstance(handler.server, _Server):
                handler.server.count("reset")
            raise

    def log_exception(self, exc_info: Any) -> None:
        logger.error("metrics: a request failed: %s", exc_info[1])


class _Handler(WSGIRequestHandler):
    server_version = f"phasewatch/{__version__}"
    timeout = READ_TIMEOUT  # per read; StreamRequestHandler sets it on the connection

    def __init__(self, request: Any, client_address: Any, server: Any, uid: int | None = None) -> None:
        self.peer_uid = uid  # (before the base class handles the request)
        super().__init__(request, client_address, server)

    def handle(self) -> None:
        """WSGIRequestHandler.handle with our response writer; one request per connection."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline, self.request_version, self.command = "", "", ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        environ = {**self.get_environ(), PEER_UID: self.peer_uid}
        writer = _ResponseWriter(self.rfile, self.wfile, sys.stderr, environ,  # type: ignore[arg-type]
                                 multithread=True)
        writer.request_handler = self  # type: ignore[attr-defined]
        writer.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug("metrics: " + format, *args)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        self.log_message(format, *args)


class MetricsServer:
    """The listener thread; `close()` stops it (tests, and the daemon on exit)."""

    def __init__(self, httpd: _Server) -> None:
        self._httpd = httpd
        self._collector = _ServerCollector(httpd)
        httpd.exporter.registry.register(self._collector)
        # serve_forever wakes every poll_interval only to notice shutdown(); close() wakes it with a
        # connection instead, so an idle daemon does not tick twice a second here.
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 3600},
                                        name="phasewatch-metrics", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        stopper = threading.Thread(target=self._httpd.shutdown, daemon=True)
        stopper.start()
        host, port = self.address
        while stopper.is_alive():
            try:
                with socket.create_connection((host if host not in ("0.0.0.0", "::") else "127.0.0.1", port),
                                              timeout=1):
                    pass
            except OSError:
                pass
            stopper.join(timeout=0.05)
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._httpd.exporter.registry.unregister(self._collector)


def parse_listen(listen: str) -> tuple[str, int]:
    """`127.0.0.1:9877`, `[::1]:9877`, `localhost:9877` -> (host, port)."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"expected HOST:PORT like 127.0.0.1:9877, got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def serve(listen: str, exporter: Exporter, quiet: bool = False) -> MetricsServer | None:
    """Serve /metrics and /status on `listen`; None (logged unless `quiet`) when that fails: the daemon
    runs on."""
    try:
        host, port = parse_listen(listen)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        httpd = _Server((host, port), family, exporter)
    except (OSError, ValueError) as exc:
        if quiet:
            return None
        logger.error("[%s] metrics: cannot listen on %s (%s); running without /metrics and /status",
                     exporter.config.unit, listen, exc)
        return None
    server = MetricsServer(httpd)
    logger.info("[%s] metrics and status on http://%s/metrics, /status", exporter.config.unit, listen)
    return server


REBIND_SPACING = 30.0  # seconds between tries to bind metrics.listen after it failed


class Rebinder:
    """While `metrics.listen` cannot be bound (a local user may hold the port first): said once through
    `unbound(why)` (the daemon's metrics_unbound alert), then tried again every REBIND_SPACING in a
    thread of its own until it binds; `server` is the listener once there."""

    def __init__(self, listen: str, exporter: Exporter, unbound: Callable[[str], None],
                 spacing: float = REBIND_SPACING) -> None:
        self.listen, self.exporter, self.spacing = listen, exporter, spacing
        self.server: MetricsServer | None = None
        self._stop = threading.Event()
        unbound(f"{exporter.config.unit}: cannot listen on {listen} for /metrics and /status (another process may "
                f"hold the port); watching and acting without them, trying again every {spacing:g}s")
        self._thread = threading.Thread(target=self._run, name="phasewatch-rebind", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.spacing):
            server = serve(self.listen, self.exporter, quiet=True)
            if server is not None:
                self.server = server
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.server is not None:
            self.server.close()


def start_metrics(config: Config, clock: Clock | None = None) -> tuple[Exporter, MetricsServer | None]:
    """The daemon's exporter on its own registry (with the process and platform collectors), served at
    `config.metrics_listen`."""
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    exporter = Exporter(config, registry, clock)
    return exporter, serve(config.metrics_listen, exporter)
