"""Every error phasewatch raises on purpose, and the exit status (sysexits.h) each one means.

    PhasewatchError                      70  (EX_SOFTWARE: an error without a more precise class)
    ├── UsageError                       64  a command line that cannot be carried out
    │   └── DurationError                    "20x" where a duration was expected (also a ValueError)
    ├── DataError                        65  input that is there but cannot be read
    │   ├── InputError                       a log file in no format replay knows
    │   └── HistoryUnreadable                a history database that is not one
    ├── NoInputError                     66  input that is not there
    │   └── NoHistory                        no history recorded for the unit yet
    ├── NoPermission                     77  not allowed to read the journal or the state (says the group)
    ├── UnavailableError                 69  a service phasewatch needs does not answer
    │   ├── JournalError                     the journal cannot be opened or read
    │   │   └── JournalUnavailable           ... for replay --unit (says which journal)
    │   ├── UnitError                        systemd (D-Bus) refused or could not be reached
    │   ├── NoSuchUnit                    3  neither systemd nor the journal knows the unit
    │   └── ForeignDaemon                    something else answers on metrics.listen
    ├── ConfigError                      78  a bad config, naming key, file and line (also a ValueError)
    ├── ProfileError                     78  a malformed rule in a profile or in `patterns:` (a ValueError)
    └── ListenError                      78  metrics.listen is not HOST:PORT (a ValueError)

`EXIT_STATUSES` below is the one table of what each exit status means.
`cli.main` catches `PhasewatchError` once and exits with its `exit_status`; the operator's commands
(status, logs, wait-ready) map the ones they expect to their own documented statuses.
"""

from __future__ import annotations

import re

EX_OK, EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_SOFTWARE = 0, 64, 65, 66, 69, 70
EX_CANTCREAT, EX_NOPERM, EX_CONFIG = 73, 77, 78
# The answers of `status` and `wait-ready` about the start-up, below sysexits' range.
EXIT_READY, EXIT_STARTING, EXIT_WILL_NOT_BE_READY, EXIT_UNKNOWN_UNIT, EXIT_FOREIGN = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_CLOSED_PIPE = 130, 141

# Every exit status of every command, one meaning each: the README's table and `--help` epilogs.
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (EX_OK, "success; status/wait-ready: the start-up is ready (or serving)"),
    (EXIT_STARTING, "status: still starting, no verdict yet; wait-ready: --timeout passed while it was"),
    (EXIT_WILL_NOT_BE_READY, "status/wait-ready: it will not become ready by itself (stalled, straggler, "
                             "crashed, rank_died, unhealthy, stopped)"),
    (EXIT_UNKNOWN_UNIT, "unknown unit: no phasewatch config names it, systemd does not know it and the journal "
                        "has nothing of it (the names it knows like it are said)"),
    (EXIT_FOREIGN, "status: something other than this unit's daemon answers on metrics.listen"),
    (EX_USAGE, "bad usage (an unknown option, a malformed duration or time)"),
    (EX_DATAERR, "input that is not a log, or a history that is not one"),
    (EX_NOINPUT, "a missing file, no history recorded yet (report), or no line to show (logs: says why)"),
    (EX_UNAVAILABLE, "the journal, systemd or polkit (D-Bus) cannot be reached or refused to answer"),
    (EX_SOFTWARE, "an internal error"),
    (EX_CANTCREAT, "init: a config someone edited is in the way (the diff is shown; --force replaces it)"),
    (EX_NOPERM, "no permission: reading the journal or the state (the group to join is named); "
                "check-config --privileges: polkit says the daemon's user may not restart the unit"),
    (EX_CONFIG, "bad configuration, naming key, file and line (the daemon's unit does not restart it)"),
    (EXIT_INTERRUPTED, "wait-ready interrupted (^C)"),
    (EXIT_CLOSED_PIPE, "the reader of the output went away (piped into head): nothing more is printed"),
)


HELP_WIDTH = 79  # every line of every --help fits an 80-column terminal


def exit_table() -> str:
    """The epilog of `phasewatch --help` and of each command's."""
    import textwrap

    return "exit statuses:\n" + "\n".join(
        textwrap.fill(meaning, HELP_WIDTH, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7)
        for code, meaning in EXIT_STATUSES)



class PhasewatchError(Exception):
    exit_status = EX_SOFTWARE
    hint: str | None = None  # a second line: what to try (printed under the error, to stay within 100 columns)

    def describe(self) -> str:
        """The one line the command line prints after `phasewatch: `."""
        return str(self)


class UsageError(PhasewatchError):
    exit_status = EX_USAGE


class DurationError(UsageError, ValueError):
    pass


class DataError(PhasewatchError):
    exit_status = EX_DATAERR


class InputError(DataError):
    """The input cannot be read; the message is one human-readable line. `source` names the input."""

    def __init__(self, message: str, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source

    def describe(self) -> str:
        return f"{self.source}: {self}" if self.source is not None else str(self)


class HistoryUnreadable(DataError):
    """A read-only open (`report`) found no readable history: nothing was changed on disk."""


class NoInputError(PhasewatchError):
    exit_status = EX_NOINPUT


class NoHistory(NoInputError):
    pass


class NoPermission(PhasewatchError):
    """The journal or a file phasewatch reads is there but not readable by this user; the message
    names what to do (the group to join, or root)."""

    exit_status = EX_NOPERM


class UnavailableError(PhasewatchError):
    exit_status = EX_UNAVAILABLE


class JournalError(UnavailableError):
    """The journal could not be opened or read."""


class JournalUnavailable(JournalError):
    """The journal could not be opened or read (replay --unit)."""


class UnitError(UnavailableError):
    """systemd refused an action on the unit, or could not be reached over D-Bus."""


class NoSuchUnit(UnavailableError):
    """The unit is not loaded by systemd and the journal has nothing of it."""

    exit_status = EXIT_UNKNOWN_UNIT


class ForeignDaemon(UnavailableError):
    """Something answers on metrics.listen, but not as the phasewatch daemon of this unit."""


class ConfigError(PhasewatchError, ValueError):
    exit_status = EX_CONFIG

    def __init__(self, key: str, message: str, path: str | None = None, line: int | None = None) -> None:
        message = did_you_mean(key, message)
        where = ", ".join(part for part in (f"file: {path}" if path else "", f"line {line}" if line else "") if part)
        shown_key = key if len(key) <= 2 * SHOWN_KEY_CHARS else key[:2 * SHOWN_KEY_CHARS] + "...(cut)"
        super().__init__(f"{shown_key}: {message}" + (f" ({where})" if where else ""))
        self.key, self.path, self.line, self.detail = key, path, line, message

    def describe(self) -> str:
        return f"config error: {self}"


SHOWN_KEY_CHARS = 60
_UNKNOWN = re.compile(r"^(unknown [\w ]+?) \(known: ([^()]*)\)$")


def did_you_mean(key: str, message: str) -> str:
    """`unknown setting (known: a, b, ...)` for a key one typo off a known one: `unknown setting:
    did you mean rank_skew?` (the whole list only when no known name is close)."""
    import difflib

    found = _UNKNOWN.match(message)
    if found is None:
        return message
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], found.group(2).split(", "), n=1, cutoff=0.6)
    return f"{found.group(1)}: did you mean {close[0]}?" if close else message


class ProfileError(PhasewatchError, ValueError):
    """A rule in a profile or in a config's `patterns:` is malformed. `key` names it; the config
    loader turns it into a ConfigError naming the file and line."""

    exit_status = EX_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class ListenError(PhasewatchError, ValueError):
    """metrics.listen is not HOST:PORT (the daemon runs on without /metrics)."""

    exit_status = EX_CONFIG
