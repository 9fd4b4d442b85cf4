"""The group's metrics (config `group:`, docs/multi-node.md): what the group rules of
config/prometheus/phasewatch-rules.yml join on. Pure: from the published judgement and counts.

    phasewatch_group_node{unit, group, node, nodes}                 1: this node's place in its group
    phasewatch_group_culprit{unit, group, node, rank, phase, reason} 1 per failure of the current start-up
    phasewatch_group_waiting{unit, group, node}                      1 while every rank waits for another node
    phasewatch_group_restarts_total{unit, group, act}                group decisions handled here
    phasewatch_group_webhook_refused_total{unit, reason}             webhook requests refused
    phasewatch_group_webhook_notifications_total{unit}               notifications accepted
    phasewatch_group_receiver_up{unit, group}                        1 listening, 0 not (with a receiver)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..config.load import Config
from ..records import FAILED_STARTUP, VerdictKind
from ..stages.s3_track.snapshot import UP_STATES, InvocationView, Snapshot, UnitState
from ..stages.s4_judge.group_wait import node_rank
from ..stages.s4_judge.verdict import Verdict
from ..stages.s5_act.respond import Memory
from .metric_families import Published

GROUP_ACTS = ("restart", "refused", "ignored")
# A start-up that crashed, lost a rank or failed by itself, and was started again at once (the unit's
# Restart=) before Prometheus scraped it, is still a culprit for this long into the next start-up.
HOLD_OVER = 120.0
Culprit = tuple[str, str, str]  # rank, phase, reason
REFUSAL_REASONS = ("no_token", "bad_token", "method", "path", "too_large", "bad_payload", "other_group",
                   "timeout", "tls", "busy", "error")


def ended_failures(snapshot: Snapshot, memory: Memory, now: float,
                   judge: Callable[[InvocationView], Sequence[Verdict]]) -> tuple[Culprit, ...]:
    """The failures of the start-up before the current one, while the current one is younger than
    HOLD_OVER: only of one that failed by itself (not one phasewatch restarted, nor one stopped)."""
    if len(snapshot.invocations) < 2:
        return ()
    previous, current = snapshot.invocations[-2], snapshot.invocations[-1]
    if current.state in UP_STATES or current.started_at is None or now - current.started_at > HOLD_OVER:
        return ()
    if previous.invocation_id in memory.restarted or (previous.state is not UnitState.FAILED
                                                      and not previous.restart_scheduled):
        return ()  # (restarted by phasewatch, or stopped: a stop ends in stopped, a failure in failed)
    verdicts = judge(previous)
    out = [(v.rank or "", v.phase or "", v.kind.value) for v in verdicts
           if v.kind in (VerdictKind.CRASHED, VerdictKind.RANK_DIED)]
    if previous.state is UnitState.FAILED and not any(v.kind == VerdictKind.CRASHED for v in verdicts):
        out.append(("", "", "unit_failed"))
    return tuple(dict.fromkeys(out))


def group_families(published: Published, config: Config, counts: Mapping[str, Mapping[str, int]],
                   ended: Sequence[Culprit] = ()) -> list[Metric]:
    group = config.group
    if group is None:
        return []
    unit, inv = config.unit, published.invocation
    rank = node_rank(config, inv)
    if rank is None and published.server is not None and published.server.nnodes > 1 and group.node_rank is None:
        rank = published.server.node_rank
    node = "" if rank is None else str(rank)
    member = GaugeMetricFamily("phasewatch_group_node", "1: this phasewatch watches node `node` of the `nodes` "
                               "of group `group` (node empty until the server's arguments say it)",
                               labels=["unit", "group", "node", "nodes"])
    member.add_metric([unit, group.name, node, str(group.nodes)], 1.0)
    culprit = GaugeMetricFamily("phasewatch_group_culprit", "1 for each failure of this node's current start-up "
                                "(stalled, straggler, crashed, rank_died, unit_failed) that its group restarts for",
                                labels=["unit", "group", "node", "rank", "phase", "reason"])
    waiting = GaugeMetricFamily("phasewatch_group_waiting", "1 while every rank of this node waits for another "
                                "node (waiting_for_node), 0 otherwise", labels=["unit", "group", "node"])
    verdicts = published.judgement.verdicts if published.judgement is not None else ()
    starting = inv is not None and inv.state not in UP_STATES
    seen: set[tuple[str, str, str]] = set()
    for verdict in verdicts:
        if not starting or verdict.kind not in FAILED_STARTUP:
            continue
        labels = (verdict.rank or "", verdict.phase or "", verdict.kind.value)
        if labels not in seen:
            seen.add(labels)
            culprit.add_metric([unit, group.name, node, *labels], 1.0)
    if inv is not None and inv.state is UnitState.FAILED and not any(v.kind == VerdictKind.CRASHED for v in verdicts):
        seen.add(("", "", "unit_failed"))
        culprit.add_metric([unit, group.name, node, "", "", "unit_failed"], 1.0)
    for labels in ended:
        if labels not in seen:
            seen.add(labels)
            culprit.add_metric([unit, group.name, node, *labels], 1.0)
    waits = any(v.kind == VerdictKind.WAITING_FOR_NODE for v in verdicts) and starting
    waiting.add_metric([unit, group.name, node], 1.0 if waits else 0.0)
    restarts = CounterMetricFamily("phasewatch_group_restarts", "Group restart decisions (PhasewatchGroupRestart) "
                                   "handled by this node: restart, refused (held, budget spent), ignored (repeats, "
                                   "resends, decided before this start-up)", labels=["unit", "group", "act"])
    acts = counts.get("acts", {})
    for act in GROUP_ACTS:
        restarts.add_metric([unit, group.name, act], float(acts.get(act, 0)))
    refused = CounterMetricFamily("phasewatch_group_webhook_refused", "Requests to the Alertmanager webhook "
                                  "receiver refused, by reason", labels=["unit", "reason"])
    reasons = counts.get("refused", {})
    for reason in REFUSAL_REASONS:
        refused.add_metric([unit, reason], float(reasons.get(reason, 0)))
    accepted = CounterMetricFamily("phasewatch_group_webhook_notifications", "Alertmanager notifications the "
                                   "receiver accepted", labels=["unit"])
    accepted.add_metric([unit], float(counts.get("accepted", {}).get("", 0)))
    families: list[Metric] = [member, culprit, waiting, restarts, refused, accepted]
    if group.receiver is not None:
        up = GaugeMetricFamily("phasewatch_group_receiver_up", "1 while the Alertmanager webhook receiver "
                               "listens, 0 while it cannot bind its address (no group restart on this node)",
                               labels=["unit", "group"])
        up.add_metric([unit, group.name], float(counts.get("up", {}).get("", 0)))
        families.append(up)
    return families


def group_document(published: Published, config: Config) -> dict[str, object] | None:
    """`/status`'s `group`: the group, this node, whether it waits for another node (None: no group)."""
    group = config.group
    if group is None:
        return None
    inv = published.invocation
    rank = node_rank(config, inv)
    verdicts = published.judgement.verdicts if published.judgement is not None else ()
    waiting = next((v for v in verdicts if v.kind == VerdictKind.WAITING_FOR_NODE), None)
    return {"name": group.name, "nodes": group.nodes, "node": rank,
            "node_from": "config" if group.node_rank is not None else "server_args" if rank is not None else None,
            "receiver": group.receiver.listen if group.receiver is not None else None,
            "waiting": waiting.message if waiting is not None and inv is not None and inv.state not in UP_STATES
            else None}
