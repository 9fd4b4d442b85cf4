"""The config's `group:` section (docs/multi-node.md): validated into `sections.Group`."""

from __future__ import annotations

import re
from typing import Any

from ..durations import shown
from .parse_sections import Fail, entries, listen_problem
from .sections import Group, GroupReceiver

GROUP_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
MAX_NODES = 1024
GROUP_KEYS = ("name", "nodes", "node_rank", "receiver")
RECEIVER_KEYS = ("listen", "token_file", "tls_cert", "tls_key")

def parse_group(section: Any, line: int | None, fail: Fail) -> Group | None:
    """None when the section is absent."""
    if section is None:
        return None
    values: dict[str, Any] = {}
    receiver: GroupReceiver | None = None
    for key, raw, at in entries(section, "group", line, "a mapping with name and nodes", fail):
        if key not in GROUP_KEYS:
            raise fail(f"group.{key}", f"unknown setting (known: {', '.join(GROUP_KEYS)})", at)
        if key == "name":
            if not isinstance(raw, str) or not GROUP_NAME_RE.fullmatch(raw):
                raise fail("group.name", f"expected a name of letters, digits and _.:- (at most 64), got {shown(raw)}",
                           at)
            values["name"] = raw
        elif key == "receiver":
            receiver = _receiver(raw, at, fail)
        else:
            low = 2 if key == "nodes" else 0
            if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= MAX_NODES:
                raise fail(f"group.{key}", f"expected a whole number from {low} to {MAX_NODES}, got {shown(raw)}", at)
            values[key] = raw
    for needed in ("name", "nodes"):
        if needed not in values:
            raise fail(f"group.{needed}", "missing (a group needs its name and its number of nodes)", line)
    rank = values.get("node_rank")
    if rank is not None and rank >= values["nodes"]:
        raise fail("group.node_rank", f"node_rank {rank} is not below nodes ({values['nodes']})", line)
    return Group(values["name"], values["nodes"], rank, receiver)


def _receiver(section: Any, line: int | None, fail: Fail) -> GroupReceiver:
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for key, raw, at in entries(section, "group.receiver", line, "a mapping with listen and token_file", fail):
        if key not in RECEIVER_KEYS:
            raise fail(f"group.receiver.{key}", f"unknown setting (known: {', '.join(RECEIVER_KEYS)})", at)
        if key == "listen":
            problem = listen_problem(raw)
            if problem is not None:
                raise fail("group.receiver.listen", problem, at)
        elif not isinstance(raw, str) or not raw.startswith("/"):
            raise fail(f"group.receiver.{key}", f"expected an absolute path, got {shown(raw)}", at)
        values[key] = raw
        if at is not None:
            lines[key] = at
    for needed in ("listen", "token_file"):
        if needed not in values:
            raise fail(f"group.receiver.{needed}", "missing (the receiver needs a listen address and a token file)",
                       line)
    if ("tls_cert" in values) != ("tls_key" in values):
        raise fail("group.receiver", "TLS needs both tls_cert and tls_key", line)
    return GroupReceiver(values["listen"], values["token_file"], values.get("tls_cert"), values.get("tls_key"), lines)
