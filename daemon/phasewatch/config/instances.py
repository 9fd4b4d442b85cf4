"""Names of phasewatch's systemd instances and their configs.

The instance is the watched unit's name without `.service`, like systemd's own templates
(`getty@tty1.service`): `phasewatch@sglang-kimi.service` watches `sglang-kimi.service` and reads
`/etc/phasewatch/sglang-kimi.yaml`. The older form with the full name as instance
(`phasewatch@sglang-kimi.service.service`, `sglang-kimi.service.yaml`) keeps working: each config
name falls back to the other spelling.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Callable

SUFFIX = ".service"


def watched_unit(name: str) -> str:
    """`sglang-kimi` -> `sglang-kimi.service`, as systemctl reads it; a full name stays as it is."""
    return name if "." in name else f"{name}{SUFFIX}"


def instance_of(unit: str) -> str:
    """The instance that watches `unit`: its name without `.service` (other unit types keep theirs)."""
    return unit.removesuffix(SUFFIX) if unit.endswith(SUFFIX) and unit != SUFFIX else unit


def watcher_of(unit: str) -> str:
    """`sglang-kimi.service` -> `phasewatch@sglang-kimi.service`."""
    return f"phasewatch@{instance_of(watched_unit(unit))}.service"


def watcher_names(unit: str) -> tuple[str, str]:
    """The short form first, then the older long form (`phasewatch@sglang-kimi.service.service`)."""
    full = watched_unit(unit)
    return watcher_of(full), f"phasewatch@{full}.service"


def config_names(unit: str) -> tuple[str, str]:
    """The config file names for `unit`, preferred first: `sglang-kimi.yaml`, `sglang-kimi.service.yaml`."""
    full = watched_unit(unit)
    return f"{instance_of(full)}.yaml", f"{full}.yaml"


def other_spelling(config_path: str) -> str | None:
    """The same config under the other instance spelling: `.../x.yaml` <-> `.../x.service.yaml`;
    None for a name that is not `*.yaml`."""
    path = PurePath(config_path)
    if path.suffix != ".yaml":
        return None
    stem = path.name.removesuffix(".yaml")
    other = stem.removesuffix(SUFFIX) if stem.endswith(SUFFIX) else f"{stem}{SUFFIX}"
    if not other:
        return None
    return str(path.with_name(f"{other}.yaml"))


def instance_config(path: str, exists: Callable[[str], bool] = os.path.exists) -> str:
    """The unit file passes /etc/phasewatch/%i.yaml: `sglang-kimi.yaml` for the instance
    phasewatch@sglang-kimi.service, `sglang-kimi.service.yaml` for the older long form. Whichever
    spelling is missing, the other one is read (an install of either kind keeps working)."""
    if exists(path):
        return path
    other = other_spelling(path)
    return other if other is not None and exists(other) else path
