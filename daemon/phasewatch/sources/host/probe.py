"""Edge: the health probe after ready (httpx; the transport is the seam tests replace).

SGLang's /health and /health_generate generate one token and answer 503 after 20 s without the
scheduler; a probe must wait longer than that, and must not run during start-up (connection
refused is normal there) nor while batch lines already prove the server alive.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import httpx


@dataclass(frozen=True)
class ProbeResult:
    url: str
    ok: bool
    seconds: float
    status: int | None = None
    error: str | None = None


def default_url(host: str | None, port: int | None) -> str | None:
    if not port:
        return None
    target = "127.0.0.1" if host in (None, "", "0.0.0.0", "::") else host
    if ":" in target and not target.startswith("["):
        target = f"[{target}]"
    return f"http://{target}:{port}/health_generate"


def probe(url: str, timeout: float, transport: httpx.BaseTransport | None = None,
          clock: Callable[[], float] = time.monotonic) -> ProbeResult:
    started = clock()
    try:
        with httpx.Client(transport=transport, timeout=timeout, trust_env=False) as client:
            response = client.get(url)
    except httpx.TimeoutException:
        return ProbeResult(url, False, clock() - started, None, f"no answer within {timeout:g}s")
    except httpx.HTTPError as exc:
        return ProbeResult(url, False, clock() - started, None, f"{type(exc).__name__}: {exc}")
    ok = response.status_code == 200
    return ProbeResult(url, ok, clock() - started, response.status_code,
                       None if ok else f"HTTP {response.status_code}")


class BackgroundProbe:
    """Runs one probe at a time in a thread; the result is picked up by the loop, whose poll wakes
    on `fileno()` (a pipe) when it is there."""

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        import os

        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._transport = transport
        self._result: ProbeResult | None = None
        self._busy = False
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self._read

    @property
    def busy(self) -> bool:
        return self._busy

    def start(self, url: str, timeout: float) -> None:
        if self._busy:
            return
        self._busy = True
        threading.Thread(target=self._run, args=(url, timeout), daemon=True, name="health-probe").start()

    def _run(self, url: str, timeout: float) -> None:
        import os

        result = probe(url, timeout, self._transport)
        with self._lock:
            self._result = result
        os.write(self._write, b"!")

    def take(self) -> ProbeResult | None:
        import os

        try:
            os.read(self._read, 64)
        except BlockingIOError:
            pass
        with self._lock:
            result, self._result = self._result, None
        if result is not None:
            self._busy = False
        return result
