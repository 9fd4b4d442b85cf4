"""`phasewatch check-config CONFIG [--json] [--privileges [--user USER]]`.

Validates a config; with `--privileges` also asks polkit whether the daemon's user may restart the
watched unit, the question systemd asks when phasewatch calls RestartUnit: the action
org.freedesktop.systemd1.manage-units with the details unit=<unit> and verb=restart. Nothing is
restarted: polkit's CheckAuthorization only answers.

The call goes through `busctl` (systemd's own D-Bus client): polkit's subject and details are nested
D-Bus containers, which busctl marshals the same way under every pystemd version Debian and PyPI ship.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..config import Config, load_config
from ..config_file import load_yaml, read_config_text
from ..errors import EX_NOPERM, EX_OK, ConfigError, UnavailableError, UsageError
from ..render import json_text

RESTART_ACTION = "org.freedesktop.systemd1.manage-units"
POLKIT_TIMEOUT = 10.0  # seconds; polkitd is D-Bus activated and may have to start first
DAEMON_USER = "phasewatch"  # User= in units/phasewatch@.service

Runner = Callable[[Sequence[str], float], str]


@dataclass(frozen=True)
class PolkitAnswer:
    authorized: bool
    challenge: bool  # "only after authentication": for a daemon that is a no


def check_authorization_call(unit: str, uid: int, pid: int) -> list[str]:
    """busctl arguments for CheckAuthorization(subject, action, details, flags=0, cancellation id)
    about process `pid` counted as user `uid` (polkit believes a uid given by root, or by that user)."""
    return ["busctl", "call", "--system", "--json=short", f"--timeout={POLKIT_TIMEOUT:g}",
            "org.freedesktop.PolicyKit1", "/org/freedesktop/PolicyKit1/Authority",
            "org.freedesktop.PolicyKit1.Authority", "CheckAuthorization", "(sa{sv})sa{ss}us",
            "unix-process", "3", "pid", "u", str(pid), "start-time", "t", "0", "uid", "i", str(uid),
            RESTART_ACTION, "2", "unit", unit, "verb", "restart", "0", ""]


def parse_answer(reply: str) -> PolkitAnswer:
    """busctl's JSON reply: {"type": "(bba{ss})", "data": [[authorized, challenge, details]]}."""
    try:
        authorized, challenge, _details = json.loads(reply)["data"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise UnavailableError(f"polkit: an answer that is not CheckAuthorization's: {reply[:200]!r} ({exc})") from None
    return PolkitAnswer(bool(authorized), bool(challenge))


def run_busctl(argv: Sequence[str], timeout: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 5, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnavailableError(f"polkit: cannot ask over D-Bus: {exc}") from None
    if done.returncode != 0:
        raise UnavailableError(f"polkit: CheckAuthorization failed: {done.stderr.strip() or done.returncode} "
                               "(run it as root or as the daemon's user)")
    return done.stdout


def may_restart(unit: str, user: str, run: Runner = run_busctl) -> PolkitAnswer:
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise UsageError(f"--user: no such user {user!r}") from None
    return parse_answer(run(check_authorization_call(unit, uid, os.getpid()), POLKIT_TIMEOUT))


def unit_line(path: str) -> int | None:
    document = load_yaml(read_config_text(path), path)
    lines = document.get("__lines__", {}) if isinstance(document, dict) else {}
    line = lines.get("unit")
    return line if isinstance(line, int) else None


def check_instance(config: Config, instance: str | None, path: str) -> None:
    """`run --instance %i`: the config of phasewatch@X must watch X, or two daemons could share one
    state file and restart the same unit."""
    if instance is not None and instance != config.unit:
        raise ConfigError("unit", f"{config.unit} is not this daemon's instance {instance} (phasewatch@{instance}"
                          f".service watches {instance}; its config must say unit: {instance})", path,
                          unit_line(path))


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        if not args.json:
            raise
        sys.stdout.write(json_text({"config": args.config, "ok": False, "error": str(exc), "key": exc.key,
                                    "line": exc.line, "exit_status": exc.exit_status}) + "\n")
        return exc.exit_status
    rules = len(config.engine_profile().rules)
    document: dict[str, Any] = {"config": args.config, "ok": True, "unit": config.unit, "engine": config.engine,
                                "rules": rules}
    code = EX_OK
    lines = [f"{args.config}: OK (unit {config.unit}, engine {config.engine}, {rules} rules)"]
    if args.privileges:
        answer = may_restart(config.unit, args.user)
        document["privileges"] = {"user": args.user, "action": RESTART_ACTION, "unit": config.unit, "verb": "restart",
                                  "may_restart": answer.authorized, "challenge": answer.challenge}
        if answer.authorized:
            lines.append(f"privileges: yes, user {args.user} may restart {config.unit} (polkit, nothing restarted)")
        else:
            code = EX_NOPERM
            lines.append(f"privileges: no, user {args.user} may not restart {config.unit}"
                         f"{' without authentication' if answer.challenge else ''}: install the polkit rule "
                         "(/etc/polkit-1/rules.d/50-phasewatch.rules) naming the unit")
    document["exit_status"] = code
    sys.stdout.write(json_text(document) + "\n" if args.json else "".join(line + "\n" for line in lines))
    return code


def add_parser(sub: Any) -> None:
    check = sub.add_parser("check-config", help="validate a config file (and, with --privileges, ask polkit "
                           "whether the daemon may restart the unit)")
    check.add_argument("config")
    check.add_argument("--json", action="store_true", help="print a JSON document")
    check.add_argument("--privileges", action="store_true", help="ask polkit (CheckAuthorization) whether the "
                       "daemon's user may restart the unit; restarts nothing (run as root or as that user)")
    check.add_argument("--user", default=DAEMON_USER, help=f"the daemon's user (default {DAEMON_USER})")
    check.set_defaults(func=cmd_check_config)
