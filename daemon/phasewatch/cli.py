"""Command line: the parser, made of each command's `add_parser` (commands/<name>.py), the preflight
of the commands that read a unit, and the dispatch to the command's function. Exit statuses:
errors.EXIT_STATUSES (sysexits.h for errors), printed by `--help`.

Every line a command prints fits the terminal, or 100 columns when not one (fit.FittedStream over
stdout and stderr), unless `--wide` (every command has it); also left whole: JSON, `--plain`, the
daemon's own log (`run`), log records (`logs`) and a config file printed (`init --dry-run`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Iterator, NoReturn, Sequence, TextIO, cast

from . import __version__
from .commands import replay, run
from .config.instances import watched_unit
from .errors import (
    EX_NOINPUT,
    EX_USAGE,
    EXIT_CLOSED_PIPE,
    NoPermission,
    PhasewatchError,
    exit_table,
)
from .output.fit import FittedStream, output_width
from .output.render import terminal_safe
from .sources.journal import journal_source


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
    run.add_parser(sub)
    from .commands import checkconfig, hold, init, logs, report, status, vitals, waitready

    report.add_parser(sub)
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
    add_wide(parser)
    return parser


WIDE_HELP = "print every line whole (default: lines wrapped within the terminal, or 100 columns when not one)"


def add_wide(parser: argparse.ArgumentParser) -> None:
    """`--wide` on every command (and every command of a command) that has none of its own."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                add_wide(command)
            return
    if "--wide" not in parser._option_string_actions:
        parser.add_argument("--wide", action="store_true", help=WIDE_HELP)


# Commands whose standard output is never wrapped: the daemon (its stderr is the journal's) and
# log records, which stay one line each, as journalctl prints them.
WHOLE_LINES = ("run", "logs")


@contextlib.contextmanager
def fitted_output(args: argparse.Namespace) -> Iterator[None]:
    """stdout and stderr fitted (fit.FittedStream) while a command runs, unless it prints whole lines."""
    if getattr(args, "wide", False) or args.command == "run":
        yield
        return
    saved = sys.stdout, sys.stderr
    whole = args.command in WHOLE_LINES or any(getattr(args, flag, False) for flag in ("json", "plain", "dry_run"))
    if not whole:
        sys.stdout = cast(TextIO, FittedStream(saved[0], output_width(saved[0])))
    sys.stderr = cast(TextIO, FittedStream(saved[1], output_width(saved[1])))
    try:
        yield
    finally:
        try:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, FittedStream):
                    stream.flush()
        finally:
            sys.stdout, sys.stderr = saved


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
        with fitted_output(args):
            return _dispatch(args)
    except BrokenPipeError:
        return closed_pipe()


def _dispatch(args: argparse.Namespace) -> int:
    try:
        _preflight(args)
        code: int = args.func(args)
        return code
    except PhasewatchError as exc:
        print(terminal_safe(f"phasewatch: {exc.describe()}"), file=sys.stderr)
        if exc.hint:
            print(terminal_safe(f"  {exc.hint}"), file=sys.stderr)
        return exc.exit_status
    except PermissionError as exc:
        from .sources.journal.access import user_name

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
        from .sources.journal.access import preflight

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
