"""A failing host: the state directory full, read-only or unwritable. phasewatch keeps going with its
history and state in memory; this says so once per change and alerts once per run."""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Protocol

from ...stages.s5_act.respond import Action, ActionKind, Priority

logger = logging.getLogger(__name__)


class Degradable(Protocol):
    @property
    def degraded(self) -> str | None: ...


class DegradedHost:
    def __init__(self, unit: str, alert: Callable[[Action], None], history: Degradable | None,
                 store: Degradable) -> None:
        self.unit = unit
        self.alert = alert
        self.history = history
        self.store = store
        self.degraded: Mapping[str, str] = {}  # "history"/"state" -> why it is kept in memory only
        self.alerted: set[str] = set()  # alerted once per run

    def check(self) -> None:
        degraded = {what: why for what, why in (("history", self.history.degraded if self.history else None),
                                                ("state", self.store.degraded)) if why is not None}
        if degraded == self.degraded:
            return
        for what in self.degraded.keys() - degraded.keys():
            logger.info("[%s] %s is written to the state directory again", self.unit, what)
        for what, why in degraded.items():
            if self.degraded.get(what) is not None:
                continue
            logger.error("[%s] %s kept in memory only: %s", self.unit, what, why)
            if what in self.alerted:
                continue
            self.alerted.add(what)
            self.alert(Action(
                kind=ActionKind.ALERT, verdict_kind="state_degraded", priority=Priority.of("state_degraded"),
                message=f"{self.unit}: phasewatch cannot write its {what} ({why}); it keeps watching and "
                        f"acting with it in memory only", cause=what))
        self.degraded = degraded
