"""Which journal entries are the unit's own: only what journald itself vouches for.

Fields starting with `_` are set by journald from the sender's credentials; a client cannot send
them. Every other field (`OBJECT_SYSTEMD_UNIT=`, `UNIT=`, `MESSAGE_ID=`, `INVOCATION_ID=`,
`N_DROPPED=`) any local user can write with `logger --journald`. So an entry read from the journal
for a unit counts only as:

- a line of the server: `_SYSTEMD_UNIT=<unit>` (its invocation from `_SYSTEMD_INVOCATION_ID`);
- PID 1 about the unit (lifecycle): `_PID=1` and `_UID=0`;
- journald's own notice ("Suppressed N messages"): `_TRANSPORT=driver` and `_UID=0`.

Anything else that claims the unit is rejected, with the reason naming what it claimed to be.
Pasted logs replayed from a file carry no `_` fields at all and are not screened (see commands/replay.py).
"""

from __future__ import annotations

from ...records import (
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STARTING,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    JournalRecord,
)

LIFECYCLE_NOT_FROM_PID1 = "lifecycle_not_from_pid1"
SUPPRESSION_NOT_FROM_JOURNALD = "suppression_not_from_journald"
LINE_NOT_FROM_UNIT = "line_not_from_unit"
REASONS = (LIFECYCLE_NOT_FROM_PID1, SUPPRESSION_NOT_FROM_JOURNALD, LINE_NOT_FROM_UNIT)

LIFECYCLE_IDS = frozenset({MID_STARTING, MID_STARTED, MID_STOPPING, MID_STOPPED, MID_DEACTIVATED, MID_FAILED,
                           MID_MAIN_EXITED, MID_RESTART_SCHEDULED})
# The trusted fields a reader must fetch for `rejection` to judge an entry.
TRUSTED_FIELDS = ("_SYSTEMD_UNIT", "_PID", "_UID", "_TRANSPORT")


def rejection(record: JournalRecord, unit: str) -> str | None:
    """Why an entry read from the journal for `unit` is not to be believed; None: it is genuine."""
    extra = record.extra
    if extra.get("_SYSTEMD_UNIT") == unit:
        return None  # written by one of the unit's own processes
    root = extra.get("_UID") == "0"
    if record.message_id == MID_SUPPRESSED or record.n_dropped is not None:
        return None if root and extra.get("_TRANSPORT") == "driver" else SUPPRESSION_NOT_FROM_JOURNALD
    if root and record.pid == 1:
        return None  # PID 1 about the unit
    if root and extra.get("_TRANSPORT") == "driver":
        return None  # journald's own word about the unit
    if record.message_id in LIFECYCLE_IDS or record.unit is not None:
        return LIFECYCLE_NOT_FROM_PID1
    return LINE_NOT_FROM_UNIT

