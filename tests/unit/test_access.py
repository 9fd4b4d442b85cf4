"""sources/journal/access.py: before a command reads a unit, each failure an operator meets on a first
try said once, with what to do and its exit status from errors.EXIT_STATUSES. Here what needs no
socket and no journal: bus addresses that name no socket, journal directories as tmp trees, and
preflight's choices with the host's answers (journal permission, system bus, systemd's load state)
given in. The real socket, real journal files and the names a journal knows:
tests/integration/test_journal_access.py."""

from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest

from phasewatch.errors import (
    EX_DATAERR,
    EX_NOPERM,
    EX_UNAVAILABLE,
    EXIT_STATUSES,
    EXIT_UNKNOWN_UNIT,
    DataError,
    NoPermission,
    NoSuchUnit,
    PhasewatchError,
    UnavailableError,
)
from phasewatch.sources.journal import access
from phasewatch.sources.journal.access import (
    check_directory,
    journal_permission_problem,
    preflight,
    system_bus_problem,
    user_name,
)

UNIT = "sglang-kimi.service"


def status(error: PhasewatchError) -> int:
    """The error's exit status, which must be one the table documents."""
    assert error.exit_status in dict(EXIT_STATUSES), error.exit_status
    return error.exit_status


def test_the_bus_address_names_the_socket_and_a_missing_one_is_said(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "system_bus_socket"
    address = f"unix:path={gone},guid=0123456789abcdef"
    assert system_bus_problem({"DBUS_SYSTEM_BUS_ADDRESS": address}) == f"no system bus: {gone} does not exist"
    # only the first of several addresses is tried
    two = f"unix:path={gone};unix:path=/run/dbus/system_bus_socket"
    assert system_bus_problem({"DBUS_SYSTEM_BUS_ADDRESS": two}) == f"no system bus: {gone} does not exist"
    monkeypatch.setattr(access, "DEFAULT_BUS", str(tmp_path / "default"))
    for environ in ({}, {"DBUS_SYSTEM_BUS_ADDRESS": "unix:abstract=/tmp/dbus-x"}):  # no path: the default one
        assert system_bus_problem(environ) == f"no system bus: {tmp_path / 'default'} does not exist"


def _system_journal(root: Path, name: str = "system.journal", gid: int | None = None) -> Path:
    path = root / "0123456789abcdef0123456789abcdef" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"LPKSHHRH")
    if gid is not None:
        os.chown(path, -1, gid)
    return path


def test_a_system_journal_no_file_of_which_is_readable_names_its_group(tmp_path: Path) -> None:
    var, run = tmp_path / "var", tmp_path / "run"
    unreadable = lambda path: False  # noqa: E731
    assert journal_permission_problem((str(var), str(run)), unreadable) is None  # no journal: nothing to say
    _system_journal(var, "user-1000.journal")
    assert journal_permission_problem((str(var), str(run)), unreadable) is None  # a user's journal only
    first = _system_journal(run, "system.journal", gid=os.getgid())
    _system_journal(run, "system@0005f1-0123.journal")  # an archived one
    group = grp.getgrgid(os.getgid()).gr_name
    user = user_name()
    assert journal_permission_problem((str(var), str(run)), unreadable) == (
        f"{user} may not read the system journal ({first}): join the {group} group "
        f"(usermod -aG {group} {user}, then log in again) or run as root")
    assert journal_permission_problem((str(var), str(run)), lambda path: path == str(first)) is None
    assert journal_permission_problem((str(var), str(run)), lambda path: path != str(first)) is None  # any one
    if os.geteuid() == 0:  # a group without a name: the one journald uses
        os.chown(first, -1, 54321)
        assert "join the systemd-journal group" in (journal_permission_problem((str(run),), unreadable) or "")


def test_a_directory_that_is_no_journal_is_refused_with_exit_65(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match=r"not a directory \(--directory takes a journal directory") as missing:
        check_directory(str(tmp_path / "absent"))
    assert status(missing.value) == EX_DATAERR
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        check_directory(str(tmp_path / "file"))
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"no journal file \(\*\.journal\) in it: not a journal directory") as empty:
        check_directory(str(tmp_path / "empty"))
    assert status(empty.value) == EX_DATAERR
    for name in ("system.journal", "system@0005f1-0123.journal~"):  # archived and dirty ones count, in a subfolder
        _system_journal(tmp_path / name, name)
        check_directory(str(tmp_path / name))
    with pytest.raises(DataError):  # preflight checks it first
        preflight(UNIT, str(tmp_path / "empty"))


def test_a_directory_this_user_may_not_list_is_exit_77(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: Path, pattern: str) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "rglob", refused)  # (the tests run as root, whom nothing refuses)
    with pytest.raises(NoPermission, match=f"not readable as {user_name()}: run as root or copy it readable") as e:
        check_directory(str(tmp_path))
    assert status(e.value) == EX_NOPERM


class Host:
    """What preflight asks the host, answered by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, permission: str | None = None, bus: str | None = None,
                 knows: bool = False, load_state: str | None = "loaded") -> None:
        self.asked: list[str] = []
        monkeypatch.setattr(access, "journal_permission_problem", lambda: self._ask("permission", permission))
        monkeypatch.setattr(access, "system_bus_problem", lambda: self._ask("bus", bus))
        monkeypatch.setattr(access, "journal_knows", lambda unit, directory: self._ask("journal", knows))
        monkeypatch.setattr(access, "_load_state", lambda unit: self._ask("systemd", load_state))
        monkeypatch.setattr(access, "known_units", lambda unit, directory=None: ["sglang-kimi2.service"])

    def _ask(self, what: str, answer: object) -> object:
        self.asked.append(what)
        return answer


def test_a_journal_this_user_may_not_read_is_exit_77_unless_systemd_is_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, permission="nobody may not read the system journal (...): join the adm group")
    with pytest.raises(NoPermission, match="join the adm group") as refused:
        preflight(UNIT, None)
    assert status(refused.value) == EX_NOPERM
    host = Host(monkeypatch, permission="nobody may not read the system journal")
    preflight(UNIT, None, needs_systemd=True)  # init asks systemd, not the journal
    assert host.asked == ["permission", "bus", "systemd"]


def test_a_unit_the_journal_knows_needs_no_bus(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, knows=True, bus="no system bus: /run/dbus/system_bus_socket does not exist")
    preflight(UNIT, None)
    assert host.asked == ["permission", "journal"]


def test_no_system_bus_is_exit_69_and_says_where_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = "no system bus: /run/dbus/system_bus_socket does not exist"
    Host(monkeypatch, bus=bus)
    with pytest.raises(UnavailableError) as reading:
        preflight(UNIT, None)
    assert str(reading.value) == (f"{UNIT}: the journal has nothing of it and systemd cannot be asked ({bus}): run "
                                  "phasewatch on the unit's host, or read a copied journal with --directory")
    assert status(reading.value) == EX_UNAVAILABLE
    Host(monkeypatch, bus=bus, knows=True)
    with pytest.raises(UnavailableError, match=r"systemd cannot be asked about it \(no system bus: .*\): init reads "
                                               "the unit over D-Bus; run it on the unit's host, as root") as init:
        preflight(UNIT, None, needs_systemd=True)
    assert status(init.value) == EX_UNAVAILABLE


def test_a_unit_neither_systemd_nor_the_journal_knows_is_exit_3_with_the_names_like_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, load_state="not-found")
    with pytest.raises(NoSuchUnit) as unknown:
        preflight(UNIT, None)
    assert str(unknown.value) == f"{UNIT}: no such unit (not known to systemd, nothing of it in the journal)"
    assert unknown.value.hint == "units it knows like it: sglang-kimi2.service"
    assert status(unknown.value) == EXIT_UNKNOWN_UNIT
    Host(monkeypatch, load_state="not-found", knows=True)
    with pytest.raises(NoSuchUnit):  # init: systemd must know it, whatever the journal holds
        preflight(UNIT, None, needs_systemd=True)
    for state in ("loaded", None):  # None: systemd could not tell
        Host(monkeypatch, load_state=state)
        preflight(UNIT, None)
