"""Which unit, which config: the one answer every operator command starts from.

    UNIT            `sglang-kimi` and `sglang-kimi.service` are the same unit (instances.watched_unit)
    --config FILE   read, over anything below
    NAME.yaml       in /etc/phasewatch (or /run/phasewatch), NAME the unit with or without `.service`
                    (instances.config_names), as `phasewatch run` reads it
    no UNIT         the config's unit; without --config, the one unit configured in /etc/phasewatch
    neither         the defaults, for UNIT

A UNIT that no config names, that systemd does not know and that the journal has nothing of is a
typo: NoSuchUnit (exit 3) with the names it knows like it, before anything else is asked (a daemon
answering on the default metrics.listen for another unit is not this one's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..config.instances import config_names, watched_unit
from ..config.load import Config
from ..errors import NoPermission, NoSuchUnit, UnavailableError, UsageError
from ..sources.journal.current import CONFIG_DIRS, resolve_config, warn


@dataclass(frozen=True)
class Target:
    unit: str  # the full name: sglang-kimi.service
    config: Config
    config_file: str | None  # the file read; None: the defaults


def config_file_for(unit: str, dirs: Sequence[str] | None = None) -> Path | None:
    """The instance's config as `phasewatch@NAME` reads it, when there is one (readable or not)."""
    return next((path for directory in dirs or CONFIG_DIRS for name in config_names(unit)
                 if (path := Path(directory) / name).exists()), None)


def configured_units(dirs: Sequence[str] | None = None) -> list[str]:
    """The units that have a config, by file name (`x.yaml` and `x.service.yaml` are one unit)."""
    return sorted({watched_unit(p.name.removesuffix(".yaml")) for d in dirs or CONFIG_DIRS if os.path.isdir(d)
                   for p in Path(d).glob("*.yaml")})


def check_known(unit: str) -> None:
    """NoSuchUnit (with the names it knows like it) when systemd does not know `unit` and the journal
    has nothing of it. Whatever else keeps this from being told (no permission, no bus) is said by the
    command when it reads the journal, or not at all when a daemon answers for it."""
    from ..sources.journal.access import preflight

    try:
        preflight(unit, None)
    except NoSuchUnit:
        raise
    except (NoPermission, UnavailableError):
        pass


def resolve(unit: str | None, config: str | None, *, directory: str | None = None,
            known: Callable[[str], None] | None = check_known, dirs: Sequence[str] | None = None) -> Target:
    """The unit and the config a command reads; `known`: how a unit without a config is checked
    (None: not at all, for the commands that read only phasewatch's own files)."""
    dirs = dirs or CONFIG_DIRS
    name = watched_unit(unit) if unit else None
    if name is None and config is None:
        units = configured_units(dirs)
        if len(units) != 1:
            raise UsageError("name the UNIT, or give --config" + (
                f" (configured: {', '.join(units)})" if units else f" (no config in {dirs[0]})"))
        name = units[0]
    found = config_file_for(name, dirs) if name is not None and config is None else None
    if found is not None and not os.access(found, os.R_OK):
        warn(f"{found} is not readable by this user: the default limits are used")
        found = None
    resolved = resolve_config(name, config if config is not None else (str(found) if found else None), warn)
    if config is None and found is None and directory is None and known is not None \
            and config_file_for(resolved.unit, dirs) is None:
        known(resolved.unit)
    return Target(resolved.unit, resolved, config if config is not None else (str(found) if found else None))
