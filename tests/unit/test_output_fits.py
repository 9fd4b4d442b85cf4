"""Output fits: replay's tables of every bundled example within 100 columns when not a terminal (or
the terminal's COLUMNS), the whole text in --json and --plain; every --help line within 80."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.status_documents import STALLED, document

from phasewatch.cli import build_parser, main
from phasewatch.commands.status import render_table
from phasewatch.fit import NOT_A_TERMINAL, fit_text, fitted, wrap_line
from phasewatch.manpages import _subcommands

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
