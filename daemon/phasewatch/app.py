"""The daemon: the only place where the stages meet the world.

One loop: wait on the journal fd and the rank processes' pidfds until the policy's next deadline
(or the watchdog's half-interval), feed new entries through the pipeline, judge the current
start-up, act on new verdicts, tell systemd how things stand.
"""

from __future__ import annotations

import logging
import math
import os
import select
import sqlite3
from dataclasses import dataclass, replace
from typing import Protocol

from . import policy
from .actions import UnitError, UnitFacts
from .clock import Clock
from .config import Config, format_duration
from .follow import INVALIDATE, JournalFollower
from .history import History, fingerprint, summarize
from .learn import LimitInForce, adapted, eta_seconds, limits_in_force, typical_durations
from .metrics import Exporter
from .pipeline import Pipeline
from .probe import BackgroundProbe, default_url
from .procs import ProcessTable, RankProcess, RankWatch
from .procstat import ProcSampler
from .records import MAIN, Event, EventKind, Phase
from .render import current_phase
from .respond import PRIORITY, Action, BudgetState, Memory, Response, reset_budget, respond
from .state import Saved, StateStore
from .timerlint import TimerWarning, UnitTimers, lint
from .timerlint import summary as lint_summary
from .tracker import InvocationView, Snapshot, UnitState
from .vitals import Sample, Vitals, compare, progress_events

logger = logging.getLogger(__name__)

READ_BATCH = 1000
SCAN_INTERVAL = 1.0  # how often the unit's cgroup is read while it starts
DEATH_GRACE = 0.5  # a rank death is confirmed only if the unit is not being torn down meanwhile
REBUILD_MARGIN = 5.0  # read from this long before the unit's start
# journald tells a follower about new entries only when its post-change timer fires (250 ms, coalesced;
# here a bare reader waiting on the fd woke 0.25-0.5 s after the write, docs/performance.md). While a
# start-up is talking, the loop also looks for entries every JOURNAL_POLL; a look that finds nothing
# costs one _next() and goes back to sleep. Quiet for TALKING: only the fd, deadlines and the watchdog.
JOURNAL_POLL = 0.05
TALKING = 2.0


class Unit(Protocol):
    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...

    def timers(self) -> UnitTimers: ...


class Alerter(Protocol):
    def alert(self, action: Action) -> None: ...


class Notify(Protocol):
    def send(self, state: str) -> None: ...


@dataclass
class _PendingDeath:
    process: RankProcess
    seen_at: float


class Daemon:
    def __init__(self, config: Config, *, follower: JournalFollower, unit: Unit, alerter: Alerter, notifier: Notify,
                 store: StateStore, clock: Clock, processes: ProcessTable | None = None,
                 watchdog_interval: float | None = None, health_probe: BackgroundProbe | None = None,
                 exporter: Exporter | None = None, history: History | None = None,
                 sampler: ProcSampler | None = None) -> None:
        self.config = config
        self.follower = follower
        self.unit = unit
        self.alerter = alerter
        self.notifier = notifier
        self.store = store
        self.clock = clock
        self.processes = processes or ProcessTable()
        self.watchdog_interval = watchdog_interval
        self.pipeline = Pipeline(config)
        self.memory = Memory()
        self.rank_watch = RankWatch()
        self.pending_deaths: list[_PendingDeath] = []
        self.facts: UnitFacts | None = None
        self.retry_at: float | None = None
        self.last_scan = -math.inf
        self.last_watchdog = -math.inf
        self.watched_invocation: str | None = None
        self.stopping = False
        self.entries_by_invocation: dict[str, int] = {}
        self.health_probe = health_probe or BackgroundProbe()
        self.last_probe = -math.inf
        self.last_status: dict[str, object] = {}
        self.last_entries_at = -math.inf  # when the journal last gave entries (wall clock)
        self.starting = False  # the current start-up has not reached ready (from the last _timeout)
        self.exporter = exporter  # metrics and /status (None: none)
        self.history = history  # past start-ups: learned limits, ETA (None: none)
        self.recorded: set[str] = set()
        self.learned: dict[str, Learned] = {}  # by fingerprint
        self.eta: float | None = None
        self.degraded: dict[str, str] = {}  # "history"/"state" -> why it is kept in memory only
        self.degraded_alerted: set[str] = set()  # alerted once per run
        self.status_unwritable = False
        self.sampler = sampler or ProcSampler(self.processes)  # signs of life beyond log lines
        self.vitals_sample: Sample | None = None
        self.vitals: Vitals | None = None
        self.last_vitals = -math.inf
        self.linted: set[str] = set()  # start-ups whose timers were checked (once each)
        self.timer_warnings: list[TimerWarning] = []

    # -- start-up ----------------------------------------------------------------------------
    def start(self) -> None:
        """Rebuild the current start-up from the journal, then tell systemd we are ready."""
        saved = self.store.load()
        self.memory = saved.memory
        self.facts = self._read_facts()
        started = self.facts.started_at if self.facts is not None else None
        if started is not None and self.facts is not None and self.facts.active_state != "inactive":
            self.follower.seek_realtime(started - REBUILD_MARGIN)
            logger.info("[%s] rebuilding the start-up that began %s ago from the journal", self.config.unit,
                        format_duration(self.clock.wall() - started))
        else:
            self.follower.seek_tail()
        while self._read_journal():
            pass
        self.watched_invocation = self._current_id()
        self._judge_and_act()
        self._save()
        self._check_host()
        self.notifier.send("READY=1")
        self._status()
        self._publish()

    def _read_facts(self) -> UnitFacts | None:
        try:
            return self.unit.facts()
        except UnitError as exc:
            logger.warning("[%s] %s", self.config.unit, exc)
            return None

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self.start()
        while not self.stopping:
            self.step()

    def step(self, max_wait: float | None = None) -> None:
        now = self.clock.wall()
        timeout = full = self._timeout(now)
        polling = (max_wait is None and self.starting and now - self.last_entries_at < TALKING
                   and timeout > JOURNAL_POLL)
        if polling:
            timeout = JOURNAL_POLL
        if max_wait is not None:
            timeout = min(timeout, max_wait)
        if self.follower.behind:
            timeout = 0.0  # the journal holds more than the last reads took (a flood of forged entries)
        poller = select.poll()
        journal_fd = self.follower.fileno()
        poller.register(journal_fd, select.POLLIN)
        for fd in self.rank_watch.fds():
            poller.register(fd, select.POLLIN)
        poller.register(self.health_probe.fileno(), select.POLLIN)
        ready = poller.poll(None if math.isinf(timeout) else max(int(timeout * 1000), 0))
        readable = [fd for fd, _ in ready]
        if journal_fd in readable and self.follower.wait_result() == INVALIDATE:
            logger.info("[%s] journal changed (rotation, vacuum or journald restart): reopening at the cursor",
                        self.config.unit)
            self.follower.reopen()
        read_any = False
        for _ in range(10):  # bounded, so the watchdog is fed during a flood
            if not self._read_journal():
                break
            read_any = True
        if polling and not readable and not read_any and self.clock.wall() < now + full - 0.05:
            # Only looked for entries journald had not announced, and no deadline passed meanwhile
            # (next_deadline() forgets a deadline once it is past: it must be judged in this step).
            return
        now = self.clock.wall()
        if self.health_probe.fileno() in readable:
            self._probe_result()
        for process in self.rank_watch.dead([fd for fd in readable if fd != journal_fd]):
            self.pending_deaths.append(_PendingDeath(process, now))
        self._probe_if_due(now)
        self._scan_processes(now)
        self._sample_vitals(now)
        self._confirm_deaths(now)
        self._judge_and_act()
        self._status()
        self._publish()

    def _timeout(self, now: float) -> float:
        candidates = [math.inf]
        inv = self.pipeline.snapshot().current
        self.starting = inv is not None and inv.state is UnitState.STARTING
        if inv is not None:
            candidates.append(policy.next_deadline(inv, now, self.pipeline.config) - now + 0.05)
            if self._scanning(inv):
                candidates.append(self.last_scan + SCAN_INTERVAL - now)
            if self._sampling(inv):
                candidates.append(self.last_vitals + self.config.vitals.period - now)
        if self.retry_at is not None:
            candidates.append(self.retry_at - now)
        if self.pending_deaths:
            candidates.append(min(d.seen_at for d in self.pending_deaths) + DEATH_GRACE - now)
        if self.watchdog_interval is not None:
            candidates.append(self.last_watchdog + self.watchdog_interval / 2 - now)
        due = self._probe_due_at(inv)
        if due is not None:
            candidates.append(due - now)
        return max(min(candidates), 0.0)

    # -- health after ready ----------------------------------------------------------------------
    def _probe_url(self, inv: InvocationView) -> str | None:
        if self.config.health.url:
            return self.config.health.url
        server = inv.server
        return default_url(server.host, server.port) if server is not None else None

    def _probe_due_at(self, inv: InvocationView | None) -> float | None:
        """Never during start-up; after ready every interval, unless batch lines proved life since."""
        health = self.config.health
        if inv is None or not health.enabled or inv.state not in (UnitState.READY, UnitState.SERVING):
            return None
        if self.health_probe.busy or self._probe_url(inv) is None:
            return None
        ready = next((s.start for r in inv.ranks if r.rank == MAIN for s in r.spans
                      if s.phase is Phase.READY and s.start is not None), None)
        last = max(t for t in (self.last_probe, inv.proof_of_life, ready) if t is not None)
        return last + health.interval

    def _probe_if_due(self, now: float) -> None:
        inv = self.pipeline.snapshot().current
        due = self._probe_due_at(inv)
        if inv is None or due is None or now < due:
            return
        url = self._probe_url(inv)
        if url is not None:
            self.last_probe = now
            self.health_probe.start(url, self.config.health.timeout)

    def _probe_result(self) -> None:
        result = self.health_probe.take()
        inv = self.pipeline.snapshot().current
        if result is not None and self.exporter is not None:
            self.exporter.observe_probe(result.seconds, result.ok)
        if result is None or inv is None:
            return
        self.last_probe = self.clock.wall()
        kind = EventKind.PROBE_OK if result.ok else EventKind.PROBE_FAILED
        if not result.ok:
            logger.info("[%s] health probe %s failed: %s", self.config.unit, result.url, result.error)
        self.pipeline.tracker.apply(Event(kind, self.last_probe, text=result.error or "",
                                          invocation_id=inv.invocation_id), self.last_probe)

    def _read_journal(self) -> bool:
        records = self.follower.read(READ_BATCH)
        if not records:
            return self.follower.behind  # only forged entries in that read: more to come
        now = self.clock.wall()
        self.last_entries_at = now
        counts = self.entries_by_invocation
        for record in records:
            self.pipeline.feed(record, now)
            if record.invocation_id is not None:
                counts[record.invocation_id] = counts.get(record.invocation_id, 0) + 1
        if len(counts) > 16:
            for stale in list(counts)[:-16]:
                del counts[stale]
        self._on_invocation_change()
        return True

    def _current_id(self) -> str | None:
        inv = self.pipeline.snapshot().current
        return inv.invocation_id if inv is not None else None

    def _on_invocation_change(self) -> None:
        snapshot = self.pipeline.snapshot()
        current = snapshot.current
        if current is None or current.invocation_id == self.watched_invocation:
            return
        previous = next((i for i in snapshot.invocations if i.invocation_id == self.watched_invocation), None)
        self.watched_invocation = current.invocation_id
        self.rank_watch.forget()
        self.pending_deaths.clear()
        self.last_scan = -math.inf
        self.vitals_sample, self.vitals, self.last_vitals = None, None, -math.inf
        logger.info("[%s] new start-up %s", self.config.unit, current.invocation_id)
        if previous is not None and previous.invocation_id not in self.memory.restarted \
                and not previous.restart_scheduled:
            # Started again by someone else than phasewatch or Restart=: the operator. Budget reset.
            self.memory = reset_budget(self.memory)

    # -- rank processes ----------------------------------------------------------------------
    def _scanning(self, inv: InvocationView | None) -> bool:
        """Rank processes are looked for while the unit starts, until every rank server_args promised
        has its pidfd (ranks do not respawn within a start-up)."""
        if inv is None or inv.state is not UnitState.STARTING:
            return False
        expected = inv.server.expected_ranks() if inv.server is not None else ()
        return not expected or not self.rank_watch.watching(expected)

    def _scan_processes(self, now: float) -> None:
        inv = self.pipeline.snapshot().current
        if inv is None or not self._scanning(inv) or now - self.last_scan < SCAN_INTERVAL:
            return
        self.last_scan = now
        known = self.facts
        if known is None or not known.control_group or known.invocation_id != inv.invocation_id:
            # D-Bus only until this start-up's cgroup is known (a dozen calls a time): then the file alone.
            self.facts = self._read_facts() or self.facts
        if self.facts is None or not self.facts.control_group:
            return
        if self.facts.invocation_id is not None and self.facts.invocation_id != inv.invocation_id:
            return  # the journal has not caught up with the new start yet
        self.rank_watch.update(self.processes.ranks(self.facts.control_group))

    # -- signs of life beyond log lines ------------------------------------------------------------
    def _sampling(self, inv: InvocationView | None) -> bool:
        """While the unit starts and its cgroup is known: every `vitals.period`."""
        return (self.config.vitals.enabled and inv is not None and inv.state is UnitState.STARTING
                and self.facts is not None and bool(self.facts.control_group)
                and self.facts.invocation_id in (None, inv.invocation_id))

    def _sample_vitals(self, now: float) -> None:
        inv = self.pipeline.snapshot().current
        if not self._sampling(inv):
            if self.vitals is not None and (inv is None or inv.state is not UnitState.STARTING):
                self.vitals_sample, self.vitals = None, None
                if self.exporter is not None:
                    self.exporter.saw_vitals(None)
            return
        if inv is None or self.facts is None or now - self.last_vitals < self.config.vitals.period - 0.05:
            return
        self.last_vitals = now
        try:
            sample = self.sampler.sample(self.facts.control_group or "", now)
        except OSError as exc:  # a cgroup or /proc oddity: no sign of life this time, the loop goes on
            logger.warning("[%s] cannot sample the unit's processes: %s", self.config.unit, exc)
            return
        self.vitals = compare(self.vitals_sample, sample)
        self.vitals_sample = sample
        for event in progress_events(self.vitals, inv.invocation_id):
            self.pipeline.tracker.apply(event, now)
        if self.exporter is not None:
            self.exporter.saw_vitals(self.vitals)

    def _confirm_deaths(self, now: float) -> None:
        due = [d for d in self.pending_deaths if now >= d.seen_at + DEATH_GRACE]
        if not due:
            return
        self.pending_deaths = [d for d in self.pending_deaths if d not in due]
        inv = self.pipeline.snapshot().current
        facts = self._read_facts()
        torn_down = (inv is None or inv.state is not UnitState.STARTING or bool(inv.fatals) or facts is None
                     or facts.active_state not in ("active", "activating") or len(due) > 1
                     and len(due) >= len(inv.scheduler_ranks) // 2)
        if torn_down:
            return  # the unit is stopping or crashing as a whole: not one rank's death
        for death in due:
            logger.info("[%s rank=%s] process %d vanished", self.config.unit, death.process.rank, death.process.pid)
            self.pipeline.tracker.apply(Event(EventKind.RANK_DIED, death.seen_at, rank=death.process.rank,
                                              pid=death.process.pid, invocation_id=inv.invocation_id if inv else None),
                                        now)

    # -- judging and acting --------------------------------------------------------------------
    def _judge_and_act(self) -> None:
        snapshot = self.pipeline.snapshot()
        # The start-up that just ended (a crash, then systemd's Restart=) may have news too.
        for earlier in snapshot.invocations[-3:-1]:
            self._judge(earlier, current=False)
        if snapshot.current is not None:
            self._judge(snapshot.current, current=True)

    def _judge(self, inv: InvocationView, current: bool) -> None:
        now = self.clock.wall()
        if current and inv.state in (UnitState.READY, UnitState.SERVING) and (
                self.memory.budget.failures or self.memory.budget.state is not BudgetState.ARMED):
            self.memory = reset_budget(self.memory)  # GAVE_UP -> ARMED: a start-up reached ready
            self._save()
        learned = self._learned(inv)
        if current:
            self.pipeline.config = learned.config  # judged with the limits in force for this start-up
            self.eta = eta_seconds(inv, now, learned.typical)
            self._lint_timers(inv, learned)
        verdicts = policy.evaluate(inv, now, learned.config, self.pipeline.profile)
        self._record(inv, current, now)
        if not current:
            verdicts = [v for v in verdicts if v.kind in ("crashed", "rank_died", "lines_lost")]
        if self.exporter is not None:
            self.exporter.saw_verdicts(verdicts)
        if not any(self._unhandled(v) for v in verdicts):
            return
        if self.retry_at is not None and now < self.retry_at and all(v.key in self.memory.alerted for v in verdicts):
            return  # only a restart is left to do, after the backoff
        status = self._read_facts() or UnitFacts("unknown", "unknown", None)
        response = respond(verdicts, self.memory, status, now, self.config)
        self._execute(response, inv)

    def _lint_timers(self, inv: InvocationView, learned: Learned) -> None:
        """Once per start-up, when its server_args are known: warn about engine and systemd timers that
        end a phase before phasewatch's limit does, and limits below the learned healthy duration."""
        if inv.server is None or inv.invocation_id in self.linted or inv.state is not UnitState.STARTING:
            return
        self.linted.add(inv.invocation_id)
        try:
            timers = self.unit.timers()
        except UnitError as exc:
            logger.warning("[%s] timer check without the unit's settings: %s", self.config.unit, exc)
            timers = UnitTimers()
        self.timer_warnings = lint(learned.config, inv.server.timer_args, timers, learned.typical)
        if self.exporter is not None:
            self.exporter.saw_timer_warnings(self.timer_warnings)
        if self.timer_warnings:
            message = f"{self.config.unit}: {len(self.timer_warnings)} limit(s) will not fire as configured: " \
                      f"{lint_summary(self.timer_warnings)}"
            logger.warning("[%s] %s", self.config.unit, message)
            self.alerter.alert(Action("alert", message[:4000], "timer_lint", PRIORITY["timer_lint"],
                                      inv.invocation_id, cause=",".join(w.code for w in self.timer_warnings)))

    # -- learning from past start-ups -------------------------------------------------------------
    def _learned(self, inv: InvocationView) -> Learned:
        if self.history is None or inv.server is None:
            return Learned(self.config, {}, {})
        key = fingerprint(inv.server, inv.cold)  # cold and warm start-ups learn apart
        if key not in self.learned:
            durations = {p: self.history.durations(self.config.unit, key, p.value) for p in Phase}
            silences = {p: self.history.silences(self.config.unit, key, p.value) for p in Phase}
            limits = limits_in_force(self.config, self.config.adaptive, durations, silences)
            self.learned[key] = Learned(adapted(self.config, limits), limits, typical_durations(durations))
        return self.learned[key]

    def _record(self, inv: InvocationView, current: bool, now: float) -> None:
        """A start-up that reached ready, or ended without, goes into the history once."""
        if self.history is None or inv.invocation_id in self.recorded:
            return
        ready = inv.state in (UnitState.READY, UnitState.SERVING)
        ended = not current and inv.state in (UnitState.FAILED, UnitState.STOPPED, UnitState.STOPPING)
        if not (ready or ended):
            return
        self.recorded.add(inv.invocation_id)
        judgement = self.pipeline.judge(now, Snapshot((inv,)))[0]
        marks = tuple((v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts)
        cause = next((v.cause for v in judgement.verdicts if v.kind != "lines_lost"), None)
        ended_at = _ready_time(inv) if ready else (inv.stopped_at or inv.last_ts or now)
        record = summarize(self.config.unit, inv, "ready" if ready else judgement.outcome, cause,
                           ended_at or now, marks)
        if record is None:
            return
        try:
            if self.history.add(record):
                logger.info("[%s] start-up %s recorded: %s in %s", self.config.unit, inv.invocation_id,
                            record.outcome, format_duration(record.duration))
                self.learned.pop(record.fingerprint, None)
        except sqlite3.Error as exc:
            logger.error("[%s] cannot write history: %s", self.config.unit, exc)
        self._check_host()

    def _unhandled(self, verdict: policy.Verdict) -> bool:
        wanted = self.config.actions.get(verdict.kind, ("alert",))
        return ("alert" in wanted and verdict.key not in self.memory.alerted) or (
            "restart" in wanted and verdict.invocation_id not in self.memory.restarted
            and self.memory.budget.state is BudgetState.ARMED)

    def _execute(self, response: Response, inv: InvocationView) -> None:
        self.memory = response.memory
        self.retry_at = response.retry_at
        self._save()  # remember before acting: a crash here must not act twice
        for action in response.actions:
            if action.kind == "alert":
                logger.info("[%s rank=%s phase=%s] alert %s: %s", self.config.unit, action.rank, action.phase,
                            action.verdict_kind, action.message)
                self.alerter.alert(action)
            elif action.dry_run:
                logger.info("[%s] dry run: would restart (%s)", self.config.unit, action.verdict_kind)
            else:
                try:
                    job = self.unit.restart()
                    if self.exporter is not None:
                        self.exporter.restarted(action.verdict_kind)
                    logger.info("[%s] restart requested (%s), job %s", self.config.unit, action.verdict_kind, job)
                except UnitError as exc:
                    logger.error("[%s] %s", self.config.unit, exc)
                    self.alerter.alert(replace(action, kind="alert", verdict_kind="restart_failed", priority=3,
                                               message=f"{self.config.unit}: restart failed: {exc}"))

    def _save(self) -> None:
        try:
            self.store.save(Saved(self.memory, self.follower.cursor, self.watched_invocation))
        except OSError:
            pass  # the store says why in `degraded`: logged and alerted once, below
        self._check_host()

    # -- a failing host: the state directory full, read-only or unwritable --------------------------
    def _check_host(self) -> None:
        """Keeps going with history and state in memory; says so once per change, alerts once per run."""
        degraded = {what: why for what, why in (("history", self.history.degraded if self.history else None),
                                                ("state", self.store.degraded)) if why is not None}
        if degraded == self.degraded:
            return
        for what in self.degraded.keys() - degraded.keys():
            logger.info("[%s] %s is written to the state directory again", self.config.unit, what)
        for what, why in degraded.items():
            if self.degraded.get(what) is not None:
                continue
            logger.error("[%s] %s kept in memory only: %s", self.config.unit, what, why)
            if what in self.degraded_alerted:
                continue
            self.degraded_alerted.add(what)
            self.alerter.alert(Action(
                "alert", f"{self.config.unit}: phasewatch cannot write its {what} ({why}); it keeps watching and "
                f"acting with it in memory only", "state_degraded", PRIORITY["state_degraded"], cause=what))
        self.degraded = degraded
        if self.exporter is not None:
            self.exporter.set_degraded(degraded)

    def _publish(self) -> None:
        if self.exporter is not None:
            inv = self.pipeline.snapshot().current
            reasons = {p.value: item.reason for p, item in self._learned(inv).limits.items()} if inv else {}
            self.exporter.saw_rejected(self.follower.rejected)
            self.exporter.publish(self.pipeline, self.memory, self.clock.wall(), self.eta, reasons)

    # -- telling systemd -----------------------------------------------------------------------
    def _status(self) -> None:
        now = self.clock.wall()
        inv = self.pipeline.snapshot().current
        parts = [f"STATUS={status_line(inv, now, self.pipeline.config, self.eta)}"]
        if self.degraded:
            parts[0] += f" ({' and '.join(sorted(self.degraded))} in memory only: state directory not writable)"
        self._write_status(inv)
        if self.watchdog_interval is not None:
            parts.append("WATCHDOG=1")
            self.last_watchdog = now
        self.notifier.send("\n".join(parts))


    def _write_status(self, inv: InvocationView | None) -> None:
        """A small JSON view of the current start-up beside the state file (read by tests and tools)."""
        status: dict[str, object] = {"unit": self.config.unit}
        if inv is not None:
            status.update({"invocation_id": inv.invocation_id, "state": inv.state.value, "eta_seconds": self.eta,
                           "phase": current_phase(inv), "ranks": {r.rank: r.phase.value for r in inv.ranks},
                           "entries": self.entries_by_invocation.get(inv.invocation_id, 0),
                           "lines_lost": inv.lines_lost})
            if self.vitals is not None:
                status["vitals"] = {r.rank: r.text() for r in self.vitals.ranks}
            if self.timer_warnings:
                status["timer_warnings"] = [w.message for w in self.timer_warnings]
        status["budget"] = self.memory.budget.state.value
        status["restarted"] = sorted(self.memory.restarted)
        status["entries_rejected"] = dict(self.follower.rejected)
        if status != self.last_status:
            self.last_status = status
            try:
                self.store.write_status(status)
                self.status_unwritable = False
            except OSError as exc:
                if not self.status_unwritable:
                    logger.error("[%s] cannot write status: %s", self.config.unit, exc)
                self.status_unwritable = True


def _ready_time(inv: InvocationView) -> float | None:
    main = inv.rank(MAIN)
    return next((s.start for s in main.spans if s.phase is Phase.READY), None) if main is not None else None


@dataclass(frozen=True)
class Learned:
    config: Config  # with the limits in force
    limits: dict[Phase, LimitInForce]
    typical: dict[Phase, float]


def status_line(inv: InvocationView | None, now: float, config: Config, eta: float | None = None) -> str:
    """One line for `systemctl status`: "sglang-kimi: draft_cuda_graph_capture 8/8 ranks, 3m12s of 20m"."""
    name = config.unit.removesuffix(".service")
    if inv is None:
        return f"{name}: no start-up seen yet"
    state = inv.state.value
    if state != "starting":
        return f"{name}: {state}"
    phase = current_phase(inv) or "launch"
    ranks = inv.scheduler_ranks
    if not ranks:
        limit = config.limits(Phase.LAUNCH).deadline
        since = inv.started_at
        spent = format_duration(now - since) if since is not None else "?"
        return f"{name}: launch, {spent}" + (f" of {format_duration(limit)}" if limit is not None else "")
    in_phase = [r for r in ranks if r.phase.value == phase]
    starts = [r.phase_start for r in in_phase if r.phase_start is not None]
    spent = format_duration(now - min(starts)) if starts else "?"
    limit = next((config.limits(r.phase).deadline for r in in_phase), None)
    text = f"{name}: {phase} {len(in_phase)}/{len(ranks)} ranks, {spent}"
    text += f" of {format_duration(limit)}" if limit is not None else ""
    return text + (f"; ready in about {format_duration(eta)}" if eta is not None else "")


def watchdog_interval_from_env() -> float | None:
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6
    except ValueError:
        return None
