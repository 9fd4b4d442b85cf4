"""The man pages, generated so that they cannot drift: phasewatch(1) from the argparse parser
(every command and option as `--help` has it, and errors.EXIT_STATUSES), phasewatch.yaml(5) from
config.TOP_KEYS, DEFAULT_LIMITS and the example config, phasewatch@.service(8) from the unit file.

    python3 -m phasewatch.output.manpages OUTDIR [--example config/phasewatch.yaml --unit units/phasewatch@.service]

writes man/phasewatch.1, man/phasewatch.yaml.5 and man/phasewatch@.service.8 (committed; a test
checks they equal what this writes from the current parser and config).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from .. import __version__
from ..config.load import DEFAULT_LIMITS, TOP_KEYS
from ..durations import format_duration
from ..errors import EXIT_STATUSES

DATE = "2026-12-01"  # the pages' own date: fixed, so that a regeneration changes only what changed
SEE_ALSO = r"""\fBsystemd.service\fR(5), \fBjournalctl\fR(1), \fBsystemd.exec\fR(5), \fBpolkit\fR(8);
/usr/share/doc/phasewatch/operations.md, runbook.md, metrics.md"""
KEY_DOCS = {
    "unit": "the watched unit, e.g. sglang-kimi.service; phasewatch@NAME.service must watch NAME.service",
    "engine": "the built-in grammar that reads the server's lines: sglang or vllm",
    "profile_path": "a profile file of rules read instead of the built-in one",
    "phases": "per phase: deadline (longest a rank may stay in it) and stall (longest it may stay silent)",
    "rank_skew": "how long after the first rank left a phase a rank still in it is a straggler",
    "crash_cause_wait": "how long a crash verdict waits for the line that names its cause (at most 60s)",
    "patterns": "extra rules ({id, event, scope, match}) before the profile's",
    "actions": "per verdict kind: the actions taken (evidence, alert, restart)",
    "restart_budget": "max restarts in a window, and the backoff between two",
    "dry_run": "true: say what would be done, do nothing",
    "metrics": "listen: HOST:PORT of /metrics and /status (default 127.0.0.1:9877)",
    "health": "the health probe after ready (url, period, failures)",
    "adaptive": "deadlines learned from past start-ups (k, min_samples, floor, ceiling)",
    "vitals": "signs of life sampled from /proc and, with gpu: true (the default), from the ranks' GPUs over "
              "NVML between lines: period, gpu",
    "rank_processes": "watch the rank processes in the unit's cgroup (a vanished rank is rank_died)",
    "evidence": "what is captured for a verdict before a restart (stacks, journal excerpt)",
    "hooks": "commands run on verdicts, bounded in time",
    "leftovers": "after a stop: GPU memory still held by processes of the old start-up",
    "group": "one server on several hosts: name, nodes, node_rank, and the Alertmanager webhook receiver "
             "(listen, token_file, TLS) through which the group restarts this node",
}


def _esc(text: str) -> str:
    """Text as troff reads it: backslashes, and a leading dot or quote, made literal."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def _head(name: str, section: str, title: str) -> list[str]:
    return [f'.TH "{name.upper()}" "{section}" "{DATE}" "phasewatch {__version__}" "{title}"']


def _options(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        names = ", ".join(action.option_strings) or str(action.metavar or action.dest)
        if action.option_strings and action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
        help_text = (action.help or "") % {"prog": parser.prog, "default": action.default}
        if action.choices and not isinstance(action.choices, dict):
            help_text += f" (one of: {', '.join(map(str, action.choices))})"
        out += [".TP", f"\\fB{_esc(str(names))}\\fR", _esc(help_text)]
    return out


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every command, and every command of a command (`vitals record`), in the parser's order."""
    out = []
    for name, help_text, sub in _subcommands(parser):
        out.append((prefix + name, help_text, sub))
        out.extend(_commands(sub, f"{prefix}{name} "))
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def phasewatch_1(parser: argparse.ArgumentParser) -> str:
    lines = _head("phasewatch", "1", "phasewatch manual")
    lines += [".SH NAME", "phasewatch \\- phase\\-aware start\\-up watchdog for LLM inference servers under systemd",
              ".SH SYNOPSIS", "\\fBphasewatch\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR]", ".SH DESCRIPTION",
              _esc("phasewatch reads the watched unit's journal in full, tracks the start-up phase of every "
                   "tensor-parallel rank, judges each phase against its own deadline and stall window, alerts in "
                   "the journal and Prometheus, and restarts the unit within a budget. The daemon runs as "
                   "phasewatch@NAME.service (phasewatch@.service(8)), configured by /etc/phasewatch/NAME.yaml "
                   "(phasewatch.yaml(5)); the commands below are the operator's."),
              ".SH OPTIONS", *_options(parser), ".SH COMMANDS"]
    for name, help_text, sub in _commands(parser):
        lines += [".SS " + _esc(name), _esc(help_text[:1].upper() + help_text[1:] + "."), ".PP",
                  "\\fB" + _esc(_usage(sub)) + "\\fR", *_options(sub)]
    lines += [".SH EXIT STATUS", "One meaning each, for every command:"]
    for code, meaning in EXIT_STATUSES:
        lines += [".TP", f"\\fB{code}\\fR", _esc(meaning)]
    lines += [".SH FILES", ".TP", "/etc/phasewatch/NAME.yaml", "the config of the watchdog of NAME.service",
              ".TP", "/var/lib/phasewatch", "the daemon's state: restarts, budget, history, evidence",
              ".SH SEE ALSO", "\\fBphasewatch.yaml\\fR(5), \\fBphasewatch@.service\\fR(8), " + SEE_ALSO]
    return "\n".join(lines) + "\n"


def phasewatch_yaml_5(example: str) -> str:
    lines = _head("phasewatch.yaml", "5", "phasewatch manual")
    lines += [".SH NAME", "phasewatch.yaml \\- the config of one phasewatch watchdog", ".SH SYNOPSIS",
              "/etc/phasewatch/NAME.yaml", ".SH DESCRIPTION",
              _esc("One YAML mapping per watched unit, read by phasewatch run (phasewatch@NAME.service) and by "
                   "phasewatch check-config, which names the key, file and line of every error. Durations are "
                   "written 90s, 20m, 1h30m. phasewatch init NAME writes one from the unit's ExecStart=."),
              ".SH KEYS"]
    for key in TOP_KEYS:
        lines += [".TP", f"\\fB{key}\\fR", _esc(KEY_DOCS[key])]
    lines += [".SH DEFAULT LIMITS", "deadline / stall window of each phase when phases: does not set them:"]
    for phase, limits in DEFAULT_LIMITS.items():
        if limits.deadline is not None:
            lines += [".TP", f"\\fB{phase.value}\\fR",
                      f"{format_duration(limits.deadline)} / {format_duration(limits.stall or 0.0)}"]
    lines += [".SH EXAMPLE", ".nf", *(_esc(line) if line else "" for line in example.rstrip("\n").splitlines()),
              ".fi", ".SH SEE ALSO", "\\fBphasewatch\\fR(1), \\fBphasewatch@.service\\fR(8)"]
    return "\n".join(lines) + "\n"


def phasewatch_service_8(unit_file: str) -> str:
    directives = [line for line in unit_file.splitlines() if line and not line.startswith("#")]
    lines = _head("phasewatch@.service", "8", "phasewatch manual")
    lines += [".SH NAME", "phasewatch@.service \\- the phasewatch daemon of one watched unit", ".SH SYNOPSIS",
              "phasewatch@NAME.service", ".SH DESCRIPTION",
              _esc("The instance NAME watches NAME.service with the config /etc/phasewatch/NAME.yaml. It is "
                   "Type=notify (READY=1 once caught up with the journal, WATCHDOG=1, a STATUS= line), runs as the "
                   "static system user phasewatch in the systemd-journal group, restarts the watched unit over "
                   "D-Bus as the polkit rule allows it (/usr/share/phasewatch/polkit/50-phasewatch.rules, copied "
                   "to /etc/polkit-1/rules.d/), and keeps its state in /var/lib/phasewatch. A broken config exits "
                   "78, which the unit does not restart; systemctl reload reads the config again."),
              ".SH METRICS FROM ANOTHER HOST",
              _esc("The unit allows only localhost (IPAddressDeny=any, IPAddressAllow=localhost). To scrape from "
                   "another host, set metrics.listen to an address of this host and install the shipped drop-in: "
                   "install -D -m 0644 /usr/share/doc/phasewatch/examples/phasewatch-remote-scrape.conf "
                   "/etc/systemd/system/phasewatch@NAME.service.d/50-remote-scrape.conf, with the scraper's "
                   "address in its IPAddressAllow=, then systemctl daemon-reload and systemctl restart "
                   "phasewatch@NAME.service."),
              ".SH THE UNIT", ".nf", *(_esc(line) for line in directives), ".fi",
              ".SH SEE ALSO", "\\fBphasewatch\\fR(1), \\fBphasewatch.yaml\\fR(5), " + SEE_ALSO]
    return "\n".join(lines) + "\n"


PAGES = ("phasewatch.1", "phasewatch.yaml.5", "phasewatch@.service.8")


def render_all(example: str, unit_file: str) -> dict[str, str]:
    from ..cli import build_parser

    return {"phasewatch.1": phasewatch_1(build_parser()), "phasewatch.yaml.5": phasewatch_yaml_5(example),
            "phasewatch@.service.8": phasewatch_service_8(unit_file)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m phasewatch.output.manpages")
    parser.add_argument("outdir")
    parser.add_argument("--example", default="config/phasewatch.yaml")
    parser.add_argument("--unit", default="units/phasewatch@.service")
    args = parser.parse_args(argv)
    pages = render_all(Path(args.example).read_text(), Path(args.unit).read_text())
    Path(args.outdir).mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (Path(args.outdir) / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
