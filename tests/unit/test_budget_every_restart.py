"""Issue 12, point 3: every restart counts in the budget (`unhealthy` too), and reaching ready frees
the budget only after the server stayed healthy for `restart_budget.stable`."""

from __future__ import annotations

from dataclasses import replace

from phasewatch.config.load import DEFAULT_ACTIONS, Config, RestartBudget
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.respond import BudgetState, Memory, UnitStatus, reset_budget, respond, settled

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
CONFIG = Config(unit=UNIT, actions={**DEFAULT_ACTIONS, "unhealthy": ("alert", "restart")},
                restart_budget=RestartBudget(max=3, window=6 * 3600, backoff=60, stable=600))


def unhealthy(invocation: str, at: float) -> Verdict:
    return Verdict("unhealthy", invocation, "ready", None, "health", f"{UNIT}: /health failed 3 times", at)


def test_a_server_unhealthy_after_every_ready_is_restarted_at_most_max_times_in_the_window() -> None:
    memory = Memory()
    now = T0
    restarts = 0
    for attempt in range(12):  # each start-up: ready after 5 min, unhealthy 2 min later
        invocation = f"inv-{attempt}"
        ready_at = now + 300
        now = ready_at + 120
        verdicts = [unhealthy(invocation, now)]
        if settled(memory, ready_at, verdicts, now, CONFIG):
            memory = reset_budget(memory)
        response = respond(verdicts, memory, UnitStatus("active", "running", invocation), now, CONFIG)
        memory = response.memory
        restarts += sum(a.kind == "restart" for a in response.actions)
    assert now - T0 < CONFIG.restart_budget.window
    assert restarts == CONFIG.restart_budget.max
    assert memory.budget.state is BudgetState.GAVE_UP


def test_ready_alone_does_not_free_the_budget() -> None:
    memory = respond([unhealthy("inv-1", T0)], Memory(), UnitStatus("active", "running", "inv-1"), T0, CONFIG).memory
    ready_at = T0 + 300
    assert not settled(memory, ready_at, [], ready_at + 599, CONFIG)
    assert not settled(memory, ready_at, [unhealthy("inv-2", ready_at + 700)], ready_at + 700, CONFIG)
    assert settled(memory, ready_at, [], ready_at + 600, CONFIG)


def test_an_unhealthy_restart_counts_like_a_failed_start_up() -> None:
    response = respond([unhealthy("inv-1", T0)], Memory(), UnitStatus("active", "running", "inv-1"), T0, CONFIG)
    assert [a.kind for a in response.actions] == ["alert", "restart"]
    assert response.memory.budget.failures == (("inv-1", T0),)


def test_an_alert_only_unhealthy_is_not_counted() -> None:
    config = replace(CONFIG, actions=DEFAULT_ACTIONS)
    response = respond([unhealthy("inv-1", T0)], Memory(), UnitStatus("active", "running", "inv-1"), T0, config)
    assert response.memory.budget.failures == ()
