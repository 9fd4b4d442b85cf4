"""Ranks that fail alike share one verdict line in the text outputs (replay's table, `status`); the
JSON outputs keep one entry per verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_sim import Faults, build, journal_json

from phasewatch.cli import main
from phasewatch.commands.status import render_table
from phasewatch.output.verdict_lines import VerdictLine, grouped, rank_ranges

UNIT = "sglang-kimi.service"


def stalled(rank: str, spent: str = "25m", peers: int = 7) -> VerdictLine:
    return VerdictLine("stalled", rank, f"{UNIT}: {rank} stalled in weight_load for {spent} (limit 20m); "
                                        f"{peers} other rank(s) in the same phase")


def test_eight_ranks_stalled_alike_make_one_line() -> None:
    assert grouped([stalled(f"TP{i}") for i in range(8)]) == [
        f"stalled: {UNIT}: TP0–TP7 stalled in weight_load for 25m (limit 20m)"]


def test_durations_that_differ_are_shown_as_their_range() -> None:
    lines = [stalled("TP0", "25m3s", 2), stalled("TP1", "25m9s", 2), stalled("TP2", "25m5s", 2)]
    assert grouped(lines) == [f"stalled: {UNIT}: TP0–TP2 stalled in weight_load for 25m3s–25m9s (limit 20m)"]


def test_a_group_smaller_than_the_phase_keeps_the_others_count() -> None:
    assert grouped([stalled("TP2"), stalled("TP5")]) == [
        f"stalled: {UNIT}: TP2, TP5 stalled in weight_load for 25m (limit 20m); 7 other rank(s) in the same phase"]


def test_different_phases_kinds_and_rankless_verdicts_stay_apart_in_order() -> None:
    crash = VerdictLine("crashed", None, f"{UNIT}: a process (rank unknown) crashed (cuda_error)")
    straggler = VerdictLine("straggler", "TP4", f"{UNIT}: TP4 is still in weight_load; other ranks left ...")
    other_phase = VerdictLine("stalled", "TP3", f"{UNIT}: TP3 stalled in dist_init for 25m (limit 10m)")
    assert grouped([stalled("TP0"), crash, stalled("TP1"), straggler, other_phase, stalled("TP2")]) == [
        f"stalled: {UNIT}: TP0–TP2 stalled in weight_load for 25m (limit 20m); 7 other rank(s) in the same phase",
        f"crashed: {crash.message}", f"straggler: {straggler.message}", f"stalled: {other_phase.message}"]


@pytest.mark.parametrize(("labels", "text"), [
    (["TP0", "TP1", "TP2", "TP3"], "TP0–TP3"),
    (["TP0", "TP1"], "TP0, TP1"),
    (["TP0", "TP1", "TP2", "TP5", "TP6", "TP7"], "TP0–TP2, TP5–TP7"),
    (["DP0 TP0", "DP1 TP1", "DP2 TP2"], "DP0 TP0–DP2 TP2"),
    (["PP0 TP0", "PP0 TP1", "PP1 TP2"], "PP0 TP0, PP0 TP1, PP1 TP2"),  # not one step in every number
    (["TP8", "TP9", "TP10", "TP11"], "TP8–TP11"),
    (["main"], "main"),
])
def test_rank_ranges(labels: list[str], text: str) -> None:
    assert rank_ranges(labels) == text


@pytest.fixture
def all_ranks_hang(tmp_path: Path) -> Path:
    plan = build(faults=Faults(hang={rank: "weight_load" for rank in range(8)}))
    path = tmp_path / "hang.json"
    path.write_text("".join(json.dumps(entry) + "\n" for entry in journal_json(plan, unit=UNIT)))
    return path


def test_replay_table_groups_and_json_keeps_every_verdict(all_ranks_hang: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(all_ranks_hang), "--now", "+2h"]) == 0
    table = capsys.readouterr().out
    verdicts = table[table.index("verdicts:"):].splitlines()[1:]
    assert [v for v in verdicts if v.startswith("  ")] == [
        f"  stalled: {UNIT}: TP0–TP7 stalled in weight_load for 2h (limit 45m)",
        # one remedy line for the eight alike (stages/s4_judge/remedies.py), not eight, wrapped within 100 columns
        "  remedy: TP0 makes no progress loading weights (model moonshotai/Kimi-K2.5): check the storage it",
        "      reads and the page cache; `py-spy dump --pid <the rank's PID>` has its stack"]
    assert main(["replay", str(all_ranks_hang), "--now", "+2h", "--json"]) == 0
    [inv] = json.loads(capsys.readouterr().out)["invocations"]
    assert sorted(v["rank"] for v in inv["verdicts"]) == [f"TP{i}" for i in range(8)]


def test_status_groups_the_verdict_lines_but_keeps_each_ranks_verdict_column() -> None:
    ranks = {f"TP{i}": {"phase": "weight_load", "elapsed_seconds": 1500.0, "deadline_seconds": 1200.0}
             for i in range(8)}
    verdicts = [{"kind": "stalled", "rank": f"TP{i}", "phase": "weight_load", "cause": "deadline",
                 "message": f"{UNIT}: TP{i} stalled in weight_load for 25m (limit 20m); 7 other rank(s) in the same "
                            "phase"} for i in range(8)]
    document = {"unit": UNIT, "now": "2026-11-30T01:00:00.000Z",
                "invocation": {"invocation_id": "x", "outcome": "stalled", "phase": "weight_load",
                               "unit_state": "starting", "ranks": ranks, "verdicts": verdicts}}
    table = render_table(document)
    assert table.count("stalled (deadline)") == 8  # the per-rank column
    assert [line for line in table.splitlines() if line.startswith("  stalled:")] == [
        f"  stalled: {UNIT}: TP0–TP7 stalled in weight_load for 25m (limit 20m)"]


def test_a_zero_duration_in_a_message_is_grouped_not_an_error() -> None:
    """Issue 36 (found by the e2e): `replay --unit` of a stall whose message says "0s" exited 64."""
    from phasewatch.output.verdict_lines import VerdictLine, grouped

    lines = list(grouped(VerdictLine("stalled", f"TP{n}", f"TP{n} silent for 0s in weight_load") for n in range(2)))
    assert lines and all("0s" in line for line in lines)
