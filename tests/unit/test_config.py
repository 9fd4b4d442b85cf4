"""Configuration (config/load.py, each section checked by config/parse_sections.py): durations, a full
valid file, and errors that name key path, file and line."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pytest

from phasewatch.cli import main
from phasewatch.config.load import DEFAULT_LIMITS, DEFAULT_RANK_SKEW, Config, PhaseLimits, load_config, parse_config
from phasewatch.durations import format_duration, parse_duration
from phasewatch.errors import EX_CONFIG, EX_OK, ConfigError
from phasewatch.pipeline import Pipeline
from phasewatch.records import MAIN, JournalRecord, Phase

REPO = Path(__file__).resolve().parents[2]
FILE = "/etc/phasewatch/sglang-kimi.yaml"  # only a name for messages: nothing is read from it
DURATION_ERROR = "expected a duration like 90s, 20m or 1h30m"
T0 = 1771804502.0


def where(line: int, path: str = FILE) -> str:
    """The anchored tail of every error message."""
    return re.escape(f" (file: {path}, line {line})") + "$"


# --- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0),
    ("20m", 1200.0),
    ("1h30m", 5400.0),
    ("2d", 172800.0),
    ("1d2h3m4s", 93784.0),
    ("1.5h", 5400.0),
    (" 1h 30m ", 5400.0),
    # systemd time spans (systemd.time(7)), as in the units' TimeoutStartSec=
    ("45min", 2700.0),
    ("1h 30min", 5400.0),
    ("2h30m", 9000.0),
    ("1d 2h", 93600.0),
    ("2 hours 5 minutes", 7500.0),
    ("1w", 604800.0),
    ("1sec 500ms", 1.5),
    ("30min 1h", 5400.0),
    (45, 45.0),
    (2.5, 2.5),
    ("none", None),
    ("None", None),
    ("off", None),
    ("never", None),
    (None, None),
])
def test_parse_duration(text: object, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("value", "message"), [
    ("5x", r"^expected a duration like 90s, 20m or 1h30m, got '5x'$"),
    ("30", r"^expected a duration like 90s, 20m or 1h30m, got '30'$"),  # a bare number must be a YAML number
    ("", r"^expected a duration like 90s, 20m or 1h30m, got ''$"),
    ("0s", r"^expected a duration like 90s, 20m or 1h30m, got '0s'$"),
    ("1h1h", r"^expected a duration like 90s, 20m or 1h30m, got '1h1h'$"),
    ("m", r"^expected a duration like 90s, 20m or 1h30m, got 'm'$"),
    ("1h 1hr", r"^expected a duration like 90s, 20m or 1h30m, got '1h 1hr'$"),
    ("5 fortnights", r"^expected a duration like 90s, 20m or 1h30m, got '5 fortnights'$"),
    ("1h30", r"^expected a duration like 90s, 20m or 1h30m, got '1h30'$"),
    ("2y", r"^expected a duration of at most 365d, got '2y'$"),
    (-1, r"^expected a positive duration, got -1$"),
    (0, r"^expected a positive duration, got 0$"),
    (math.nan, r"^expected a positive duration, got nan$"),
    (True, r"^expected a duration like 90s, 20m or 1h30m, got True$"),
    ([1], r"^expected a duration like 90s, 20m or 1h30m, got \[1\]$"),
])
def test_parse_duration_errors(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(value)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "none"),
    (0, "0s"),
    (59.4, "59s"),
    (59.6, "1m"),
    (60, "1m"),
    (61, "1m1s"),
    (901, "15m1s"),
    (1200, "20m"),
    (1260, "21m"),
    (3600, "1h"),
    (5400, "1h30m"),
    (5430, "1h30m"),  # seconds are dropped past an hour
])
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["45s", "1m30s", "20m", "1h30m", "none"])
def test_format_duration_reads_back(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


# --- a full valid config -------------------------------------------------------------------------

FULL = textwrap.dedent("""\
    # phasewatch for the Kimi server
    unit: sglang-kimi.service
    engine: sglang
    phases:
      weight_load:
        deadline: 1h30m
        stall: 20m
      cuda_graph_capture: {deadline: 45m}
      warmup:
        stall: none
      ready: {deadline: none, stall: none}
    rank_skew: 10m
    patterns:
      - id: kimi_license_check
        event: fatal
        scope: main
        cause: exit_code
        match: '^License check failed'
      - id: ready
        event: phase_begin
        phase: ready
        scope: main
        match: '^(?:The server is fired up and ready to roll!|Kimi gateway is up)'
    """)


def test_parse_config_full() -> None:
    config = parse_config(FULL, FILE)
    assert (config.unit, config.engine, config.rank_skew, config.source) == (
        "sglang-kimi.service", "sglang", 600.0, FILE)
    assert config.limits(Phase.WEIGHT_LOAD) == PhaseLimits(5400.0, 1200.0)
    # A phase's unset key keeps its default.
    capture_stall = DEFAULT_LIMITS[Phase.CUDA_GRAPH_CAPTURE].stall
    assert config.limits(Phase.CUDA_GRAPH_CAPTURE) == PhaseLimits(2700.0, capture_stall, gpu_stall=180)
    assert config.limits(Phase.WARMUP) == PhaseLimits(DEFAULT_LIMITS[Phase.WARMUP].deadline, None)
    assert config.limits(Phase.DIST_INIT) == DEFAULT_LIMITS[Phase.DIST_INIT]


def test_parse_config_patterns_add_a_rule_and_replace_one_in_place() -> None:
    builtin = Config().engine_profile()
    profile = parse_config(FULL, FILE).engine_profile()
    ids = [r.id for r in profile.rules]
    assert ids == [r.id for r in builtin.rules] + ["kimi_license_check"]
    ready = next(r for r in profile.rules if r.id == "ready")
    assert ready.pattern.search("Kimi gateway is up") is not None
    assert next(r for r in builtin.rules if r.id == "ready").pattern.search("Kimi gateway is up") is None


def _start_and_finish(config: Config, last_line: str) -> Pipeline:
    pipeline = Pipeline(config)
    lines = ["[2026-02-22 23:55:02] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=1)",
             "[2026-02-22 23:56:41] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
             '[2026-02-22 23:56:42] INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK',
             last_line]
    for n, line in enumerate(lines):
        pipeline.feed(JournalRecord(message=line, realtime=T0 + n, pid=4711, invocation_id="inv"), T0 + n)
    return pipeline


def test_parse_config_override_changes_what_the_pipeline_detects() -> None:
    custom = parse_config(FULL, FILE)
    default = Config(unit="sglang-kimi.service")
    line = "[2026-02-22 23:56:43] Kimi gateway is up"
    (judged,) = _start_and_finish(custom, line).judge(T0 + 10)
    assert (judged.invocation.state.value, judged.outcome) == ("ready", "ready")
    (judged,) = _start_and_finish(default, line).judge(T0 + 10)
    assert (judged.invocation.state.value, judged.outcome) == ("starting", "starting")
    # The replaced rule still matches SGLang's own line.
    sglang_ready = "[2026-02-22 23:56:43] The server is fired up and ready to roll!"
    (judged,) = _start_and_finish(custom, sglang_ready).judge(T0 + 10)
    assert judged.outcome == "ready"


def test_parse_config_added_rule_is_detected_by_the_pipeline() -> None:
    line = "[2026-02-22 23:56:43] License check failed: expired"
    (judged,) = _start_and_finish(parse_config(FULL, FILE), line).judge(T0 + 10)
    (verdict,) = judged.verdicts
    assert (verdict.kind, verdict.rank, verdict.cause, judged.outcome) == (
        "crashed", MAIN, "exit_code", "crashed")


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "{}\n"])
def test_parse_config_empty_is_all_defaults(text: str) -> None:
    config = parse_config(text, FILE)
    assert (config.unit, config.engine, config.rank_skew) == ("sglang.service", "sglang", DEFAULT_RANK_SKEW)
    assert dict(config.phases) == dict(DEFAULT_LIMITS)


def test_parse_config_rank_skew_none_is_unlimited() -> None:
    assert parse_config("rank_skew: none\n", FILE).rank_skew == math.inf


def test_load_config_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "phasewatch.yaml"
    path.write_text(FULL, "utf-8")
    config = load_config(path)
    assert (config.unit, config.source) == ("sglang-kimi.service", str(path))


def test_shipped_example_config_is_valid() -> None:
    config = load_config(REPO / "config" / "phasewatch.yaml")
    assert config.unit == "sglang-kimi.service"


# --- errors: key path, file and line -------------------------------------------------------------


def test_error_unknown_top_level_key() -> None:
    text = "unit: sglang-kimi.service\ntimeouts:\n  weight_load: 20m\n"
    known = (r"\(known: unit, engine, profile_path, phases, rank_skew, crash_cause_wait, patterns, actions, "
             r"restart_budget, dry_run, metrics, health, adaptive, vitals, rank_processes, evidence, hooks, "
             r"leftovers, group\)")
    with pytest.raises(ConfigError, match=r"^timeouts: unknown setting " + known + where(2)) as info:
        parse_config(text, FILE)
    assert (info.value.key, info.value.path, info.value.line) == ("timeouts", FILE, 2)


def test_error_unknown_phase() -> None:
    text = "phases:\n  weight_load:\n    deadline: 10m\n  capture:\n    deadline: 5m\n"
    with pytest.raises(ConfigError, match=r"^phases\.capture: unknown phase \(known: launch, dist_init, "
                                          r"weight_load, .*, ready, serving\)" + where(4)):
        parse_config(text, FILE)


def test_error_bad_duration_names_key_path_and_its_line() -> None:
    text = textwrap.dedent("""\
        unit: sglang-kimi.service
        phases:
          dist_init:
            deadline: 10m
          weight_load:
            stall: 15m
            deadline: 5x
          warmup: {deadline: 12m}
        """)
    with pytest.raises(ConfigError, match=r"^phases\.weight_load\.deadline: " + DURATION_ERROR + r", got '5x'"
                                          + where(7)) as info:
        parse_config(text, FILE)
    assert (info.value.key, info.value.line) == ("phases.weight_load.deadline", 7)


def test_error_bad_duration_in_flow_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^phases\.warmup\.stall: expected a positive duration, got -1"
                                          + where(3)):
        parse_config("unit: sglang-kimi.service\nphases:\n  warmup: {deadline: 12m, stall: -1}\n", FILE)


def test_error_nan_duration() -> None:
    with pytest.raises(ConfigError, match=r"^phases\.warmup\.deadline: expected a positive duration, got nan"
                                          + where(3)):
        parse_config("unit: sglang-kimi.service\nphases:\n  warmup: {deadline: .nan}\n", FILE)


def test_error_unknown_phase_setting() -> None:
    message = r"^phases\.warmup\.timeout: unknown setting \(known: deadline, stall, gpu_stall\)"
    with pytest.raises(ConfigError, match=message + where(3)):
        parse_config("phases:\n  warmup:\n    timeout: 5m\n", FILE)


def test_error_phase_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^phases\.warmup: expected a mapping with deadline and/or stall"
                                          + where(2)):
        parse_config("phases:\n  warmup: 5m\n", FILE)


def test_error_bad_rank_skew() -> None:
    with pytest.raises(ConfigError, match=r"^rank_skew: " + DURATION_ERROR + r", got 'soon'" + where(2)):
        parse_config("unit: sglang-kimi.service\nrank_skew: soon\n", FILE)


def test_error_bad_unit_name() -> None:
    message = r"^unit: expected a unit name like sglang-kimi\.service, got 'sglang' \(systemd's: ASCII letters, " \
        r"digits and :-_\.\\@, at most 255\)"
    with pytest.raises(ConfigError, match=message + where(1)):
        parse_config("unit: sglang\n", FILE)


def test_error_unknown_engine() -> None:
    with pytest.raises(ConfigError, match=r"^engine: no built-in profile for engine 'tgi' \(known: sglang, vllm\)"
                                          + where(2)):
        parse_config("unit: sglang-kimi.service\nengine: tgi\n", FILE)


def test_engine_vllm_selects_the_vllm_profile_and_module() -> None:
    config = parse_config("unit: vllm.service\nengine: vllm\n", FILE)
    profile = config.engine_profile()
    assert (profile.engine, profile.module) == ("vllm", "vllm")
    assert any(rule.id == "waiting_core_engines" and rule.event == "heartbeat" for rule in profile.rules)


def test_error_bad_regex_in_patterns() -> None:
    text = textwrap.dedent("""\
        unit: sglang-kimi.service
        patterns:
          - id: kimi_banner
            event: activity
            match: '(unclosed'
        """)
    message = (r"^patterns\[0\]\.match: invalid regular expression '\(unclosed': "
               r"missing \), unterminated subpattern at position 0")
    with pytest.raises(ConfigError, match=message + where(5)) as info:
        parse_config(text, FILE)
    assert info.value.key == "patterns[0].match"


def test_error_bad_rule_event_in_second_pattern() -> None:
    text = "patterns:\n  - {id: a, event: activity, match: x}\n  - id: b\n    event: explode\n    match: x\n"
    message = r"^patterns\[1\]\.event: expected one of phase_begin, .*, got 'explode'"
    with pytest.raises(ConfigError, match=message + where(4)):
        parse_config(text, FILE)


def test_error_patterns_not_a_list() -> None:
    with pytest.raises(ConfigError, match=r"^patterns: expected a list of rules" + where(1)):
        parse_config("patterns: {id: x}\n", FILE)


def test_error_bad_yaml_syntax_names_the_line() -> None:
    text = "unit: sglang-kimi.service\nphases:\n  weight_load:\n\tdeadline: 10m\n"
    message = r"^config: invalid YAML: found character '\\t' that cannot start any token"
    with pytest.raises(ConfigError, match=message + where(4)) as info:
        parse_config(text, FILE)
    assert (info.value.key, info.value.line) == ("config", 4)


def test_error_unclosed_flow_mapping_names_where_yaml_noticed() -> None:
    text = "unit: sglang-kimi.service\nphases:\n  weight_load: {deadline: 10m\n  stall: 3m\n"
    message = r"^config: invalid YAML: expected ',' or '}', but got ':'"
    with pytest.raises(ConfigError, match=message + where(4)):
        parse_config(text, FILE)


@pytest.mark.parametrize("text", ["- unit: sglang-kimi.service\n- rank_skew: 5m\n", "just words\n"])
def test_error_top_level_not_a_mapping(text: str) -> None:
    message = r"^config: expected a mapping of settings at the top level"
    with pytest.raises(ConfigError, match=message + where(1)):
        parse_config(text, FILE)


def test_error_without_a_file_names_only_the_line() -> None:
    with pytest.raises(ConfigError, match=r"^timeouts: unknown setting .* \(line 1\)$"):
        parse_config("timeouts: 3\n")


def test_load_config_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"^config: cannot read: No such file or directory "
                                          + re.escape(f"(file: {missing})") + "$"):
        load_config(missing)


def test_load_config_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"unit: caf\xe9.service\n")
    with pytest.raises(ConfigError, match=r"^config: not UTF-8 text " + re.escape(f"(file: {path})") + "$"):
        load_config(path)


def test_load_config_error_names_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("phases:\n  weight_load:\n    deadline: 5x\n", "utf-8")
    with pytest.raises(ConfigError, match=r"^phases\.weight_load\.deadline: .*" + where(3, str(path))):
        load_config(path)


# --- the CLI's view of config errors -------------------------------------------------------------


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "sglang.log"
    log.write_text("[2026-02-22 23:55:14 TP0] Init torch distributed begin.\n", "utf-8")
    return log


def test_cli_replay_with_bad_config_exits_78_naming_key_and_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("unit: sglang-kimi.service\nphases:\n  weight_load:\n    deadline: 5x\n", "utf-8")
    assert main(["replay", "--config", str(bad), str(_log(tmp_path)), "--wide"]) == EX_CONFIG == 78
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"phasewatch: config error: phases.weight_load.deadline: {DURATION_ERROR}, got '5x' "
                   f"(file: {bad}, line 4)\n")


def test_cli_replay_with_missing_config_exits_78(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--config", str(tmp_path / "absent.yaml"), str(_log(tmp_path))]) == EX_CONFIG
    assert "config error: config: cannot read" in capsys.readouterr().err


def test_cli_check_config_good(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(FULL, "utf-8")
    assert main(["check-config", str(good), "--wide"]) == EX_OK == 0
    rules = len(Config().engine_profile().rules) + 1
    assert capsys.readouterr().out == f"{good}: OK (unit sglang-kimi.service, engine sglang, {rules} rules)\n"


def test_cli_check_config_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns:\n  - id: x\n    event: fatal\n    match: '(unclosed'\n", "utf-8")
    assert main(["check-config", str(bad), "--wide"]) == EX_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("phasewatch: config error: patterns[0].match: invalid regular expression")
    assert err.endswith(f"(file: {bad}, line 4)\n")
