"""The tracker's views are cached until something changes them (stages/s3_track/tracker.py): after every
entry, through the full stages or the catch-up fast path (stages/s3_track/fastpath.py), the cached snapshot
must be the one built afresh."""

from __future__ import annotations

from fakes import Journal, up_to_ready
from phasewatch.records import JournalRecord
from phasewatch.stages.s3_track.snapshot import Snapshot


def fresh(journal: Journal) -> Snapshot:
    tracker = journal.pipeline.tracker
    return Snapshot(tuple(inv.view() for inv in tracker._invocations.values()))


def test_the_cached_snapshot_follows_every_entry_through_either_path() -> None:
    j = Journal()
    feed = j.pipeline.feed
    checked = []

    def checking(record: JournalRecord, now: float | None) -> object:
        out = feed(record, now)
        assert j.pipeline.snapshot() == fresh(j)
        checked.append(record)
        return out

    j.pipeline.feed = checking  # type: ignore[method-assign]
    up_to_ready(j)
    assert j.pipeline.fast is not None  # serving lines of TP0 take the fast path
    for n in range(50):
        j.wait(0.5)
        before = j.pipeline.snapshot()
        j.log("TP0", f"Decode batch, #running-req: {n}, #token: {48213 + n}, token usage: 0.02, cuda graph: True, "
                     f"gen throughput (token/s): 1021.55, #queue-req: 0")
        after = j.pipeline.snapshot()
        assert after == fresh(j) and after != before  # the rank's last activity moved
    assert len(checked) > 100
