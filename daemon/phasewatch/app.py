"""The daemon: one loop over sources, the only place where the stages meet the world.

Each step waits on every source's file descriptors (the journal, the rank processes' pidfds, the
health probe's pipe) until the earliest deadline (a source's, the policy's, the restart backoff's, the
watchdog's), collects what the sources saw into the pipeline, judges once, and hands one `StepResult`
to the sinks: the responder (alerts, restarts, history), systemd (STATUS=, WATCHDOG=1, the status file)
and the metrics exporter. The loop's timers run on the monotonic clock; journal times stay wall-clock.
"""

from __future__ import annotations

import logging
import math
import os
import select
from typing import Any, Callable, Sequence

from .clock import Clock
from .config import Config
from .durations import format_duration
from .errors import ConfigError, UnitError
from .pipeline import Pipeline
from .sinks.acting import ActionUnit, Worker
from .sinks.actors import Actors, build_actors, carry_over, resume_guarded
from .sinks.group_restarts import GroupRestarts
from .sinks.history import History
from .sinks.hold import HoldFile
from .sinks.metrics import Exporter
from .sinks.responder import Alerter, Responder
from .sinks.state import StateStore
from .sinks.systemd_status import Notify, StepResult, SystemdStatus
from .sources import rebuild
from .sources.alert_receiver import AlertReceiver
from .sources.base import Instant, Source
from .sources.follow import JournalFollower
from .sources.gpu import NvmlSource
from .sources.health import HealthProbes
from .sources.journal_feed import JournalFeed
from .sources.probe import BackgroundProbe
from .sources.procs import ProcessTable
from .sources.procstat import ProcSampler
from .sources.rebuild import JudgedClock, StartTelling
from .sources.signs_of_life import SignsOfLife
from .sources.unit_processes import RankProcesses, Unit, UnitFactsReader
from .stages.s4_judge import policy, wakeups
from .stages.s4_judge.vitals import Vitals
from .stages.s5_act.respond import reset_budget

logger = logging.getLogger(__name__)

REBUILD_MARGIN = 5.0  # read from this long before the unit's start
# The metrics exporter's view is rebuilt at most this often while entries stream in (a step every
# 50 ms at 100 lines/s would otherwise rebuild it 20 times a second for a scrape every 15 s).
PUBLISH_SPACING = 0.25


class Daemon:
    def __init__(self, config: Config, *, follower: JournalFollower, unit: Unit, alerter: Alerter, notifier: Notify,
                 store: StateStore, clock: Clock, processes: ProcessTable | None = None,
                 watchdog_interval: float | None = None, health_probe: BackgroundProbe | None = None,
                 exporter: Exporter | None = None, history: History | None = None,
                 sampler: ProcSampler | None = None, reload: Callable[[], Config] | None = None,
                 actions_off_the_loop: bool = False, action_unit: ActionUnit | None = None,
                 gpu: NvmlSource | None = None, receiver: AlertReceiver | None = None) -> None:
        self.config, self.follower, self.notifier, self.store, self.clock = config, follower, notifier, store, clock
        self.exporter = exporter  # metrics and /status (None: none)
        self.pipeline = Pipeline(config)
        self.stopping = False
        self.read_config = reload  # SIGHUP: the config file read again (raises ConfigError)
        self.reload_requested = False
        self.wakeup_fd: int | None = None  # signal.set_wakeup_fd's pipe: a signal ends the wait
        current = self.pipeline.current
        self.facts = UnitFactsReader(unit, config.unit)
        processes = processes or ProcessTable()
        self.journal = JournalFeed(follower, self.pipeline, config.unit, clock, self._on_invocation_change)
        observe = (lambda r: exporter.observe_probe(r.seconds, r.ok)) if exporter is not None else None
        self.health = HealthProbes(config, health_probe or BackgroundProbe(), current, clock, observe)
        self.ranks = RankProcesses(self.facts, processes, current, config.rank_processes == "host")
        self.signs = SignsOfLife(config, sampler or ProcSampler(processes), self.facts, current,
                                 exporter.saw_vitals if exporter is not None else None, gpu)
        self.sources: Sequence[Source] = (self.journal, self.health, self.ranks, self.signs,
                                          *((receiver,) if receiver is not None else ()))
        self.unit, self.alerter, self.processes = action_unit or unit, alerter, processes
        self.actors = self._actors(config)
        self.unguarded = self.actors.unguarded
        self.responder = Responder(config, self.pipeline, unit=unit, read_facts=self.facts.read, alerter=alerter,
                                   store=store, clock=JudgedClock(clock, self.journal), history=history,
                                   exporter=exporter,
                                   cursor=lambda: follower.cursor, action_unit=self.unit,
                                   hold=HoldFile(store.path.parent, config.unit).read, run_hook=self.actors.hooks,
                                   guarded=self.actors.guarded, evidence=self.actors.evidence)
        if actions_off_the_loop:
            self.responder.actor = Worker(self.responder.runner)
        self.systemd = SystemdStatus(config, notifier, store, watchdog_interval)
        self.last_publish = -math.inf  # monotonic
        self.publish_due = False  # a publish was put off by PUBLISH_SPACING: it has a deadline
        self.responder.leftovers_seen = lambda: leftovers_seen(self.responder.guarded, self.unguarded)
        self.group = GroupRestarts(self.responder, receiver, exporter)  # the group's decisions from Alertmanager

    @property
    def vitals(self) -> Vitals | None:
        return self.signs.vitals

    def now(self) -> Instant:
        return Instant(self.clock.wall(), self.clock.monotonic())

    def _actors(self, config: Config) -> Actors:
        return build_actors(config, self.unit, self.alerter.alert, self.processes, self.store.path.parent,
                            rank_pids=self.ranks.watch.known_pids, rank_starts=lambda: self.ranks.started)

    def start(self) -> None:
        """Rebuild the current start-up from the journal (its beginning up to ready and its recent
        window: sources/rebuild.py), then tell systemd we are ready."""
        saved = self.store.load()
        self.responder.memory, self.responder.last_restart = saved.memory, saved.last_restart
        facts = self.facts.known = self.facts.read()
        telling = StartTelling(self.notifier.send, self.clock, self.systemd.watchdog_interval is not None)
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
        self.responder.watched_invocation = current.invocation_id if current is not None else None
        pending = resume_guarded(self.responder.guarded, saved, self.unit, self.facts.known, self.config.unit)
        self.responder.resume(pending, self.facts.known)
        if self.unguarded is not None:
            self.unguarded.known_already(self.pipeline.snapshot().invocations)
        self.responder.judge_and_act()
        self._save()
        self.notifier.send("READY=1")
        self._tell_sinks()

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
        now = self.now()
        full = self._timeout(now)
        wait = self.next_wait(now, full)
        timeout = wait.seconds if max_wait is None else min(wait.seconds, max_wait)
        polling = wait.look and max_wait is None
        poller = select.poll()
        for source in self.sources:
            for fd in source.fds():
                poller.register(fd, select.POLLIN)
        if self.wakeup_fd is not None:
            poller.register(self.wakeup_fd, select.POLLIN)
        for fd in self.responder.actor.fds():
            poller.register(fd, select.POLLIN)
        # (rounded up: a wait that ends a millisecond before its deadline would need a second step)
        readable = [fd for fd, _ in poller.poll(None if math.isinf(timeout) else max(math.ceil(timeout * 1000), 0))]
        if self.wakeup_fd is not None and self.wakeup_fd in readable:
            _drain(self.wakeup_fd)
        if self.reload_requested:
            self.reload()
        self.journal.collect(now, readable)
        self.responder.finish()  # what the action worker did since
        if polling and not readable and not self.journal.read_any and \
                self.clock.monotonic() < now.monotonic + full - 0.05:
            # Only looked for entries journald had not announced, and no deadline passed meanwhile
            # (next_deadline() forgets a deadline once it is past: it must be judged in this step).
            return
        self.ranks.saw_pids(self.journal.take_pids())
        now = self.now()
        for source in self.sources[1:]:
            for event in source.collect(now, readable):
                self.pipeline.apply(event, now.wall)
        self.responder.judge_and_act()
        self.group.handle()
        self._tick_guarded()
        self._tell_sinks()
        self.journal.release_memory()

    def reload(self) -> bool:
        """Read the config again (SIGHUP, `systemctl reload`). A config that does not load, or names
        another unit, is refused: the old one stays in force and the error (key, file, line) is logged.
        No RELOADING=1/READY=1: under systemd 252 that notification during ExecReload= fails the reload
        job (seen in tests/e2e); the reload is done before the next step, so there is nothing to wait for."""
        self.reload_requested = False
        config = reloaded_config(self.read_config, self.config) if self.read_config is not None else None
        if config is None:
            return False
        self.group.reconfigured(config)
        self.config = config
        self.pipeline.reconfigure(config)
        self.health.config = self.signs.config = self.responder.config = self.systemd.config = config
        self.responder.learned.clear()  # learned limits are derived from the config's
        self.actors = carry_over(self.actors, self._actors(config))
        self.unguarded = self.actors.unguarded
        runner = self.responder.runner
        runner.run_hook, runner.evidence, runner.guarded = self.actors.hooks, self.actors.evidence, self.actors.guarded
        self.ranks.host_wide = config.rank_processes == "host"
        if self.exporter is not None:
            self.exporter.config = config
        logger.info("[%s] config reloaded from %s", self.config.unit, config.source)
        self.responder.judge_and_act()
        self._tell_sinks()
        return True

    def _tick_guarded(self) -> None:
        guarded, now = self.responder.guarded, self.clock.wall()
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
            self._save()  # the start that waited is made (or given up): no longer to resume

    def _timeout(self, now: Instant) -> float:
        """Seconds until the earliest deadline of any source, the policy, the backoff or the watchdog."""
        deadlines = [d for d in (s.next_deadline(now) for s in self.sources) if d is not None]
        watchdog = self.systemd.next_deadline()
        deadlines += [watchdog] if watchdog is not None else []
        inv = self.pipeline.current()
        if inv is not None:  # the policy's deadlines are journal (wall-clock) times
            deadlines.append(now.monotonic + policy.next_deadline(inv, now.wall, self.pipeline.config) - now.wall
                             + 0.05)
        guarded = self.responder.guarded.next_deadline(now.monotonic) if self.responder.guarded else None
        deadlines += [guarded] if guarded is not None else []
        if self.publish_due:
            deadlines.append(self.last_publish + PUBLISH_SPACING)
        unguarded = self.unguarded.next_deadline() if self.unguarded is not None else None
        for wall in (self.responder.retry_at, unguarded, self.responder.next_retry()):
            if wall is not None:
                deadlines.append(now.monotonic + wall - now.wall)
        return max(min(deadlines, default=math.inf) - now.monotonic, 0.0)

    def _on_invocation_change(self) -> None:
        if self.pipeline.current_id() in (None, self.responder.watched_invocation):
            return  # (after every batch read: most are no change, and the views need not be built)
        snapshot = self.pipeline.snapshot()
        current, watched = snapshot.current, self.responder.watched_invocation
        if current is None or current.invocation_id == watched:
            return
        previous = next((i for i in snapshot.invocations if i.invocation_id == watched), None)
        self.responder.watched_invocation = current.invocation_id
        self.ranks.new_startup()
        self.signs.new_startup()
        logger.info("[%s] new start-up %s", self.config.unit, current.invocation_id)
        memory = self.responder.memory
        if previous is not None and previous.invocation_id not in memory.restarted and not previous.restart_scheduled:
            # Started again by someone else than phasewatch or Restart=: the operator. Budget reset.
            self.responder.memory = reset_budget(memory)

    def _save(self) -> None:
        self.responder.save()

    def _tell_sinks(self) -> None:
        inv = self.pipeline.current()
        result = StepResult(self.clock.wall(), inv, self.pipeline.config, self.responder.eta, self.responder.memory,
                            dict(self.responder.degraded), self.signs.vitals,
                            self.journal.entries_by_invocation.get(inv.invocation_id, 0) if inv else 0,
                            dict(self.follower.rejected), tuple(w.message for w in self.responder.timer_warnings),
                            {**self.responder.why(inv.invocation_id if inv else None, self.clock.wall()),
                             "journal": self.journal.document(self.clock.wall())})
        if self.exporter is not None:
            self.exporter.set_why(result.why)
        self.systemd.tell(result, self.clock.monotonic())
        self._publish()

    def _publish(self) -> None:
        monotonic = self.clock.monotonic()
        if self.exporter is not None and monotonic - self.last_publish < PUBLISH_SPACING:
            self.publish_due = True
        elif self.exporter is not None:
            self.last_publish, self.publish_due = monotonic, False
            inv = self.pipeline.current()
            limits = self.responder.learned_for(inv).limits if inv else {}
            self.exporter.saw_rejected(self.follower.rejected)
            self.exporter.publish(self.pipeline, self.responder.memory, self.clock.wall(), self.responder.eta,
                                  {p.value: item.reason for p, item in limits.items()})


def reloaded_config(read: Callable[[], Config], old: Config) -> Config | None:
    """The config read again; None (logged, the old one stays) when it does not load or names another unit."""
    try:
        config = read()
        if config.unit != old.unit:
            raise ConfigError("unit", f"a reload cannot change the watched unit ({old.unit} -> {config.unit}); "
                              "restart phasewatch for that", config.source)
    except ConfigError as exc:
        logger.error("[%s] reload refused, the old config stays in force: %s", old.unit, exc)
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
