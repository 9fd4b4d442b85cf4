"""Edge: leftovers after stops phasewatch did not guard. A start-up that ended before ready (the
operator's `systemctl restart` or `stop`, a crash and systemd's Restart=, or phasewatch's own
RestartUnit when `leftovers.check` is off) is checked once its invocation is over: its rank processes
still alive (by PID, start time and the same rank title; a rank title elsewhere is anybody's), and,
where nvidia-smi exists, GPU memory held by its PIDs. Survivors are alerted once (`restart_blocked`,
critical); phasewatch cannot hold a start that systemd makes by itself, so this is an alert only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from ..records import MAIN, Phase
from ..stages.s3_track.snapshot import InvocationView, UnitState
from ..stages.s5_act.respond import Action, ActionKind
from .leftovers import CRITICAL, Survivor

logger = logging.getLogger(__name__)
GRACE = 2.0  # seconds after the end is seen: the kernel reaps what systemd's stop killed


@dataclass(frozen=True)
class Due:
    invocation_id: str
    old: dict[int, str]  # its rank processes: pid -> rank
    at: float  # wall clock


def reached_ready(inv: InvocationView) -> bool:
    main = inv.rank(MAIN)
    return main is not None and any(s.phase is Phase.READY for s in main.spans)


class UnguardedStops:
    def __init__(self, unit: str, scan: Callable[[dict[int, str]], Sequence[Survivor]],
                 alert: Callable[[Action], None], gpu_checked: Callable[[], bool] = lambda: True) -> None:
        self.unit = unit
        self.scan = scan  # LeftoverScan.unguarded
        self.gpu_checked = gpu_checked  # the last scan looked at GPU memory (LeftoverScan.gpu_checked)
        self.alert = alert
        self.checked: set[str] = set()  # start-ups whose end was seen (checked or not to be)
        self.due: list[Due] = []
        self.survivors_seen_at: float | None = None  # the last time survivors were found (wall)

    def known_already(self, invocations: Sequence[InvocationView]) -> None:
        """At the daemon's start: start-ups that ended before it ran are history, not news."""
        self.checked.update(i.invocation_id for i in invocations if i.state in (UnitState.FAILED, UnitState.STOPPED))
        self.checked.update(i.invocation_id for i in invocations[:-1])

    def observe(self, invocations: Sequence[InvocationView], old_pids: Callable[[str], dict[int, str]],
                guarded: Callable[[str], bool], now: float) -> None:
        """A start-up that is over (stopped, failed, or followed by a newer one) before ready and
        that phasewatch did not stop itself with a check (`guarded`) gets one check, GRACE later."""
        for index, inv in enumerate(invocations[-3:], start=max(len(invocations) - 3, 0)):
            over = inv.state in (UnitState.FAILED, UnitState.STOPPED) or index < len(invocations) - 1
            if not over or inv.invocation_id in self.checked:
                continue
            self.checked.add(inv.invocation_id)
            if reached_ready(inv) or guarded(inv.invocation_id):
                continue
            self.due.append(Due(inv.invocation_id, old_pids(inv.invocation_id), now + GRACE))

    def next_deadline(self) -> float | None:
        return min((d.at for d in self.due), default=None)

    def tick(self, now: float) -> None:
        for due in [d for d in self.due if now >= d.at]:
            self.due.remove(due)
            left = self.scan(due.old)
            if not left:
                logger.info("[%s] start-up %s ended before ready; nothing of it survived%s", self.unit,
                            due.invocation_id, "" if self.gpu_checked() else
                            " in /proc (GPU memory not checked: nvidia-smi missing or did not answer)")
                continue
            self.survivors_seen_at = now
            listed = "; ".join(s.text() for s in left)
            self.alert(Action(
                kind=ActionKind.ALERT, verdict_kind="restart_blocked", priority=CRITICAL,
                invocation_id=due.invocation_id, cause="leftovers",
                message=f"{self.unit}: start-up {due.invocation_id} ended before ready by a stop "
                              f"phasewatch did not check (the operator's, a crash and Restart=, or a restart "
                              f"without leftovers.check) and processes of it survived: {listed}. phasewatch "
                              "cannot hold a start systemd makes by itself: the next start-up may fail with OOM "
                              "until they end"))
