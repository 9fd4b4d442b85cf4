"""The daemon: one loop over sources, the only place where the stages meet the world.

Each step waits on every source's file descriptors (the journal, the rank processes' pidfds, the
health probe's pipe, the action worker's) until the earliest deadline (a source's, a sink's, the
policy's, the watchdog's), feeds what the sources saw (`collect`) to the pipeline, has the judge (judge.py)
make the step's one `Step`, and tells it to the sinks: the history and the actor (alerts, restarts)
act on it, the group's restarts after them; systemd's status (STATUS=, WATCHDOG=1, the status file)
and the metrics are told it with what the actor did (`Acted`). The loop's timers run on the monotonic
clock; journal times stay wall-clock.
"""

from __future__ import annotations

import logging
import math
import os
import select
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from .clock import Clock
from .config.load import Config
from .durations import format_duration
from .errors import ConfigError, UnitError
from .judge import JournalState, Judge, Step
from .pipeline import Pipeline
from .records import GroupRestartRequest, ProbeAnswered
from .sinks.acting.actor import ActorSink
from .sinks.acting.group import GroupRestartsSink
from .sinks.acting.runner import ActionUnit
from .sinks.actors import Actors, resume_guarded
from .sinks.metrics.sink import MetricsSink
from .sinks.state.history_sink import HistorySink
from .sinks.state.host import DegradedHost
from .sinks.state.store import StateStore
from .sinks.state.systemd_status import Notify, SystemdStatusSink
from .sources.base import GpuFaults, Instant, JournalBatch, Seen, Source
from .sources.host.gpu_health import GpuHealthSource
from .sources.host.health import HealthProbeSource
from .sources.host.ras import RasSource
from .sources.host.signs_of_life import SignsOfLifeSource
from .sources.host.unit_processes import RankProcessSource, UnitFactsReader
from .sources.journal import rebuild
from .sources.journal.follow import JournalFollower
from .sources.journal.journal_feed import JournalFeedSource
from .sources.journal.rebuild import StartTelling
from .stages.s4_judge import policy, wakeups
from .stages.s4_judge.ras_culprit import RasFinding
from .stages.s4_judge.vitals import Vitals

logger = logging.getLogger(__name__)

REBUILD_MARGIN = 5.0  # read from this long before the unit's start


@dataclass
class Parts:
    """What a daemon is made of, wired by compose.py: the loop below only runs them."""

    config: Config
    clock: Clock
    follower: JournalFollower
    notifier: Notify
    store: StateStore
    pipeline: Pipeline
    judge: Judge
    judging_clock: Clock  # the judge's time: the journal's while the reading is behind (rebuild.JudgedClock)
    read_config: Callable[[], Config] | None  # SIGHUP: the config file read again (raises ConfigError)
    rebuild: Callable[[Config, Parts], Parts]  # a reload: the parts for the new config, carrying these ones' state
    facts: UnitFactsReader
    journal: JournalFeedSource
    health: HealthProbeSource
    ranks: RankProcessSource
    signs: SignsOfLifeSource
    ras: RasSource
    faults: GpuHealthSource
    sources: Sequence[Source]
    unit: ActionUnit  # the one restarted
    actors: Actors
    actor: ActorSink  # alerts, restarts, their memory
    host: DegradedHost  # the history or state kept in memory only
    history: HistorySink | None  # start-ups recorded (None: no history)
    group: GroupRestartsSink  # the group's decisions from Alertmanager
    systemd: SystemdStatusSink  # STATUS=, WATCHDOG=1, the status file
    metrics: MetricsSink | None  # metrics and /status (None: none)


class Daemon:
    def __init__(self, parts: Parts) -> None:
        self.read_config = parts.read_config
        self.stopping = False
        self.reload_requested = False
        self.wakeup_fd: int | None = None  # signal.set_wakeup_fd's pipe: a signal ends the wait
        self._use(parts)

    def _use(self, parts: Parts) -> None:
        """These parts from now on (at the start, and a reload's)."""
        self.parts = parts
        self.config, self.clock, self.pipeline, self.judge = parts.config, parts.clock, parts.pipeline, parts.judge
        self.journal, self.sources, self.ranks, self.signs = parts.journal, parts.sources, parts.ranks, parts.signs
        self.actor, self.group, self.systemd, self.metrics = parts.actor, parts.group, parts.systemd, parts.metrics
        self.history = parts.history
        self.store, self.facts, self.actors = parts.store, parts.facts, parts.actors
        self.follower, self.notifier = parts.follower, parts.notifier
        self.unguarded = self.actors.unguarded
        self.journal.after_batch = self._on_invocation_change
        if self.history is not None:
            self.history.leftovers_seen = self._leftovers_seen

    @property
    def vitals(self) -> Vitals | None:
        return self.signs.vitals

    def now(self) -> Instant:
        return Instant(self.clock.wall(), self.clock.monotonic())

    def _leftovers_seen(self) -> float | None:
        return leftovers_seen(self.actor.guarded, self.unguarded)

    def start(self) -> None:
        """Rebuild the current start-up from the journal (its beginning up to ready and its recent
        window: sources/journal/rebuild.py), then tell systemd we are ready."""
        saved = self.store.load()
        self.actor.restore(saved)
        facts = self.facts.known = self.facts.read()
        notifier = self.notifier
        telling = StartTelling(notifier.send, self.clock, self.systemd.watchdog_interval is not None)
        if facts is not None and facts.started_at is not None and facts.active_state != "inactive":
            logger.info("[%s] rebuilding the start-up that began %s ago from the journal", self.config.unit,
                        format_duration(self.clock.wall() - facts.started_at))
            rebuild.rebuild_startup(self.journal, facts.started_at - REBUILD_MARGIN, facts.started_at,
                                    facts.invocation_id, telling)
        else:
            self.follower.seek_tail()
        until = self.clock.monotonic() + rebuild.FOLLOW_AT_START  # (a flood: the loop reads on, behind)
        while self.journal.read() and self.clock.monotonic() < until:
            telling()
        current = self.pipeline.current()
        self.actor.watched_invocation = current.invocation_id if current is not None else None
        pending = resume_guarded(self.actor.guarded, saved, self.parts.unit, self.facts.known, self.config.unit)
        self.actor.resume(pending, self.facts.known)
        if self.unguarded is not None:
            self.unguarded.known_already(self.pipeline.snapshot().invocations)
        step = self.judged()
        self._act(step)
        self.actor.save()
        notifier.send("READY=1")
        self._report(step)

    def run(self) -> None:
        self.start()
        while not self.stopping:
            self.step()

    def next_wait(self, now: Instant, until_deadline: float | None = None) -> wakeups.Wait:
        """How long the next step may sleep, and whether that is only a look for unannounced entries."""
        full = self._timeout(now) if until_deadline is None else until_deadline
        return wakeups.plan(now.monotonic, now.monotonic + full, self.journal.last_entries_at,
                            self.journal.entries_left)

    def step(self, max_wait: float | None = None) -> None:
        """Wait, collect what the sources saw, feed it to the pipeline, judge once, tell the sinks."""
        now = self.now()
        full = self._timeout(now)
        wait = self.next_wait(now, full)
        readable = self._wait(wait.seconds if max_wait is None else min(wait.seconds, max_wait))
        if self.reload_requested:
            self.reload()
        taken: list[GroupRestartRequest | ProbeAnswered] = []  # (for the step)
        self._feed(self.journal.collect(now, readable), taken)  # (first: whether the step was only a look)
        self.actor.finish()  # what the action worker did since
        if wait.look and max_wait is None and not readable and not self.journal.read_any and \
                self.clock.monotonic() < now.monotonic + full - 0.05:
            # Only looked for entries journald had not announced, and no deadline passed meanwhile
            # (next_deadline() forgets a deadline once it is past: it must be judged in this step).
            return
        self.ranks.saw_pids(self.journal.take_pids())
        now = self.now()
        for source in self.sources[1:]:
            self._feed(source.collect(now, readable), taken, now.wall)
        step = self.judged(taken)
        self._act(step)
        self.group.tell(step)
        self._tick_guarded()
        self._report(step)
        self.journal.release_memory()

    def _feed(self, seen: Iterable[Seen], taken: list[GroupRestartRequest | ProbeAnswered],
              wall: float | None = None) -> None:
        """What a source saw, into the pipeline (events at `wall`, else the clock's time as they come; the
        journal's batches in order, a new start-up looked for after each), the judge (the GPUs' faults,
        NCCL RAS's findings) or the step (the group's requests, the health probe's times)."""
        pipeline = self.pipeline
        for item in seen:
            if isinstance(item, JournalBatch):
                feed = pipeline.feed
                for record in item.records:
                    feed(record, item.wall)
                self._on_invocation_change()
            elif isinstance(item, (GroupRestartRequest, ProbeAnswered)):
                taken.append(item)
            elif isinstance(item, GpuFaults):
                self.judge.saw_gpu_faults(item.faults)
            elif isinstance(item, RasFinding):
                self.judge.saw_ras(item)
            else:
                pipeline.apply(item, self.clock.wall() if wall is None else wall)

    def _wait(self, timeout: float) -> list[int]:
        """Until a source's, a sink's or a signal's descriptor is readable, or `timeout` seconds."""
        poller = select.poll()
        for fd in (*(fd for source in self.sources for fd in source.fds()), *self.actor.fds()):
            poller.register(fd, select.POLLIN)
        if self.wakeup_fd is not None:
            poller.register(self.wakeup_fd, select.POLLIN)
        # (rounded up: a wait that ends a millisecond before its deadline would need a second step)
        readable = [fd for fd, _ in poller.poll(None if math.isinf(timeout) else max(math.ceil(timeout * 1000), 0))]
        if self.wakeup_fd is not None and self.wakeup_fd in readable:
            _drain(self.wakeup_fd)
        return readable

    def judged(self, taken: Sequence[GroupRestartRequest | ProbeAnswered] = ()) -> Step:
        """The step's one judgement (judge.py), which every sink reads, with what the sources saw for it."""
        inv, wall = self.pipeline.current(), self.clock.wall()
        rejected = dict(self.follower.rejected)
        journal = JournalState(self.journal.entries_by_invocation.get(inv.invocation_id, 0) if inv else 0,
                               rejected, self.journal.document(wall), self.pipeline.entries,
                               self.pipeline.full_entries)
        requests = tuple(item for item in taken if isinstance(item, GroupRestartRequest))
        probes = tuple(item for item in taken if isinstance(item, ProbeAnswered))
        return self.judge.judge(self.parts.judging_clock.wall(), journal, self.signs.vitals, requests, probes,
                                self.signs.shown)

    def _act(self, step: Step) -> None:
        """The sinks that act on the judgement: the history first (as the actor did before it acted)."""
        if self.history is not None:
            self.history.tell(step)
        self.actor.tell(step)

    def _report(self, step: Step) -> None:
        """The sinks that say how things stand, told the step with what the actor did."""
        current = step.snapshot.current
        told = replace(step, acted=self.actor.report(current.invocation_id if current else None, self.clock.wall()))
        self.systemd.tell(told)
        if self.metrics is not None:
            self.metrics.tell(told)

    def reload(self) -> bool:
        """Read the config again (SIGHUP, `systemctl reload`) and use the parts built again from it, the
        old ones' state carried over (compose.build_parts). A config that does not load, or names
        another unit, is refused: the old one stays in force and the error (key, file, line) is logged.
        No RELOADING=1/READY=1: under systemd 252 that notification during ExecReload= fails the reload
        job (seen in tests/e2e); the reload is done before the next step, so there is nothing to wait for."""
        self.reload_requested = False
        refusals: list[str] = []
        read = self.read_config
        config = reloaded_config(read, self.config, refusals.append) if read else None
        self.systemd.refused_reload = refusals[0] if refusals else None  # STATUS= says so until a good reload
        if config is None:
            return False
        self._use(self.parts.rebuild(config, self.parts))  # (compose.py: the old parts' state carried over)
        logger.info("[%s] config reloaded from %s", self.config.unit, config.source)
        step = self.judged()
        self._act(step)
        self._report(step)
        return True

    def _tick_guarded(self) -> None:
        guarded, now = self.actor.guarded, self.clock.wall()
        if self.unguarded is not None:
            if self.journal.read_any:  # an end is only ever learned from the journal
                current = self.pipeline.current()
                self.unguarded.observe(self.pipeline.snapshot().invocations, lambda invocation: self.ranks.ended_pids(
                    invocation, current.invocation_id if current is not None else None),
                                       lambda invocation: guarded is not None and invocation in guarded.stopped, now)
            self.unguarded.tick(now)
        if guarded is None:
            return
        waiting = guarded.pending
        try:
            guarded.tick(now)
        except UnitError as exc:
            logger.error("[%s] %s", self.config.unit, exc)
        if guarded.pending is not waiting:
            self.actor.save()  # the start that waited is made (or given up): no longer to resume

    def _timeout(self, now: Instant) -> float:
        """Seconds until the earliest deadline of any source or sink, the policy's or the watchdog's."""
        deadlines = [d for d in (s.next_deadline(now) for s in self.sources) if d is not None]
        watchdog = self.systemd.next_deadline()
        deadlines += [watchdog] if watchdog is not None else []
        inv = self.pipeline.current()
        if inv is not None:  # the policy's deadlines are journal (wall-clock) times
            deadlines.append(now.monotonic + policy.next_deadline(inv, now.wall, self.judge.limits) - now.wall
                             + 0.05)
        for sink in (self.actor, self.metrics):
            deadline = sink.next_deadline(now) if sink is not None else None
            deadlines += [deadline] if deadline is not None else []
        unguarded = self.unguarded.next_deadline() if self.unguarded is not None else None
        if unguarded is not None:
            deadlines.append(now.monotonic + unguarded - now.wall)
        return max(min(deadlines, default=math.inf) - now.monotonic, 0.0)

    def _on_invocation_change(self) -> None:
        watched = self.actor.watched_invocation
        if self.pipeline.current_id() in (None, watched):
            return  # (after every batch read: most are no change, and the views need not be built)
        snapshot = self.pipeline.snapshot()
        current = snapshot.current
        if current is None or current.invocation_id == watched:
            return
        previous = next((i for i in snapshot.invocations if i.invocation_id == watched), None)
        self.ranks.new_startup()
        self.signs.new_startup()
        logger.info("[%s] new start-up %s", self.config.unit, current.invocation_id)
        self.actor.new_startup(current.invocation_id, previous)


def reloaded_config(read: Callable[[], Config], old: Config,
                    refused: Callable[[str], None] | None = None) -> Config | None:
    """The config read again; None (logged, told to `refused`, the old one stays) when it does not load
    or names another unit."""
    try:
        config = read()
        if config.unit != old.unit:
            raise ConfigError("unit", f"a reload cannot change the watched unit ({old.unit} -> {config.unit}); "
                              "restart phasewatch for that", config.source)
    except ConfigError as exc:
        logger.error("[%s] reload refused, the old config stays in force: %s", old.unit, exc)
        if refused is not None:
            refused(str(exc))
        return None
    if config.metrics_listen != old.metrics_listen:
        logger.warning("[%s] metrics.listen changed to %s: it takes effect when phasewatch restarts", old.unit,
                       config.metrics_listen)
    return config


def leftovers_seen(guarded: Any, unguarded: Any) -> float | None:
    """When survivors of a stop were last found, by the guarded restart or the unguarded stops' check."""
    times = (guarded.survivors_seen_at if guarded else None, unguarded.survivors_seen_at if unguarded else None)
    return max((t for t in times if t is not None), default=None)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def watchdog_interval_from_env() -> float | None:
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6
    except ValueError:
        return None
