"""Output fits: replay's tables of every bundled example within 100 columns when not a terminal (or
the terminal's COLUMNS), the whole text in --json and --plain; every --help line within 80."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.status_documents import STALLED, document

from phasewatch.cli import build_parser, main
from phasewatch.commands.status import render_table
from phasewatch.output.fit import NOT_A_TERMINAL, fit_text, fitted, wrap_line
from phasewatch.output.manpages import _subcommands

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.json"))
JUDGED = ([], ["--now", "+25m"], ["--now", "+3h"])


@pytest.mark.parametrize("judged", JUDGED, ids=["at-last-line", "+25m", "+3h"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_replay_of_every_example_fits_100_columns_when_not_a_terminal(
        example: Path, judged: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["replay", *judged, str(example)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= NOT_A_TERMINAL, out
    # The verdicts' whole text is in --json; --plain keeps every line whole (for scripts).
    assert main(["replay", "--json", *judged, str(example)]) == 0
    for inv in json.loads(capsys.readouterr().out)["invocations"]:
        for verdict in inv["verdicts"]:
            assert main(["replay", "--plain", *judged, str(example)]) == 0
            assert verdict["message"] in capsys.readouterr().out


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_replay_fits_the_terminals_columns(columns: int, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    for example in EXAMPLES:
        assert main(["replay", "--now", "+25m", str(example)]) == 0
        out = capsys.readouterr().out
        assert max(len(line) for line in out.splitlines()) <= columns, out
        if columns < 100:
            assert "phases: " in out  # short names, with their legend


def test_the_plain_table_has_no_legend_and_full_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--plain", str(EXAMPLES[1])]) == 0
    out = capsys.readouterr().out
    assert "draft_cuda_graph_capture" in out.splitlines()[2] and "(durations:" not in out and "phases:" not in out


def test_status_table_fits_and_a_long_verdict_wraps() -> None:
    doc = document("stalled", STALLED)
    text = fitted(render_table(doc, "127.0.0.1:9877"), 100)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert max(len(line) for line in render_table(doc, "127.0.0.1:9877").splitlines()) > 100  # it did not fit


def test_wrapping_keeps_table_rows_and_long_words_whole() -> None:
    row = "TP0   draft_cuda_graph_capture (done)  23/23 bs=1  " + "4m18s    " * 12
    assert wrap_line(row, 60) == [row]
    path = "/usr/share/doc/phasewatch/examples/sglang-log-rate.conf"
    assert wrap_line(f"  see {path} for it", 30) == ["  see", f"      {path}", "      for it"]
    assert fit_text("a b\n", 10) == "a b\n"


@pytest.mark.parametrize("columns", ["80", "100"])
def test_every_help_line_fits(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    for sub in [parser, *(sub for _, _, sub in _subcommands(parser))]:
        text = sub.format_help()
        assert max(len(line) for line in text.splitlines()) <= int(columns), (sub.prog, text)


# -- issue 36: every line of every command within 100 columns unless --wide -----------------------

def test_every_command_takes_wide() -> None:
    from phasewatch.output.manpages import _commands

    leaves = [(name, sub) for name, _, sub in _commands(build_parser()) if not _subcommands(sub)]
    assert len(leaves) >= 10
    for name, sub in leaves:
        assert "--wide" in sub._option_string_actions, name


def test_reports_remedies_fit_and_wide_keeps_them_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The `remedies:` line was 276 columns."""
    from dataclasses import replace

    from tests.unit.test_report_table import RECORDS

    from phasewatch.sinks.history import History

    monkeypatch.delenv("COLUMNS", raising=False)
    remedy = ("no progress in draft_cuda_graph_capture on TP3: its stack in `py-spy dump --pid <the rank's PID>` "
              "shows the kernel or collective it waits in; --disable-custom-all-reduce when that is an "
              "all-reduce; capture runs batch sizes up to --cuda-graph-max-bs (512 now)")
    history = History(tmp_path / "sglang-kimi.service.history.sqlite3")
    for record in (RECORDS[0], replace(RECORDS[1], remedy=remedy)):
        history.add(record)
    assert main(["report", "sglang-kimi", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= NOT_A_TERMINAL, out
    assert remedy in " ".join(out[out.index("remedies:"):].split())
    assert main(["report", "sglang-kimi", "--state-dir", str(tmp_path), "--wide"]) == 0
    assert f"{RECORDS[1].invocation_id[:12]}  {remedy}" in capsys.readouterr().out


def test_check_config_counts_each_setting_and_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two wrong settings of one section are two errors (it said 3 errors where there were 5), each
    said within 100 columns (142 to 295 before)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    bad = tmp_path / "bad.yaml"
    bad.write_text("unit: sglang-kimi.service\nrank_skw: 5m\nrestart_budget: {max: x, window: 6q}\nphases:\n"
                   "  weight_load: {deadline: 20x, stall: 3y}\ngroup: {name: g, nodes: 1}\n")
    assert main(["check-config", str(bad)]) == 78
    err = capsys.readouterr().err
    assert max(len(line) for line in err.splitlines()) <= NOT_A_TERMINAL or str(bad) in err, err
    assert all(len(line) <= NOT_A_TERMINAL for line in err.splitlines() if str(bad) not in line), err
    said = " ".join(err.split())
    for key in ("rank_skw", "restart_budget.max", "restart_budget.window", "phases.weight_load.deadline",
                "phases.weight_load.stall", "group.nodes"):
        assert f"config error: {key}: " in said, key
    assert said.count("config error: group.nodes") == 1  # left out, it is missing: not a second error
    assert err.splitlines()[-1] == f"phasewatch: 6 errors in {bad}"
