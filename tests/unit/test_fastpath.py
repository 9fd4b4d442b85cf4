"""The catch-up fast path (stages/s3_track/fastpath.py): lines that change nothing but last activity skip the
stages, and every output and every piece of the stages' state stays what the full path makes of them.
Generated serving-heavy and crash-heavy journals go through a pipeline with and one without it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath_compare import assert_same, run
from fastpath_journals import T0, decode, journal, piece, prefixed, steps
from phasewatch.config.load import Config
from phasewatch.engines.sglang import fast_prefix, find_prefixes
from phasewatch.pipeline import Pipeline


@settings(max_examples=150, deadline=None)
@given(st.lists(piece, max_size=60), steps, st.booleans())
def test_fast_and_full_paths_agree_on_generated_journals(pieces: list[tuple[str | None, str, str]],
                                                         step: list[float], startup: bool) -> None:
    assert_same(journal(pieces, step, startup))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=50, max_size=300), st.lists(piece, max_size=10))
def test_a_serving_heavy_journal_takes_the_fast_path_and_agrees(batches: list[int], others: list[Any]) -> None:
    pieces = [("TP0", decode(n), "line") for n in batches] + others
    taken = assert_same(journal(pieces, [0.001]))
    assert taken >= len(batches) - 2  # the first Decode line after ready moves the unit to serving


def test_a_crash_heavy_journal_agrees() -> None:
    pieces: list[tuple[str | None, str, str]] = []
    for _ in range(6):
        pieces += [("TP0", decode(n), "line") for n in range(30)]
        pieces += [("TP1", "Batch dump: " + "{'rid': 1}, " * 300, "line"), (None, "asgi", "asgi")]
        pieces += [("TP0", "Scheduler hit an exception: Traceback (most recent call last):", "line"),
                   ("TP0", '  File "/x/scheduler.py", line 3, in run', "raw"),
                   ("TP0", "torch.OutOfMemoryError: CUDA out of memory.", "raw"), (None, "stop", "systemd"),
                   (None, "restart", "restart")]
    assert_same(journal(pieces, [0.002, 0.01]))


def test_a_traceback_with_the_prefix_on_every_line_agrees() -> None:
    """Its source lines would take the fast path as plain lines; they continue the traceback's record."""
    pieces: list[tuple[str | None, str, str]] = [("TP0", decode(n), "line") for n in range(20)]
    for head in ("Traceback (most recent call last):", '  File "/x/scheduler.py", line 3, in run'):
        pieces += [("TP0", head, "line"), ("TP0", '  File "/x/scheduler.py", line 9, in event_loop', "line"),
                   ("TP0", "    self.run_batch(batch)", "line"), ("TP0", "    ^^^^^^^^^^^^^^", "line"),
                   ("TP0", "KeyboardInterrupt", "line")]
        pieces += [("TP0", decode(n), "line") for n in range(20)]
    assert_same(journal(pieces, [0.002]))


def test_the_fast_prefix_is_the_first_prefix_find_prefixes_finds() -> None:
    for line in ("[2026-05-28 20:26:40 TP0] Decode batch", "[2026-05-28 20:26:40.123 DP1 TP3 EP3] x",
                 "[2026-05-28 20:26:40] INFO:     127.0.0.1:1 - x", "[2026-05-28 20:26:40 TP0]Decode"):
        fast = fast_prefix(line.encode())
        assert fast is not None and fast == find_prefixes(line)[0]
    for line in ("[20:26:40 TP0] Decode batch", "[gpu_id=3] x", "Rank 1: load weight begin.",
                 "x [2026-05-28 20:26:40] y"):
        assert fast_prefix(line.encode()) is None


def test_lines_that_change_more_than_last_activity_take_the_full_path() -> None:
    records = journal([("TP0", decode(1), "line")], [0.001])
    pipeline = Pipeline(Config(unit="sglang.service"), default_year=2026)
    for record in records:
        pipeline.feed(record, None)
    assert pipeline.fast is not None
    assert pipeline.current() is not None and pipeline.current().state.value == "serving"  # type: ignore[union-attr]
    taken = pipeline.fast.taken  # (not the first Decode line after ready: it moved the unit to serving)
    later = replace(records[-1], realtime=T0 + 100)
    pipeline.feed(later, None)
    assert pipeline.fast.taken == taken + 1
    for text in ("Load weight begin. avail mem=1 GB", "Scheduler hit an exception: Traceback (most recent call last):"):
        pipeline.feed(replace(later, message=prefixed("TP0", text).encode()), None)
    pipeline.feed(replace(later, message=prefixed("TP3", decode(2)).encode(), pid=104), None)  # a rank not seen yet
    assert pipeline.fast.taken == taken + 1


def test_the_fast_path_is_off_where_it_cannot_be_exact() -> None:
    assert Pipeline(Config(unit="u"), fast=False).fast is None
    assert run([], True, engine="vllm").taken == 0  # no fast prefix for vLLM's grammar yet
    from phasewatch.stages.s2_interpret.ruletally import RuleTally

    assert Pipeline(Config(unit="u"), RuleTally()).fast is None  # replay --rules sees every line
