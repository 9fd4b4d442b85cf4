"""`phasewatch init UNIT`: read the unit over D-Bus (and its last start-up from the journal), write
/etc/phasewatch/NAME.yaml for it, and say how to enable the watchdog. The decisions are in
stages/s4_judge/init_config.py; this module only reads and writes.

Exit statuses: 0 written (or unchanged); 69 systemd cannot be asked; 73 an edited config is in the
way (a diff is shown; --force replaces it); 78 the unit runs no engine phasewatch knows; 3 systemd does
not know the unit and the journal has nothing of it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config.instances import config_names, watched_unit, watcher_of
from ..config.load import parse_config
from ..config.yaml_file import load_yaml
from ..errors import EX_CANTCREAT, ConfigError, PhasewatchError, UnitError
from ..output.render import terminal_safe
from ..profile.load import load_builtin_profile
from ..records import Phase
from ..stages.s4_judge.init_config import (
    LOG_RATE_BURST_NEEDED,
    UnitCommand,
    engine_facts,
    intended_keys,
    one_line,
    phase_durations,
    ras_dropin,
    ras_port_for,
    render_config,
    sealed,
    untouched,
)

USEC_INFINITY = 2**64 - 1
JOURNAL_LOOKBACK = 30 * 86400.0  # the last start-up is looked for this far back
# The drop-in as the .deb installs it, or as `make install` does (PREFIX=/usr/local).
LOG_RATE_DROPINS = ("/usr/share/doc/phasewatch/examples/sglang-log-rate.conf",
                    "/usr/local/share/doc/phasewatch/examples/sglang-log-rate.conf")


class EditedConfig(PhasewatchError):
    exit_status = EX_CANTCREAT


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_unit(unit: str) -> UnitCommand:  # pragma: systemd no cover (e2e: test_e2e_init.py)
    """ExecStart=, Environment=, TimeoutStartSec=, User= and Type= over D-Bus."""
    try:
        from pystemd.systemd1 import Unit

        handle = Unit(unit.encode(), _autoload=True)
        if _text(handle.Unit.LoadState) != "loaded":
            raise ConfigError("unit", f"{unit} is not loaded by systemd ({_text(handle.Unit.LoadState)}): "
                              "is the name right?")
        service = handle.Service
        exec_start = list(service.ExecStart or [])
        argv = tuple(_text(word) for word in exec_start[0][1]) if exec_start else ()
        environment = dict(_text(item).partition("=")[::2] for item in service.Environment or [])
        timeout = int(service.TimeoutStartUSec)
        return UnitCommand(unit=unit, argv=argv, environment=environment,
                           timeout_start=None if timeout == USEC_INFINITY else timeout / 1e6,
                           user=_text(service.User) or None, service_type=_text(service.Type) or "simple",
                           log_rate_burst=int(getattr(service, "LogRateLimitBurst", 0) or 0))
    except PhasewatchError:
        raise
    except Exception as exc:  # pystemd's D-Bus exception tree
        raise UnitError(f"cannot read {unit} over D-Bus: {exc}") from None


def last_startup(unit: str, directory: str | None) -> dict[Phase, float]:
    """The phase durations of the unit's last start-up in the journal; none when it cannot be read."""
    from ..config.load import Config
    from ..errors import JournalError
    from ..pipeline import Pipeline
    from ..sources.journal.journal_source import UnitRecords

    try:
        pipeline = Pipeline(Config(unit=unit))
        pipeline.feed_all(UnitRecords(unit, directory, time.time() - JOURNAL_LOOKBACK), now=None)
        invocations = pipeline.snapshot().invocations
    except JournalError:
        return {}
    if not invocations:
        return {}
    ranks = invocations[-1].ranks
    return phase_durations([(span.phase, span.start, span.end) for rank in ranks for span in rank.spans])


def cmd_init(args: argparse.Namespace) -> int:
    unit = watched_unit(args.unit)
    command = read_unit(unit)
    command = replace(command, last_startup=last_startup(unit, args.directory))
    facts = engine_facts(command.argv)
    if facts.engine is None:
        raise ConfigError("engine", f"{unit}'s ExecStart= runs no engine phasewatch knows (sglang, vllm): "
                          f"{one_line(' '.join(command.argv)[:200])}")
    try:
        load_builtin_profile(facts.engine)
    except PhasewatchError:
        raise ConfigError("engine", f"{unit} runs {facts.engine}, which this phasewatch has no built-in "
                          "profile for yet") from None
    facts.check_size()
    text = sealed(render_config(command, facts))
    path = Path(args.directory_out) / config_names(unit)[0]
    parse_config(text, str(path))  # what init writes, check-config accepts: checked before writing
    _check_faithful(text, str(path), intended_keys(facts, command))
    if args.dry_run:
        sys.stdout.writelines(terminal_safe(line) + "\n" for line in text.splitlines())
        return 0
    existing = next((Path(args.directory_out) / name for name in config_names(unit)
                     if (Path(args.directory_out) / name).exists()), None)
    if existing is not None:
        old = existing.read_text(errors="replace")
        if old == text:
            print(f"{existing}: unchanged")
            _ras(args, command)
            return _next_steps(command, existing)
        if not untouched(old) and not args.force:
            diff = difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(existing), "phasewatch init")
            sys.stdout.writelines(terminal_safe(line.rstrip("\n")) + "\n" for line in diff)
            raise EditedConfig(f"{existing} was edited since init wrote it (or not written by init): not "
                               "replaced; the diff above is what init would write (--force replaces it)")
        path = existing
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.init")
    temporary.write_text(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    print(f"wrote {path} ({facts.engine}, TP={facts.tp}"
          + (f", speculative {facts.speculative}" if facts.speculative else "") + ")")
    _ras(args, command)
    return _next_steps(command, path)


def _ras(args: argparse.Namespace, command: UnitCommand) -> None:
    """--ras-dropin: the unit's NCCL RAS on a port of its own (a drop-in), unless it names one."""
    if not args.ras_dropin:
        return
    if "NCCL_RAS_ADDR" in command.environment:
        print(f"{command.unit} sets NCCL_RAS_ADDR={command.environment['NCCL_RAS_ADDR']} already: no drop-in written")
        return
    path = Path(args.systemd_dir) / f"{command.unit}.d" / "50-nccl-ras.conf"
    port = ras_port_for(command.unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ras_dropin(command.unit, port))
    print(f"wrote {path} (NCCL_RAS_ADDR=127.0.0.1:{port}); it takes effect at the unit's next start, after:")
    print("    systemctl daemon-reload")


def _check_faithful(text: str, path: str, intended: dict[str, object]) -> None:
    """The text parses back to exactly the keys init meant to write (values it names: the unit, the
    engine, the phases): a value of the unit that made a key of its own is refused, nothing written."""
    document = load_yaml(text, path) or {}
    document.pop("__lines__", None)
    found: dict[str, object] = {key: None for key in document}
    for key in ("unit", "engine"):
        if key in document:
            found[key] = document[key]
    if isinstance(document.get("phases"), dict):
        found["phases"] = sorted(str(phase) for phase in document["phases"] if phase != "__lines__")
    if found != intended:
        extra = sorted(set(found) - set(intended))
        raise ConfigError("config", "init's text does not parse back to the config it meant to write ("
                          + (f"keys it did not write: {', '.join(map(one_line, map(str, extra)))}" if extra else
                             "a value differs") + "): a value of the unit's ExecStart= or Environment= is not "
                          "plain text; nothing written", path)


def _next_steps(command: UnitCommand, path: Path) -> int:
    unit = command.unit
    print("next, check that polkit lets phasewatch restart it (else add it to WATCHED_UNITS there),")
    print("then enable the watchdog:")
    print(f"    grep -n '\"{unit}\"' /etc/polkit-1/rules.d/50-phasewatch.rules")
    print(f"    systemctl enable --now {watcher_of(unit)}")
    if command.log_rate_burst < LOG_RATE_BURST_NEEDED:
        print(f"{unit} has LogRateLimitBurst={command.log_rate_burst}: journald may drop start-up lines;")
        print("keep them all from its next start with:")
        dropin = next((p for p in LOG_RATE_DROPINS if os.path.exists(p)), LOG_RATE_DROPINS[0])
        print(f"    install -D -m 0644 {dropin} \\")  # (two lines of one command: each fits 100 columns)
        print(f"        /etc/systemd/system/{unit}.d/50-log-rate.conf")
        print("    systemctl daemon-reload")
    return 0


def add_parser(sub: Any) -> None:
    init = sub.add_parser("init", help="write /etc/phasewatch/NAME.yaml for a unit from its ExecStart= (and its "
                          "last start-up in the journal)")
    init.add_argument("unit", metavar="UNIT", help="the server's unit, e.g. sglang-kimi (or sglang-kimi.service)")
    init.add_argument("--dry-run", action="store_true", help="print the config instead of writing it")
    init.add_argument("--force", action="store_true", help="replace a config that was edited since")
    init.add_argument("--ras-dropin", action="store_true", help="also write a drop-in giving the unit's NCCL RAS a "
                      "port of its own (NCCL_RAS_ADDR), so that phasewatch asks its RAS and no other")
    init.add_argument("--systemd-dir", default="/etc/systemd/system", help=argparse.SUPPRESS)
    init.add_argument("--config-dir", dest="directory_out", default="/etc/phasewatch", help=argparse.SUPPRESS)
    init.add_argument("--directory", help=argparse.SUPPRESS)  # a journal directory (tests)
    init.set_defaults(func=cmd_init)



