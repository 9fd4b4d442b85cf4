"""Edge: the `hook:NAME` action. Runs `hooks.NAME.exec` as phasewatch's own user, with the verdict in
`PHASEWATCH_*` environment variables (the alert's fields), bounded by `hooks.NAME.timeout`; what it
writes goes to phasewatch's journal, line by line (capped)."""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

from ..config import Hook
from ..stages.respond import Action
from .actions import alert_fields

logger = logging.getLogger(__name__)
MAX_OUTPUT_LINES = 200
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "INVOCATION_ID")


@dataclass(frozen=True)
class HookRun:
    returncode: int | None  # None: killed at its timeout
    output: str


def run_process(argv: Sequence[str], env: dict[str, str], timeout: float) -> HookRun:
    try:
        done = subprocess.run(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return HookRun(None, exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else "")
    except OSError as exc:
        return HookRun(127, f"cannot run {argv[0]}: {exc.strerror or exc}")
    return HookRun(done.returncode, done.stdout.decode(errors="replace"))


def hook_env(action: Action, unit: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    fields = alert_fields(action, unit)
    env.update({k: v for k, v in fields.items() if k.startswith("PHASEWATCH_")})
    env["PHASEWATCH_MESSAGE"] = fields["MESSAGE"]
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
