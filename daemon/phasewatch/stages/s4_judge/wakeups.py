"""How long the daemon's loop may sleep: pure, on the monotonic clock (app.py asks once per step).

journald tells a follower about new entries only when its post-change timer fires (250 ms, coalesced:
a bare reader waiting on the journal's fd wakes 0.25-0.5 s after the write, docs/performance.md).
So while the unit talks (an entry within TALKING) the loop also looks for entries every LOOK; a look
that finds nothing costs one read and sleeps again. When the last read stopped on its bound with
entries left (a burst), the next step comes at once. Quiet for TALKING: the loop sleeps until the
earliest deadline (its sources', the policy's, the watchdog's) or until an fd is readable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LOOK = 0.05
TALKING = 2.0


@dataclass(frozen=True)
class Wait:
    seconds: float  # how long poll() may sleep (inf: until an fd is readable)
    look: bool  # a look for entries journald has not announced; not a deadline


def plan(now: float, deadline: float, last_entries_at: float, entries_left: bool) -> Wait:
    """`deadline`: the earliest one of any source, the policy or the watchdog (inf: none);
    `last_entries_at`: when the journal last gave entries; `entries_left`: it has more right now."""
    if entries_left:
        return Wait(0.0, False)
    until_deadline = max(deadline - now, 0.0) if not math.isinf(deadline) else math.inf
    if now - last_entries_at < TALKING and until_deadline > LOOK:
        return Wait(LOOK, True)
    return Wait(until_deadline, False)
