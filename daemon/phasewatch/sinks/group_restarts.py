"""Sink: the group's restart decisions (PhasewatchGroupRestart, taken in by
sources/alert_receiver.py) acted on through the responder: decided by stages/group_decision.py,
executed like any restart (remembered first, then the journal alert, then the restart), and the
decision kept for the history of the start-up it ended."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..records import GroupRestartRequest
from ..stages.group_decision import LocalStart, decide
from ..stages.respond import PRIORITY, Action, Response
from .actions import UnitFacts
from .responder import Responder

logger = logging.getLogger(__name__)


class GroupRestarts:
    def __init__(self, responder: Responder, counted: Callable[[str], None] = lambda act: None) -> None:
        self.responder = responder
        self.counted = counted  # phasewatch_group_restarts_total{act}
        self.decided: frozenset[tuple[str, float]] = frozenset()  # (fingerprint, startsAt) handled here

    def handle(self, requests: Iterable[GroupRestartRequest]) -> None:
        for request in requests:
            self._handle(request)

    def _handle(self, request: GroupRestartRequest) -> None:
        responder = self.responder
        config, now = responder.config, responder.clock.wall()
        inv = responder.pipeline.current()
        local = LocalStart(inv.invocation_id, inv.started_at) if inv is not None else LocalStart(None, None)
        decision = decide(request, local, responder.memory, self.decided, now, config, responder.hold(now))
        self.decided = decision.decided
        self.counted(decision.act)
        if decision.act == "ignored" or inv is None:
            logger.info("[%s] %s", config.unit, decision.message)
            return
        alert = Action("alert", decision.message, "group_restart", PRIORITY["group_restart"], inv.invocation_id,
                       request.phase, request.culprit_rank, request.reason, config.dry_run)
        actions: tuple[Action, ...] = (alert,)
        if decision.act == "restart":
            responder.ended_by[inv.invocation_id] = f"restarted by the group: {request.why}"
            actions += (Action("restart", decision.message, "group_restart", PRIORITY["group_restart"],
                               inv.invocation_id, request.phase, request.culprit_rank, request.reason,
                               config.dry_run),)
        facts = responder.read_facts() or UnitFacts("unknown", "unknown", None)
        responder.execute(Response(actions, decision.memory, responder.retry_at), inv, facts)
