"""Sink: the group's restart decisions (PhasewatchGroupRestart, taken in by
sources/alert_receiver.py) acted on through the responder: decided by stages/s5_act/group_decision.py,
executed like any restart (remembered first, then the journal alert, then the restart), and the
decision kept for the history of the start-up it ended."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..config.load import Config
from ..records import GroupRestartRequest
from ..sources.receiver.alert_receiver import AlertReceiver
from ..stages.s5_act.group_decision import LocalStart, decide
from ..stages.s5_act.respond import PRIORITY, Action, Response
from ..systemd_unit import UnitFacts
from .metrics import Exporter
from .responder import Responder

logger = logging.getLogger(__name__)


class GroupRestarts:
    def __init__(self, responder: Responder, receiver: AlertReceiver | None = None,
                 exporter: Exporter | None = None) -> None:
        self.responder, self.receiver = responder, receiver  # (None: no group receiver)
        self.decided: frozenset[tuple[str, float]] = frozenset()  # (fingerprint, startsAt) handled here
        if exporter is not None and receiver is not None:
            exporter.group_counts = receiver.counts

    def handle(self, requests: Iterable[GroupRestartRequest] | None = None) -> None:
        """The requests given, else those the receiver took in since the last step."""
        if requests is None:
            requests = self.receiver.take() if self.receiver is not None else ()
        for request in requests:
            self._handle(request)

    def counted(self, act: str) -> None:
        if self.receiver is not None:
            self.receiver.handled(act)  # phasewatch_group_restarts_total{act}

    def reconfigured(self, config: Config) -> None:
        if config.group != self.responder.config.group:
            logger.warning("[%s] group changed: its receiver takes it when phasewatch restarts", config.unit)

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
