"""Edge: each GPU as NVML shows it, through nvidia-ml-py (`pynvml`; the optional `phasewatch[gpu]`).

One worker thread makes every NVML call, once a second while someone wants readings (`want`), and
queues the readings; the daemon's loop only takes what is queued (`take`), so a wedged driver can
stall the worker, never the loop or its WATCHDOG=1. A worker that has not come back from a call
within `deadline` is reported stuck and its readings are not used until it answers again.

Per GPU and reading: power (nvmlDeviceGetPowerUsage, mW), SM and memory utilisation
(nvmlDeviceGetUtilizationRates), PCIe RX/TX (nvmlDeviceGetPcieThroughput, KB/s), the processes
with a context and their memory (nvmlDeviceGetComputeRunningProcesses: host PIDs) and their SM
utilisation (nvmlDeviceGetProcessUtilization); once: the power limit (nvmlDeviceGetEnforcedPowerLimit),
name, memory size and PCI address (nvmlDeviceGetPciInfo, for the driver's XID lines); every
HEALTH_EVERY readings its health (gpu_nvml_health.py: retired pages and remapped rows pending or
failed, the recovery action field, GPU_IS_LOST). A value NVML refuses (NOT_SUPPORTED,
NO_PERMISSION) is None; one it gives in
a shape phasewatch cannot read (a pid of None, a text for a number, a constant an older binding lacks)
is skipped, said once.

A worker that ends anyway (an exception out of the binding, SystemExit from a call) is a state,
`failed`, with its `problem`: said in the log, /status and `phasewatch_gpu_source`, and the worker is
started again after RESTART_BACKOFF (doubling), at most MAX_RESTARTS times an hour; past that it
stays `failed` and says it gave up. Until its readings flow again the GPU is no sign of life.

Needs: the NVIDIA driver's libnvidia-ml.so.1 and read access to /dev/nvidiactl and /dev/nvidia*
(the unit must not set PrivateDevices=yes, or needs DeviceAllow=; units/phasewatch@.service.d/gpu.conf).
Without pynvml, the library, a GPU or permission the source says so once (`problem`) and gives nothing.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import threading
import time
from types import ModuleType
from typing import Any, Callable, Iterator

from ...profile.xid_table import pci_key
from ...stages.s4_judge.gpu_fault import GpuHealth
from ...stages.s4_judge.gpu_vitals import GpuInfo, GpuReading
from .gpu_nvml_health import read_health

logger = logging.getLogger(__name__)

INTERVAL = 1.0
DEADLINE = 5.0  # a call not back after this long: the driver is wedged
MAX_READINGS = 4096  # queued readings kept (16 GPUs x 256 s) when nobody takes them
RESTART_BACKOFF = 5.0  # seconds before a failed worker is started again (doubled each time in the hour)
MAX_RESTARTS = 5  # per hour; then the source stays `failed`
HEALTH_EVERY = 10  # readings between two reads of each GPU's health


class NvmlSource:
    def __init__(self, load: Callable[[], ModuleType] | None = None, interval: float = INTERVAL,
                 deadline: float = DEADLINE, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, backoff: float = RESTART_BACKOFF) -> None:
        self._load = load or (lambda: importlib.import_module("pynvml"))
        self.interval = interval
        self.deadline = deadline
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._readings: collections.deque[GpuReading] = collections.deque(maxlen=MAX_READINGS)
        self._infos: dict[int, GpuInfo] = {}
        self._pci: dict[int, str] = {}  # NVML index -> PCI address (`0000:3b:00`)
        self._health: dict[int, GpuHealth] = {}
        self._problem: str | None = None
        self._said: str | None = None
        self._busy_since: float | None = None  # monotonic: the worker is inside an NVML call
        self._thread: threading.Thread | None = None
        self._started = False
        self.backoff = backoff
        self._failed: str | None = None  # the worker ended: why (cleared once its readings flow again)
        self._skipped: set[str] = set()  # values skipped, each said once

    # -- the loop's side: never blocks on NVML -------------------------------------------------

    def want(self, wanted: bool) -> None:
        """Sample while `wanted` (the unit starts); the worker starts on the first want."""
        if wanted and not self._started:
            self._started = True
            self._thread = threading.Thread(target=self._supervise, name="phasewatch-nvml", daemon=True)
            self._thread.start()
        if wanted:
            self._wanted.set()
        else:
            self._wanted.clear()

    def take(self) -> list[GpuReading]:
        """The readings queued since the last take (none while the worker is stuck)."""
        stuck = self.stuck()
        with self._lock:
            out = list(self._readings)
            self._readings.clear()
        if stuck:
            self._say(f"NVML has not answered for {self._clock() - (self._busy_since or 0):.0f} s "
                      "(a wedged driver?): the GPU is not used as a sign of life until it does")
            return []
        return out

    def stuck(self) -> bool:
        busy = self._busy_since
        return busy is not None and self._clock() - busy > self.deadline

    def infos(self) -> dict[int, GpuInfo]:
        with self._lock:
            return dict(self._infos)

    def pci_addresses(self) -> dict[int, str]:
        with self._lock:
            return dict(self._pci)

    def health(self) -> dict[int, GpuHealth]:
        """The last health read of each GPU (none until the worker read it)."""
        with self._lock:
            return dict(self._health)

    def problem(self) -> str | None:
        """Why there are no readings (None: there are, or nothing was asked yet)."""
        if self.stuck():
            return "NVML not answering"
        with self._lock:
            return self._failed or self._problem

    def state(self) -> str:
        """`off` (never wanted), `ok`, `unavailable`, `stuck`, `failed` (the worker ended)."""
        if not self._started:
            return "off"
        if self.stuck():
            return "stuck"
        with self._lock:
            if self._failed is not None:
                return "failed"
            return "unavailable" if self._problem is not None else "ok"

    def _say(self, problem: str) -> None:
        if self._said != problem:
            self._said = problem
            logger.warning("GPU signs of life: %s", problem)

    # -- the worker ----------------------------------------------------------------------------

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        self._busy_since = self._clock()
        try:
            return function(*args)
        finally:
            self._busy_since = None

    def _supervise(self) -> None:
        """The worker: `_run`, started again when it ends by an exception, within the hour's bound."""
        restarts: collections.deque[float] = collections.deque()
        while True:
            try:
                self._run()
                return  # NVML unavailable: said, nothing to read
            except BaseException as exc:  # SystemExit from a call too: the thread would end unsaid
                now = self._clock()
                while restarts and now - restarts[0] > 3600:
                    restarts.popleft()
                why = f"the NVML worker ended: {type(exc).__name__}: {exc}"
                if len(restarts) >= MAX_RESTARTS:
                    self._fail(f"{why}; it ended {MAX_RESTARTS + 1} times within an hour: not started again "
                               "until phasewatch restarts")
                    return
                wait = self.backoff * 2 ** len(restarts)
                restarts.append(now)
                self._fail(f"{why}; started again in {wait:g} s ({len(restarts)} of {MAX_RESTARTS} this hour)")
                time.sleep(wait)

    def _fail(self, why: str) -> None:
        logger.error("GPU signs of life: %s", why)
        with self._lock:
            self._failed = why

    def _run(self) -> None:
        try:
            nvml = self._call(self._load)
            self._call(nvml.nvmlInit)
            handles = self._devices(nvml)
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NO_PERMISSION, DRIVER_NOT_LOADED...
            self._unavailable(_describe(exc))
            return
        if not handles:
            self._unavailable("NVML sees no GPU")
            return
        last_seen: dict[int, int] = {}
        rounds = 0
        while True:
            self._wanted.wait()
            began = self._clock()
            at = self._wall()
            readings = [r for index, handle in handles if (r := self._reading(nvml, index, handle, at, last_seen))]
            if rounds % HEALTH_EVERY == 0:
                health = {index: read_health(nvml, index, handle, self._call) for index, handle in handles}
                with self._lock:
                    self._health = health
            rounds += 1
            with self._lock:
                self._readings.extend(readings)
                if readings:
                    self._failed = None
            time.sleep(max(self.interval - (self._clock() - began), 0.05))

    def _unavailable(self, problem: str) -> None:
        self._say(f"{problem}; vitals use /proc only")  # said before `state` tells it
        with self._lock:
            self._problem, self._failed = problem, None

    def _devices(self, nvml: Any) -> list[tuple[int, Any]]:
        handles = []
        for index in range(self._call(nvml.nvmlDeviceGetCount)):
            handle = self._call(nvml.nvmlDeviceGetHandleByIndex, index)
            name = self._optional(nvml.nvmlDeviceGetName, handle)
            memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
            limit = self._optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            pci = self._optional(nvml.nvmlDeviceGetPciInfo, handle) if hasattr(nvml, "nvmlDeviceGetPciInfo") else None
            bus_id = getattr(pci, "busId", None)
            address = pci_key(bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id or ""))
            if address is not None:
                with self._lock:
                    self._pci[index] = address
            with self._skipping("GPU description"):
                info = GpuInfo(index, name.decode() if isinstance(name, bytes) else str(name or ""),
                               int(limit) if limit is not None else None,
                               int(memory.total) if memory is not None else None)
                with self._lock:
                    self._infos[index] = info
            handles.append((index, handle))
        return handles

    def _optional(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return self._call(function, *args)
        except Exception:  # NVMLError: NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST...
            return None

    def _skip(self, what: str, exc: Exception) -> None:
        """A value NVML gave that cannot be read: skipped, said once per kind."""
        if what not in self._skipped:
            self._skipped.add(what)
            logger.warning("GPU signs of life: NVML gave a %s phasewatch cannot read (%s: %s): skipped", what,
                           type(exc).__name__, exc)

    def _reading(self, nvml: Any, index: int, handle: Any, at: float, last_seen: dict[int, int]
                 ) -> GpuReading | None:
        try:
            return self._read(nvml, index, handle, at, last_seen)
        except Exception as exc:  # a shape no guard below foresaw: this GPU's reading of this second only
            self._skip("reading", exc)
            return None

    def _read(self, nvml: Any, index: int, handle: Any, at: float, last_seen: dict[int, int]) -> GpuReading:
        rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        power = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        rx = tx = None
        with self._skipping("PCIe counter"):  # (NVML_PCIE_UTIL_*: missing from an older binding)
            rx = self._optional(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
            tx = self._optional(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        processes = {}
        for process in self._optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or ():
            with self._skipping("process"):
                used = getattr(process, "usedGpuMemory", None)
                processes[int(process.pid)] = int(used) if isinstance(used, int) else 0
        sm_by_pid: dict[int, float] = {}
        samples = self._optional(nvml.nvmlDeviceGetProcessUtilization, handle, last_seen.get(index, 0))
        for sample in samples or ():
            with self._skipping("process utilisation sample"):
                pid, sm = int(sample.pid), float(sample.smUtil)
                last_seen[index] = max(last_seen.get(index, 0), int(getattr(sample, "timeStamp", 0)))
                sm_by_pid[pid] = sm
        return GpuReading(at, index, _num(getattr(rates, "gpu", None)), _num(getattr(rates, "memory", None)),
                          _num(power), _num(rx), _num(tx), processes, sm_by_pid)


    @contextlib.contextmanager
    def _skipping(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # TypeError, ValueError, AttributeError, OverflowError...
            self._skip(what, exc)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def nvml_install_hint(installed_at: str = __file__) -> str:
    """How to get NVML's bindings where this phasewatch is installed: Debian's package where the .deb
    put it (/usr/lib/python3/dist-packages; `Suggests: python3-pynvml`, in contrib), else the pip extra."""
    if installed_at.startswith("/usr/lib/python3/dist-packages/"):
        return "apt install python3-pynvml, from Debian's contrib (the package suggests it)"
    return "pip install 'phasewatch[gpu]' in phasewatch's environment"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return f"nvidia-ml-py is not installed ({nvml_install_hint()})"
    text = str(exc) or type(exc).__name__
    if "Insufficient Permissions" in text or "No Permission" in text:
        return f"NVML: {text} (phasewatch needs read access to /dev/nvidiactl and /dev/nvidia*)"
    return f"NVML: {text}"
