"""One config error per top-level section, each through `check-config`: exit 78 and a message that
names the key path, the file and the line, matched whole (anchored at both ends).

These are the errors test_config.py and test_config_hostile.py do not already show for the section;
each file starts with a comment line so a line number counted from the wrong place shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phasewatch.cli import main
from phasewatch.config.load import TOP_KEYS, ConfigError, load_config
from phasewatch.errors import EX_CONFIG

HEAD = "# phasewatch for the Kimi server\nunit: sglang-kimi.service\n"

SECTIONS = [
    ("unit", "# phasewatch for the Kimi server\nunit: [sglang-kimi.service]\n", "unit", 2,
     r"expected a unit name like sglang-kimi\.service, got \['sglang-kimi\.service'\] \(systemd's: ASCII letters, "
     r"digits and :-_\.\\@, at most 255\)"),
    ("engine", HEAD + "engine: 7\n", "engine", 3,
     r"expected a built-in profile name like sglang, got 7 \(a profile file goes in profile_path:\)"),
    ("phases", HEAD + "phases:\n  - weight_load\n", "phases", 3, r"expected a mapping of phase names"),
    # "5 minutes" is a systemd time span, accepted; a fortnight is not a unit of one
    ("rank_skew", HEAD + "rank_skew: 5 fortnights\n", "rank_skew", 3,
     r"expected a duration like 90s, 20m or 1h30m, got '5 fortnights'"),
    ("crash_cause_wait", HEAD + "crash_cause_wait: 5m\n", "crash_cause_wait", 3,
     r"at most 60s: a crash's alert and restart wait this long"),
    ("patterns", HEAD + "patterns:\n  - id: nccl_init\n    event: fatal\n    scope: everywhere\n"
                        "    match: 'NCCL error'\n",
     "patterns[0].scope", 6, r"expected one of rank, main, any, got 'everywhere'"),
    ("actions", HEAD + "actions:\n  stalled: [alert]\n  crashed: [alert, reboot]\n", "actions.crashed", 5,
     r"expected a list of evidence, alert, restart, got \['alert', 'reboot'\]"),
    ("restart_budget", HEAD + "restart_budget:\n  max: -1\n", "restart_budget.max", 4,
     r"expected a whole number >= 0, got -1"),
    ("dry_run", HEAD + "dry_run: maybe\n", "dry_run", 3, r"expected true or false, got 'maybe'"),
    ("metrics", HEAD + "metrics:\n  listen: localhost\n", "metrics.listen", 4,
     r"expected HOST:PORT like 127\.0\.0\.1:9877, got 'localhost'"),
    ("health", HEAD + "health:\n  url: ftp://127.0.0.1:30000/health\n", "health.url", 4,
     r"expected an http:// or https:// URL, got 'ftp://127\.0\.0\.1:30000/health'"),
    ("adaptive", HEAD + "adaptive:\n  enabled: true\n  floor: 3\n  ceiling: 2\n", "adaptive.floor", 5,
     r"floor 3 is above ceiling 2"),
    ("vitals", HEAD + "vitals:\n  enabled: true\n  period: 0.1s\n", "vitals.period", 5,
     r"expected a duration of at least 0\.5s, got '0\.1s'"),
    ("rank_processes", HEAD + "rank_processes: everywhere\n", "rank_processes", 3,
     r"expected cgroup or host, got 'everywhere'"),
    ("evidence", HEAD + "evidence:\n  timeout: none\n", "evidence.timeout", 4, r"expected a duration like 15s"),
    ("hooks", HEAD + "hooks:\n  collect-logs:\n    timeout: 10s\n", "hooks.collect-logs.exec", 4,
     r"missing: the command to run"),
    ("leftovers", HEAD + "leftovers:\n  check: yes please\n", "leftovers.check", 4,
     r"expected true or false, got 'yes please'"),
    ("leftovers", HEAD + "leftovers:\n  check: true\n  after_any_stop: 1\n", "leftovers.after_any_stop", 5,
     r"expected true or false, got 1"),
    ("group", HEAD + "group:\n  name: kimi\n  nodes: 1\n", "group.nodes", 5,
     r"expected a whole number from 2 to 1024, got 1"),
    ("group", HEAD + "group:\n  name: kimi\n  nodes: 2\n  node_rank: x\n", "group.node_rank", 6,
     r"expected a whole number from 0 to 1024, got 'x'"),
    ("group", HEAD + "group:\n  name: 'a b'\n  nodes: 2\n", "group.name", 4,
     r"expected a name of letters, digits and _.:- \(at most 64\), got 'a b'"),
    ("group", HEAD + "group:\n  name: k\n  nodes: 2\n  receiver:\n    listen: 0.0.0.0:9878\n"
     "    token_file: token\n", "group.receiver.token_file", 8, r"expected an absolute path, got 'token'"),
    ("group", HEAD + "group:\n  name: k\n  nodes: 2\n  receiver:\n    listen: nowhere\n"
     "    token_file: /t\n", "group.receiver.listen", 7, r"expected HOST:PORT like 127.0.0.1:9877, got 'nowhere'"),
]


def expected(key: str, message: str, path: Path, line: int) -> str:
    return "^" + re.escape(key) + ": " + message + re.escape(f" (file: {path}, line {line})") + "$"


def check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """check-config's stderr, once it has exited 78."""
    assert main(["check-config", str(path), "--wide"]) == EX_CONFIG == 78  # (the error on one line)
    out, err = capsys.readouterr()
    assert out == ""
    prefix = "phasewatch: config error: "
    assert err.startswith(prefix) and err.endswith("\n")
    return err[len(prefix):-1]


@pytest.mark.parametrize(("text", "key", "line", "message"), [case[1:] for case in SECTIONS],
                         ids=[case[0] for case in SECTIONS])
def test_a_bad_section_exits_78_naming_key_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         text: str, key: str, line: int, message: str) -> None:
    path = tmp_path / "sglang-kimi.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError, match=expected(key, message, path, line)) as info:
        load_config(str(path))
    assert (info.value.key, info.value.path, info.value.line) == (key, str(path), line)
    assert re.fullmatch(expected(key, message, path, line)[1:-1], check_config(path, capsys))


def test_a_profile_that_is_not_one_exits_78_naming_the_config_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "vllm.yaml"
    profile.write_text("engine: vllm\n", "utf-8")
    path = tmp_path / "sglang-kimi.yaml"
    path.write_text(HEAD + f"profile_path: {profile}\n", "utf-8")
    message = re.escape(f"{profile}: ") + r".*rules: expected a list"
    assert re.fullmatch(expected("profile_path", message, path, 3)[1:-1], check_config(path, capsys))


def test_an_unreadable_profile_exits_78_naming_the_config_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sglang-kimi.yaml"
    path.write_text(HEAD + f"profile_path: {tmp_path / 'absent.yaml'}\n", "utf-8")
    message = r"cannot read: No such file or directory.*"
    assert re.fullmatch(expected("profile_path", message, path, 3)[1:-1], check_config(path, capsys))


def test_every_section_has_its_error_case() -> None:
    assert {case[0] for case in SECTIONS} | {"profile_path"} == set(TOP_KEYS)


def test_leftovers_after_any_stop_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD)
    assert (load_config(str(path)).leftovers.check, load_config(str(path)).leftovers.after_any_stop) == (False, True)
    path.write_text(HEAD + "leftovers:\n  after_any_stop: false\n")
    assert load_config(str(path)).leftovers.after_any_stop is False
