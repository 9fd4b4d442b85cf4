"""`phasewatch init`'s pure stage: ExecStart= argv (+ Environment=) -> engine facts -> config text that
the config parser accepts. Over the example units in units/ and realistic command lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phasewatch.config.load import parse_config
from phasewatch.records import Phase
from phasewatch.stages.s4_judge.init_config import (
    UnitCommand,
    detect_engine,
    engine_facts,
    exec_argv,
    intended_keys,
    limits_for,
    phase_durations,
    render_config,
    sealed,
    untouched,
)

UNITS = Path(__file__).resolve().parents[2] / "units"


def unit_exec_start(path: Path) -> tuple[str, ...]:
    match = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", path.read_text(), re.M)
    assert match is not None, path
    return exec_argv(match.group(1))


def engine_units() -> list[Path]:
    """The example units that run an engine (sglang-kimi-ready.service runs phasewatch itself)."""
    return [p for p in sorted(UNITS.glob("*.service"))
            if "@" not in p.name and detect_engine(unit_exec_start(p))[0] is not None]


def test_the_example_units_include_the_kimi_server() -> None:
    assert [p.name for p in engine_units()] == ["sglang-kimi.service"]
    assert detect_engine(unit_exec_start(UNITS / "sglang-kimi-ready.service"))[0] is None


@pytest.mark.parametrize("path", engine_units(), ids=lambda p: p.name)
def test_init_writes_a_config_the_parser_accepts_for_each_example_unit(path: Path) -> None:
    argv = unit_exec_start(path)
    facts = engine_facts(argv)
    text = sealed(render_config(UnitCommand(path.name, argv, timeout_start=120.0, user="sglang"), facts))
    config = parse_config(text, f"/etc/phasewatch/{path.stem}.yaml")
    assert (config.unit, config.engine) == (path.name, facts.engine)
    # Issue 36: the stacks every stall remedy points to are written (the alert names the file).
    assert config.actions["stalled"] == ("evidence", "alert", "restart")
    assert config.actions["straggler"] == ("evidence", "alert", "restart")


def test_kimi_unit_facts_engine_tp_and_eagle3() -> None:
    facts = engine_facts(unit_exec_start(UNITS / "sglang-kimi.service"))
    assert (facts.engine, facts.model, facts.tp, facts.speculative, facts.ranks) == (
        "sglang", "/models/Kimi-K2.5-INT4", 8, "EAGLE3", 8)
    text = render_config(UnitCommand("sglang-kimi.service", ()), facts)
    assert "draft_cuda_graph_capture:" in text and "speculative EAGLE3" in text and "TP=8" in text


@pytest.mark.parametrize(("command", "expected"), [
    ("sglang serve --model-path Qwen/Qwen3-32B --tp-size 4 --dp 2",
     ("sglang", "Qwen/Qwen3-32B", 4, 2, 1, 1, None)),
    ("/usr/bin/python3 -m sglang.launch_server --model-path /m/DeepSeek-V3 --tp=16 --nnodes 2 --node-rank 0 "
     "--speculative-algorithm NEXTN --speculative-num-steps 3 --dist-timeout 600 --watchdog-timeout 900",
     ("sglang", "/m/DeepSeek-V3", 16, 1, 1, 2, "NEXTN")),
    ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --pipeline-parallel-size 2",
     ("vllm", "meta-llama/Llama-3.1-70B-Instruct", 4, 1, 2, 1, None)),
    ("python -m vllm.entrypoints.openai.api_server --model /m/llama -tp 2 "
     "--speculative-config '{\"method\":\"eagle3\"}'",
     ("vllm", "/m/llama", 2, 1, 1, 1, '{"method":"eagle3"}')),
    ("/opt/venv/bin/python /srv/app.py --tp 8", (None, None, 1, 1, 1, 1, None)),
])
def test_engine_and_parallelism_from_realistic_command_lines(
        command: str, expected: tuple[object, ...]) -> None:
    facts = engine_facts(exec_argv(command))
    assert (facts.engine, facts.model, facts.tp, facts.dp, facts.pp, facts.nnodes, facts.speculative) == expected


def test_multi_node_ranks_per_host_and_engine_timers() -> None:
    argv = exec_argv("python -m sglang.launch_server --model-path /m --tp 16 --nnodes 2 --dist-timeout 600 "
                     "--watchdog-timeout 900")
    facts = engine_facts(argv)
    assert facts.ranks == 8 and facts.dist_timeout == 600 and facts.watchdog_timeout == 900
    text = render_config(UnitCommand("big.service", argv, timeout_start=None), facts)
    assert "# --dist-timeout 600: dist_init's deadline (9m) comes first" in text  # brought under the timer
    assert "# timer lint: no engine or systemd timer ends a start-up before these limits" in text
    assert "# --watchdog-timeout 900: SGLang kills" in text
    assert "TimeoutStartSec=infinity bounds only the fork (Type=simple)" in text


def test_a_notify_unit_whose_start_timeout_is_shorter_than_the_deadlines_is_named() -> None:
    facts = engine_facts(exec_argv("vllm serve m"))
    text = render_config(UnitCommand("v.service", (), timeout_start=600.0, service_type="notify"), facts)
    assert "TimeoutStartSec=10m is shorter than the sum of the deadlines" in text


def test_no_draft_phases_without_speculative_decoding() -> None:
    facts = engine_facts(exec_argv("sglang serve --model-path m --tp 2"))
    limits = limits_for(facts, {})
    assert Phase.DRAFT_WEIGHT_LOAD not in limits and Phase.DRAFT_CUDA_GRAPH_CAPTURE not in limits
    config = parse_config(render_config(UnitCommand("s.service", ()), facts))
    assert config.limits(Phase.WEIGHT_LOAD).deadline == 2700  # the shipped limit


def test_the_last_start_up_widens_deadlines_it_came_near() -> None:
    facts = engine_facts(exec_argv("sglang serve --model-path m --tp 8"))
    last = phase_durations([(Phase.WEIGHT_LOAD, 100.0, 1300.0), (Phase.WEIGHT_LOAD, 100.0, 1250.0),
                            (Phase.DIST_INIT, 50.0, 80.0), (Phase.KV_CACHE_ALLOC, 10.0, None)])
    assert last == {Phase.WEIGHT_LOAD: 1200.0, Phase.DIST_INIT: 30.0}
    limits = limits_for(facts, last)
    assert limits[Phase.WEIGHT_LOAD].deadline == 3600  # 3 x 20m, past the shipped 45m
    assert limits[Phase.DIST_INIT].deadline == 600  # far from it: the shipped limit stays
    text = render_config(UnitCommand("s.service", (), last_startup=last), facts)
    assert "(last start-up: 20m)" in text
    assert parse_config(text).limits(Phase.WEIGHT_LOAD).deadline == 3600


def test_sglang_warmup_timeout_from_the_environment() -> None:
    facts = engine_facts(exec_argv("sglang serve --model-path m"))
    assert limits_for(facts, {}, {})[Phase.WARMUP].deadline == 540  # a minute under SGLang's default 600 s
    limits = limits_for(facts, {}, {"SGLANG_WARMUP_TIMEOUT": "1200"})
    assert limits[Phase.WARMUP].deadline == 600  # the shipped limit, under the engine's
    assert limits[Phase.WARMUP].stall == 240  # a minute under the scheduler watchdog (300 s)


def test_the_seal_tells_an_edited_config_from_an_untouched_one() -> None:
    text = sealed(render_config(UnitCommand("s.service", ()), engine_facts(exec_argv("sglang serve --model-path m"))))
    assert untouched(text)
    assert not untouched(text.replace("deadline: 45m", "deadline: 50m"))
    assert not untouched("unit: s.service\n")  # written by hand


KIMI = ("/usr/bin/python3", "-m", "sglang.launch_server", "--tp-size", "8")
BREAKS = ["\n", "\r", "\x85", "\u2028", "\u2029", "\x0b", "\x0c"]


@pytest.mark.parametrize("brk", BREAKS, ids=[f"U+{ord(b):04X}" for b in BREAKS])
@pytest.mark.parametrize("flag", ["--model-path", "--speculative-algorithm"])
def test_probe_c4_a_line_break_in_a_value_writes_no_key(brk: str, flag: str) -> None:
    """PROBE-S3 C-4: systemd C-unescapes ExecStart= words; a `\\n` in --model-path wrote `hooks:`."""
    payload = f"/models/x{brk}hooks: {{pwn: {{exec: [/bin/sh, -c, id]}}}}{brk}actions: {{stalled: [hook:pwn]}}{brk}#"
    argv = (*KIMI, flag, payload)
    command = UnitCommand(unit="sglang-kimi.service", argv=argv)
    text = render_config(command, engine_facts(argv))
    config = parse_config(text)
    assert config.hooks == {} and "hooks:" not in [line[:6] for line in text.splitlines()]
    assert all(ch.isprintable() for line in text.splitlines() for ch in line)
    assert f"\\x{ord(brk):02x}hooks" in text or f"\\u{ord(brk):04x}hooks" in text  # shown, escaped


def test_probe_l2_control_characters_and_esc_in_a_path_are_escaped_not_a_traceback() -> None:
    argv = (*KIMI, "--model-path", "/models/\x1b[31mred\x00\x7f\ufeff")
    text = render_config(UnitCommand(unit="sglang-kimi.service", argv=argv), engine_facts(argv))
    parse_config(text)
    assert "model /models/\\x1b[31mred\\x00\\x7f\\ufeff, TP=8" in text


def test_probe_l2_a_count_of_5000_digits_is_a_clear_error() -> None:
    from phasewatch.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--tp-size 9{24}\.\.\. \(5000 digits\) is no count"):
        engine_facts((*KIMI[:3], "--tp-size", "9" * 5000))
    assert engine_facts((*KIMI[:3], "--tp-size", "\u00b2")).tp == 1  # a digit to str.isdigit, not to int()


def test_probe_l2_absurd_parallelism_is_refused_not_written() -> None:
    from phasewatch.errors import ConfigError

    facts = engine_facts((*KIMI[:3], "--tp-size", "999999999", "--dp", "99999999"))
    with pytest.raises(ConfigError, match=r"ask for over 10\^12 ranks on this host .*at most 1024 per host"):
        facts.check_size()
    engine_facts(KIMI).check_size()  # TP=8: fine


def test_intended_keys_are_what_render_config_writes() -> None:
    from phasewatch.config.yaml_file import load_yaml

    for argv in (KIMI, (*KIMI, "--speculative-algorithm", "EAGLE3"), ("/usr/bin/vllm", "serve", "m", "-tp", "1")):
        command = UnitCommand(unit="sglang-kimi.service", argv=argv)
        facts = engine_facts(argv)
        document = load_yaml(render_config(command, facts), None)
        keys = intended_keys(facts, command)
        assert set(document) - {"__lines__"} == set(keys)
        assert sorted(p for p in document["phases"] if p != "__lines__") == keys["phases"]


def test_init_refuses_text_that_parses_to_keys_it_did_not_mean_to_write() -> None:
    from phasewatch.commands.init import _check_faithful
    from phasewatch.errors import ConfigError

    command = UnitCommand(unit="sglang-kimi.service", argv=KIMI)
    facts = engine_facts(KIMI)
    text = render_config(command, facts)
    _check_faithful(text, "x.yaml", intended_keys(facts, command))
    with pytest.raises(ConfigError, match=r"keys it did not write: hooks\).*nothing written"):
        _check_faithful(text + "hooks: {pwn: {exec: [/bin/sh]}}\n", "x.yaml", intended_keys(facts, command))
    with pytest.raises(ConfigError, match="a value differs"):
        _check_faithful(text.replace("unit: sglang-kimi.service", "unit: other.service"), "x.yaml",
                        intended_keys(facts, command))
