"""`phasewatch hold UNIT --for 1h --reason "..."` and `phasewatch release UNIT`: hands off a unit.

The hold is a file in phasewatch's state directory (sinks/hold.py) that the daemon reads before
each decision: no socket, no new privilege; whoever may write the state directory may hold.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ..durations import format_duration, parse_duration
from ..errors import EX_OK, UsageError
from ..sinks.hold import HoldFile
from ..stages.respond import Hold


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("STATE_DIRECTORY", "").split(":")[0] or "/var/lib/phasewatch")


def cmd_hold(args: argparse.Namespace) -> int:
    try:
        seconds = parse_duration(args.duration)
    except ValueError as exc:
        raise UsageError(f"--for: {exc}") from None
    if not seconds or seconds <= 0:
        raise UsageError("--for: expected a duration like 1h (a hold always ends by itself)")
    now = time.time()
    HoldFile(_state_dir(args), args.unit).write(Hold(now + seconds, args.reason))
    until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now + seconds))
    print(f"{args.unit}: held for {format_duration(seconds)}, until {until}: verdicts are alerted, "
          "nothing is restarted")
    return EX_OK


def cmd_release(args: argparse.Namespace) -> int:
    removed = HoldFile(_state_dir(args), args.unit).remove()
    print(f"{args.unit}: released" if removed else f"{args.unit}: was not held")
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
