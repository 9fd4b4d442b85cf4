"""`phasewatch logs` over real journal files (the simulator's entries written by systemd-journal-remote):
whole decoded lines where journalctl shows `[N blob data]`, bars collapsed, every line tagged with
its rank and phase, tracebacks whole."""

from __future__ import annotations

from phasewatch.commands.logs import Regrouper, TaggedLine


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
