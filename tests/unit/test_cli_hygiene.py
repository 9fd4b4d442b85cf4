"""Issue 13's CLI points: --version; one meaning per exit status (the table in errors.py, in --help and
in the README); usage errors exit 64; an unknown unit is a clear error; --json on every read command;
check-config's instance check and its polkit question (answered here by a recorded reply)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Sequence

import pytest

from phasewatch.cli import build_parser, main
from phasewatch.commands import checkconfig
from phasewatch.commands.checkconfig import PolkitAnswer, check_authorization_call, check_instance, parse_answer
from phasewatch.config.load import load_config
from phasewatch.errors import (
    EX_CONFIG,
    EX_NOINPUT,
    EX_NOPERM,
    EX_UNAVAILABLE,
    EX_USAGE,
    EXIT_STATUSES,
    ConfigError,
    UnavailableError,
)

UNIT = "sglang-kimi.service"
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "phasewatch.yaml"
COMMANDS = ("replay", "run", "report", "check-config", "init", "status", "hold", "release", "logs", "wait-ready",
            "vitals")


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits (--help, --version, usage)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The version, and which journal reader `replay --unit` uses (the C one unless built without it)."""
    from phasewatch import __version__
    from phasewatch.sources.journal import journal_source

    built = "C" if journal_source.c_lines is not None else "Python"
    monkeypatch.delenv("PHASEWATCH_PURE_PYTHON", raising=False)
    assert run(["--version"], capsys)[:2] == (0, f"phasewatch {__version__} (journal reader: {built})\n")
    monkeypatch.setenv("PHASEWATCH_PURE_PYTHON", "1")
    assert run(["--version"], capsys)[:2] == (0, f"phasewatch {__version__} (journal reader: Python)\n")


@pytest.mark.parametrize("argv", [["bogus"], ["status", "--bogus"], ["logs"], ["report", "--last", "many"],
                                  ["check-config"], ["wait-ready", UNIT, "--nope"], []])
def test_usage_errors_exit_64_never_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == EX_USAGE and out == ""
    assert "usage: phasewatch" in err and "error:" in err


def test_each_exit_status_has_one_meaning_and_is_in_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    codes = [code for code, _ in EXIT_STATUSES]
    assert len(codes) == len(set(codes))
    assert 2 in codes and EX_USAGE in codes
    for argv in ([], *([c] for c in COMMANDS)):
        code, out, _ = run([*argv, "--help"], capsys)
        assert code == 0
        epilog = out[out.index("exit statuses:"):]
        for status, meaning in EXIT_STATUSES:
            assert re.search(rf"^\s+{status}\s+{re.escape(meaning[:30])}", epilog, flags=re.M), (argv, status)


def test_the_readme_has_the_same_table() -> None:
    readme = (REPO / "README.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", readme[readme.index("## Exit statuses"):], flags=re.M))
    assert {int(code) for code in rows} == {code for code, _ in EXIT_STATUSES}
    for code, meaning in EXIT_STATUSES:
        assert rows[str(code)] == meaning.replace("|", "\\|"), code


def test_report_on_an_unknown_unit_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["report", "nothing-here.service", "--state-dir", str(tmp_path)], capsys)
    assert (code, out) == (EX_NOINPUT, "")
    assert "no history for nothing-here.service" in err


def test_check_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check-config", str(CONFIG), "--json"], capsys)
    document = json.loads(out)
    assert code == 0 and document["ok"] is True and document["unit"] == UNIT and document["rules"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"unit: {UNIT}\nrank_skew: soon\n")
    code, out, err = run(["check-config", str(bad), "--json"], capsys)
    document = json.loads(out)
    assert (code, document["ok"], document["key"], document["line"]) == (EX_CONFIG, False, "rank_skew", 2)
    assert err == ""


def test_the_config_must_watch_the_daemons_instance(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("# the wrong one\nunit: other.service\n")
    config = load_config(path)
    check_instance(config, "other.service", str(path))
    check_instance(config, "other", str(path))  # phasewatch@other.service, init's short instance name
    check_instance(config, None, str(path))  # run without --instance (by hand)
    with pytest.raises(ConfigError) as caught:
        check_instance(config, UNIT, str(path))
    assert (caught.value.key, caught.value.line, caught.value.exit_status) == ("unit", 2, EX_CONFIG)
    assert f"its config must say unit: {UNIT}" in str(caught.value)


def test_the_polkit_question_is_the_one_systemd_asks() -> None:
    argv = check_authorization_call(UNIT, 998, 4242)
    assert argv[argv.index("CheckAuthorization") + 1] == "(sa{sv})sa{ss}us"
    assert argv[-8:] == ["org.freedesktop.systemd1.manage-units", "2", "unit", UNIT, "verb", "restart", "0", ""]
    assert ["pid", "u", "4242"] == argv[argv.index("pid"):argv.index("pid") + 3]
    assert ["uid", "i", "998"] == argv[argv.index("uid"):argv.index("uid") + 3]
    assert parse_answer('{"type":"(bba{ss})","data":[[true,false,{}]]}') == PolkitAnswer(True, False)
    assert parse_answer('{"type":"(bba{ss})","data":[[false,true,{}]]}') == PolkitAnswer(False, True)
    with pytest.raises(UnavailableError):
        parse_answer("Call failed: Access denied")


@pytest.mark.parametrize(("reply", "code", "said"), [
    ('{"type":"(bba{ss})","data":[[true,false,{}]]}', 0, "privileges: yes, user root may restart"),
    ('{"type":"(bba{ss})","data":[[false,true,{}]]}', EX_NOPERM, "privileges: no, user root may not restart"),
])
def test_check_config_privileges(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reply: str,
                                 code: int, said: str) -> None:
    asked: list[Sequence[str]] = []

    def recorded(argv: Sequence[str], timeout: float) -> str:
        asked.append(argv)
        return reply

    monkeypatch.setattr(checkconfig, "run_busctl", recorded)
    monkeypatch.setattr(checkconfig.may_restart, "__defaults__", (recorded,))
    got, out, _ = run(["check-config", str(CONFIG), "--privileges", "--user", "root"], capsys)
    assert (got, said in out) == (code, True)
    assert [a for a in asked[0] if a in ("unit", UNIT, "verb", "restart")] == ["unit", UNIT, "verb", "restart"]
    got, out, _ = run(["check-config", str(CONFIG), "--privileges", "--user", "root", "--json"], capsys)
    assert json.loads(out)["privileges"]["may_restart"] is (code == 0)


def test_check_config_privileges_unknown_user(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check-config", str(CONFIG), "--privileges", "--user", "no-such-user-here"], capsys)
    assert code == EX_USAGE and "no such user" in err


def test_polkit_unreachable_is_69(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def unreachable(argv: Sequence[str], timeout: float) -> str:
        raise UnavailableError("polkit: cannot ask over D-Bus: no bus")

    monkeypatch.setattr(checkconfig.may_restart, "__defaults__", (unreachable,))
    code, _, err = run(["check-config", str(CONFIG), "--privileges", "--user", "root"], capsys)
    assert code == EX_UNAVAILABLE and "polkit: cannot ask over D-Bus" in err


def test_the_parser_knows_every_command() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)  # type: ignore[arg-type]


def test_stderr_is_the_journal_only_when_journal_stream_names_it() -> None:
    # Under systemd the daemon's stderr is the journal: its alert is logged once, as its own entry.
    from phasewatch.sinks.actions import stderr_is_journal

    def stat(fd: int) -> os.stat_result:
        return os.stat_result((0o600, 77, 12, 1, 0, 0, 0, 0, 0, 0))  # st_ino 77, st_dev 12

    assert stderr_is_journal({"JOURNAL_STREAM": "12:77"}, stat)
    assert not stderr_is_journal({"JOURNAL_STREAM": "12:78"}, stat)  # inherited by a child with another stderr
    assert not stderr_is_journal({}, stat)
    assert not stderr_is_journal({"JOURNAL_STREAM": "garbage"}, stat)


# check-config: every error of the file and the limits' warnings (config/all_errors.py)
def test_check_config_reports_every_error_and_warns_on_a_stall_window_above_its_deadline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"unit: {UNIT}\nrank_skew: soon\nbogus: 1\nphases:\n  weight_load: {{deadline: 20x}}\n"
                   "  warmup: {stall: 1h, deadline: 10m}\n  nosuch: {deadline: 1m}\n")
    code, out, err = run(["check-config", str(bad), "--wide"], capsys)  # (one line each)
    assert (code, out) == (EX_CONFIG, "")
    lines = err.splitlines()
    assert [line.split(": ")[2] for line in lines[:4]] == ["rank_skew", "bogus", "phases.weight_load.deadline",
                                                          "phases.nosuch"]  # in the file's order
    assert lines[4] == f"phasewatch: 4 errors in {bad}"
    code, out, _ = run(["check-config", str(bad), "--json"], capsys)
    document = json.loads(out)
    assert code == EX_CONFIG and len(document["errors"]) == 4 and document["key"] == "bogus"
    warn = tmp_path / "warn.yaml"
    warn.write_text(f"unit: {UNIT}\nphases:\n  warmup: {{stall: 1h, deadline: 10m}}\n")
    code, out, _ = run(["check-config", str(warn)], capsys)
    assert code == 0
    assert "warning: phases.warmup: its stall window 1h is above its deadline 10m" in out


def test_an_unknown_key_one_typo_off_says_which_it_meant(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36: not the 19 known keys in one 200-column line, but the one it meant."""
    path = tmp_path / "x.yaml"
    path.write_text("unit: sglang-kimi.service\nrank_skw: 5m\nrestart_budget: {max: 3, windwo: 6h}\n")
    code, out, err = run(["check-config", str(path)], capsys)
    assert (code, out) == (78, "")
    assert "rank_skw: unknown setting: did you mean rank_skew?" in err
    assert "restart_budget.windwo: unknown setting: did you mean window?" in err
    assert all(len(line) <= 100 or str(path) in line for line in err.splitlines())
    path.write_text("unit: sglang-kimi.service\nzzz: 1\n")
    assert "unknown setting (known: unit, engine," in run(["check-config", str(path)], capsys)[2]


def test_report_last_0_is_a_usage_error_not_an_empty_history(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["report", "sglang-kimi", "--last", "0", "--state-dir", str(tmp_path)], capsys)
    assert (code, out) == (EX_USAGE, "")
    assert "--last: expected 1 or more start-ups, got 0" in err
