"""Edge: running a child (a hook, py-spy, nvidia-smi) with every resource bounded.

- The child runs in its own process group (a session): on its timeout, or once it exited while a
  child of its own still holds the pipe, the whole group is SIGKILLed.
- Its output (stdout and stderr together) is read up to `cap` bytes while it is read; the rest is
  read and discarded, never collected whole.
- After the kill it is waited on for at most `reap` seconds, then abandoned (a child stuck in the
  kernel, D state, cannot die before its call returns: the caller must not wait on it for ever).
- A spawn that fails (no such file, a NUL in the environment) is a result, never an exception.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..config.sections import CHILD_REAP

CAP = 1 << 20  # bytes of output kept
REAP = CHILD_REAP  # seconds a killed child is waited on before it is abandoned
READ = 65536


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: it did not finish in time (killed)
    output: str
    truncated: bool = False  # more output than the cap: the rest was discarded
    abandoned: bool = False  # killed, and still not gone after the reap bound


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass  # (gone already)


def _reap(process: subprocess.Popen[bytes], bound: float) -> int | None:
    try:
        return process.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        return None


def run_child(argv: Sequence[str], timeout: float, env: dict[str, str] | None = None, cap: int = CAP,
              reap: float = REAP, monotonic: Callable[[], float] = time.monotonic) -> Ran:
    """Runs `argv` for at most `timeout` seconds (plus `reap` when it must be killed)."""
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True)
    except (OSError, ValueError, UnicodeError) as exc:  # ValueError: an embedded NUL
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return Ran(127, f"cannot run {argv[0] if argv else '(nothing)'}: {why}")
    assert process.stdout is not None
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    kept = bytearray()
    truncated = False
    deadline = monotonic() + max(timeout, 0.0)
    returncode: int | None = None
    timed_out = False
    try:
        while True:
            if returncode is None:
                returncode = process.poll()
            left = deadline - monotonic()
            if left <= 0:
                timed_out = returncode is None
                break
            # Once the child exited, what is still in the pipe is read without waiting for a
            # grandchild that holds the pipe open.
            ready, _, _ = select.select([fd], [], [], 0 if returncode is not None else min(left, 0.1))
            if not ready:
                if returncode is not None:
                    break
                continue
            try:
                chunk = os.read(fd, READ)
            except BlockingIOError:
                continue
            if not chunk:  # closed: it is exiting, or went on without its output
                if returncode is None:
                    try:
                        returncode = process.wait(timeout=max(deadline - monotonic(), 0.0))
                    except subprocess.TimeoutExpired:
                        timed_out = True
                break
            room = cap - len(kept)
            if room > 0:
                kept += chunk[:room]
            if len(chunk) > room:
                truncated = True
    finally:
        _kill_group(process.pid)  # whatever of its group is left (a background child holding the pipe)
        process.stdout.close()
    abandoned = timed_out and _reap(process, reap) is None
    text = kept.decode(errors="replace")
    return Ran(None if timed_out else returncode, text, truncated, abandoned)
