"""Every error of a config file, not only the first (`check-config`), and the warnings of limits
that load but cannot work as written.

The loader stops at its first error (the daemon needs one config or none). Here the file is loaded
again without the setting that failed, until it loads: each setting's first error once, in the
context of all the others (a restart action naming a hook still sees the hooks)."""

from __future__ import annotations

from typing import Any

from .config import Config, parse_document
from .config_file import load_yaml
from .durations import format_duration
from .errors import ConfigError

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
            errors.append(exc)
            document = _without(document, exc.key)
            if document is None:
                return errors
    return errors


def _without(document: Any, key: str) -> Any:
    """The document without the setting `key` names (`phases.weight_load.stall`: that phase only);
    None when nothing can be left out (the top level itself, or a key not in it)."""
    if not isinstance(document, dict):
        return None
    top, _, rest = key.partition(".")
    if top not in document or top == "__lines__":
        return None
    trimmed = dict(document)
    if top == "phases" and rest and isinstance(document[top], dict):
        phase = rest.split(".", 1)[0]
        phases = {k: v for k, v in document[top].items() if k != phase}
        if len(phases) < len(document[top]):
            trimmed[top] = phases
            return trimmed
    del trimmed[top]
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
