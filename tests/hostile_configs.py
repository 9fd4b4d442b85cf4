"""Hostile configs shared by the config tests of the unit and integration tiers (one copy)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

FILE = "/etc/phasewatch/sglang-kimi.yaml"  # only a name for messages


def where(line: int, path: str = FILE) -> str:
    return re.escape(f" (file: {path}, line {line})") + "$"


BILLION_LAUGHS = textwrap.dedent("""\
    unit:
      - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      - &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      - &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      - &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      - &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      - &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      - &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
      - &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
      - &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """)  # 9**9 strings once expanded: the repr() in the old "got ..." message took a minute and GBs


# A node of a group with its receiver (tests/unit/test_config_host.py, tests/integration/test_config_host_process.py):
# the lines are fixed (metrics.listen on 3, group.receiver.listen on 8, token_file 9, tls_cert 10, tls_key 11).
def write_config(etc: Path, receiver: str, metrics: str = "127.0.0.1:9877") -> Path:
    path = etc / "sglang-kimi.yaml"
    path.write_text("unit: sglang-kimi.service\n"                 # 1
                    f"metrics:\n  listen: \"{metrics}\"\n"         # 2, 3
                    "group:\n  name: kimi-tp16\n  nodes: 2\n"      # 4, 5, 6
                    f"  receiver:\n{receiver}")                    # 7, 8...
    path.chmod(0o644)
    return path


def receiver(token: Path, listen: str = "127.0.0.1:9878", **tls: Path) -> str:
    lines = [f"    listen: \"{listen}\"", f"    token_file: {token}"]  # lines 8, 9
    lines += [f"    {key}: {path}" for key, path in tls.items()]       # 10, 11
    return "".join(line + "\n" for line in lines)


# Settings that load as YAML but could not work (PROBE-S4 L-4, L-5): (id, text, key, line, message).
# A unit name systemd refuses (its alphabet is ASCII; \w took any letter), or a restart limit
# too large to be one.
UNIT_REFUSED = r"expected a unit name like sglang-kimi\.service, got .* \(systemd's: ASCII letters"
CANNOT_WORK = [
    ("unit with a non-ASCII letter", "unit: sglang-kïmi.service\n", "unit", 1, UNIT_REFUSED),
    ("unit of Arabic-Indic digits", "engine: sglang\nunit: ١٢.service\n", "unit", 2, UNIT_REFUSED),
    ("unit of 300 characters", "unit: " + "a" * 292 + ".service\n", "unit", 1, UNIT_REFUSED),
    ("unit of 256 characters", "unit: " + "a" * 248 + ".service\n", "unit", 1, UNIT_REFUSED),
    ("a template, no unit", "unit: sglang@.service\n", "unit", 1, UNIT_REFUSED),
    ("unit starting with @", "unit: \"@x.service\"\n", "unit", 1, UNIT_REFUSED),
    ("restart_budget.max of 20 digits", "unit: sglang-kimi.service\nrestart_budget:\n  max: 99999999999999999999\n",
     "restart_budget.max", 3, r"at most 100, got 99999999999999999999 \(more would remove the restart limit, as "
                              r"window: none would\)"),
    ("restart_budget.max of 101", "unit: sglang-kimi.service\nrestart_budget: {max: 101, window: 1d}\n",
     "restart_budget.max", 2, r"at most 100, got 101"),
]
# ... and their neighbours that systemd takes.
UNITS_TAKEN = ["sglang-kimi.service", "a" * 247 + ".service", "sglang@kimi.service", "a@b@c.service",
               "sglang\\x2dkimi.service", "x:y_z.scope", "1.service"]
