"""Edge: the unit's current start-up, read from the journal, for `status`, `logs` and `wait-ready`.

Where a start-up begins, best source first:
1. systemd over D-Bus: `InactiveExitTimestamp` (when this start began) and `InvocationID`;
2. `$INVOCATION_ID` when this process runs inside the unit itself (`ExecStartPost=`): the id only;
3. the journal: PID 1's last "Starting" entry about the unit (or its "Started", when the
   "Starting" is gone), with the `INVOCATION_ID` it names;
4. nothing found: the journal from its head, and the last invocation in it.

`CurrentStartup` then feeds the unit's entries from there through the same `Pipeline` as the
daemon and judges the start-up it was pointed at.
"""

from __future__ import annotations

import os
import select
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ...config.instances import config_names, watched_unit
from ...config.load import Config, load_config
from ...errors import JournalError, NoSuchUnit, UnitError, UsageError
from ...pipeline import Judgement, Pipeline
from ...records import (
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STARTING,
    MID_STOPPED,
    MID_STOPPING,
    record_from_fields,
)
from ...stages.s3_track.snapshot import InvocationView, Snapshot, Transition
from ...stages.s4_judge.timerlint import UnitTimers
from ...systemd_unit import SystemdUnit, UnitFacts
from .follow import JournalFollower
from .journal_reader import INVALIDATE

# PID 1's entries that belong to another start than the one a "Started" entry closes.
_OTHER_LIFECYCLE = frozenset({MID_STARTED, MID_STOPPING, MID_STOPPED, MID_DEACTIVATED, MID_FAILED, MID_MAIN_EXITED,
                              MID_RESTART_SCHEDULED})
DBUS_MARGIN = 1.0  # read from this long before InactiveExitTimestamp
LOOKBACK = 500  # PID 1's entries about the unit searched backwards for its last start
READ_BATCH = 1000
CONFIG_DIRS = ("/etc/phasewatch", "/run/phasewatch")




def unit_name(text: str) -> str:
    """`sglang-kimi` -> `sglang-kimi.service`, as systemctl reads it."""
    return watched_unit(text)


def resolve_config(unit: str | None, path: str | None, warn: Callable[[str], None] | None = None) -> Config:
    """--config F; else /etc/phasewatch/NAME.yaml (or /run/phasewatch/NAME.yaml) if readable, NAME
    the unit's name without `.service` or with it (instances.config_names); else
    the defaults for UNIT. A UNIT given beside a config whose `unit:` differs wins (with a warning)."""
    config: Config | None = None
    if path is not None:
        config = load_config(path)
    elif unit is not None:
        candidates = [Path(directory) / name for directory in CONFIG_DIRS for name in config_names(unit)]
        readable = next((candidate for candidate in candidates if os.access(candidate, os.R_OK)), None)
        if readable is not None:
            config = load_config(readable)
    if config is None:
        if unit is None:
            raise UsageError("name the UNIT, or give --config")
        return Config(unit=unit)
    if unit is not None and unit != config.unit:
        if warn is not None:
            warn(f"{config.source} watches {config.unit}; using its limits for {unit}")
        config = replace(config, unit=unit)
    return config


@dataclass(frozen=True)
class StartPoint:
    """Where to read from (`since`, None = the journal's head) and which start-up to follow
    (`invocation_id`, None = the last one found). `how` names the source."""

    since: float | None
    invocation_id: str | None
    how: str
    active_state: str | None = None  # systemd's, when D-Bus answered


def _open_reader(directory: str | None) -> Any:
    try:
        from systemd import _reader  # pragma: systemd no cover
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise JournalError(f"python-systemd is not installed: {exc}") from None
    try:
        reader = _reader._Reader(0, directory) if directory else _reader._Reader()
    except OSError as exc:
        raise JournalError(f"cannot open the journal{' in ' + directory if directory else ''}: "
                           f"{exc.strerror or exc}") from None
    reader.data_threshold = 0
    return reader


def journal_start(unit: str, directory: str | None = None, before: float | None = None) -> StartPoint | None:
    """PID 1's last "Starting" (else "Started") entry about the unit, before `before` (default: ever)."""
    reader = _open_reader(directory)
    try:
        reader.add_match(f"UNIT={unit}")
        reader.add_match("_PID=1")
        reader.add_match("_UID=0")  # trusted fields: no other sender can claim to be PID 1
        if before is None:
            reader.seek_tail()
        else:
            reader.seek_realtime(int(before * 1_000_000))
        started: StartPoint | None = None
        for _ in range(LOOKBACK):
            if not reader._previous():
                break
            fields: dict[str, object] = {"__REALTIME_TIMESTAMP": reader._get_realtime()}
            for name in ("MESSAGE_ID", "INVOCATION_ID"):
                try:
                    fields[name] = reader._get(name)
                except KeyError:
                    pass
            record = record_from_fields(fields)
            invocation = record.extra.get("INVOCATION_ID")
            invocation = invocation.replace("-", "").lower() if invocation else None
            if record.message_id == MID_STARTING:
                if started is not None and invocation and started.invocation_id and invocation != started.invocation_id:
                    return started  # another start's "Starting": "Started" stands alone
                return StartPoint(record.realtime, invocation or (started.invocation_id if started else None),
                                  "journal")
            if record.message_id in _OTHER_LIFECYCLE:
                if started is not None:
                    return started  # the "Starting" before this "Started" is gone
                if record.message_id == MID_STARTED:
                    started = StartPoint(record.realtime, invocation, "journal")
        return started
    finally:
        reader.close()


def journal_knows(unit: str, directory: str | None) -> bool:
    """Whether the journal holds any entry of the unit: PID 1's about it, or its own output."""
    reader = _open_reader(directory)
    try:
        reader.add_match(f"UNIT={unit}")
        reader.add_disjunction()
        reader.add_match(f"_SYSTEMD_UNIT={unit}")
        reader.seek_head()
        return bool(reader._next())
    finally:
        reader.close()


def _own_invocation(unit: str) -> str | None:
    """`$INVOCATION_ID` if this process runs in `unit` itself (ExecStartPost=, ExecStartPre=)."""
    invocation = os.environ.get("INVOCATION_ID")
    if not invocation:
        return None
    try:
        cgroup = Path("/proc/self/cgroup").read_text("utf-8")
    except OSError:
        return None
    # cgroup v2 "0::/system.slice/UNIT" (or ".../UNIT/control" with Delegate=), v1 "1:name=systemd:/..."
    paths = [line.split(":", 2)[-1].strip() for line in cgroup.splitlines()]
    if any(unit in path.split("/") for path in paths):
        return invocation.replace("-", "").lower()
    return None


def read_facts(unit: str) -> UnitFacts | None:
    """The unit's state over D-Bus; None when D-Bus cannot be reached. NoSuchUnit when not loaded."""
    systemd_unit = SystemdUnit(unit)
    try:
        if systemd_unit.load_state() == "not-found":
            raise NoSuchUnit(unit)
        return systemd_unit.facts()
    except UnitError:
        return None


def unit_timers(unit: str) -> UnitTimers:
    """The unit's timers over D-Bus; none known when D-Bus cannot be reached."""
    try:
        return SystemdUnit(unit).timers()
    except UnitError:
        return UnitTimers()


def find_start(unit: str, directory: str | None = None,
               facts: Callable[[str], UnitFacts | None] | None = read_facts) -> StartPoint:
    """Where the unit's current (last) start-up begins. With `directory` (a journal copied from
    another host) systemd is not asked. Raises NoSuchUnit when systemd does not know the unit and
    the journal holds no start of it."""
    state: UnitFacts | None = None
    unknown = False
    if directory is None and facts is not None:
        try:
            state = facts(unit)
        except NoSuchUnit:
            unknown = True
    own = _own_invocation(unit) if directory is None else None
    if state is not None and state.started_at is not None:
        return StartPoint(state.started_at - DBUS_MARGIN, state.invocation_id or own, "dbus", state.active_state)
    found = journal_start(unit, directory)
    if found is not None:
        invocation = own or found.invocation_id
        return replace(found, invocation_id=invocation, how="journal",
                       active_state=state.active_state if state is not None else None)
    if unknown or (directory is not None and not journal_knows(unit, directory)):
        raise NoSuchUnit(unit)  # a copied journal gets no new entries: nothing of the unit is a wrong name
    return StartPoint(None, own, "head", state.active_state if state is not None else None)


class CurrentStartup:
    """The unit's entries from a start point on, through the pipeline; judges the start-up followed.

    `follow_restarts`: when a newer start-up appears, follow it (status --watch); otherwise stay
    with the one pointed at (wait-ready: its stop is the answer). Entries written by `skip_pid`
    (this process, when it runs inside the unit as ExecStartPost=) are not the server's lines.
    """

    def __init__(self, config: Config, follower: JournalFollower, start: StartPoint, *,
                 follow_restarts: bool = False, skip_pid: int | None = None) -> None:
        self.config = config
        self.follower = follower
        self.start = start
        self.target = start.invocation_id
        self.follow_restarts = follow_restarts
        self.skip_pid = skip_pid
        self.pipeline = Pipeline(config)
        if start.since is not None:
            follower.seek_realtime(start.since)
        else:
            follower.seek_head()

    def read(self, now: float) -> list[Transition]:
        """Every entry there is now (the journal's own time dates them; `now` only undated ones)."""
        out: list[Transition] = []
        while True:
            records = self.follower.read(READ_BATCH)
            if not records and not self.follower.behind:
                return out
            for record in records:
                if self.skip_pid is not None and record.pid == self.skip_pid:
                    continue
                out.extend(self.pipeline.feed(record, now))

    def finish(self, now: float) -> list[Transition]:
        """Release lines held for their continuation (a one-shot read is over)."""
        return self.pipeline.flush(now)

    def invocation(self) -> InvocationView | None:
        snapshot = self.pipeline.snapshot()
        if not snapshot.invocations:
            return None
        if self.target is None:
            return snapshot.invocations[-1]  # no id to go by: the last start-up in the journal
        ids = [inv.invocation_id for inv in snapshot.invocations]
        if self.follow_restarts and self.target in ids and ids[-1] != self.target:
            self.target = ids[-1]  # started again since
        return next((inv for inv in snapshot.invocations if inv.invocation_id == self.target), None)

    def judgement(self, now: float) -> Judgement | None:
        inv = self.invocation()
        if inv is None:
            return None
        [judgement] = self.pipeline.judge(now, Snapshot((inv,)))
        return judgement

    def wait(self, seconds: float) -> None:
        wait_for_journal(self.follower, seconds)


def wait_for_journal(follower: JournalFollower, seconds: float) -> None:
    """Sleep until the journal moves or `seconds` passed (reopening it after rotation or vacuum)."""
    poller = select.poll()
    poller.register(follower.fileno(), select.POLLIN)
    if poller.poll(max(int(seconds * 1000), 0)) and follower.wait_result() == INVALIDATE:
        follower.reopen()


def warn(message: str) -> None:
    print(f"phasewatch: warning: {message}", file=sys.stderr)
