"""A history row read back (`history_records.startup_from_row`): every value checked; a start-up
without what it cannot do without is dropped, a bad phase, span list or verdict list is left out."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from phasewatch.sinks.history_records import MAX_JSON, PhaseRecord, startup_from_row, valid_seconds

T0 = 1_800_000_000.0
SPANS = json.dumps({"TP0": [["weight_load", T0 + 10, T0 + 550], ["cuda_graph_capture", T0 + 600, None]]})
VERDICTS = json.dumps([["stalled", "TP0", "cuda_graph_capture", T0 + 900]])
PHASE = ("weight_load", 540.0, 3.0, 64, 12.0, "TP5")


def row(**changed: Any) -> tuple[Any, ...]:
    fields = {"id": 1, "unit": "sglang-kimi.service", "invocation": "i1", "fingerprint": "f" * 16,
              "started_at": T0, "ended_at": T0 + 900, "outcome": "stalled", "cause": "deadline",
              "spans": SPANS, "verdicts": VERDICTS, "ended_by": None, "remedy": "raise the limit", "failure": None}
    fields.update(changed)
    return tuple(fields.values())


def test_a_row_as_written_reads_back_whole() -> None:
    record = startup_from_row(row(), [PHASE])
    assert record is not None
    assert record.phases == (PhaseRecord("weight_load", 540.0, 3.0, 64, 12.0, "TP5"),)
    assert record.spans == {"TP0": [("weight_load", T0 + 10, T0 + 550), ("cuda_graph_capture", T0 + 600, None)]}
    assert record.verdicts == (("stalled", "TP0", "cuda_graph_capture", T0 + 900),)
    assert (record.duration, record.remedy, record.cold) == (900, "raise the limit", False)


@pytest.mark.parametrize("changed", [{"unit": None}, {"invocation": 7}, {"outcome": b"ready"},
                                     {"started_at": "yesterday"}, {"ended_at": math.nan}, {"started_at": True},
                                     {"cause": 3}, {"ended_by": 1.5}])
def test_a_row_without_what_it_cannot_do_without_is_dropped(changed: dict[str, Any]) -> None:
    assert startup_from_row(row(**changed), [PHASE]) is None


@pytest.mark.parametrize("spans, verdicts", [
    ("not json", VERDICTS), (json.dumps({"TP0": [["no_such_phase", T0, None]]}), VERDICTS),
    (json.dumps({"TP0": [["weight_load", "soon", None]]}), VERDICTS), ("x" * (MAX_JSON + 1), VERDICTS),
    (SPANS, json.dumps([["stalled", "TP0", None, "later"]])), (SPANS, json.dumps({"stalled": 1})),
    (SPANS, json.dumps([["stalled", 0, None, T0]]))])
def test_a_bad_span_or_verdict_list_is_left_out_and_the_start_up_kept(spans: str, verdicts: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    record = startup_from_row(row(spans=spans, verdicts=verdicts), [PHASE])
    assert record is not None and record.phases
    assert (record.spans == {}) != (record.verdicts == ())
    assert "invalid phases, spans or verdicts" in caplog.text


def test_a_bad_phase_is_left_out_and_its_good_neighbours_kept() -> None:
    bad = [("weight_load", -1.0, 0.0, None, 0.0, None), ("no_such_phase", 1.0, 0.0, None, 0.0, None),
           ("cuda_graph_capture", 30.0, 1.0, True, 2.0, 5)]
    record = startup_from_row(row(), [PHASE, *bad])
    assert record is not None
    assert [p.phase for p in record.phases] == ["weight_load", "cuda_graph_capture"]
    assert record.phases[1].progress_total is None and record.phases[1].slowest_rank is None  # a bool, an int


@pytest.mark.parametrize("value, expected", [(3, 3.0), (0.5, 0.5), (0, 0.0), (-1, None), (math.inf, None),
                                             (True, None), ("3", None), (None, None)])
def test_valid_seconds_are_finite_and_not_negative(value: object, expected: float | None) -> None:
    assert valid_seconds(value) == expected
