"""Edge: what the daemon must remember across its own restarts, in its state directory.

One JSON file, written atomically (temporary file, fsync, rename): the journal cursor, the
invocation it belongs to, which verdicts were alerted, which invocations were restarted, and the
restart budget. A corrupt or unreadable file is reported and replaced, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .respond import Budget, BudgetState, Memory

logger = logging.getLogger(__name__)
KEEP_INVOCATIONS = 32


@dataclass(frozen=True)
class Saved:
    memory: Memory
    cursor: str | None
    invocation_id: str | None


class StateStore:
    def __init__(self, directory: str | Path, unit: str) -> None:
        self.path = Path(directory) / f"{unit}.state.json"
        self.status_path = Path(directory) / f"{unit}.status.json"

    def load(self) -> Saved:
        try:
            document = json.loads(self.path.read_text("utf-8"))
            return _decode(document)
        except FileNotFoundError:
            return Saved(Memory(), None, None)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("state file %s is unreadable (%s); starting with an empty memory", self.path, exc)
            return Saved(Memory(), None, None)

    def save(self, saved: Saved) -> None:
        _write_atomically(self.path, _encode(saved), sync=True)

    def write_status(self, status: dict[str, Any]) -> None:
        _write_atomically(self.status_path, status, sync=False)


def _write_atomically(path: Path, document: dict[str, Any], sync: bool) -> None:
    temporary = path.with_suffix(".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temporary, path)


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
                   "last_restart": budget.last_restart, "restarts": budget.restarts},
    }


def _decode(document: dict[str, Any]) -> Saved:
    budget_doc = document["budget"]
    budget = Budget(BudgetState(budget_doc["state"]), tuple((str(i), float(t)) for i, t in budget_doc["failures"]),
                    budget_doc["last_restart"], int(budget_doc["restarts"]))
    alerted = frozenset((str(k[0]), str(k[1]), k[2], k[3]) for k in document["alerted"])
    memory = Memory(alerted, frozenset(str(i) for i in document["restarted"]), budget)
    return Saved(memory, document.get("cursor"), document.get("invocation_id"))
