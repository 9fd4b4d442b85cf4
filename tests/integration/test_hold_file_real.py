"""PROBE-S3 L-1: a FIFO at the hold file's path (whoever may write the state directory can make one)
never blocks the daemon's decision: the read returns at once (opened non-blocking, fstat'ed)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from phasewatch.sinks.hold import HoldFile

UNIT = "sglang-kimi.service"
T0 = 1_800_000_000.0


def test_probe_l1_a_fifo_as_hold_file_never_blocks(tmp_path: Path) -> None:
    os.mkfifo(HoldFile(tmp_path, UNIT).path)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(HoldFile(tmp_path, UNIT).read(T0)), daemon=True)
    reader.start()
    reader.join(timeout=10)  # it returns at once; a blocking open (no writer) would never
    if reader.is_alive():
        with open(HoldFile(tmp_path, UNIT).path, "wb"):  # unblock the reader, then fail
            pass
    assert result == [None]
