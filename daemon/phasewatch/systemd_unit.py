"""Edge: the watched unit in systemd, read and driven over D-Bus (pystemd), for sources and sinks
alike: its facts (`UnitFacts`: state, invocation, cgroup, timers, ExecStart=, Environment=,
devices) and its jobs (restart, stop, start). `RecordingUnit` is the fake beside it.

Errors from D-Bus become `UnitError` (the daemon logs and alerts, never dies of them), but for a
name systemd refuses (EINVAL on loading the unit): that is the config's `unit`, a `ConfigError`.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from .errors import ConfigError, UnitError
from .stages.s4_judge.timerlint import UnitTimers
from .stages.s5_act.respond import UnitStatus

T = TypeVar("T")
USEC_INFINITY = 2**64 - 1  # systemd's "infinity" for a usec property


@dataclass(frozen=True)
class UnitFacts(UnitStatus):
    control_group: str | None = None
    started_at: float | None = None  # InactiveExitTimestamp: when this start began (realtime)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SystemdUnit:
    """The watched unit, through pystemd. `unit_factory` is the seam (tests pass a fake bus)."""

    def __init__(self, name: str, unit_factory: Callable[[bytes], Any] | None = None) -> None:
        self.name = name
        self._factory = unit_factory
        self._unit: Any = None
        self._lock = threading.RLock()

    def _load(self) -> Any:
        if self._unit is None:
            with self._dbus(f"cannot reach systemd over D-Bus for {self.name}"):
                try:
                    if self._factory is not None:
                        self._unit = self._factory(self.name.encode())
                    else:
                        from pystemd.systemd1 import Unit  # pragma: systemd no cover

                        self._unit = Unit(self.name.encode(), _autoload=True)
                except Exception as exc:  # pystemd raises its own D-Bus exception tree
                    if refused_name(exc):
                        raise ConfigError("unit", f"systemd refuses the unit name {self.name!r}: {exc}") from None
                    raise
        return self._unit

    @contextmanager
    def _dbus(self, failure: str) -> Iterator[None]:
        """The one place a D-Bus failure becomes a `UnitError`: `failure` says what could not be
        done; the connection is dropped so that the next call reconnects. One call at a time (an
        sd-bus connection is one thread's: the loop and the action worker may share this unit)."""
        try:
            with self._lock:
                yield
        except (UnitError, ConfigError):
            raise
        except Exception as exc:  # pystemd raises its own D-Bus exception tree
            self._unit = None
            raise UnitError(f"{failure}: {exc}") from None

    def facts(self) -> UnitFacts:
        """Read again at once when a signal cuts the read (EINTR), like a job call: an interrupted
        read said "the unit is unknown" in a verdict's alert (PROBE-S4 L-5)."""
        return self._retried(self._facts, f"cannot read {self.name}'s state over D-Bus")

    def _facts(self) -> UnitFacts:
        unit = self._load()
        raw_invocation = unit.Unit.InvocationID
        invocation = bytes(raw_invocation).hex() if raw_invocation else None
        job = unit.Unit.Job
        job_id = job[0] if isinstance(job, (tuple, list)) else 0
        try:
            control_group = _text(unit.Service.ControlGroup) or None
        except AttributeError:
            control_group = None
        exit_ts = int(unit.Unit.InactiveExitTimestamp)
        return UnitFacts(active_state=_text(unit.Unit.ActiveState), sub_state=_text(unit.Unit.SubState),
                         invocation_id=invocation or None, job_pending=bool(job_id),
                         control_group=control_group, started_at=exit_ts / 1e6 if exit_ts else None)

    def timers(self) -> UnitTimers:
        """The unit's timers and environment (TimeoutStartUSec, Type, ExecStartPost, Environment)."""
        return self._retried(self._timers, f"cannot read {self.name}'s timers over D-Bus")

    def _timers(self) -> UnitTimers:
        service = self._load().Service
        usec = int(service.TimeoutStartUSec)
        environment = {}
        for item in service.Environment or ():
            key, sep, value = _text(item).partition("=")
            if sep:
                environment[key] = value
        exec_start = list(service.ExecStart or [])
        return UnitTimers(timeout_start=math.inf if usec >= USEC_INFINITY else usec / 1e6,
                          service_type=_text(service.Type), has_exec_start_post=bool(service.ExecStartPost),
                          environment=environment,
                          exec_start=tuple(_text(w) for w in exec_start[0][1]) if exec_start else (),
                          devices=_devices(service))

    def load_state(self) -> str:
        """loaded, not-found, masked, error..."""
        return self._retried(lambda: _text(self._load().Unit.LoadState), f"cannot read {self.name}'s state over D-Bus")

    def restart(self) -> str:
        """RestartUnit(unit, "replace"); returns the job path."""
        return self._job("Restart", f"systemd refused to restart {self.name}")

    def stop(self) -> str:
        """StopUnit(unit, "replace") (a restart with a leftovers check: stop, check, start)."""
        return self._job("Stop", f"systemd refused to stop {self.name}")

    def start(self) -> str:
        return self._job("Start", f"systemd refused to start {self.name}")

    def _job(self, method: str, failure: str) -> str:
        """A job call (idempotent with "replace")."""
        return self._retried(lambda: _text(getattr(self._load().Unit, method)(b"replace")), failure)

    def _retried(self, call: Callable[[], T], failure: str) -> T:
        """A D-Bus call; a signal that interrupts it (EINTR: a SIGHUP, `systemctl reload`) is retried
        at once, up to EINTR_TRIES times."""
        for attempt in range(EINTR_TRIES):
            try:
                with self._dbus(failure):
                    return call()
            except UnitError as exc:
                if attempt + 1 == EINTR_TRIES or not interrupted(exc):
                    raise
        raise AssertionError("unreachable")


EINTR_TRIES = 5


def refused_name(exc: BaseException) -> bool:
    """Loading a unit whose name systemd refuses: `[err -22]: b'Unit name x is neither a valid invocation
    ID nor unit name.'` (EINVAL)."""
    text = str(exc)
    return "[err -22]" in text or "neither a valid invocation ID nor unit name" in text


def interrupted(exc: BaseException) -> bool:
    """A D-Bus call cut by a signal: pystemd says `[err -4]: b'Interrupted system call'`."""
    text = str(exc)
    return "Interrupted system call" in text or "[err -4]" in text


@dataclass
class RecordingUnit:
    """A fake `SystemdUnit`: facts are set by the test, restarts are recorded (or refused)."""

    status: UnitFacts
    restarts: list[str] = field(default_factory=list)
    refuse: str | None = None
    refuse_times: int = 0  # refuse this many restarts (with `refuse`'s text), then accept
    calls: list[str] = field(default_factory=list)  # "stop", "start"
    unit_timers: UnitTimers = field(default_factory=UnitTimers)

    def facts(self) -> UnitFacts:
        return self.status

    def timers(self) -> UnitTimers:
        return self.unit_timers

    def restart(self) -> str:
        if self.refuse_times:
            self.refuse_times -= 1
            raise UnitError(self.refuse or "refused")
        if self.refuse:
            raise UnitError(self.refuse)
        self.restarts.append(self.status.invocation_id or "")
        return f"/org/freedesktop/systemd1/job/{len(self.restarts)}"

    def stop(self) -> str:
        self.calls.append("stop")
        return "/org/freedesktop/systemd1/job/stop"

    def start(self) -> str:
        self.calls.append("start")
        return "/org/freedesktop/systemd1/job/start"


def _devices(service: Any) -> dict[str, str]:
    """PrivateDevices=yes, DevicePolicy=closed and DeviceAllow= as the unit file would say them."""
    devices: dict[str, str] = {}
    try:
        if service.PrivateDevices:
            devices["PrivateDevices"] = "yes"
        policy = _text(service.DevicePolicy)
        if policy and policy != "auto":
            devices["DevicePolicy"] = policy
        allowed = " ".join(f"{_text(path)}:{_text(mode)}" for path, mode in service.DeviceAllow or ())
        if allowed:
            devices["DeviceAllow"] = allowed
    except (AttributeError, TypeError, ValueError):
        pass  # an older systemd without one of these properties
    return devices
