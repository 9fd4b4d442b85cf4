"""`phasewatch run`: the daemon (made by compose.py, run by app.py) over one unit, as its systemd unit
starts it: the instance's config read (and read again on SIGHUP), the sources and sinks made, SIGTERM
a clean stop."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config.instances import instance_config
from ..config.load import Config, load_config
from ..errors import EX_OK, ConfigError

if TYPE_CHECKING:
    from ..app import Daemon


def cmd_run(args: argparse.Namespace) -> int:
    import logging

    from ..app import watchdog_interval_from_env
    from ..clock import SystemClock
    from ..compose import Extras, World, compose
    from ..config.host import check_on_host
    from ..sinks.actions import JournalAlerter, Notifier
    from ..sinks.history import History
    from ..sinks.http import Rebinder, start_metrics
    from ..sinks.peers import peer_key
    from ..sinks.state.store import StateStore
    from ..sources.journal.follow import JournalFollower
    from ..sources.receiver.alert_receiver import start_receiver
    from ..stages.s5_act.respond import PRIORITY, Action, ActionKind
    from ..systemd_unit import SystemdUnit
    from .checkconfig import check_instance

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    def read_config() -> Config:
        path = instance_config(args.config)
        config = load_config(path)
        check_instance(config, args.instance, path)
        check_on_host(path, config)
        return config

    config = read_config()
    state_dir = args.state_dir or os.environ.get("STATE_DIRECTORY", "").split(":")[0] or "/var/lib/phasewatch"
    unit = SystemdUnit(config.unit)
    loaded = unit.load_state()
    if loaded == "not-found":
        raise ConfigError("unit", f"{config.unit} is not loaded by systemd (not-found): is the name right?",
                          config.source)
    exporter, metrics_server = start_metrics(config)  # None when metrics.listen cannot be bound: runs on
    alerter = JournalAlerter(config.unit)
    rebinder = None if metrics_server is not None else Rebinder(
        config.metrics_listen, exporter,
        lambda why: alerter.alert(Action(kind=ActionKind.ALERT, message=why, verdict_kind="metrics_unbound",
                                         priority=PRIORITY["metrics_unbound"], cause="listen")))
    from ..sources.host.gpu import NvmlSource
    from ..sources.host.gpu_health import STARTUP_LOOKBACK, KernelXids

    # Unbindable: alerted once, tried again; never bound within GIVE_UP_AFTER: the loop raises (exit 69).
    receiver = start_receiver(config, lambda why: alerter.alert(Action(kind=ActionKind.ALERT, message=why,
                                                                       verdict_kind="receiver_unbound",
                                                                       priority=PRIORITY["receiver_unbound"],
                                                                       cause="listen")), peer_of=peer_key)
    world = World(JournalFollower(config.unit, args.directory), unit, alerter, Notifier(),
                  StateStore(state_dir, config.unit), SystemClock(),
                  action_unit=SystemdUnit(config.unit))  # (its own D-Bus connection)
    daemon = compose(config, world, Extras(
        watchdog_interval=watchdog_interval_from_env(), exporter=exporter,
        history=History(Path(state_dir) / f"{config.unit}.history.sqlite3"), reload=read_config,
        actions_off_the_loop=True, gpu=NvmlSource(), receiver=receiver,
        kernel=KernelXids(args.directory, since=SystemClock().wall() - STARTUP_LOOKBACK)))

    _serve(daemon, config, metrics_server, rebinder, receiver)
    return EX_OK


class Closable(Protocol):
    def close(self) -> None: ...


def _serve(daemon: Daemon, config: Config, *closing: Closable | None) -> None:
    """Run the loop until SIGTERM (SIGHUP: reload between two steps); then close what `closing` names."""
    import logging
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    def reload(signum: int, frame: object) -> None:
        daemon.reload_requested = True  # done by the loop between two steps; the wakeup fd ends its wait

    wakeup, daemon.wakeup_fd = _wakeup_pipe()
    signal.set_wakeup_fd(wakeup)
    signal.signal(signal.SIGHUP, reload)
    signal.signal(signal.SIGTERM, stop)
    logging.getLogger(__name__).info("phasewatch watching %s (config %s)", config.unit, config.source)
    try:
        daemon.run()
    finally:
        daemon.parts.notifier.send("STOPPING=1")
        for part in closing:
            if part is not None:
                part.close()


def _wakeup_pipe() -> tuple[int, int]:
    """(write end, read end), both non-blocking: what signal.set_wakeup_fd needs."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return write_end, read_end


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="the daemon: follow the unit's journal and act on stalls")
    run.add_argument("--config", required=True, help="phasewatch YAML config")
    run.add_argument("--state-dir", help="where to remember what was done (default $STATE_DIRECTORY)")
    run.add_argument("--instance", help="the unit's instance name (%%i): the config's unit: must be it")
    run.add_argument("--directory", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
