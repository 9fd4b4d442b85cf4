"""Journal entries as a local user forges them with `logger --journald` (and, for contrast, what
journald and PID 1 put on their own entries): field dicts for JournalRecord or journal files."""

from __future__ import annotations

import datetime as dt
from typing import Any

from phasewatch.records import MID_STARTED, MID_STOPPING, MID_SUPPRESSED

UNIT = "sglang-kimi.service"
INVOCATION = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
FORGED_INVOCATION = "ffffffffffffffffffffffffffffffff"
BASE = 1796025600.0
# What journald adds to an entry `logger --journald` sent as uid 65534 from outside any service.
NOBODY = {"_UID": "65534", "_GID": "65534", "_PID": "4242", "_TRANSPORT": "journal", "_COMM": "logger"}
# What journald puts on its own "Suppressed N messages" notice (seen in the e2e sandbox, systemd 252).
JOURNALD = {"_UID": "0", "_GID": "0", "_PID": "76", "_TRANSPORT": "driver", "_COMM": "systemd-journal",
            "_SYSTEMD_UNIT": "systemd-journald.service"}
PID1 = {"_UID": "0", "_PID": "1", "_TRANSPORT": "journal", "UNIT": UNIT}


def forged_started(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT, "UNIT": UNIT,
            "MESSAGE_ID": MID_STARTED, "INVOCATION_ID": FORGED_INVOCATION, "MESSAGE": f"Started {UNIT}."}


def forged_stopping(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT, "UNIT": UNIT,
            "MESSAGE_ID": MID_STOPPING, "INVOCATION_ID": INVOCATION, "MESSAGE": f"Stopping {UNIT}..."}


def forged_line(text: str, ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT,
            "_SYSTEMD_INVOCATION_ID": INVOCATION, "MESSAGE": text}


def forged_suppressed(ts: float = BASE) -> dict[str, Any]:
    return {**NOBODY, "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "OBJECT_SYSTEMD_UNIT": UNIT,
            "MESSAGE_ID": MID_SUPPRESSED, "N_DROPPED": "123456", "MESSAGE": f"Suppressed 123456 messages from {UNIT}"}


def stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def phantom_rank(ts: float = BASE) -> dict[str, Any]:
    return forged_line(f"[{stamp(ts)} TP9] Load weight begin. avail mem=137.95 GB", ts)


def forged_ready(ts: float = BASE) -> dict[str, Any]:
    return forged_line(f"[{stamp(ts)}] The server is fired up and ready to roll!", ts)
