"""Every error of a config file, not only the first (`check-config`), and the warnings of limits
that load but cannot work as written.

The loader stops at its first error (the daemon needs one config or none). Here the file is loaded
again without the setting that failed, until it loads: each setting's first error once, in the
context of all the others (a restart action naming a hook still sees the hooks)."""

from __future__ import annotations

from typing import Any

from ..durations import format_duration
from ..errors import ConfigError
from .load import Config, parse_document
from .yaml_file import load_yaml

MAX_ERRORS = 50


def every_error(text: str, path: str | None) -> list[ConfigError]:
    try:
        document = load_yaml(text, path)  # a YAML error ends the reading: nothing after it is known
    except ConfigError as exc:
        return [exc]
    errors: list[ConfigError] = []
    while len(errors) < MAX_ERRORS:
        try:
            parse_document(document, path)
            return errors
        except ConfigError as exc:
            if any(exc.key == seen.key for seen in errors):
                # Left out, the setting is missing (`group.nodes` is required): its section goes.
                document = _without(document, ".".join(exc.key.split(".")[:2 if exc.key.startswith("phases.")
                                                                            else 1]))
                if document is None or any(str(exc) == str(seen) for seen in errors):
                    return errors
                continue
            errors.append(exc)
            document = _without(document, exc.key)
            if document is None:
                return errors
    return errors


def _without(document: Any, key: str) -> Any:
    """The document without the setting `key` names, and only it (`restart_budget.max`: not the
    whole budget, whose `window` may be wrong too); when `key` is no path of the document, the
    deepest mapping of its path that is. None when nothing can be left out (the top level itself)."""
    if not isinstance(document, dict):
        return None
    parts = key.split(".")
    depth = 0
    node: Any = document
    while depth < len(parts) and isinstance(node, dict) and parts[depth] in node and parts[depth] != "__lines__":
        node = node[parts[depth]]
        depth += 1
    if depth == 0:
        return None
    return _drop(document, parts[:depth])


def _drop(mapping: dict[Any, Any], path: list[str]) -> dict[Any, Any]:
    """A copy of `mapping` without `path` (copied along the path only)."""
    trimmed = dict(mapping)
    if len(path) == 1:
        del trimmed[path[0]]
    else:
        trimmed[path[0]] = _drop(mapping[path[0]], path[1:])
    return trimmed


def limit_warnings(config: Config) -> list[str]:
    """Limits that load but cannot work as written."""
    out = []
    for phase, limits in config.phases.items():
        if limits.deadline is not None and limits.stall is not None and limits.stall > limits.deadline:
            out.append(f"phases.{phase.value}: its stall window {format_duration(limits.stall)} is above its "
                       f"deadline {format_duration(limits.deadline)}: the deadline always fires first, so a "
                       "silent rank is called stalled only at the deadline (make stall shorter)")
    return out
