"""Golden outputs of `phasewatch report`'s table: within 100 columns by default (short phase names
and a legend; one line per start-up with its longest phase when even that is wider), every phase
under its full name with --wide. Fixed records in, exact text out."""

from __future__ import annotations

import pytest

from phasewatch.commands import report
from phasewatch.commands.report import to_table
from phasewatch.sinks.history import PhaseRecord, StartupRecord

T0 = 1796025600.0  # 2026-11-30 08:00:00 UTC
FULL = [("launch", 12.0), ("dist_init", 2.0), ("weight_load", 540.0), ("kv_cache_alloc", 2.0),
        ("cuda_graph_capture", 292.0), ("draft_weight_load", 10.0), ("draft_cuda_graph_capture", 258.0),
        ("http_server_start", 1.0), ("warmup", 2.0)]


def record(index: int, outcome: str, cause: str | None, durations: list[tuple[str, float]]) -> StartupRecord:
    start = T0 + index * 7200
    phases = tuple(PhaseRecord(name, took, 1.0, None, 5.0, "TP3") for name, took in durations)
    spans = {"main": [("launch", start, None)], "TP1": [(durations[0][0], start, start + 1)],
             "TP3": [(name, start, start + took) for name, took in durations]}
    return StartupRecord("sglang-kimi.service", f"{index:032x}", "fp", start, start + sum(t for _, t in durations),
                         outcome, cause, phases, spans)


RECORDS = [record(0, "ready", None, FULL), record(1, "stalled", "deadline", FULL[:7]),
           record(2, "crashed", "oom", FULL[:5])]

DEFAULT = """\
STARTED UTC  TOOK    OUTCOME             SLOW  launch dist load kv graphs dload dgraphs http warmup
11-30 08:00  18m39s  ready               TP3   12s    2s   9m   2s 4m52s  10s   4m18s   1s   2s
11-30 10:00  18m36s  stalled (deadline)  TP3   12s    2s   9m   2s 4m52s  10s   4m18s   -    -
11-30 12:00  14m8s   crashed (oom)       TP3   12s    2s   9m   2s 4m52s  -     -       -    -

SLOW: the rank that finished last; durations: each phase's wall time
phases: dist = dist_init, load = weight_load, kv = kv_cache_alloc, graphs = cuda_graph_capture
        dload = draft_weight_load, dgraphs = draft_cuda_graph_capture, http = http_server_start
"""

WIDE_HEADER = ("STARTED (UTC)        TOOK    OUTCOME             SLOWEST  launch  dist_init  weight_load  "
               "kv_cache_alloc  cuda_graph_capture  draft_weight_load  draft_cuda_graph_capture  "
               "http_server_start  warmup")

LONGEST = """\
STARTED (UTC)        TOOK    OUTCOME             SLOWEST  LONGEST PHASE
2026-11-30 08:00:00  18m39s  ready               TP3      weight_load 9m
2026-11-30 10:00:00  18m36s  stalled (deadline)  TP3      weight_load 9m
2026-11-30 12:00:00  14m8s   crashed (oom)       TP3      weight_load 9m

every phase: phasewatch report --wide
"""


def test_default_table_fits_100_columns_with_a_legend() -> None:
    text = to_table(RECORDS)
    assert text == DEFAULT
    assert max(len(line) for line in text.splitlines()) <= 100


def test_wide_table_names_every_phase_in_full() -> None:
    lines = to_table(RECORDS, wide=True).splitlines()
    assert lines[0] == WIDE_HEADER
    assert lines[1].split() == ["2026-11-30", "08:00:00", "18m39s", "ready", "TP3", "12s", "2s", "9m", "2s",
                                "4m52s", "10s", "4m18s", "1s", "2s"]
    assert len(lines) == 4


def test_when_even_short_names_do_not_fit_one_line_per_start_up_with_its_longest_phase(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "FITS", 80)
    assert to_table(RECORDS) == LONGEST


def test_no_records() -> None:
    assert to_table([]) == "no start-ups recorded yet\n"


def test_remedies_are_listed_below_the_table_and_in_json_terminal_safe() -> None:
    from dataclasses import replace

    remedy = "lower --cuda-graph-max-bs (48 now) or --mem-fraction-static (0.88 now)"
    records = [RECORDS[0], replace(RECORDS[2], remedy=remedy), replace(RECORDS[1], remedy="set \x1b[2Jthis")]
    # A row wider than 100 columns has its text on a line of its own (where it wraps as prose).
    assert report.remedy_lines(records) == (f"\nremedies:\n  2026-11-30 12:00:00  {RECORDS[2].invocation_id[:12]}\n"
                                            f"    {remedy}\n  2026-11-30 10:00:00  {RECORDS[1].invocation_id[:12]}  "
                                            "set \\x1b[2Jthis\n")
    assert f"{RECORDS[2].invocation_id[:12]}  {remedy}" in report.remedy_lines(records, wide=True)
    assert report.remedy_lines(RECORDS) == ""
    assert [s["remedy"] for s in report.to_json(records)["startups"]] == [None, remedy, "set \x1b[2Jthis"]


def test_failures_are_listed_with_how_many_in_a_row_and_in_json() -> None:
    from dataclasses import replace

    stall = "stalled in draft_cuda_graph_capture (deadline) on TP3"
    records = [RECORDS[0], replace(RECORDS[1], failure=stall), replace(RECORDS[1], invocation_id="b" * 32,
                                                                       started_at=T0 + 4 * 7200, failure=stall),
               replace(RECORDS[2], failure="crashed in cuda_graph_capture (oom) on TP3 torch.OutOfMemoryError")]
    assert report.failure_lines(records, wide=True) == (
        f"\nfailures:\n  2026-11-30 10:00:00  {RECORDS[1].invocation_id[:12]}  {stall}\n"
        f"  2026-11-30 16:00:00  bbbbbbbbbbbb  {stall}  (2 in a row)\n"
        f"  2026-11-30 12:00:00  {RECORDS[2].invocation_id[:12]}  crashed in cuda_graph_capture (oom) on TP3 "
        "torch.OutOfMemoryError\n")
    assert all(len(line) <= 100 for line in report.failure_lines(records).splitlines())
    assert report.failure_lines(RECORDS) == ""
    assert [s["failure"] for s in report.to_json(records)["startups"]][:2] == [None, stall]
