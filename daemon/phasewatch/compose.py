"""The daemon's parts, made and wired (`compose`): the pipeline, the sources that feed it, the sinks
that read its one judgement per step; made again on a reload (`build_parts` with the parts in use
carried: those that hold threads, fds or sockets are kept and told the new config, the others are
made from it and carry their state over). The loop that runs them is app.py; this module holds no
loop and the loop makes no part.

    journal, health probe, rank processes, signs of life, Alertmanager's webhook   (sources/)
        -> Pipeline (stages/)  -> Judge (judge.py): one Step per loop turn
        -> history, actor (alerts, restarts), group restarts, systemd (STATUS=, WATCHDOG=1,
           status file), metrics                                                     (sinks/)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Sequence

from .app import Daemon, Parts
from .clock import Clock
from .config.load import Config
from .judge import HistoryReaders, Judge, UnitReaders
from .pipeline import Pipeline
from .sinks.acting.actor import ActorParts, ActorSink, Alerter
from .sinks.acting.group import GroupRestartsSink
from .sinks.acting.runner import ActionRunner, ActionUnit, Worker
from .sinks.actors import ActorInputs, Actors, build_actors, carry_over
from .sinks.history import History, fingerprint
from .sinks.hold import HoldFile
from .sinks.metrics.exporter import Exporter
from .sinks.metrics.sink import MetricsSink
from .sinks.state.history_sink import HistorySink
from .sinks.state.host import DegradedHost
from .sinks.state.store import StateStore
from .sinks.state.systemd_status import Notify, SystemdStatusSink
from .sources.base import Source
from .sources.host.gpu import NvmlSource
from .sources.host.gpu_health import GpuHealthSource, KernelXids, gpu_ranks
from .sources.host.health import HealthProbeSource
from .sources.host.listeners import port_holders
from .sources.host.probe import BackgroundProbe
from .sources.host.procs import ProcessTable
from .sources.host.procstat import ProcSampler
from .sources.host.ras import RasSource
from .sources.host.ras_client import ras_port_holder
from .sources.host.signs_of_life import SignsOfLifeSource
from .sources.host.unit_processes import RankProcessSource, Unit, UnitFactsReader
from .sources.journal.follow import JournalFollower
from .sources.journal.journal_feed import JournalFeedSource
from .sources.journal.rebuild import JudgedClock
from .sources.receiver.alert_receiver import AlertReceiverSource
from .stages.s4_judge.ras_culprit import RasFinding


@dataclass(frozen=True)
class World:
    """What the daemon reads and acts on: real in the daemon (commands/run.py), fakes in tests."""

    follower: JournalFollower
    unit: Unit  # read (its facts, timers)
    alerter: Alerter
    notifier: Notify
    store: StateStore
    clock: Clock
    action_unit: ActionUnit | None = None  # the one restarted, when not `unit` (the guarded restart's)
    processes: ProcessTable | None = None


@dataclass(frozen=True)
class Extras:
    """The parts a daemon may go without (None: none)."""

    watchdog_interval: float | None = None
    health_probe: BackgroundProbe | None = None
    exporter: Exporter | None = None
    history: History | None = None
    sampler: ProcSampler | None = None
    reload: Callable[[], Config] | None = None  # reads the config again on SIGHUP
    actions_off_the_loop: bool = False  # the actor's actions on a worker thread (the daemon's way)
    gpu: NvmlSource | None = None
    receiver: AlertReceiverSource | None = None
    kernel: KernelXids | None = None


def compose(config: Config, world: World, extras: Extras = Extras()) -> Daemon:
    """A daemon watching `config.unit`."""
    processes = world.processes or ProcessTable()
    world = replace(world, processes=processes)  # (made once: a reload's parts use the same)
    extras = replace(extras, health_probe=extras.health_probe or BackgroundProbe(),
                     sampler=extras.sampler or ProcSampler(processes))
    return Daemon(build_parts(config, world, extras))


@dataclass(frozen=True)
class Kept:
    """The parts a reload keeps, told the new config: they hold the start-ups tracked, the journal's
    reading and fd, the rank processes' pidfds, RAS's query thread, the exporter's HTTP server."""

    pipeline: Pipeline
    facts: UnitFactsReader
    journal: JournalFeedSource
    ranks: RankProcessSource
    judge: Judge
    ras: RasSource
    host: DegradedHost
    metrics: MetricsSink | None


def build_parts(config: Config, world: World, extras: Extras, carried: Parts | None = None) -> Parts:
    """The parts for `config`; on a reload (`carried`: the parts in use) the kept ones (`Kept`) are
    told the new config and the others are made again from it, carrying the old ones' state over."""
    unit, alerter, store, clock = world.unit, world.alerter, world.store, world.clock
    kept = _kept(config, world, extras) if carried is None else _told(config, carried)
    pipeline, facts, journal, ranks, judge = kept.pipeline, kept.facts, kept.journal, kept.ranks, kept.judge
    processes, current, old = world.processes or ProcessTable(), pipeline.current, carried
    health = HealthProbeSource(config, extras.health_probe or BackgroundProbe(), current, clock).carrying(
        old.health if old else None)
    signs = SignsOfLifeSource(config, extras.sampler or ProcSampler(processes), facts, current, extras.gpu).carrying(
        old.signs if old else None)
    faults = GpuHealthSource(current, gpu_ranks(signs), signs.gpu, extras.kernel if old is None else None).carrying(
        old.faults if old else None)
    acting_unit = world.action_unit or unit
    make_actors = ActorsFactory(acting_unit, alerter, processes, store, ranks, judge.ras_advice.get, faults)
    actors = make_actors(config) if old is None else carry_over(old.actors, make_actors(config))
    judging_clock = JudgedClock(clock, journal)
    hold = HoldFile(store.path.parent, config.unit).read
    runner = ActionRunner(config.unit, acting_unit, alerter.alert, wall=judging_clock.wall, evidence=actors.evidence,
                          run_hook=actors.hooks, guarded=actors.guarded)
    worker = Worker() if extras.actions_off_the_loop and old is None else None
    actor = ActorSink(config, ActorParts(facts.read, alerter, store, judging_clock, _cursor_of(world.follower), hold,
                                         kept.host), runner, worker).carrying(old.actor if old else None)
    group = GroupRestartsSink(config, actor, extras.receiver, hold, facts.read).carrying(old.group if old else None)
    history = HistorySink(config.unit, extras.history, kept.host, judge.forget, group.ended_by.get).carrying(
        old.history if old else None) if extras.history is not None else None
    systemd = SystemdStatusSink(config, world.notifier, store, extras.watchdog_interval, clock).carrying(
        old.systemd if old else None)
    sources: Sequence[Source] = (journal, health, ranks, signs, kept.ras, faults,
                                 *((extras.receiver,) if extras.receiver is not None else ()))
    return Parts(config=config, clock=clock, follower=world.follower, notifier=world.notifier, store=store,
                 pipeline=pipeline, judge=judge, judging_clock=judging_clock, read_config=extras.reload,
                 rebuild=partial(_rebuilt, world, extras), facts=facts, journal=journal, health=health, ranks=ranks,
                 signs=signs, ras=kept.ras, faults=faults, sources=sources, unit=acting_unit, actors=actors,
                 actor=actor, host=kept.host, group=group, history=history, systemd=systemd, metrics=kept.metrics)


def _kept(config: Config, world: World, extras: Extras) -> Kept:
    """The parts a reload keeps, made at the start."""
    unit, store, history, exporter, receiver = world.unit, world.store, extras.history, extras.exporter, extras.receiver
    processes = world.processes or ProcessTable()
    pipeline = Pipeline(config)
    current = pipeline.current
    facts = UnitFactsReader(unit, config.unit)
    journal = JournalFeedSource(world.follower, pipeline, config.unit, world.clock,
                                after_batch=lambda: None)  # (the loop's)
    ranks = RankProcessSource(facts, processes, current, config.rank_processes == "host")
    judge = Judge(config, pipeline, HistoryReaders(history, fingerprint),
                  UnitReaders(unit.timers, _control_group(facts), port_holders, ras_port_holder))
    ras = RasSource(lambda: judge.limits, facts, processes, ranks, current,
                     unit_environment=lambda: judge.unit_settings.environment)
    if exporter is not None and receiver is not None:
        exporter.group_counts = receiver.counts
    host = DegradedHost(config.unit, world.alerter.alert, history, store)
    return Kept(pipeline, facts, journal, ranks, judge, ras, host,
                MetricsSink(exporter, world.clock) if exporter is not None else None)


def _told(config: Config, carried: Parts) -> Kept:
    """The parts a reload keeps, told the new config."""
    kept = Kept(carried.pipeline, carried.facts, carried.journal, carried.ranks, carried.judge, carried.ras,
                carried.host, carried.metrics)
    kept.pipeline.reconfigure(config)
    kept.judge.reconfigure(config)  # (learned limits are derived from the config's)
    kept.ranks.reconfigure(config)
    if kept.metrics is not None:
        kept.metrics.exporter.reconfigure(config)
    return kept


def _rebuilt(world: World, extras: Extras, config: Config, carried: Parts) -> Parts:
    return build_parts(config, world, extras, carried)


@dataclass(frozen=True)
class ActorsFactory:
    """The actors (evidence, hooks, guarded restart, unguarded stops) for a config: at the start and
    again on every reload (sinks/actors.py carries what is running over)."""

    unit: ActionUnit
    alerter: Alerter
    processes: ProcessTable
    store: StateStore
    ranks: RankProcessSource
    ras: Callable[[str], RasFinding | None]  # invocation -> NCCL RAS's last finding, for the evidence
    faults: GpuHealthSource  # the kernel's XIDs and the ranks' GPUs, for the evidence

    def __call__(self, config: Config) -> Actors:
        return build_actors(config, ActorInputs(self.unit, self.alerter.alert, self.processes, self.store.path.parent,
                                                rank_pids=self.ranks.watch.known_pids, rank_starts=self._rank_starts,
                                                ras=self.ras, xids=self.faults.xids_between,
                                                gpu_of=self.faults.gpu_of))

    def _rank_starts(self) -> dict[int, int]:
        return self.ranks.started


def _control_group(facts: UnitFactsReader) -> Callable[[], str | None]:
    def control_group() -> str | None:
        known = facts.read()
        return known.control_group if known is not None else None
    return control_group


def _cursor_of(follower: JournalFollower) -> Callable[[], str | None]:
    def cursor() -> str | None:
        return follower.cursor
    return cursor
