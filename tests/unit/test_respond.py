"""respond(): what phasewatch does about verdicts. Pure: verdicts, memory, unit status, now."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from phasewatch.config.load import Config, RestartBudget
from phasewatch.sinks.state.store import Saved, StateStore
from phasewatch.stages.s4_judge.verdict import MemoryKey, Verdict
from phasewatch.stages.s5_act.respond import (
    CRASH_SETTLE,
    PRIORITY,
    BudgetState,
    Memory,
    Response,
    UnitStatus,
    reset_budget,
    respond,
)

UNIT = "sglang-kimi.service"
# (same_failure: these stalls are alike on purpose; the refusal of alike ones is test_gpu_fault.py's)
CONFIG = Config(unit=UNIT, restart_budget=RestartBudget(max=3, window=6 * 3600, backoff=300, same_failure=99))
T0 = 1_800_000_000.0


def stall(invocation: str = "inv-1", rank: str = "TP3", at: float = T0) -> Verdict:
    return Verdict("stalled", invocation, "draft_cuda_graph_capture", rank, "deadline",
                   f"{UNIT}: {rank} stalled in draft_cuda_graph_capture for 21m (limit 20m)", at)


def running(invocation: str = "inv-1") -> UnitStatus:
    return UnitStatus("activating", "start", invocation)


def kinds(response: Response) -> list[tuple[str, str]]:
    return [(a.kind, a.verdict_kind) for a in response.actions]


def test_armed_to_restart_on_first_stall() -> None:
    response = respond([stall()], Memory(), running(), T0, CONFIG)
    assert kinds(response) == [("alert", "stalled"), ("restart", "stalled")]
    alert = response.actions[0]
    assert alert.message.endswith("; restarting (1 of 3 in 6h)")
    assert (alert.priority, alert.rank, alert.phase, alert.invocation_id) == (4, "TP3", "draft_cuda_graph_capture",
                                                                              "inv-1")
    assert response.memory.restarted == {"inv-1"}
    assert response.memory.budget.failures == (("inv-1", T0),)
    assert response.memory.budget.last_restart == T0


def test_the_same_verdict_is_never_acted_on_twice() -> None:
    first = respond([stall()], Memory(), running(), T0, CONFIG)
    again = respond([stall(at=T0 + 5)], first.memory, running(), T0 + 5, CONFIG)
    assert again.actions == ()
    assert again.memory == first.memory


def test_a_second_rank_of_the_same_start_up_is_alerted_but_not_restarted_again() -> None:
    first = respond([stall()], Memory(), running(), T0, CONFIG)
    second = respond([stall(), stall(rank="TP5")], first.memory, running(), T0 + 1, CONFIG)
    assert kinds(second) == [("alert", "stalled")]
    assert second.actions[0].rank == "TP5"


def test_operator_stopped_unit_is_not_restarted() -> None:
    response = respond([stall()], Memory(), UnitStatus("inactive", "dead", "inv-1"), T0, CONFIG)
    assert kinds(response) == [("alert", "stalled")]
    assert "not restarting: the unit is inactive (stopped by the operator?)" in response.actions[0].message
    assert response.memory.restarted == frozenset()


def test_pending_stop_job_is_not_fought() -> None:
    response = respond([stall()], Memory(), replace(running(), job_pending=True), T0, CONFIG)
    assert kinds(response) == [("alert", "stalled")]


def test_systemd_restart_scheduled_is_left_to_systemd() -> None:
    response = respond([stall()], Memory(), UnitStatus("activating", "auto-restart", "inv-1"), T0, CONFIG)
    assert kinds(response) == [("alert", "stalled")]
    assert "systemd has a restart scheduled (Restart=)" in response.actions[0].message


def test_a_start_up_already_replaced_is_not_restarted() -> None:
    response = respond([stall("inv-1")], Memory(), running("inv-2"), T0, CONFIG)
    assert kinds(response) == [("alert", "stalled")]
    assert "already started again" in response.actions[0].message


def test_armed_waits_for_backoff_then_restarts() -> None:
    first = respond([stall("inv-1")], Memory(), running("inv-1"), T0, CONFIG)
    early = respond([stall("inv-2", at=T0 + 60)], first.memory, running("inv-2"), T0 + 60, CONFIG)
    assert kinds(early) == [("alert", "stalled")]
    assert early.actions[0].message.endswith("; restarting in 4m (backoff)")
    assert early.retry_at == T0 + 300
    assert respond([stall("inv-2")], early.memory, running("inv-2"), T0 + 299, CONFIG).actions == ()
    later = respond([stall("inv-2")], early.memory, running("inv-2"), T0 + 300, CONFIG)
    assert kinds(later) == [("restart", "stalled")]
    assert later.memory.budget.restarts == 2


def test_armed_to_gave_up_when_the_budget_is_spent() -> None:
    config = replace(CONFIG, restart_budget=RestartBudget(max=1, window=3600, backoff=0, same_failure=99))
    first = respond([stall("inv-1")], Memory(), running("inv-1"), T0, config)
    assert kinds(first) == [("alert", "stalled"), ("restart", "stalled")]
    second = respond([stall("inv-2")], first.memory, running("inv-2"), T0 + 60, config)
    assert kinds(second) == [("alert", "gave_up"), ("alert", "stalled")]
    gave_up = second.actions[0]
    assert gave_up.priority == PRIORITY["gave_up"] == 2
    assert gave_up.message.startswith(f"{UNIT}: restart budget spent (2 failed start-ups in 1h, at most 1)")
    assert second.memory.budget.state is BudgetState.GAVE_UP
    third = respond([stall("inv-3")], second.memory, running("inv-3"), T0 + 120, config)
    assert kinds(third) == [("alert", "stalled")]
    assert "restart budget spent" in third.actions[0].message


def test_failures_older_than_the_window_do_not_count() -> None:
    config = replace(CONFIG, restart_budget=RestartBudget(max=1, window=3600, backoff=0, same_failure=99))
    first = respond([stall("inv-1")], Memory(), running("inv-1"), T0, config)
    later = respond([stall("inv-2", at=T0 + 4000)], first.memory, running("inv-2"), T0 + 4000, config)
    assert kinds(later) == [("alert", "stalled"), ("restart", "stalled")]


def test_gave_up_to_armed_on_reset() -> None:
    memory = Memory(budget=replace(Memory().budget, state=BudgetState.GAVE_UP, failures=(("a", T0),)))
    reset = reset_budget(memory)
    assert reset.budget.state is BudgetState.ARMED
    assert reset.budget.failures == ()


def test_dry_run_restart_is_only_logged() -> None:
    response = respond([stall()], Memory(), running(), T0, replace(CONFIG, dry_run=True))
    assert kinds(response) == [("alert", "stalled"), ("restart", "stalled")]
    assert all(a.dry_run for a in response.actions)
    assert response.actions[0].message.endswith("; would restart (dry run) (1 of 3 in 6h)")


def crash(at: float = T0) -> Verdict:
    return Verdict("crashed", "inv-1", "cuda_graph_capture", "TP4", "oom", f"{UNIT}: TP4 crashed", at)


def test_crash_restart_waits_for_the_crash_to_settle() -> None:
    config = replace(CONFIG, actions={**CONFIG.actions, "crashed": ("alert", "restart")})
    early = respond([crash()], Memory(), running(), T0 + 1, config)
    assert kinds(early) == [("alert", "crashed")]
    assert early.retry_at == T0 + CRASH_SETTLE
    failed = respond([crash()], early.memory, UnitStatus("failed", "failed", "inv-1"), T0 + CRASH_SETTLE, config)
    assert kinds(failed) == [("restart", "crashed")]
    by_systemd = respond([crash()], early.memory, UnitStatus("activating", "auto-restart", "inv-1"),
                         T0 + CRASH_SETTLE, config)
    assert by_systemd.actions == ()


def test_crash_defaults_to_alert_only() -> None:
    response = respond([crash()], Memory(), UnitStatus("failed", "failed", "inv-1"), T0 + 60, CONFIG)
    assert kinds(response) == [("alert", "crashed")]
    assert response.actions[0].priority == 3


def test_state_survives_a_round_trip(tmp_path: Path) -> None:
    store = StateStore(tmp_path, UNIT)
    memory = respond([stall()], Memory(), running(), T0, CONFIG).memory
    store.save(Saved(memory, "s=abc;i=1", "inv-1"))
    assert store.load() == Saved(memory, "s=abc;i=1", "inv-1")


def test_corrupt_state_file_gives_an_empty_memory(tmp_path: Path) -> None:
    store = StateStore(tmp_path, UNIT)
    store.path.write_text("{not json")
    assert store.load() == Saved(Memory(), None, None)


def test_a_state_file_of_keys_as_text_loads_and_nothing_is_done_twice(tmp_path: Path) -> None:
    """The memory's keys are typed (MemoryKey) but kept in the state file as they always were:
    [invocation, what, which, detail], what being `stalled`, `evidence:stalled`, `hook:NAME:stalled`
    or `restart_refused`. A file written so loads, its deeds are not done again, and saves unchanged."""
    alerted = [["inv-1", "evidence:stalled", "TP3", "draft_cuda_graph_capture"],
               ["inv-1", "hook:page:stalled", "TP3", "draft_cuda_graph_capture"],
               ["inv-1", "restart_refused", None, None],
               ["inv-1", "stalled", "TP3", "draft_cuda_graph_capture"]]
    store = StateStore(tmp_path, UNIT)
    store.path.write_text(json.dumps({"version": 1, "cursor": None, "invocation_id": "inv-1", "alerted": alerted,
                                      "restarted": ["inv-1"], "budget": {"state": "armed", "failures": []}}))
    memory = store.load().memory
    key = stall().key
    assert isinstance(key, MemoryKey) and {key, key.evidence(), key.of_hook("page"),
                                           MemoryKey.refused_restart("inv-1")} == memory.alerted
    config = replace(CONFIG, actions={**CONFIG.actions, "stalled": ("evidence", "hook:page", "alert", "restart")})
    response = respond([stall()], memory, running(), T0, config)
    assert response.actions == () and response.memory.alerted == memory.alerted
    store.save(Saved(response.memory, None, "inv-1"))
    assert json.loads(store.path.read_text())["alerted"] == alerted
