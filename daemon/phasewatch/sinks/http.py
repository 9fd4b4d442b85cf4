"""The daemon's HTTP server: /metrics (Prometheus text) and /status (JSON) from the exporter's latest
published snapshot. Its threads only read that snapshot; every connection is bounded in time and
their number is bounded.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from .. import __version__
from ..clock import Clock
from ..config import Config
from ..errors import ListenError
from .metrics import Exporter

logger = logging.getLogger(__name__)

# A scrape or a `phasewatch status` takes milliseconds; a client that has not sent its request within
# READ_TIMEOUT of a read, or is not done within CONNECTION_DEADLINE, is cut off. At most
# MAX_CONNECTIONS are served at once; more are closed at once (counted as `busy`).
READ_TIMEOUT = 5.0
CONNECTION_DEADLINE = 15.0
MAX_CONNECTIONS = 16
CONNECTION_REASONS = ("reset", "timeout", "busy", "error")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, exporter: Exporter) -> None:
        self.address_family = family
        self.exporter = exporter
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._counts_lock = threading.Lock()
        self.connection_errors: dict[str, int] = {}
        super().__init__(address, _Handler)

    def count(self, reason: str) -> None:
        with self._counts_lock:
            self.connection_errors = {**self.connection_errors, reason: self.connection_errors.get(reason, 0) + 1}

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.count("busy")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # a thread, which releases the slot
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(CONNECTION_DEADLINE, _cut_off, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self.slots.release()

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
                                     f"{MAX_CONNECTIONS} at once), or failed", labels=["unit", "reason"])
        counts = self.httpd.connection_errors
        for reason in CONNECTION_REASONS:
            family.add_metric([self.httpd.exporter.config.unit, reason], counts.get(reason, 0))
        yield family


class _Handler(BaseHTTPRequestHandler):
    server_version = f"phasewatch/{__version__}"
    timeout = READ_TIMEOUT  # per read; http.server sets it on the connection

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        exporter = self.server.exporter if isinstance(self.server, _Server) else None
        path = urlsplit(self.path).path
        if exporter is None:
            self._answer(500, "text/plain; charset=utf-8", b"no exporter\n")
        elif path == "/metrics":
            try:
                body = generate_latest(exporter.registry)
            except Exception:  # a bug must not kill the daemon's listener
                logger.exception("metrics: collecting failed")
                self._answer(500, "text/plain; charset=utf-8", b"collecting the metrics failed\n")
                return
            self._answer(200, CONTENT_TYPE_LATEST, body)
        elif path == "/status":
            try:
                body = json.dumps(exporter.status(), indent=1).encode() + b"\n"
            except Exception:
                logger.exception("metrics: /status failed")
                self._answer(500, "text/plain; charset=utf-8", b"building the status failed\n")
                return
            self._answer(200, "application/json", body)
        elif path == "/":
            self._answer(200, "text/html; charset=utf-8",
                         b'<html><body><h1>phasewatch</h1><p><a href="/metrics">/metrics</a> '
                         b'<a href="/status">/status</a></p></body></html>\n')
        else:
            self._answer(404, "text/plain; charset=utf-8", b"not found: try /metrics or /status\n")

    def _answer(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug("metrics: " + format, *args)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        if args and isinstance(args[-1], TimeoutError) and isinstance(self.server, _Server):
            self.server.count("timeout")  # http.server caught it: the client sent nothing in time
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


def serve(listen: str, exporter: Exporter) -> MetricsServer | None:
    """Serve /metrics and /status on `listen`; None (logged) when that fails: the daemon runs on."""
    try:
        host, port = parse_listen(listen)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        httpd = _Server((host, port), family, exporter)
    except (OSError, ValueError) as exc:
        logger.error("[%s] metrics: cannot listen on %s (%s); running without /metrics and /status",
                     exporter.config.unit, listen, exc)
        return None
    server = MetricsServer(httpd)
    logger.info("[%s] metrics and status on http://%s/metrics, /status", exporter.config.unit, listen)
    return server


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
