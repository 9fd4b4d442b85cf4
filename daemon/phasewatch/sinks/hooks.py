"""Edge: the `hook:NAME` action. Runs `hooks.NAME.exec` as phasewatch's own user, with the verdict in
`PHASEWATCH_*` environment variables (the alert's fields), bounded by `hooks.NAME.timeout`; what it
writes goes to phasewatch's journal, line by line (capped)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Sequence

from ..config.load import Hook
from ..stages.s5_act.respond import Action
from .actions import alert_fields
from .children import run_child

logger = logging.getLogger(__name__)
MAX_OUTPUT_LINES = 200
MAX_OUTPUT_BYTES = 64 * 1024  # read while it runs; the rest is discarded
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "INVOCATION_ID")


@dataclass(frozen=True)
class HookRun:
    returncode: int | None  # None: killed at its timeout
    output: str


def run_process(argv: Sequence[str], env: dict[str, str], timeout: float) -> HookRun:
    """In its own process group, output capped while read, killed with its group at the timeout
    (sinks/children.py); a hook that exits while a background child holds its output has exited."""
    ran = run_child(argv, timeout, env=env, cap=MAX_OUTPUT_BYTES)
    output = ran.output + ("\n(output past %d bytes discarded)" % MAX_OUTPUT_BYTES if ran.truncated else "")
    return HookRun(ran.returncode, output)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c != 0x09}


def env_safe(value: str) -> str:
    """No NUL, no other C0 control byte, no lone surrogate in an environment value: escaped as `\\xNN`
    (the value is the server's log text, not phasewatch's)."""
    return value.translate(_CONTROL).encode("utf-8", "backslashreplace").decode("utf-8")


def hook_env(action: Action, unit: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    fields = alert_fields(action, unit)
    env.update({k: env_safe(v) for k, v in fields.items() if k.startswith("PHASEWATCH_")})
    env["PHASEWATCH_MESSAGE"] = env_safe(fields["MESSAGE"])
    return env


class HookRunner:
    def __init__(self, unit: str, hooks: dict[str, Hook],
                 run: Callable[[Sequence[str], dict[str, str], float], HookRun] = run_process) -> None:
        self.unit = unit
        self.hooks = hooks
        self.run = run

    def __call__(self, action: Action) -> HookRun | None:
        hook = self.hooks.get(action.hook or "")
        if hook is None:
            logger.error("[%s] hook %s is not configured (hooks: has no such name): not run", self.unit, action.hook)
            return None
        result = self.run(hook.argv, hook_env(action, self.unit), hook.timeout)
        lines = result.output.splitlines()
        for line in lines[:MAX_OUTPUT_LINES]:
            logger.info("[%s] hook %s: %s", self.unit, action.hook, line)
        if len(lines) > MAX_OUTPUT_LINES:
            logger.info("[%s] hook %s: (%d more lines not shown)", self.unit, action.hook,
                        len(lines) - MAX_OUTPUT_LINES)
        if result.returncode is None:
            logger.error("[%s] hook %s killed after its timeout of %gs", self.unit, action.hook, hook.timeout)
        elif result.returncode != 0:
            logger.error("[%s] hook %s exited with status %d", self.unit, action.hook, result.returncode)
        else:
            logger.info("[%s] hook %s done", self.unit, action.hook)
        return result
