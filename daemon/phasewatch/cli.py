"""Command line: `phasewatch run`, and the parser; the other commands (replay among them) are in
commands/. Exit statuses: errors.EXIT_STATUSES (sysexits.h for errors), printed by `--help`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from . import __version__
from .commands import replay
from .config import Config, load_config
from .errors import (
    EX_NOINPUT,
    EX_OK,
    EX_USAGE,
    EXIT_CLOSED_PIPE,
    ConfigError,
    NoPermission,
    PhasewatchError,
    exit_table,
)
from .instances import other_spelling, watched_unit
from .render import terminal_safe
from .sources import journal_source


def instance_config(path: str, exists: Callable[[str], bool] = os.path.exists) -> str:
    """The unit file passes /etc/phasewatch/%i.yaml: `sglang-kimi.yaml` for the instance
    phasewatch@sglang-kimi.service, `sglang-kimi.service.yaml` for the older long form. Whichever
    spelling is missing, the other one is read (an install of either kind keeps working)."""
    if exists(path):
        return path
    other = other_spelling(path)
    return other if other is not None and exists(other) else path


def cmd_run(args: argparse.Namespace) -> int:
    import logging
    import signal

    from .app import Daemon, watchdog_interval_from_env
    from .clock import SystemClock
    from .commands.checkconfig import check_instance
    from .config_trust import check_trusted
    from .sinks.actions import JournalAlerter, Notifier
    from .sinks.history import History
    from .sinks.http import Rebinder, start_metrics
    from .sinks.state import StateStore
    from .sources.alert_receiver import start_receiver
    from .sources.follow import JournalFollower
    from .stages.s5_act.respond import PRIORITY, Action
    from .systemd_unit import SystemdUnit

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    def read_config() -> Config:
        path = instance_config(args.config)
        config = load_config(path)
        check_instance(config, args.instance, path)
        check_trusted(path, config.profile_path)
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
        lambda why: alerter.alert(Action("alert", why, "metrics_unbound", PRIORITY["metrics_unbound"], cause="listen")))
    from .sources.gpu import NvmlSource

    receiver = start_receiver(config)
    daemon = Daemon(config, follower=JournalFollower(config.unit, args.directory), unit=unit,
                    alerter=alerter, notifier=Notifier(), store=StateStore(state_dir, config.unit),
                    clock=SystemClock(), watchdog_interval=watchdog_interval_from_env(), exporter=exporter,
                    history=History(Path(state_dir) / f"{config.unit}.history.sqlite3"), reload=read_config,
                    actions_off_the_loop=True, action_unit=SystemdUnit(config.unit),  # (its own D-Bus connection)
                    gpu=NvmlSource(), receiver=receiver)

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
        daemon.notifier.send("STOPPING=1")
        if metrics_server is not None:
            metrics_server.close()
        if rebinder is not None:
            rebinder.close()
    return EX_OK


def _wakeup_pipe() -> tuple[int, int]:
    """(write end, read end), both non-blocking: what signal.set_wakeup_fd needs."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return write_end, read_end


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line exits 64 (EX_USAGE), not 2: 2 means "will not become ready"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="phasewatch", description="Phase-aware start-up watchdog for LLM servers",
                    epilog=exit_table(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {__version__} (journal reader: {journal_source.reader_name()})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    replay.add_parser(sub)
    run = sub.add_parser("run", help="the daemon: follow the unit's journal and act on stalls")
    run.add_argument("--config", required=True, help="phasewatch YAML config")
    run.add_argument("--state-dir", help="where to remember what was done (default $STATE_DIRECTORY)")
    run.add_argument("--instance", help="the unit's instance name (%%i): the config's unit: must be it")
    run.add_argument("--directory", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
    from .commands import report as report_command

    report_command.add_parser(sub)
    from .commands import checkconfig, hold, init, logs, status, vitals, waitready

    checkconfig.add_parser(sub)

    init.add_parser(sub)
    status.add_parser(sub)
    hold.add_parser(sub)
    logs.add_parser(sub)
    waitready.add_parser(sub)
    vitals.add_parser(sub)
    for command in sub.choices.values():
        command.epilog = exit_table()
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # --help, --version into a closed pipe
        return closed_pipe()
    check_args = getattr(args, "check_args", None)  # what the parser alone cannot check (replay's)
    if check_args is not None:
        check_args(parser, args)
    try:
        _preflight(args)
        code: int = args.func(args)
        return code
    except PhasewatchError as exc:
        print(terminal_safe(f"phasewatch: {exc.describe()}"), file=sys.stderr)
        return exc.exit_status
    except PermissionError as exc:
        from .sources.access import user_name

        print(terminal_safe(f"phasewatch: {exc.filename}: {exc.strerror} for {user_name()}: run as root, or as a user "
                            "who may"), file=sys.stderr)
        return NoPermission.exit_status
    except (FileNotFoundError, IsADirectoryError) as exc:
        print(terminal_safe(f"phasewatch: {exc.filename}: {exc.strerror}"), file=sys.stderr)
        return EX_NOINPUT
    except BrokenPipeError:
        return closed_pipe()


# The commands that read a UNIT: before they do, what would leave them with nothing to say (no
# permission, no system bus, an unknown unit, a directory that is no journal) is said instead.
PREFLIGHT = ("logs", "wait-ready", "init")  # status: once no daemon answers (StatusSource)


def _preflight(args: argparse.Namespace) -> None:
    unit = getattr(args, "unit", None)
    if unit and (args.command in PREFLIGHT or args.command == "replay"):
        from .sources.access import preflight

        preflight(watched_unit(unit), getattr(args, "directory", None), needs_systemd=args.command == "init")


def closed_pipe() -> int:
    """`phasewatch replay --json | head`: the reader is gone. Nothing more is printed, and the
    interpreter's last flush of stdout at exit must not fail either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE

if __name__ == "__main__":
    sys.exit(main())
