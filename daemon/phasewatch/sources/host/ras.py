"""Source: NCCL RAS asked who a collective hang waits for (advice, never a trigger).

While the unit starts, once a rank has been quiet for half its stall window, or every rank's GPU
waits (stages/s4_judge/ras_culprit.py: `ask_at`), RAS is asked at the address the rank processes use
(NCCL_RAS_ADDR / NCCL_RAS_ENABLE in /proc/PID/environ; default localhost:28028), again every
ASK_SPACING while it stays so. The exchange runs on a thread of its own, bounded (ras_client.py:
QUERY_SECONDS in all, REPORT_LIMIT bytes); the loop never waits on it: an answer that comes is judged
(`find_culprit`: the unit's cgroup's PIDs only, named by the rank titles) and returned by `collect`
(the judge's advice for the stall verdicts' words, the metrics). No answer, a slow one or a lying one
changes no verdict's kind or time: the stall verdict comes when the policy says, with "no culprit
from RAS" or with nothing from RAS at all.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from typing import Callable, Mapping, Sequence

from ...config.load import Config
from ...stages.s4_judge.ras_culprit import ASK_SPACING, RasFinding, ask_at, failed_finding, find_culprit
from ...stages.s4_judge.ras_report import RasAddress, RasFormatError, parse_report
from ..base import Current, Instant
from .procs import ProcessTable
from .ras_client import QUERY_SECONDS, RasAnswer, address_of, query
from .unit_processes import RankProcessSource, UnitFactsReader

logger = logging.getLogger(__name__)

Query = Callable[[RasAddress], RasAnswer]


class RasSource:
    def __init__(self, config: Callable[[], Config], facts: UnitFactsReader, processes: ProcessTable,
                 ranks: RankProcessSource, current: Current, ask: Query = query,
                 unit_environment: Callable[[], Mapping[str, str]] = dict) -> None:
        self.config = config  # the limits in force (the pipeline's: reloads and learned limits included)
        self.facts = facts
        self.processes = processes
        self.ranks = ranks
        self.current = current
        self.ask = ask
        self.unit_environment = unit_environment  # the unit's Environment= (D-Bus), when no environ reads
        self.answers: queue.Queue[RasFinding] = queue.Queue()
        self.in_flight_since: float | None = None  # monotonic
        self.last_asked = -math.inf  # monotonic
        self.asked_for: str | None = None  # the start-up asked about last
        self.findings = 0
        self.found: list[RasFinding] = []  # by the collect under way
        self.thread: threading.Thread | None = None  # the query in flight (tests join it)

    def fds(self) -> Sequence[int]:
        return ()

    def next_deadline(self, now: Instant) -> float | None:
        if self.in_flight_since is not None:  # (an answer overdue is looked for once a second, no more)
            answer_by = self.in_flight_since + QUERY_SECONDS + 0.2
            return answer_by if answer_by > now.monotonic else now.monotonic + 1.0
        due = self._due(now)
        if due is None:
            return None
        return max(now.monotonic + due - now.wall, self.last_asked + ASK_SPACING)

    def _due(self, now: Instant) -> float | None:
        config = self.config()
        if not (config.vitals.enabled and config.vitals.ras):
            return None
        inv = self.current()
        when = ask_at(inv, now.wall, config)
        return when[0] if when is not None else None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[RasFinding]:
        """The findings made since (answers come, or the ranks' setting says no RAS); a query started
        when one is due."""
        found = self.found = list[RasFinding]()
        self._take_answers()
        self._ask(now)
        return found

    def _ask(self, now: Instant) -> None:
        inv = self.current()
        if inv is not None and inv.invocation_id != self.asked_for:
            self.last_asked = -math.inf
        due = self._due(now)
        if inv is None or due is None or due > now.wall or self.in_flight_since is not None \
                or now.monotonic - self.last_asked < ASK_SPACING:
            return
        self.last_asked, self.asked_for = now.monotonic, inv.invocation_id  # (asked or not: again in ASK_SPACING)
        control_group = self.facts.control_group_of(inv)
        if control_group is None:
            return
        titled = {p.pid: p.rank for p in self.processes.ranks(control_group, self.ranks.host_wide, inv.started_at)}
        labels = {**titled, **self.ranks.watch.known_pids()}  # (rank_processes: host: the watched ones too)
        unit_pids = set(self.processes.pids(control_group)) | set(labels)
        address, where = address_of([*sorted(labels), *sorted(unit_pids - set(labels))],
                                    self.processes.proc, self.unit_environment())
        if not address.enabled:
            self._found(failed_finding(inv.invocation_id, now.wall, str(address),
                                       f"RAS is off in the rank processes ({where}: NCCL_RAS_ENABLE=0)", told=False))
            return
        if address.problem is not None:
            self._found(failed_finding(inv.invocation_id, now.wall, str(address), address.problem))
            return
        self.in_flight_since = now.monotonic
        self.thread = threading.Thread(target=self._query, name="phasewatch-ras", daemon=True,
                                       args=(address, inv.invocation_id, now.wall, labels, frozenset(unit_pids)))
        self.thread.start()

    def _query(self, address: RasAddress, invocation_id: str, at: float, labels: dict[int, str],
               unit_pids: frozenset[int]) -> None:
        try:
            answer = self.ask(address)
            if answer.error is not None:
                finding = failed_finding(invocation_id, at, answer.address,
                                         f"no answer from RAS at {answer.address}: {answer.error}",
                                         told=not answer.error.startswith("cannot connect"))
            else:
                try:
                    report = parse_report(answer.report)
                except RasFormatError as exc:
                    finding = failed_finding(invocation_id, at, answer.address, f"RAS's answer does not read: {exc}")
                else:
                    finding = find_culprit(report, invocation_id, at, answer.address, labels, unit_pids,
                                           answer.report)
        except Exception as exc:  # the thread's last word: a finding, never a dead daemon
            finding = failed_finding(invocation_id, at, str(address), f"asking RAS failed: {exc}")
        self.answers.put(finding)

    def _take_answers(self) -> None:
        while True:
            try:
                finding = self.answers.get_nowait()
            except queue.Empty:
                return
            self.in_flight_since = None
            self._found(finding)

    def _found(self, finding: RasFinding) -> None:
        self.findings += 1
        if finding.ignored_pids:
            logger.warning("[%s] RAS at %s named %d PID(s) outside the unit (ignored): %s", self.config().unit,
                           finding.address, len(finding.ignored_pids),
                           ", ".join(map(str, finding.ignored_pids[:10])))
        logger.info("[%s] %s", self.config().unit, finding.words())
        self.found.append(finding)
