"""Issue 12, point 4: the `hook:NAME` action: config, once per verdict, not while held, verdict in env."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from phasewatch.config.load import DEFAULT_ACTIONS, Config, Hook, load_config
from phasewatch.errors import ConfigError
from phasewatch.sinks.hooks import HookRun, HookRunner
from phasewatch.stages.s4_judge.verdict import Verdict
from phasewatch.stages.s5_act.respond import Hold, Memory, UnitStatus, respond

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0
CONFIG = Config(unit=UNIT, actions={**DEFAULT_ACTIONS, "stalled": ("evidence", "alert", "hook:collect-logs",
                                                                    "restart")},
                hooks={"collect-logs": Hook(("/usr/local/bin/collect", "--all"), 30.0)})
STALL = Verdict("stalled", "inv-1", "draft_cuda_graph_capture", "TP3", "deadline", "TP3 stalled", T0)


def test_config_reads_hooks_and_hook_actions(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("unit: sglang-kimi.service\nhooks:\n  collect-logs:\n    exec: [/usr/bin/collect, --all]\n"
                    "    timeout: 10s\nactions:\n  stalled: [evidence, alert, hook:collect-logs, restart]\n")
    config = load_config(path)
    assert config.hooks["collect-logs"] == Hook(("/usr/bin/collect", "--all"), 10.0)
    assert config.actions["stalled"] == ("evidence", "alert", "hook:collect-logs", "restart")


@pytest.mark.parametrize(("text", "key", "line"), [
    ("hooks:\n  x:\n    timeout: 10s\n", "hooks.x.exec", 2),
    ("hooks:\n  x:\n    exec: /bin/true\n", "hooks.x.exec", 3),
    ("hooks:\n  x:\n    exec: [/bin/true]\n    timeout: none\n", "hooks.x.timeout", 4),
    ("actions:\n  stalled: [alert, hook:nope]\n", "actions.stalled", 2),
])
def test_config_errors_name_the_key_and_line(tmp_path: Path, text: str, key: str, line: int) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("unit: sglang-kimi.service\n" + text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == key and info.value.line == line + 1


def test_the_hook_runs_after_the_alert_before_the_restart_and_once() -> None:
    first = respond([STALL], Memory(), UnitStatus("activating", "start", "inv-1"), T0, CONFIG)
    assert [(a.kind, a.hook) for a in first.actions] == [("evidence", None), ("alert", None),
                                                          ("hook", "collect-logs"), ("restart", None)]
    again = respond([STALL], first.memory, UnitStatus("activating", "start", "inv-1"), T0 + 5, CONFIG)
    assert again.actions == ()


def test_no_hook_and_no_restart_while_held() -> None:
    response = respond([STALL], Memory(), UnitStatus("activating", "start", "inv-1"), T0, CONFIG,
                       Hold(T0 + 3600, "by hand"))
    assert [a.kind for a in response.actions] == ["evidence", "alert"]


def test_the_hook_gets_the_verdict_in_its_environment() -> None:
    calls: list[tuple[Sequence[str], dict[str, str], float]] = []

    def run(argv: Sequence[str], env: dict[str, str], timeout: float) -> HookRun:
        calls.append((argv, env, timeout))
        return HookRun(0, "collected 3 files\n")

    action = respond([STALL], Memory(), UnitStatus("activating", "start", "inv-1"), T0, CONFIG).actions[2]
    HookRunner(UNIT, dict(CONFIG.hooks), run)(action)
    [(argv, env, timeout)] = calls
    assert argv == ("/usr/local/bin/collect", "--all") and timeout == 30.0
    assert {k: env[k] for k in ("PHASEWATCH_UNIT", "PHASEWATCH_VERDICT", "PHASEWATCH_RANK", "PHASEWATCH_PHASE",
                                "PHASEWATCH_INVOCATION")} == {
        "PHASEWATCH_UNIT": UNIT, "PHASEWATCH_VERDICT": "stalled", "PHASEWATCH_RANK": "TP3",
        "PHASEWATCH_PHASE": "draft_cuda_graph_capture", "PHASEWATCH_INVOCATION": "inv-1"}
    assert env["PHASEWATCH_MESSAGE"] == "TP3 stalled"
