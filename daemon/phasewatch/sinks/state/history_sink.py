"""Sink: start-ups that reached ready, or ended without, go into the history once (sinks/history.py),
with what ended them from outside (the group's decision) and what to do about them; a start-up of a
fingerprint recorded makes the judge learn that fingerprint's limits again."""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from typing import Callable

from ...durations import format_duration
from ...judge import Step
from ...pipeline import Judgement
from ...records import FAILED_STARTUP, VerdictKind
from ...stages.s3_track.snapshot import ENDED_STATES, UP_STATES, InvocationView
from ...stages.s5_act.restart_gate import fingerprint as failure_print
from ..acting.actor import ready_time
from ..history import History, summarize
from .host import DegradedHost

logger = logging.getLogger(__name__)
LEFTOVERS_BEFORE = 60.0


class HistorySink:
    def __init__(self, unit: str, history: History, host: DegradedHost, forget: Callable[[str], None],
                 ended_by: Callable[[str], str | None]) -> None:
        self.unit = unit
        self.history = history
        self.host = host
        self.forget = forget  # a fingerprint's start-up recorded: the judge learns its limits again
        self.ended_by = ended_by  # invocation -> what ended it from outside (the group's decision)
        self.leftovers_seen: Callable[[], float | None] = lambda: None  # when survivors of a stop were last found
        self.recorded: set[str] = set()

    def carrying(self, old: HistorySink | None) -> HistorySink:
        """This sink (made again on a reload, for the judge and group it tells) with the start-ups `old` recorded."""
        if old is not None:
            self.recorded = old.recorded
        return self

    def tell(self, step: Step) -> None:
        for judgement in step.judgements.values():
            self._record(judgement, judgement.invocation is step.snapshot.current, step.at)

    def _record(self, judgement: Judgement, current: bool, now: float) -> None:
        inv = judgement.invocation
        if inv.invocation_id in self.recorded:
            return
        ready = inv.state in UP_STATES
        ended = not current and inv.state in ENDED_STATES
        if not (ready or ended):
            return
        self.recorded.add(inv.invocation_id)
        marks = tuple((v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts)
        cause = next((v.cause for v in judgement.verdicts if v.kind != VerdictKind.LINES_LOST), None)
        if cause == "oom" and not ready and after_leftovers(inv, self.leftovers_seen(), now):
            cause = "oom after leftovers"  # the old start-up's memory, not the model's: said as such
        ended_at = ready_time(inv) if ready else (inv.stopped_at or inv.last_ts or now)
        record = summarize(self.unit, inv, "ready" if ready else judgement.outcome, cause, ended_at or now, marks)
        if record is None:
            return
        record = replace(record, ended_by=self.ended_by(inv.invocation_id),
                         remedy=next((v.remedy.text for v in judgement.verdicts if v.remedy is not None), None),
                         failure=None if ready else next((failure_print(v) for v in judgement.verdicts
                                                          if v.kind in FAILED_STARTUP), None))
        try:
            if self.history.add(record):
                logger.info("[%s] start-up %s recorded: %s in %s", self.unit, inv.invocation_id, record.outcome,
                            format_duration(record.duration))
                self.forget(record.fingerprint)
        except sqlite3.Error as exc:
            logger.error("[%s] cannot write history: %s", self.unit, exc)
        self.host.check()


def after_leftovers(inv: InvocationView, seen: float | None, now: float) -> bool:
    """Survivors of a stop were found within LEFTOVERS_BEFORE before this start-up began (a guarded
    start waits for them) or while it ran (a stop phasewatch did not make: found after the new start)."""
    began = inv.started_at
    return seen is not None and began is not None and began - LEFTOVERS_BEFORE <= seen <= (inv.stopped_at or now)
