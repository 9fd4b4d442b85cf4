"""Edge: the operator's hold, one small JSON file in the state directory (`<unit>.hold.json`).

`phasewatch hold` writes it and `phasewatch release` removes it; the daemon reads it before each
decision, so a hold survives a daemon restart and ends by itself at `until`. Writing it needs write
access to the state directory (root, or the phasewatch user): the same as changing what phasewatch
remembers, nothing more.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path

from ..durations import MAX_DURATION
from ..stages.s5_act.respond import Hold

logger = logging.getLogger(__name__)
MAX_HOLD_BYTES = 4096


class HoldFile:
    def __init__(self, directory: str | Path, unit: str) -> None:
        self.path = Path(directory) / f"{unit}.hold.json"

    def read(self, now: float) -> Hold | None:
        """The hold in force at `now`; None when there is none, it ended, or the file is not ours."""
        try:
            raw = self._read_regular()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("hold file %s is unreadable (%s): no hold", self.path, exc.strerror or exc)
            return None
        try:
            if len(raw) > MAX_HOLD_BYTES:
                raise ValueError(f"larger than {MAX_HOLD_BYTES} bytes")
            document = json.loads(raw.decode("utf-8"))
            until, reason = document["until"], document["reason"]
            if isinstance(until, bool) or not (isinstance(until, (int, float)) and math.isfinite(until)
                                               and isinstance(reason, str)):
                raise ValueError("until must be a number, reason a string")
            if until > now + MAX_DURATION:  # `hold --for` is at most 365d: this one never ends
                raise ValueError(f"it ends more than {MAX_DURATION / 86400:.0f} days from now")
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            logger.warning("hold file %s is not a hold (%s): ignored", self.path, exc)
            return None
        hold = Hold(float(until), reason)
        return hold if hold.active(now) else None

    def _read_regular(self) -> bytes:
        """The file's first bytes; a symlink, FIFO, device or directory is refused without blocking."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"not a regular file (mode {oct(os.fstat(fd).st_mode)})")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                return handle.read(MAX_HOLD_BYTES + 1)
        finally:
            os.close(fd)

    def write(self, hold: Hold) -> None:
        """Written to a new file beside it (never through a link left there), then renamed over it."""
        temporary = self.path.with_suffix(".tmp")
        temporary.unlink(missing_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps({"until": hold.until, "reason": hold.reason}))
        os.replace(temporary, self.path)

    def remove(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
