"""Hostile configs shared by the config tests of the unit and integration tiers (one copy)."""

from __future__ import annotations

import re
import textwrap

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
