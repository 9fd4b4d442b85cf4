"""`phasewatch logs` over real journal files (the simulator's entries written by systemd-journal-remote):
whole decoded lines where journalctl shows `[N blob data]`, bars collapsed, every line tagged with
its rank and phase, tracebacks whole."""

from __future__ import annotations

import pytest

from phasewatch.commands.logs import LogTagger, Regrouper, TaggedLine
from phasewatch.config.load import Config
from phasewatch.records import Event, JournalRecord, Line


def test_regrouper_keeps_continuations_with_their_record_within_the_window() -> None:
    def line(ts: float, group: int, text: str, continuation: bool = False) -> TaggedLine:
        return TaggedLine(ts, "TP4", "warmup", text, group, continuation)

    regroup = Regrouper(window=1.0)
    assert regroup.add([line(10.0, 1, "hit an exception:")]) == []
    assert regroup.add([line(10.1, 2, "another process")]) == []
    assert regroup.add([line(10.2, 1, "  File x", True)]) == []
    released = regroup.add([line(12.0, 3, "much later")])
    assert [t.text for t in released] == ["hit an exception:", "  File x", "another process"]
    late = regroup.add([line(12.1, 1, "ValueError: late", True)])  # its record is out already
    assert late == [] and [t.text for t in regroup.flush()] == ["much later", "ValueError: late"]


def test_a_line_a_stage_cannot_take_is_quarantined_and_the_next_one_tagged(monkeypatch: pytest.MonkeyPatch) -> None:
    """`logs` enters the stages through the pipeline's door: a line that raises in a stage is
    quarantined (counted), as in the daemon, and the lines after it are still tagged."""
    tagger = LogTagger(Config(unit="sglang.service"))
    mapper = tagger.pipeline.mapper
    real = mapper.map_line

    def map_line(line: Line) -> list[Event]:
        if "poison" in line.message:
            raise ValueError("a stage's bug")
        return real(line)

    monkeypatch.setattr(mapper, "map_line", map_line)

    def record(text: str, at: float) -> JournalRecord:
        return JournalRecord(f"[2026-05-28 20:26:40 TP0] {text}".encode(), at, pid=7, invocation_id="a" * 32)

    assert tagger.feed(record("poison", 1.0), None) == []
    [line] = tagger.feed(record("Load weight begin. avail mem=70.00 GB", 2.0), None)
    assert (line.rank, line.phase, line.text) == ("TP0", "weight_load", "Load weight begin. avail mem=70.00 GB")
    assert tagger.pipeline.quarantined == 1
