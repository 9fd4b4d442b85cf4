"""Who the Alertmanager webhook receiver (sources/receiver/alert_receiver.py) serves, and what it says about
those it refuses. No I/O: the time is passed in.

`Gate`: at most MAX_CONNECTIONS connections at once, at most MAX_PER_PEER of them for one peer (a
local user by the uid owning its socket, a remote one by its address: sinks/peers.py), and the last
TRUSTED_SLOTS of them only for a peer that presented the group's token within TRUSTED_FOR. So
token-less peers, slow or many, cannot take every slot from Alertmanager.

`RefusalLog`: a refused request is counted (the metric) on every one, but said in the log at most
once per LOG_EVERY for each reason, with how many were refused since the previous line: a flood of
refusals does not fill the journal nor get the daemon's other lines suppressed by journald.
"""

from __future__ import annotations

import threading

MAX_CONNECTIONS = 10
MAX_PER_PEER = 4
# Two: both Alertmanagers of an HA pair deliver each notification at once.
TRUSTED_SLOTS = 2
TRUSTED_FOR = 7 * 86400.0  # a group restart is rare: Alertmanager may not have come for days
MAX_TRUSTED = 32  # peers remembered; the one heard from longest ago is forgotten first
LOG_EVERY = 60.0


class Gate:
    """Connection slots, shared by the listener's accept thread and its connection threads."""

    def __init__(self, total: int = MAX_CONNECTIONS, per_peer: int = MAX_PER_PEER, kept: int = TRUSTED_SLOTS,
                 trusted_for: float = TRUSTED_FOR) -> None:
        self.total, self.per_peer, self.kept, self.trusted_for = total, per_peer, kept, trusted_for
        self._lock = threading.Lock()
        self._in_use = 0
        self._by_peer: dict[str, int] = {}
        self._trusted: dict[str, float] = {}  # peer -> when it last presented the token (monotonic)

    def take(self, peer: str, now: float) -> bool:
        """A slot for `peer`, or False (busy)."""
        with self._lock:
            heard = self._trusted.get(peer)
            trusted = heard is not None and now - heard <= self.trusted_for
            limit = self.total if trusted else self.total - self.kept
            if self._in_use >= limit or self._by_peer.get(peer, 0) >= self.per_peer:
                return False
            self._in_use += 1
            self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
            return True

    def give_back(self, peer: str) -> None:
        with self._lock:
            self._in_use = max(self._in_use - 1, 0)
            left = self._by_peer.get(peer, 1) - 1
            if left > 0:
                self._by_peer[peer] = left
            else:
                self._by_peer.pop(peer, None)

    def trust(self, peer: str, now: float) -> None:
        """`peer` presented the token: it may use the kept slots."""
        with self._lock:
            self._trusted.pop(peer, None)
            self._trusted[peer] = now
            while len(self._trusted) > MAX_TRUSTED:
                del self._trusted[next(iter(self._trusted))]

    def in_use(self) -> int:
        with self._lock:
            return self._in_use


class RefusalLog:
    """At most one line per reason per `every` seconds."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._said_at: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}

    def line(self, reason: str, peer: str, now: float) -> str | None:
        """The log line for this refusal, or None when one for `reason` was said less than `every` ago."""
        with self._lock:
            said = self._said_at.get(reason)
            if said is not None and now - said < self.every:
                self._unsaid[reason] = self._unsaid.get(reason, 0) + 1
                return None
            more = self._unsaid.pop(reason, 0)
            self._said_at[reason] = now
        text = f"webhook request from {peer} refused: {reason}"
        if more and said is not None:
            text += f" ({more} more refused as {reason} since the last such line, {now - said:.0f}s ago)"
        return text
