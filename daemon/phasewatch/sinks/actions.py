"""Edge: the side effects. Each seam has a recording fake beside it.

- the unit's restart, stop and start: `systemd_unit.SystemdUnit`, shared with the sources;
- `JournalAlerter`: structured journal entries (`systemd.journal.send`) with a MESSAGE_ID per kind.
- `Notifier`: sd_notify READY=1 / WATCHDOG=1 / STATUS=.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..stages.s5_act.respond import Action


def alert_fields(action: Action, unit: str) -> dict[str, str]:
    fields = {
        "MESSAGE": action.message,
        "MESSAGE_ID": action.message_id,
        "PRIORITY": str(action.priority),
        "SYSLOG_IDENTIFIER": "phasewatch",
        "PHASEWATCH_UNIT": unit,
        "PHASEWATCH_VERDICT": action.verdict_kind,
    }
    optional = {"PHASEWATCH_INVOCATION": action.invocation_id, "PHASEWATCH_PHASE": action.phase,
                "PHASEWATCH_RANK": action.rank, "PHASEWATCH_CAUSE": action.cause,
                "PHASEWATCH_EVIDENCE": action.evidence, "PHASEWATCH_REMEDY": action.remedy}
    fields.update({k: v for k, v in optional.items() if v})
    if action.dry_run:
        fields["PHASEWATCH_DRY_RUN"] = "1"
    return fields


def stderr_is_journal(environ: Mapping[str, str] | None = None, stat: Callable[[int], os.stat_result] = os.fstat
                      ) -> bool:
    """Whether standard error is a journald stream (systemd sets JOURNAL_STREAM=DEVICE:INODE of it):
    what the daemon logs there is in the journal already, beside the alerts' own entries."""
    stream = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, _, inode = stream.partition(":")
    try:
        st = stat(2)
    except OSError:
        return False
    return device.isdigit() and inode.isdigit() and (st.st_dev, st.st_ino) == (int(device), int(inode))


class JournalAlerter:
    def __init__(self, unit: str, send: Callable[..., Any] | None = None) -> None:
        self.unit = unit
        if send is None:
            from systemd import journal  # pragma: systemd no cover

            send = journal.send
        self._send = send

    def alert(self, action: Action) -> None:
        fields = alert_fields(action, self.unit)
        message = fields.pop("MESSAGE")
        self._send(message, **fields)


@dataclass
class RecordingAlerter:
    unit: str
    sent: list[dict[str, str]] = field(default_factory=list)

    def alert(self, action: Action) -> None:
        self.sent.append(alert_fields(action, self.unit))


class Notifier:
    """sd_notify; a no-op outside systemd (no NOTIFY_SOCKET)."""

    def __init__(self, notify: Callable[[str], Any] | None = None) -> None:
        if notify is None:
            from systemd import daemon  # pragma: systemd no cover

            notify = daemon.notify
        self._notify = notify

    def send(self, state: str) -> None:
        self._notify(state)


@dataclass
class RecordingNotifier:
    sent: list[str] = field(default_factory=list)

    def send(self, state: str) -> None:
        self.sent.append(state)
