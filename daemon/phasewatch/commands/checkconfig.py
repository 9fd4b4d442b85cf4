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
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config.all_errors import every_error, limit_warnings
from ..config.instances import instance_config, watched_unit
from ..config.load import Config, load_config
from ..config.yaml_file import load_yaml, read_config_text
from ..errors import (
    EX_NOPERM,
    EX_OK,
    ConfigError,
    HistoryUnreadable,
    JournalError,
    NoSuchUnit,
    UnavailableError,
    UnitError,
    UsageError,
)
from ..output.render import json_text, terminal_safe
from ..records import Phase

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
    """`run --instance %i`: the config of phasewatch@X must watch X (X short, `sglang-kimi` for
    `sglang-kimi.service`, or the older long form), or two daemons could share one state file and
    restart the same unit."""
    if instance is not None and watched_unit(instance) != watched_unit(config.unit):
        raise ConfigError("unit", f"{config.unit} is not this daemon's instance {instance} (phasewatch@{instance}"
                          f".service watches {instance}; its config must say unit: {instance})", path,
                          unit_line(path))


def cmd_check_config(args: argparse.Namespace) -> int:
    if args.instance is not None:  # as `phasewatch run --instance` reads it (the unit's ExecReload=)
        args.config = instance_config(args.config)
    try:
        config = load_config(args.config)
        check_instance(config, args.instance, args.config)
        from ..config.host import check_on_host  # (ssl, sockets: only this command, not every command line)

        check_on_host(args.config, config)
    except ConfigError as exc:
        errors = _every_error(args.config, exc)
        if not args.json:
            if len(errors) == 1:
                raise
            for error in sorted(errors, key=lambda e: e.line or 0):
                print(terminal_safe(f"phasewatch: {error.describe()}"), file=sys.stderr)
            print(f"phasewatch: {len(errors)} errors in {terminal_safe(args.config)}", file=sys.stderr)
            return exc.exit_status
        sys.stdout.write(json_text({"config": args.config, "ok": False, "error": str(exc), "key": exc.key,
                                    "line": exc.line, "exit_status": exc.exit_status,
                                    "errors": [{"error": str(e), "key": e.key, "line": e.line} for e in errors]})
                         + "\n")
        return exc.exit_status
    rules = len(config.engine_profile().rules)
    warnings = limit_warnings(config)
    document: dict[str, Any] = {"config": args.config, "ok": True, "unit": config.unit, "engine": config.engine,
                                "rules": rules, "warnings": warnings}
    code = EX_OK
    lines = [f"{args.config}: OK (unit {config.unit}, engine {config.engine}, {rules} rules)",
             *(f"warning: {warning}" for warning in warnings)]
    if config.group is not None:
        lines.append(group_line(config))
        document["group"] = {"name": config.group.name, "nodes": config.group.nodes,
                             "receiver": config.group.receiver.listen if config.group.receiver else None}
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
    if args.unit:
        timer_lines = timer_check(replace(config, unit=watched_unit(args.unit)), args.state_dir)
        document["timers"] = timer_lines
        lines.extend(timer_lines)
    document["exit_status"] = code
    sys.stdout.write(json_text(document) + "\n" if args.json else "".join(line + "\n" for line in lines))
    return code


def group_line(config: Config) -> str:
    """The group, and its token read as the daemon will (a ConfigError, exit 78, when it cannot be)."""
    group = config.group
    assert group is not None
    node = f"node {group.node_rank}" if group.node_rank is not None else "node rank from server_args"
    if group.receiver is None:
        return f"group {group.name} of {group.nodes} nodes, {node}; no receiver (no group restarts on this node)"
    from ..sources.receiver.alert_receiver import read_token  # (its HTTP server: only this command)

    read_token(group.receiver)
    return (f"group {group.name} of {group.nodes} nodes, {node}; Alertmanager webhook on {group.receiver.listen} "
            f"({'https' if group.receiver.tls_cert else 'http'}), token file {group.receiver.token_file} readable")


def _every_error(path: str, first: ConfigError) -> list[ConfigError]:
    """Every error of the file (config/all_errors.py: every_error), the loader's own first."""
    try:
        errors = every_error(read_config_text(path), path)
    except ConfigError:  # unreadable, too big: the loader's error is the one
        return [first]
    return errors if errors and str(errors[0]) == str(first) else [first, *errors[1:]]


def timer_check(config: Config, state_dir: str | None) -> list[str]:
    """`check-config --unit`: the unit's timers (over D-Bus), its last start-up's server_args (from
    the journal) and the learned healthy durations (history), against the config's limits."""
    from ..sinks.history import History, fingerprint
    from ..sources.journal.current import CurrentStartup, find_start
    from ..sources.journal.follow import JournalFollower
    from ..stages.s4_judge.learn import typical_durations
    from ..stages.s4_judge.timerlint import UnitTimers, lint
    from ..systemd_unit import SystemdUnit

    notes: list[str] = []
    try:
        timers = SystemdUnit(config.unit).timers()
    except UnitError as exc:
        timers = UnitTimers()
        notes.append(f"note: {exc}; TimeoutStartSec= and Environment= not checked")
    server = None
    try:
        start = find_start(config.unit)
        follower = JournalFollower(config.unit)
        try:
            startup = CurrentStartup(config, follower, start)
            startup.read(time.time())
            inv = startup.invocation()
            server = inv.server if inv is not None else None
        finally:
            follower.close()
    except (NoSuchUnit, JournalError, OSError) as exc:
        notes.append(f"note: no start-up of {config.unit} read from the journal ({exc})")
    if server is None:
        notes.append("note: no server_args in the journal: the engine's default timers are assumed")
    healthy: dict[Phase, float] = {}
    path = Path(state_dir or os.environ.get("STATE_DIRECTORY", "").split(":")[0] or "/var/lib/phasewatch") \
        / f"{config.unit}.history.sqlite3"
    if server is not None and path.exists():
        try:
            history = History(path, read_only=True)
            key = fingerprint(server)
            healthy = typical_durations({p: history.durations(config.unit, key, p.value) for p in Phase})
        except (HistoryUnreadable, sqlite3.Error) as exc:
            notes.append(f"note: history not read ({exc})")
    warnings = lint(config, server.timer_args if server is not None else {}, timers, healthy)
    lines = [*notes]
    if not warnings:
        lines.append(f"{config.unit}: no engine or systemd timer ends a phase before phasewatch's limits")
    lines.extend(f"warning: {w.message}" for w in warnings)
    return lines


def add_parser(sub: Any) -> None:
    check = sub.add_parser("check-config", help="validate a config file (and, with --privileges, ask polkit "
                           "whether the daemon may restart the unit)")
    check.add_argument("config")
    check.add_argument("--json", action="store_true", help="print a JSON document")
    check.add_argument("--privileges", action="store_true", help="ask polkit (CheckAuthorization) whether the "
                       "daemon's user may restart the unit; restarts nothing (run as root or as that user)")
    check.add_argument("--user", default=DAEMON_USER, help=f"the daemon's user (default {DAEMON_USER})")
    check.add_argument("--unit", help="also check the unit's engine and systemd timers against the limits "
                                      "(TimeoutStartSec= and Environment= over D-Bus, server_args from the journal)")
    check.add_argument("--state-dir", help="where the history is (default $STATE_DIRECTORY or /var/lib/phasewatch)")
    check.add_argument("--instance", help="check it as phasewatch@INSTANCE reads it (the other spelling of the "
                       "file's name too; its unit: must be INSTANCE): what `systemctl reload` runs first")
    check.set_defaults(func=cmd_check_config)
