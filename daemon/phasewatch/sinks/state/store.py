"""Edge: what the daemon must remember across its own restarts, in its state directory.

One JSON file, written atomically (temporary file, fsync, rename): the journal cursor, the
invocation it belongs to, which verdicts were alerted, which invocations were restarted, the
restart budget, the alerts and restart decided and not yet done (`pending`, done at the next start:
sinks/acting/actor.py) and a guarded restart's start that waits for leftovers (`guarded`). A corrupt
or unreadable file, or a corrupt value in it, is reported and dropped, never fatal; a write the host
refuses leaves the old file whole.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

from ...stages.s5_act.respond import PRIORITY, Action, Budget, BudgetState, Memory

logger = logging.getLogger(__name__)
KEEP_INVOCATIONS = 32


@dataclass(frozen=True)
class Saved:
    memory: Memory
    cursor: str | None
    invocation_id: str | None
    last_restart: dict[str, str | None] | None = None  # the start-up phasewatch last restarted, and why
    pending: tuple[Action, ...] = ()  # alerts and a restart decided and not yet done (done at the next start)
    guarded: dict[str, Any] | None = None  # a guarded restart's start waiting for leftovers (GuardedRestart.record)


MAX_STATE_BYTES = 4 << 20  # a state file larger than this is not ours


class StateStore:
    """The state file. `degraded` says why the last write failed (None once one succeeds): the
    daemon then keeps its memory in memory only."""

    def __init__(self, directory: str | Path, unit: str) -> None:
        self.path = Path(directory) / f"{unit}.state.json"
        self.status_path = Path(directory) / f"{unit}.status.json"
        self.degraded: str | None = None

    def load(self) -> Saved:
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return Saved(Memory(), None, None)
        except OSError as exc:
            logger.warning("state file %s is unreadable (%s); starting with an empty memory", self.path, exc)
            return Saved(Memory(), None, None)
        try:
            if len(raw) > MAX_STATE_BYTES:
                raise ValueError(f"larger than {MAX_STATE_BYTES} bytes")
            document = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
            logger.warning("state file %s is unreadable (%s); starting with an empty memory", self.path, reason)
            return Saved(Memory(), None, None)
        return decode(document, str(self.path))

    def save(self, saved: Saved) -> None:
        """Raises OSError when the host refuses the write (and says so in `degraded`)."""
        try:
            _write_atomically(self.path, _encode(saved), sync=True)
        except OSError as exc:
            self.degraded = f"cannot write {self.path}: {exc.strerror or exc}"
            raise
        self.degraded = None

    def write_status(self, status: dict[str, Any]) -> None:
        _write_atomically(self.status_path, status, sync=False)


def _write_atomically(path: Path, document: dict[str, Any], sync: bool) -> None:
    """The old file stays whole until the new one is complete; a failed write leaves no temporary.
    (The status file is written at every step that changed it, up to 20 times a second: no text layer,
    and the directory made only when it is missing.)"""
    temporary = path.with_suffix(".tmp")
    data = json.dumps(document).encode("utf-8")  # (json.dump streams through the pure-Python encoder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o666)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, flags, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _encode(saved: Saved) -> dict[str, Any]:
    memory = saved.memory
    recent = list(dict.fromkeys([*(k[0] for k in memory.alerted), *memory.restarted]))[-KEEP_INVOCATIONS:]
    budget = memory.budget
    return {
        "version": 1,
        "cursor": saved.cursor,
        "invocation_id": saved.invocation_id,
        "alerted": sorted([list(k) for k in memory.alerted if k[0] in recent], key=str),
        "restarted": sorted(i for i in memory.restarted if i in recent),
        "budget": {"state": budget.state.value, "failures": [list(f) for f in budget.failures],
                   "last_restart": budget.last_restart, "restarts": budget.restarts,
                   "prints": [list(p) for p in budget.prints]},
        "last_restart": saved.last_restart,
        "pending": [asdict(a) for a in saved.pending],
        "guarded": saved.guarded,
    }


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _optional_text(value: object) -> bool:
    return value is None or isinstance(value, str)


class _Dropped:
    """Collects what was dropped while decoding, for one warning."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def __call__(self, what: str) -> None:
        self.items.append(what)


def decode(document: object, source: str = "state") -> Saved:
    """The saved memory, every field checked: an invalid value is dropped (with one warning naming
    them), what is valid is kept. Never raises."""
    dropped = _Dropped()
    if not isinstance(document, dict):
        logger.warning("%s: not a JSON object; starting with an empty memory", source)
        return Saved(Memory(), None, None)
    cursor, invocation = document.get("cursor"), document.get("invocation_id")
    if not isinstance(cursor, str) and cursor is not None:
        dropped("cursor")
    if not isinstance(invocation, str) and invocation is not None:
        dropped("invocation_id")
    alerted = set()
    for entry in _list(document.get("alerted"), "alerted", dropped):
        if isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str) and isinstance(entry[1], str) \
                and _optional_text(entry[2]) and _optional_text(entry[3]):
            alerted.add((entry[0], entry[1], entry[2], entry[3]))
        else:
            dropped("an alerted entry")
    restarted = set()
    for entry in _list(document.get("restarted"), "restarted", dropped):
        if isinstance(entry, str):
            restarted.add(entry)
        else:
            dropped("a restarted entry")
    memory = Memory(frozenset(alerted), frozenset(restarted), _budget(document.get("budget"), dropped))
    last_restart = _last_restart(document.get("last_restart"), dropped)
    pending = tuple(a for a in (action_from(e, dropped) for e in _list(document.get("pending"), "pending", dropped))
                    if a is not None)
    guarded = _guarded(document.get("guarded"), dropped)
    if dropped.items:
        logger.warning("%s: invalid values dropped: %s", source, ", ".join(dict.fromkeys(dropped.items)))
    return Saved(memory, cursor if isinstance(cursor, str) else None,
                 invocation if isinstance(invocation, str) else None, last_restart, pending, guarded)


ACTION_TEXT = [f.name for f in fields(Action) if f.name not in ("priority", "dry_run")]
ACTION_KINDS = ("alert", "restart", "hook", "evidence")


def action_from(value: object, dropped: Callable[[str], None]) -> Action | None:
    """A saved action, every field checked (None: dropped)."""
    if isinstance(value, dict) and value.get("kind") in ACTION_KINDS and isinstance(value.get("message"), str) \
            and value.get("verdict_kind") in PRIORITY and all(_optional_text(value.get(k)) for k in ACTION_TEXT) \
            and isinstance(value.get("priority"), int) and isinstance(value.get("dry_run", False), bool):
        return Action(**{f.name: value[f.name] for f in fields(Action) if f.name in value})
    dropped("a pending action")
    return None


def _guarded(value: object, dropped: Callable[[str], None]) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, dict) and action_from(value.get("action"), dropped) is not None \
            and _number(value.get("until")) is not None and _optional_text(value.get("control_group")):
        return value
    dropped("guarded")
    return None


LAST_RESTART_KEYS = ("invocation_id", "verdict", "message", "evidence", "quote")  # quote: Action.quote


def _last_restart(value: object, dropped: _Dropped) -> dict[str, str | None] | None:
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("invocation_id"), str) and all(
            _optional_text(value.get(key)) for key in LAST_RESTART_KEYS):
        return {key: value.get(key) for key in LAST_RESTART_KEYS}
    dropped("last_restart")
    return None


def _list(value: object, name: str, dropped: _Dropped) -> list[Any]:
    if isinstance(value, list):
        return value
    if value is not None:
        dropped(name)
    return []


def _budget(document: object, dropped: _Dropped) -> Budget:
    if not isinstance(document, dict):
        if document is not None:
            dropped("budget")
        return Budget()
    try:
        state = BudgetState(document.get("state", BudgetState.ARMED.value))
    except (ValueError, TypeError):
        dropped("budget.state")
        state = BudgetState.ARMED
    failures = []
    for entry in _list(document.get("failures"), "budget.failures", dropped):
        when = _number(entry[1]) if isinstance(entry, list) and len(entry) == 2 else None
        if when is not None and isinstance(entry[0], str):
            failures.append((entry[0], when))
        else:
            dropped("a budget.failures entry")
    raw_last = document.get("last_restart")
    last_restart = _number(raw_last)
    if last_restart is None and raw_last is not None:
        dropped("budget.last_restart")
    restarts = document.get("restarts", 0)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts < 1 << 32:
        dropped("budget.restarts")
        restarts = 0
    prints = [(p[0], p[1]) for p in _list(document.get("prints"), "budget.prints", dropped)
              if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)]
    return Budget(state, tuple(failures), last_restart, restarts, tuple(prints))
