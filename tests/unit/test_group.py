"""A node of a multi-node group (config `group:`, config/group.py): its ranks waiting for another node, and the
group's restart decision from Alertmanager's webhook, parsed and decided (pure; the receiver's
socket and the daemon acting on it: tests/integration/test_group_receiver.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from fakes import INV as FIRST
from fakes import MAIN_PID, TP8, Journal, up_to_capture
from phasewatch.config.load import Config, Group, parse_config
from phasewatch.config.sections import GroupReceiver
from phasewatch.errors import ConfigError
from phasewatch.judge import Judge
from phasewatch.records import MID_FAILED, MID_STARTED, GroupRestartRequest, JournalRecord, VerdictKind
from phasewatch.sinks.group_metrics import HOLD_OVER, ended_failures
from phasewatch.sinks.metrics.exporter import Exporter
from phasewatch.stages.s3_track.snapshot import InvocationView, Snapshot
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.group_decision import LocalStart, NotificationError, decide, parse_notification
from phasewatch.stages.s5_act.respond import Budget, BudgetState, Hold, Memory

GROUP = Group("kimi-tp16", 2)
UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0


def capture_for_all(j: Journal, ended: tuple[str, ...] = ()) -> None:
    up_to_capture(j)
    j.wait(1)
    j.every("Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB")
    j.every("Capture cuda graph end. Time elapsed: 10.12 s. mem usage=1.17 GB. avail mem=19.21 GB.", ended)


def test_a_node_whose_ranks_all_wait_in_lock_step_waits_for_another_node() -> None:
    j = Journal(Config(unit="sglang.service", group=GROUP))
    capture_for_all(j)
    j.wait(1300)  # past the capture's stall window (20m), every rank silent since the same moment
    [verdict] = j.verdicts()
    assert verdict.kind == VerdictKind.WAITING_FOR_NODE and verdict.rank is None
    assert verdict.phase == "cuda_graph_capture"
    assert "waiting for another node: all 8 ranks" in verdict.message and "group kimi-tp16" in verdict.message
    assert j.outcome() == "starting"
    # The same log without a group: eight stalls, as before.
    plain = Journal()
    capture_for_all(plain)
    plain.wait(1300)
    assert [v.kind for v in plain.verdicts()] == [VerdictKind.STALLED] * 8


def test_a_rank_that_hangs_while_its_peers_finished_is_the_nodes_own_culprit() -> None:
    j = Journal(Config(unit="sglang.service", group=GROUP))
    capture_for_all(j, ended=tuple(r for r in TP8 if r != "TP3"))
    j.wait(1300)
    assert [(v.kind, v.rank) for v in j.verdicts()] == [(VerdictKind.STALLED, "TP3")]


def test_every_rank_finished_and_waiting_for_the_next_collective_is_waiting_too() -> None:
    j = Journal(Config(unit="sglang.service", group=GROUP))
    capture_for_all(j, ended=TP8)
    j.wait(1300)
    assert [v.kind for v in j.verdicts()] == [VerdictKind.WAITING_FOR_NODE]


def rfc3339(ts: float) -> str:
    # Go's way: nanoseconds and a zone
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f123Z")


def notification(starts_at: float, group: str = "kimi-tp16", status: str = "firing") -> bytes:
    alert = {"status": status, "labels": {"alertname": "PhasewatchGroupRestart", "group": group,
                                          "culprit_node": "1", "culprit_rank": "TP12",
                                          "phase": "cuda_graph_capture", "reason": "stalled",
                                          "severity": "critical", "trigger": "verdict"},
             "annotations": {"held_nodes": "", "summary": "..."}, "startsAt": rfc3339(starts_at),
             "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "0f1e2d3c4b5a6978"}
    return json.dumps({"version": "4", "status": status, "receiver": "phasewatch-group",
                       "groupLabels": {"group": group}, "alerts": [alert]}).encode()


def test_an_alertmanager_notification_becomes_this_groups_requests_only() -> None:
    [request] = parse_notification(notification(T0 + 5), "kimi-tp16").requests
    assert request == GroupRestartRequest("kimi-tp16", "1", "stalled", pytest.approx(T0 + 5, abs=1e-3),
                                          "0f1e2d3c4b5a6978", "TP12", "cuda_graph_capture", None)
    assert request.why == "node 1 TP12 stalled in cuda_graph_capture"
    held = notification(T0).replace(b'"held_nodes": ""', b'"held_nodes": "node 0, node 2"')
    assert parse_notification(held, "kimi-tp16").requests[0].held_nodes == "node 0, node 2"
    other = parse_notification(notification(T0, group="other"), "kimi-tp16")
    assert other.requests == () and other.other_groups == 1
    assert parse_notification(notification(T0, status="resolved"), "kimi-tp16").requests == ()
    for bad in (b"{", b"[]", b'{"alerts": [1]}', notification(T0).replace(b"123Z\"", b"123\"")):
        with pytest.raises(NotificationError):
            parse_notification(bad, "kimi-tp16")


def test_a_notification_nested_too_deep_or_decided_in_the_future_is_refused() -> None:
    with pytest.raises(NotificationError, match="nested too deep"):
        parse_notification(b"[" * 100_000 + b"]" * 100_000, "kimi-tp16")
    assert parse_notification(notification(T0 + 299), "kimi-tp16", now=T0).requests  # (clock skew)
    with pytest.raises(NotificationError, match="more than 300s ahead of this node's clock"):
        parse_notification(notification(T0 + 301), "kimi-tp16", now=T0)


def request(starts_at: float = T0 + 60) -> GroupRestartRequest:
    return GroupRestartRequest("kimi-tp16", "1", "stalled", starts_at, "fp", "TP12", "cuda_graph_capture")


CONFIG = Config(unit=UNIT, group=GROUP)


def test_a_decision_restarts_a_start_up_that_began_before_it_once() -> None:
    local = LocalStart(INV, T0)
    first = decide(request(), local, Memory(), frozenset(), T0 + 70, CONFIG)
    assert first.act == "restart" and INV in first.memory.restarted
    assert first.message == f"{UNIT}: restarted by the group kimi-tp16: node 1 TP12 stalled in cuda_graph_capture; " \
                            "restarting this node"
    assert first.memory.budget.restarts == 1 and first.memory.budget.failures == ((INV, T0 + 70),)
    # a repeat, a resend after the restart (the new start-up began after startsAt), the HA twin
    assert decide(request(), local, first.memory, first.decided, T0 + 80, CONFIG).act == "ignored"
    assert decide(request(), LocalStart("new", T0 + 75), first.memory, frozenset(), T0 + 90, CONFIG).act == "ignored"
    assert decide(request(), local, first.memory, frozenset(), T0 + 71, CONFIG).act == "ignored"
    # a start-up that began after the decision is not restarted for it
    assert decide(request(T0 - 1), local, Memory(), frozenset(), T0 + 70, CONFIG).act == "ignored"


def test_a_hold_or_a_spent_budget_refuses_the_group_restart_once() -> None:
    local = LocalStart(INV, T0)
    held = decide(request(), local, Memory(), frozenset(), T0 + 70, CONFIG, Hold(T0 + 3670, "driver update"))
    assert held.act == "refused" and held.memory == Memory()
    assert "not restarting this node: held by the operator for 1h (driver update)" in held.message
    assert decide(request(), local, Memory(), held.decided, T0 + 71, CONFIG, Hold(T0 + 3670, "x")).act == "ignored"
    spent = Memory(budget=Budget(failures=tuple((f"i{n}", T0) for n in range(4))))
    refused = decide(request(), local, spent, frozenset(), T0 + 70, CONFIG)
    assert refused.act == "refused" and "restart budget spent" in refused.message
    assert refused.memory.budget.state is BudgetState.GAVE_UP


def test_the_group_config_is_validated() -> None:
    config = parse_config("unit: a.service\ngroup:\n  name: kimi-tp16\n  nodes: 2\n  node_rank: 1\n  receiver:\n"
                          "    listen: 10.250.0.1:9878\n    token_file: /etc/phasewatch/group.token\n")
    assert config.group == Group("kimi-tp16", 2, 1, GroupReceiver("10.250.0.1:9878", "/etc/phasewatch/group.token"))
    with pytest.raises(ConfigError, match="node_rank 2 is not below nodes"):
        parse_config("unit: a.service\ngroup:\n  name: k\n  nodes: 2\n  node_rank: 2\n")
    with pytest.raises(ConfigError, match="TLS needs both"):
        parse_config("unit: a.service\ngroup:\n  name: k\n  nodes: 2\n  receiver:\n    listen: 1.2.3.4:1\n"
                     "    token_file: /t\n    tls_cert: /c\n")




def group_samples(j: Journal) -> dict[str, list[tuple[dict[str, str], float]]]:
    exporter = Exporter(j.config, CollectorRegistry(), j.clock)
    exporter.publish(Judge(j.config, j.pipeline).judge(j.now), Memory())
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in exporter.collect()
            if f.name.startswith("phasewatch_group_")}


def test_the_group_metrics_name_the_culprit_and_the_waiting_node() -> None:
    culprit = Journal(Config(unit="sglang.service", group=replace(GROUP, node_rank=1)))
    capture_for_all(culprit, ended=tuple(r for r in TP8 if r != "TP3"))
    culprit.wait(1300)
    samples = group_samples(culprit)
    assert samples["phasewatch_group_culprit"] == [({"unit": "sglang.service", "group": "kimi-tp16", "node": "1",
                                                     "rank": "TP3", "phase": "cuda_graph_capture",
                                                     "reason": "stalled"}, 1.0)]
    assert samples["phasewatch_group_node"] == [({"unit": "sglang.service", "group": "kimi-tp16", "node": "1",
                                                  "nodes": "2"}, 1.0)]
    assert [v for _, v in samples["phasewatch_group_waiting"]] == [0.0]
    waiting = Journal(Config(unit="sglang.service", group=GROUP))
    capture_for_all(waiting)
    waiting.wait(1300)
    samples = group_samples(waiting)
    assert samples["phasewatch_group_culprit"] == []
    assert [v for _, v in samples["phasewatch_group_waiting"]] == [1.0]
    assert samples["phasewatch_group_node"][0][0]["node"] == ""  # these server_args say nnodes=1: no node rank


def test_a_node_that_failed_and_was_started_again_at_once_stays_the_culprit_for_a_while() -> None:
    j = Journal(Config(unit="sglang.service", group=GROUP))
    capture_for_all(j)
    j.systemd(MID_FAILED, "sglang.service: Failed with result 'exit-code'.", UNIT_RESULT="exit-code")
    j.wait(1)  # the unit's Restart=: a new start-up before any scrape saw the failed one
    second = "0123456789abcdef0123456789abcdee"
    j.pipeline.feed(JournalRecord(message="Started sglang.service - SGLang server.", realtime=j.now, pid=1,
                                  message_id=MID_STARTED, unit="sglang.service", invocation_id=second,
                                  extra={"JOB_TYPE": "start", "INVOCATION_ID": second}), j.now)
    j.pipeline.feed(JournalRecord(message="[2026-02-22 23:59:00] starting", realtime=j.now, pid=MAIN_PID + 1,
                                  invocation_id=second), j.now)
    snapshot = j.pipeline.snapshot()
    assert snapshot.current is not None and snapshot.current.invocation_id == second

    def judge(inv: InvocationView) -> tuple[Verdict, ...]:
        return j.pipeline.judge(j.now, Snapshot((inv,)))[0].verdicts

    held = ended_failures(snapshot, Memory(), j.now, judge)
    assert held and {reason for _, _, reason in held} <= {"crashed", "unit_failed"}
    # not once phasewatch (the group) restarted that start-up, nor after HOLD_OVER
    assert ended_failures(snapshot, Memory(restarted=frozenset({FIRST})), j.now, judge) == ()
    assert ended_failures(snapshot, Memory(), j.now + HOLD_OVER + 1, judge) == ()


def test_check_config_reads_the_token_as_the_daemon_will(tmp_path: Path) -> None:
    from phasewatch.commands.checkconfig import group_line

    token = tmp_path / "group.token"
    config = Config(unit=UNIT, group=replace(GROUP, receiver=GroupReceiver("10.0.0.2:9878", str(token))))
    with pytest.raises(ConfigError, match="cannot read the token"):
        group_line(config)
    token.write_text("a-token-long-enough\n")
    with pytest.raises(ConfigError, match=r"refused: readable by group and others \(mode 0644\)"):
        group_line(config)  # (the umask's mode: every local user could read it)
    token.chmod(0o400)
    assert group_line(config) == (f"group kimi-tp16 of 2 nodes, node rank from server_args; Alertmanager webhook on "
                                  f"10.0.0.2:9878 (http), token file {token} readable")
    assert group_line(Config(unit=UNIT, group=replace(GROUP, node_rank=1))).startswith(
        "group kimi-tp16 of 2 nodes, node 1; no receiver")
