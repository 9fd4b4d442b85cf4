"""The unit tier is pure: a unit test (or a fixture of it) that starts a thread, spawns a process,
sleeps, opens a socket or opens a journal fails here. Such a test belongs in tests/integration.

The guard is module-scoped and autouse, so it is in place before any module-scoped fixture of the
test module runs (a fixture writing journal files once per module is caught too), and it is taken
down when the module ends, before the next tier's modules run in the same session."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from systemd import journal


def _forbidden(what: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError(f"a unit test must not {what}: it belongs in tests/integration")
    return refuse


SPAWNS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve", "execvp", "execvpe")


@pytest.fixture(scope="module", autouse=True)
def _unit_tier_is_pure() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(threading.Thread, "start", _forbidden("start a thread"))
        patch.setattr(subprocess.Popen, "__init__", _forbidden("spawn a process"))
        for spawn in SPAWNS:
            if hasattr(os, spawn):
                patch.setattr(os, spawn, _forbidden("spawn a process"))
        patch.setattr(time, "sleep", _forbidden("sleep (pass `now` instead)"))
        patch.setattr(asyncio, "sleep", _forbidden("sleep (pass `now` instead)"))
        patch.setattr(socket.socket, "__init__", _forbidden("open a socket"))
        patch.setattr(socket, "socketpair", _forbidden("open a socket"))
        patch.setattr(journal.Reader, "__init__", _forbidden("open a journal"))
        yield
