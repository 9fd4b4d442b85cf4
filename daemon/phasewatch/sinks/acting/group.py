"""Sink: the group's restart decisions (PhasewatchGroupRestart, taken in by
sources/receiver/alert_receiver.py) acted on through the actor: decided by stages/s5_act/group_decision.py,
executed like any restart (remembered first, then the journal alert, then the restart), and the
decision kept for the history of the start-up it ended (`ended_by`)."""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from ...config.load import Config
from ...judge import Step
from ...records import GroupRestartRequest
from ...stages.s5_act.group_decision import LocalStart, decide
from ...stages.s5_act.respond import Action, ActionKind, Hold, Priority, Response
from ...systemd_unit import UnitFacts
from .actor import UNKNOWN, ActorSink

logger = logging.getLogger(__name__)


class Counted(Protocol):
    """The receiver's count of decisions by act (sources/receiver/alert_receiver.AlertReceiverSource)."""

    def handled(self, act: str) -> None: ...


class GroupRestartsSink:
    def __init__(self, config: Config, actor: ActorSink, receiver: Counted | None,
                 hold: Callable[[float], Hold | None], read_facts: Callable[[], UnitFacts | None]) -> None:
        self.config = config
        self.actor, self.receiver = actor, receiver  # (None: no group receiver)
        self.hold = hold
        self.read_facts = read_facts
        self.decided: frozenset[tuple[str, float]] = frozenset()  # (fingerprint, startsAt) handled here
        self.ended_by: dict[str, str] = {}  # invocation -> what ended it from outside (for the history)

    def tell(self, step: Step) -> None:
        """The requests the receiver took in at this step (sources/receiver/alert_receiver.py)."""
        for request in step.requests:
            self._handle(request, step)

    def carrying(self, old: GroupRestartsSink | None) -> GroupRestartsSink:
        """This sink (a reloaded config's) with the decisions `old` made (the receiver: the same one)."""
        if old is not None:
            if self.config.group != old.config.group:
                logger.warning("[%s] group changed: its receiver takes it when phasewatch restarts", self.config.unit)
            self.decided, self.ended_by = old.decided, old.ended_by
        return self

    def _handle(self, request: GroupRestartRequest, step: Step) -> None:
        config, now, actor = self.config, step.at, self.actor
        inv = step.snapshot.current
        local = LocalStart(inv.invocation_id, inv.started_at) if inv is not None else LocalStart(None, None)
        decision = decide(request, local, actor.memory, self.decided, now, config, self.hold(now))
        self.decided = decision.decided
        if self.receiver is not None:
            self.receiver.handled(decision.act)  # phasewatch_group_restarts_total{act}
        if decision.act == "ignored" or inv is None:
            logger.info("[%s] %s", config.unit, decision.message)
            return
        kinds = (ActionKind.ALERT, ActionKind.RESTART) if decision.act == "restart" else (ActionKind.ALERT,)
        if decision.act == "restart":
            self.ended_by[inv.invocation_id] = f"restarted by the group: {request.why}"
        actions = tuple(Action(kind=kind, message=decision.message, verdict_kind="group_restart",
                               priority=Priority.of("group_restart"), invocation_id=inv.invocation_id,
                               phase=request.phase, rank=request.culprit_rank, cause=request.reason,
                               dry_run=config.dry_run) for kind in kinds)
        actor.execute(Response(actions, decision.memory, actor.retry_at), inv, self.read_facts() or UNKNOWN)
