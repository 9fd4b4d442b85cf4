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
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .clock import Clock
from .config import Config
from .durations import format_duration
from .errors import ConfigError, UnitError
from .pipeline import Pipeline, StepJudgement
from .sinks.acting import ActionUnit
from .sinks.actors import Actors, carry_over, resume_guarded
from .sinks.group_restarts import GroupRestarts
from .sinks.metrics import Exporter
from .sinks.responder import Alerter, Responder
from .sinks.state import StateStore
from .sinks.systemd_status import Notify, StepResult, SystemdStatus
from .sources import rebuild
from .sources.base import Instant, Source
from .sources.follow import JournalFollower
from .sources.health import HealthProbes
from .sources.journal_feed import JournalFeed
from .sources.procs import ProcessTable
from .sources.rebuild import StartTelling
from .sources.signs_of_life import SignsOfLife
from .sources.unit_processes import RankProcesses, UnitFactsReader
from .stages.s4_judge import policy, wakeups
from .stages.s4_judge.ras_culprit import RasFinding
from .stages.s4_judge.vitals import Vitals
from .stages.s5_act.respond import reset_budget

logger = logging.getLogger(__name__)

REBUILD_MARGIN = 5.0  # read from this long before the unit's start
# The metrics exporter's view is rebuilt at most this often while entries stream in (a step every
# 50 ms at 100 lines/s would otherwise rebuild it 20 times a second for a scrape every 15 s), unless
# the step read a line that may change more than a rank's last activity (a progress step, a phase):
# /status shows that at once.
PUBLISH_SPACING = 0.25


@dataclass
class Parts:
    """What a daemon is made of, wired by compose.py: the loop below only runs them."""

    config: Config
    clock: Clock
    follower: JournalFollower
    notifier: Notify
    store: StateStore
    pipeline: Pipeline
    read_config: Callable[[], Config] | None  # SIGHUP: the config file read again (raises ConfigError)
    facts: UnitFactsReader
    processes: ProcessTable
    journal: JournalFeed
    health: HealthProbes
    ranks: RankProcesses
    signs: SignsOfLife
    sources: Sequence[Source]
    unit: ActionUnit  # the one restarted
    alerter: Alerter
    make_actors: Callable[[Config], Actors]  # on a reload: the actors for the new config
    actors: Actors
    responder: Responder
    systemd: SystemdStatus
    group: GroupRestarts  # the group's decisions from Alertmanager
    exporter: Exporter | None  # metrics and /status (None: none)


class Daemon:
    def __init__(self, parts: Parts) -> None:
        self.config = parts.config
        self.clock = parts.clock
        self.follower = parts.follower
        self.notifier = parts.notifier
        self.store = parts.store
        self.pipeline = parts.pipeline
        self.read_config = parts.read_config
        self.facts = parts.facts
        self.processes = parts.processes
        self.journal = parts.journal
        self.health = parts.health
        self.ranks = parts.ranks
        self.signs = parts.signs
        self.sources = parts.sources
        self.unit = parts.unit
        self.alerter = parts.alerter
        self.make_actors = parts.make_actors
        self.actors = parts.actors
        self.responder = parts.responder
        self.systemd = parts.systemd
        self.group = parts.group
        self.exporter = parts.exporter
        self.unguarded = self.actors.unguarded
        self.stopping = False
        self.reload_requested = False
        self.wakeup_fd: int | None = None  # signal.set_wakeup_fd's pipe: a signal ends the wait
        self.last_publish = -math.inf  # monotonic
        self.publish_due = False  # a publish was put off by PUBLISH_SPACING: it has a deadline
        self.published_full_entries = 0  # the pipeline's full_entries at the last publish
        self.journal.after_batch = self._on_invocation_change
        self.responder.leftovers_seen = self._leftovers_seen

    @property
    def vitals(self) -> Vitals | None:
        return self.signs.vitals

    def now(self) -> Instant:
        return Instant(self.clock.wall(), self.clock.monotonic())

    def _leftovers_seen(self) -> float | None:
        return leftovers_seen(self.responder.guarded, self.unguarded)

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
        judged = self.responder.judge_and_act()
        self._save()
        self.notifier.send("READY=1")
        self._tell_sinks(judged)

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
        judged = self.responder.judge_and_act()
        self.group.handle()
        self._tick_guarded()
        self._tell_sinks(judged)
        self.journal.release_memory()

    def reload(self) -> bool:
        """Read the config again (SIGHUP, `systemctl reload`). A config that does not load, or names
        another unit, is refused: the old one stays in force and the error (key, file, line) is logged.
        No RELOADING=1/READY=1: under systemd 252 that notification during ExecReload= fails the reload
        job (seen in tests/e2e); the reload is done before the next step, so there is nothing to wait for."""
        self.reload_requested = False
        refusals: list[str] = []
        config = reloaded_config(self.read_config, self.config, refusals.append) if self.read_config else None
        self.systemd.refused_reload = refusals[0] if refusals else None  # STATUS= says so until a good reload
        if config is None:
            return False
        self.group.reconfigured(config)
        self.config = config
        self.pipeline.reconfigure(config)
        self.health.config = self.signs.config = self.responder.config = self.systemd.config = config
        self.responder.learned.clear()  # learned limits are derived from the config's
        self.actors = carry_over(self.actors, self.make_actors(config))
        self.unguarded = self.actors.unguarded
        runner = self.responder.runner
        runner.run_hook, runner.evidence, runner.guarded = self.actors.hooks, self.actors.evidence, self.actors.guarded
        self.ranks.host_wide = config.rank_processes == "host"
        if self.exporter is not None:
            self.exporter.config = config
        logger.info("[%s] config reloaded from %s", self.config.unit, config.source)
        self._tell_sinks(self.responder.judge_and_act())
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

    def _tell_sinks(self, judged: StepJudgement) -> None:
        """The step's judgement to systemd and the metrics (the responder acted on it already)."""
        inv = judged.snapshot.current
        result = StepResult(self.clock.wall(), inv, self.pipeline.config, self.responder.eta, self.responder.memory,
                            dict(self.responder.degraded), self.signs.vitals,
                            self.journal.entries_by_invocation.get(inv.invocation_id, 0) if inv else 0,
                            dict(self.follower.rejected), tuple(w.message for w in self.responder.timer_warnings),
                            {**self.responder.why(inv.invocation_id if inv else None, self.clock.wall()),
                             "journal": self.journal.document(self.clock.wall()), "ras": _ras_document(
                                 self.pipeline.ras_advice.get(inv.invocation_id) if inv else None)})
        if self.exporter is not None:
            self.exporter.set_why(result.why)
        self.systemd.tell(result, self.clock.monotonic())
        self._publish(judged)

    def _publish(self, judged: StepJudgement) -> None:
        monotonic, news = self.clock.monotonic(), self.pipeline.full_entries
        if (self.exporter is not None and monotonic - self.last_publish < PUBLISH_SPACING
                and news == self.published_full_entries):
            self.publish_due = True
        elif self.exporter is not None:
            self.last_publish, self.publish_due, self.published_full_entries = monotonic, False, news
            inv = judged.snapshot.current
            limits = self.responder.learned_for(inv).limits if inv else {}
            self.exporter.saw_rejected(self.follower.rejected)
            self.exporter.publish(self.pipeline, self.responder.memory, judged, self.responder.eta,
                                  {p.value: item.reason for p, item in limits.items()})


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


def _ras_document(finding: RasFinding | None) -> dict[str, object] | None:
    """NCCL RAS's last finding for the current start-up, for status (None: not asked)."""
    return finding.document() if finding is not None else None


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
