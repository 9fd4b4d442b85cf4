"""Before a command reads a unit: can it? Each failure an operator meets on a first try, said once
with what to do, and with the exit status of the one table (errors.EXIT_STATUSES):

    no permission   the system journal is there but not readable by this user     77  (the group to join)
    no system bus   systemd cannot be asked and the journal has nothing of it   69  (where to run it)
    unknown unit    systemd does not know it and the journal has nothing of it   3   (the names it knows)
    not a log       --directory holds no journal file                            65

Without these checks the commands answered with nothing at all (sd-journal shows a user outside
the journal's group only that user's own entries, and no entry is not an error).
"""

from __future__ import annotations

import difflib
import grp
import os
import pwd
import socket
from pathlib import Path
from typing import Callable, Iterable

from ...errors import DataError, NoPermission, NoSuchUnit, UnavailableError
from .current import _open_reader, journal_knows

JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")
DEFAULT_BUS = "/run/dbus/system_bus_socket"
CONFIG_DIR = "/etc/phasewatch"


def system_bus_problem(environ: dict[str, str] | None = None) -> str | None:
    """None when the system bus answers a connect; else what is wrong with it, in words."""
    address = (environ if environ is not None else dict(os.environ)).get("DBUS_SYSTEM_BUS_ADDRESS", "")
    path = DEFAULT_BUS
    for part in address.split(";")[0].split(":", 1)[-1].split(","):
        if part.startswith("path="):
            path = part[len("path="):]
    if not os.path.exists(path):
        return f"no system bus: {path} does not exist"
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(path)
    except OSError as exc:
        return f"the system bus at {path} does not answer ({exc.strerror or exc})"
    finally:
        probe.close()
    return None


def user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def journal_permission_problem(dirs: Iterable[str] = JOURNAL_DIRS,
                               readable: Callable[[str], bool] = lambda p: os.access(p, os.R_OK)) -> str | None:
    """None when this user may read the system journal (or there is none); else what to do."""
    files = [path for root in dirs if os.path.isdir(root) for path in sorted(Path(root).glob("*/system*.journal"))]
    if not files or any(readable(str(path)) for path in files):
        return None
    try:
        group = grp.getgrgid(files[0].stat().st_gid).gr_name
    except (KeyError, OSError):
        group = "systemd-journal"
    user = user_name()
    return (f"{user} may not read the system journal ({files[0]}): join the {group} group "
            f"(usermod -aG {group} {user}, then log in again) or run as root")


def known_units(unit: str, config_dir: str = CONFIG_DIR, directory: str | None = None) -> list[str]:
    """Service names close to `unit` that the journal (`directory`'s, when given), systemd or
    phasewatch's configs know."""
    names: set[str] = set()
    try:
        reader = _open_reader(directory)
        try:
            names.update(_text(value) for field in ("_SYSTEMD_UNIT", "UNIT") for value in reader.query_unique(field))
        finally:
            reader.close()
    except Exception:  # no journal: the other sources still answer
        pass
    try:
        if directory is not None:
            raise LookupError("a copied journal: this host's systemd does not run its units")
        from pystemd.systemd1 import Manager  # pragma: systemd no cover

        manager = Manager(_autoload=True)
        names.update(_text(u[0]) for u in manager.Manager.ListUnits())
        names.update(os.path.basename(_text(f[0])) for f in manager.Manager.ListUnitFiles())
    except Exception:  # pystemd's D-Bus errors: the journal's names are enough
        pass
    if os.path.isdir(config_dir):
        names.update(f"{p.stem.removesuffix('.service')}.service" for p in Path(config_dir).glob("*.yaml"))
    services = sorted(n for n in names if n.endswith(".service") and n != unit)
    close = difflib.get_close_matches(unit, services, n=5, cutoff=0.5)
    return close or [n for n in services if any(w in n for w in ("sglang", "vllm", "llm"))][:5]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unknown_unit(unit: str, directory: str | None = None) -> NoSuchUnit:
    names = known_units(unit, directory=directory)
    hint = (f"units it knows like it: {', '.join(names[:3])}" if names
            else "`systemctl list-units --type=service` lists the units" if directory is None
            else f"the journal in {directory} has none like it")
    error = NoSuchUnit(f"{unit}: no such unit (nothing of it in the journal in {directory})" if directory else
                       f"{unit}: no such unit (not known to systemd, nothing of it in the journal)")
    error.hint = hint  # (on a line of its own: each within 100 columns)
    return error


def _load_state(unit: str) -> str | None:
    try:
        from pystemd.systemd1 import Unit  # pragma: systemd no cover

        state = Unit(unit.encode(), _autoload=True).Unit.LoadState
        return state.decode() if isinstance(state, bytes) else str(state)
    except Exception:  # pystemd's D-Bus errors: cannot tell
        return None


def check_directory(directory: str) -> None:
    path = Path(directory)
    if not path.is_dir():
        raise DataError(f"{directory}: not a directory (--directory takes a journal directory, e.g. a copy "
                        "of /var/log/journal/MACHINE-ID)")
    try:
        found = next(iter(path.rglob("*.journal*")), None)
    except PermissionError:
        raise NoPermission(f"{directory}: not readable as {user_name()}: run as root or copy it readable") from None
    if found is None:
        raise DataError(f"{directory}: no journal file (*.journal) in it: not a journal directory (copy "
                        "/var/log/journal/MACHINE-ID from the unit's host)")


def preflight(unit: str, directory: str | None, needs_systemd: bool = False) -> None:
    """Raise the one error an operator should see before a command reads `unit`, if any.
    `needs_systemd`: the command asks systemd whatever the journal holds (init)."""
    if directory is not None:
        check_directory(directory)
        if not journal_knows(unit, directory):
            raise unknown_unit(unit, directory)
        return
    problem = journal_permission_problem()
    if problem is not None and not needs_systemd:
        raise NoPermission(problem)
    if not needs_systemd and journal_knows(unit, None):
        return
    bus = system_bus_problem()
    if bus is not None:
        if needs_systemd:
            raise UnavailableError(f"{unit}: systemd cannot be asked about it ({bus}): init reads the unit over "
                                   "D-Bus; run it on the unit's host, as root")
        raise UnavailableError(f"{unit}: the journal has nothing of it and systemd cannot be asked ({bus}): run "
                               "phasewatch on the unit's host, or read a copied journal with --directory")
    if _load_state(unit) == "not-found" and (needs_systemd or not journal_knows(unit, None)):
        raise unknown_unit(unit)
