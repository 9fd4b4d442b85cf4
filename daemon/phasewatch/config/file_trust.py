"""Who may write the files phasewatch runs from (the config, its directory and `profile_path:`),
and who may read its secret (`group.receiver.token_file`).

A config can name hooks (commands phasewatch runs) and restarts: write access to it is code
execution as phasewatch and the power to restart the server. The daemon (`phasewatch run`, at
start and at each reload) and `check-config` therefore refuse (exit 78, the file and the reason
named) a file or a directory that is writable by group or others (a directory with the sticky bit,
like /tmp, is safe for a file owned by a trusted user), or that is owned by anyone but root, the
phasewatch user or the user phasewatch runs as. docs/operations.md, "Threat model".

The group's bearer token lets whoever holds it restart the server on every node of the group: its
file is refused (exit 78) when group or others have any permission on it, when it is not a regular
file (a symlink is followed to one), or when it fails the checks above.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from ..errors import ConfigError

SERVICE_USER = "phasewatch"


def trusted_owners() -> set[int]:
    """root, the user this runs as, and the phasewatch user where it exists."""
    owners = {0, os.geteuid()}
    try:
        owners.add(pwd.getpwnam(SERVICE_USER).pw_uid)
    except KeyError:
        pass
    return owners


def why_untrusted(path: str | Path, owners: set[int]) -> str | None:
    """Why `path` (and its directory) could have been written by someone phasewatch does not trust;
    None when only trusted users could have."""
    file = Path(path)
    try:
        info = os.stat(file)
        parent = os.stat(file.resolve().parent)
    except OSError as exc:
        return f"cannot check who may write it: {exc.strerror or exc}"
    if info.st_uid not in owners:
        return f"owned by uid {info.st_uid}, not root or phasewatch"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by {_who(info.st_mode)} (mode {stat.S_IMODE(info.st_mode):04o})"
    if parent.st_mode & stat.S_ISVTX:
        return None  # others may add files there, but not replace this one (owned by a trusted user)
    if parent.st_uid not in owners:
        return f"its directory is owned by uid {parent.st_uid}, not root or phasewatch"
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"its directory is writable by {_who(parent.st_mode)} (mode {stat.S_IMODE(parent.st_mode):04o}): "
                "anyone there may replace the file")
    return None


def _who(mode: int) -> str:
    return " and ".join(who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit)


def check_trusted(config_path: str | Path, profile_path: str | None, owners: set[int] | None = None) -> None:
    """Raises ConfigError (exit 78) when the config or its profile file is not trusted."""
    owners = trusted_owners() if owners is None else owners
    for key, path in (("config", config_path), ("profile_path", profile_path)):
        if path is None:
            continue
        why = why_untrusted(path, owners)
        if why is not None:
            raise ConfigError(key, f"refused: {why}. A config runs hooks and restarts as phasewatch: only root "
                              "or phasewatch may write it (chmod go-w, chown root)", str(path))


def why_exposed(path: str | Path, owners: set[int]) -> str | None:
    """Why a secret at `path` could be read or replaced by someone phasewatch does not trust; None
    when only trusted users could. A symlink is judged by the file it leads to."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"cannot check who may read it: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_mode & 0o077:
        return f"{_open_to(info.st_mode)} (mode {stat.S_IMODE(info.st_mode):04o})"
    return why_untrusted(path, owners)


def _open_to(mode: int) -> str:
    """`readable by others`, `readable and writable by group and others`..."""
    may = [what for what, bits in (("readable", 0o044), ("writable", 0o022), ("executable", 0o011)) if mode & bits]
    who = [who for who, bits in (("group", 0o070), ("others", 0o007)) if mode & bits]
    return f"{' and '.join(may)} by {' and '.join(who)}"


def check_token_file(path: str, owners: set[int] | None = None, config_path: str | None = None,
                     line: int | None = None) -> None:
    """Raises ConfigError (exit 78) naming group.receiver.token_file when the file is missing or exposed."""
    try:
        os.stat(path)
    except OSError as exc:
        raise ConfigError(TOKEN_KEY, f"cannot read the token: {exc.strerror or exc} ({path})", config_path,
                          line) from None
    why = why_exposed(path, trusted_owners() if owners is None else owners)
    if why is not None:
        raise ConfigError(TOKEN_KEY, f"refused: {why} ({path}). Whoever reads the token may restart the server "
                          "through the group: only root or phasewatch may (chmod 0400, chown root or phasewatch)",
                          config_path, line)


TOKEN_KEY = "group.receiver.token_file"
