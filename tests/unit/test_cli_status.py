"""`phasewatch status`: the daemon's /status when one answers, the same document from the journal when
none does, the table, exit statuses, and --watch's output in a log."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from phasewatch.cli import main
from phasewatch.commands.daemon_answer import status_url
from phasewatch.commands.status import exit_status, render_table, watch
from phasewatch.commands.status_line import oneline
from phasewatch.config.load import Config
from status_documents import STALLED, UNIT, document

HOUR_AGO = time.time() - 3600


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- a stub daemon -----------------------------------------------------------------------------

def test_status_url_asks_loopback_for_a_wildcard_listen_address() -> None:
    assert status_url("127.0.0.1:9877") == "http://127.0.0.1:9877/status"
    assert status_url("0.0.0.0:9877") == "http://127.0.0.1:9877/status"
    assert status_url("[::]:9877") == "http://[::1]:9877/status"
    assert status_url("[::1]:9000") == "http://[::1]:9000/status"


def test_no_unit_and_no_config_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["status"], capsys)
    assert code == 64
    assert "name the UNIT, or give --config" in err


# -- without a daemon: the journal -------------------------------------------------------------


# -- exit statuses and --watch ------------------------------------------------------------------

def test_exit_status_without_an_invocation() -> None:
    assert exit_status({"unit": UNIT, "invocation": None}) == 3
    assert exit_status({"unit": UNIT, "invocation": None, "active_state": "activating"}) == 1


def test_progress_of_a_phase_the_rank_left_is_not_shown() -> None:
    doc = document("starting")
    doc["invocation"]["ranks"]["TP0"]["progress"]["phase"] = "weight_load"
    [row] = [line for line in render_table(doc).splitlines() if line.startswith("TP0 ")]
    assert "7/23" not in row


def test_watch_in_a_log_prints_a_block_per_change_and_a_line_per_progress_step() -> None:
    def step(phase: str, n: int | None, outcome: str = "starting") -> dict[str, Any]:
        doc = document(outcome, STALLED if outcome == "stalled" else [])
        for r in doc["invocation"]["ranks"].values():
            if r["phase"] != "launch":
                r["phase"] = phase
        doc["invocation"]["phase"] = phase
        progress = doc["invocation"]["ranks"]["TP0"]["progress"]
        if n is None:
            doc["invocation"]["ranks"]["TP0"]["progress"] = None
        else:
            progress.update(n=n, total=64, bs=None, phase=phase)
        return doc

    docs = iter([step("weight_load", 1), step("weight_load", 1), step("weight_load", 2), step("weight_load", 3),
                 step("kv_cache_alloc", None), step("kv_cache_alloc", None, "stalled")])

    def fetch() -> dict[str, Any]:
        try:
            return next(docs)
        except StopIteration:
            raise KeyboardInterrupt from None

    out = io.StringIO()
    sleeps: list[float] = []
    code = watch(fetch, out, tty=False, listen="127.0.0.1:9877", sleep=sleeps.append, clock=lambda: HOUR_AGO)
    text = out.getvalue()
    assert code == 2  # the last document's
    assert text.count("--- ") == 3  # weight_load, kv_cache_alloc, then the verdict
    progress = [line for line in text.splitlines() if line.endswith("/64")]
    assert [line.split()[1:] for line in progress] == [["TP0", "weight_load", "2/64"], ["TP0", "weight_load", "3/64"]]
    assert "\x1b" not in text
    assert sleeps == [1.0] * 6


def test_watch_on_a_terminal_redraws(capsys: pytest.CaptureFixture[str]) -> None:
    docs = iter([document("starting"), document("ready")])

    def fetch() -> dict[str, Any]:
        try:
            return next(docs)
        except StopIteration:
            raise KeyboardInterrupt from None

    out = io.StringIO()
    assert watch(fetch, out, tty=True, sleep=lambda _: None) == 0
    assert out.getvalue().count("\x1b[H\x1b[2J") == 2


def test_default_config_is_the_units() -> None:
    from phasewatch.sources.journal.current import resolve_config

    assert resolve_config(UNIT, None) == Config(unit=UNIT)


def test_oneline_without_a_start_up() -> None:
    assert oneline({"unit": UNIT, "invocation": None, "active_state": "inactive"}) == "sglang-kimi: no start-up"
    assert oneline({"unit": UNIT, "invocation": None, "active_state": "activating"}) == (
        "sglang-kimi: activating, no line yet")


def test_oneline_from_a_fixed_document() -> None:
    assert oneline({**document("starting"), "eta_seconds": 240.0}) == (
        "sglang-kimi: draft_cuda_graph_capture 8/8 3m12s/20m ETA 4m")
    assert oneline(document("stalled", STALLED)) == (
        "sglang-kimi: stalled draft_cuda_graph_capture 8/8 3m12s/20m [stalled: TP3]")


def test_watch_in_a_log_shows_only_what_changed_since_the_last_block() -> None:
    """Issue 36: each block after the first says what changed (the ranks that moved, a new verdict),
    not the eight rows and every line again."""
    first = document("starting")
    moved = document("starting")
    moved["invocation"]["ranks"]["TP5"]["phase_ended"] = True
    for r in moved["invocation"]["ranks"].values():
        r["elapsed_seconds"], r["quiet_seconds"] = 193.0, 3.0  # a second later: every duration moved
    stalled = document("stalled", STALLED)
    docs = iter([first, moved, stalled])

    def fetch() -> dict[str, Any]:
        try:
            return next(docs)
        except StopIteration:
            raise KeyboardInterrupt from None

    out = io.StringIO()
    assert watch(fetch, out, tty=False, listen="127.0.0.1:9877", sleep=lambda _: None, clock=lambda: HOUR_AGO) == 2
    blocks = [block.splitlines()[1:] for block in out.getvalue().split("--- ")[1:]]
    assert len(blocks) == 3 and any(line.startswith("TP7 ") for line in blocks[0])  # the whole table first
    second = [line for line in blocks[1] if line]
    assert second[0].startswith(f"{UNIT}: starting, phase draft_cuda_graph_capture")
    assert [line.split()[0] for line in second[1:]] == ["RANK", "TP5"], second
    assert "(done)" in second[2]
    third = [line for line in blocks[2] if line]
    assert third[0].startswith(f"{UNIT}: stalled")
    assert [line.split()[0] for line in third if line.startswith(("RANK", "TP"))] == ["RANK", "TP3", "TP5"], third
    assert "verdicts:" in third and any("TP3 stalled in draft_cuda_graph_capture" in line for line in third)
    assert not any(line.startswith("restart budget") for line in third)  # unchanged: not said again
