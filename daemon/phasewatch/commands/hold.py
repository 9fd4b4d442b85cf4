"""`phasewatch hold UNIT --for 1h --reason "..."` and `phasewatch release UNIT`: hands off a unit.

The hold is a file in phasewatch's state directory (sinks/hold.py) that the daemon reads before
each decision: no socket, no new privilege; whoever may write the state directory may hold.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import time
from pathlib import Path
from typing import Any

from ..config.instances import config_names, watched_unit
from ..durations import format_duration, parse_duration
from ..errors import EX_OK, NoSuchUnit, UsageError
from ..sinks.hold import HoldFile
from ..sources.journal.current import CONFIG_DIRS
from ..stages.s5_act.respond import Hold
from .target import configured_units

UNIT_NAME = re.compile(r"[\w:.@\\-]+\.(?:service|scope)")  # as a config's `unit:`


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("STATE_DIRECTORY", "").split(":")[0] or "/var/lib/phasewatch")


def known_unit(args: argparse.Namespace) -> str:
    """The unit as `status` reads it (`sglang-kimi` -> `sglang-kimi.service`), if a phasewatch config or
    a file in the state directory names it; a typo is refused (a hold on it would hold nothing)."""
    unit = watched_unit(args.unit)
    if not UNIT_NAME.fullmatch(unit) or unit.startswith("."):
        raise UsageError(f"{args.unit!r} is no unit name (like sglang-kimi or sglang-kimi.service)")
    state = _state_dir(args)
    configs = [Path(directory) / name for directory in CONFIG_DIRS for name in config_names(unit)]
    files = [state / f"{unit}.{kind}.json" for kind in ("state", "status", "hold")]
    if not any(path.exists() for path in (*configs, *files)):
        watched = sorted({*configured_units(), *(p.name.split(".service.")[0] + ".service"
                                                 for p in state.glob("*.service.*.json"))} - {unit})
        close = difflib.get_close_matches(unit, watched, n=5, cutoff=0.5) or watched[:5]
        error = NoSuchUnit(f"{unit}: no phasewatch config ({configs[0]}) and no state in {state} name it")
        error.hint = (f"is the name right? units phasewatch watches: {', '.join(close[:3])}" if close
                      else "is the name right? (phasewatch status UNIT shows what phasewatch watches)")
        raise error
    return unit


def cmd_hold(args: argparse.Namespace) -> int:
    try:
        seconds = parse_duration(args.duration)
    except ValueError as exc:
        raise UsageError(f"--for: {exc}") from None
    if not seconds or seconds <= 0:
        raise UsageError("--for: expected a duration like 1h (a hold always ends by itself)")
    unit = known_unit(args)
    now = time.time()
    HoldFile(_state_dir(args), unit).write(Hold(now + seconds, args.reason))
    until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now + seconds))
    print(f"{unit}: held for {format_duration(seconds)}, until {until}: verdicts are alerted, "
          "nothing is restarted")
    return EX_OK


def cmd_release(args: argparse.Namespace) -> int:
    unit = known_unit(args)
    removed = HoldFile(_state_dir(args), unit).remove()
    print(f"{unit}: released" if removed else f"{unit}: was not held")
    return EX_OK


def add_parser(sub: Any) -> None:
    hold = sub.add_parser("hold", help="hands off: alert, but restart nothing, for a while")
    hold.add_argument("unit", metavar="UNIT", help="the server's unit")
    hold.add_argument("--for", dest="duration", required=True, help="how long, e.g. 1h (it ends by itself)")
    hold.add_argument("--reason", required=True, help="why (shown in alerts, status and metrics)")
    hold.add_argument("--state-dir", help="phasewatch's state directory (default /var/lib/phasewatch)")
    hold.set_defaults(func=cmd_hold)
    release = sub.add_parser("release", help="end a hold")
    release.add_argument("unit", metavar="UNIT", help="the server's unit")
    release.add_argument("--state-dir", help="phasewatch's state directory (default /var/lib/phasewatch)")
    release.set_defaults(func=cmd_release)
