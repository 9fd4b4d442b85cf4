"""The group's decision on this node: Alertmanager's webhook notification -> restart requests ->
what to do here. Pure (the listener is sources/receiver/alert_receiver.py, the acting sinks/acting/group.py).

A firing PhasewatchGroupRestart of this node's group restarts the local unit once per decision:
only when the local start-up began before the alert's `startsAt` (a repeat, a resend after the
restart, the second Alertmanager of an HA pair find a start-up begun after it) and was not already
restarted; a hold refuses it, and so does a spent restart budget; each is said once per decision.
A `startsAt` more than MAX_AHEAD past the node's clock is refused: no decision is made in the future.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime

from ...config.load import Config
from ...durations import format_duration
from ...records import GroupRestartRequest
from .respond import Budget, BudgetState, Hold, Memory

ALERT_NAME = "PhasewatchGroupRestart"
MAX_ALERTS = 1000
LABEL_RE = re.compile(r"[\w.:@/, -]{1,128}")
MAX_AHEAD = 300.0  # seconds a decision's startsAt may be ahead of this node's clock (NTP skew)


class NotificationError(ValueError):
    """A webhook body that is no Alertmanager notification (version 4)."""


@dataclass(frozen=True)
class Notification:
    requests: tuple[GroupRestartRequest, ...]  # firing PhasewatchGroupRestart alerts of this group
    other_groups: int  # PhasewatchGroupRestart alerts for another group: refused
    ignored: int  # other alerts, and resolved ones


def _label(labels: dict[str, object], name: str) -> str | None:
    value = labels.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not LABEL_RE.fullmatch(value):
        raise NotificationError(f"label {name}: expected a short plain value")
    return value


def _time(raw: object, now: float | None) -> float:
    if not isinstance(raw, str):
        raise NotificationError("startsAt: expected an RFC 3339 time")
    text = raw.replace("Z", "+00:00")
    text = re.sub(r"\.(\d{6})\d+", r".\1", text)  # Go writes nanoseconds; Python reads microseconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise NotificationError(f"startsAt: expected an RFC 3339 time, got {raw[:40]!r}") from None
    if moment.tzinfo is None:
        raise NotificationError("startsAt: the time has no zone")
    if now is not None and moment.timestamp() > now + MAX_AHEAD:
        raise NotificationError(f"startsAt {raw[:40]} is more than {MAX_AHEAD:g}s ahead of this node's clock")
    return moment.timestamp()


def parse_notification(body: bytes, group: str, now: float | None = None) -> Notification:
    """Alertmanager's webhook JSON -> this group's restart requests (raises NotificationError).
    `now` (wall clock) refuses a decision that starts in the future; None: no such check."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotificationError(f"not JSON: {exc}") from None
    except RecursionError:
        raise NotificationError("not JSON: nested too deep") from None
    if not isinstance(document, dict) or not isinstance(document.get("alerts"), list):
        raise NotificationError("expected an object with an alerts list (Alertmanager webhook, version 4)")
    alerts = document["alerts"]
    if len(alerts) > MAX_ALERTS:
        raise NotificationError(f"more than {MAX_ALERTS} alerts in one notification")
    requests: list[GroupRestartRequest] = []
    other = ignored = 0
    for alert in alerts:
        if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
            raise NotificationError("an alert without labels")
        labels = alert["labels"]
        if labels.get("alertname") != ALERT_NAME or alert.get("status") != "firing":
            ignored += 1
            continue
        if _label(labels, "group") != group:
            other += 1
            continue
        annotations = alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
        fingerprint = alert.get("fingerprint")
        culprit, reason = _label(labels, "culprit_node"), _label(labels, "reason")
        if culprit is None or reason is None:
            raise NotificationError("PhasewatchGroupRestart without culprit_node and reason")
        requests.append(GroupRestartRequest(
            group, culprit, reason, _time(alert.get("startsAt"), now),
            fingerprint if isinstance(fingerprint, str) and LABEL_RE.fullmatch(fingerprint) else
            f"{culprit}/{reason}", _label(labels, "culprit_rank"), _label(labels, "phase"),
            _label(annotations, "held_nodes") if annotations else None))
    return Notification(tuple(requests), other, ignored)


@dataclass(frozen=True)
class LocalStart:
    """The start-up this node runs now, as the decision needs it."""

    invocation_id: str | None
    started_at: float | None  # wall clock


@dataclass(frozen=True)
class GroupDecision:
    act: str  # "restart", "refused" (said in a journal alert) or "ignored" (logged)
    message: str
    memory: Memory
    decided: frozenset[tuple[str, float]]  # decisions handled on this node


def decide(request: GroupRestartRequest, local: LocalStart, memory: Memory,
           decided: frozenset[tuple[str, float]], now: float, config: Config,
           hold: Hold | None = None) -> GroupDecision:
    unit, why = config.unit, request.why
    if request.key in decided:
        return GroupDecision("ignored", f"{unit}: group decision ({why}) already handled", memory, decided)
    if local.invocation_id is None or local.started_at is None:
        return GroupDecision("ignored", f"{unit}: group restart ({why}) with no start-up here to restart",
                             memory, decided)
    if local.started_at >= request.starts_at:
        return GroupDecision("ignored", f"{unit}: group restart ({why}) decided before this start-up began: "
                             "done already", memory, decided)
    if local.invocation_id in memory.restarted:
        return GroupDecision("ignored", f"{unit}: group restart ({why}): this start-up was restarted already",
                             memory, decided)
    handled = decided | {request.key}
    group = config.group.name if config.group is not None else request.group
    if hold is not None and hold.active(now):
        return GroupDecision("refused", f"{unit}: the group {group} decided a restart ({why}); not restarting "
                             f"this node: held by the operator for {format_duration(hold.until - now)} "
                             f"({hold.reason})", memory, handled)
    budget = _counted(memory.budget, local.invocation_id, now)
    limits = config.restart_budget
    if budget.state is BudgetState.GAVE_UP or len(budget.within(now, limits.window)) > limits.max:
        spent = replace(memory, budget=replace(budget, state=BudgetState.GAVE_UP))
        return GroupDecision("refused", f"{unit}: the group {group} decided a restart ({why}); not restarting "
                             "this node: restart budget spent", spent, handled)
    budget = replace(budget, last_restart=now, restarts=budget.restarts + 1)
    after = replace(memory, budget=budget, restarted=memory.restarted | {local.invocation_id})
    verb = "would restart (dry run)" if config.dry_run else "restarting"
    held = f" (held: {request.held_nodes})" if request.held_nodes else ""
    return GroupDecision("restart", f"{unit}: restarted by the group {group}: {why}{held}; {verb} this node",
                         after, handled)


def _counted(budget: Budget, invocation: str, now: float) -> Budget:
    """The group restart counts its start-up as a failed one (once)."""
    if invocation in {f[0] for f in budget.failures}:
        return budget
    return replace(budget, failures=budget.failures + ((invocation, now),))
