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
from pathlib import Path

from ..stages.respond import Hold

logger = logging.getLogger(__name__)
MAX_HOLD_BYTES = 4096


class HoldFile:
    def __init__(self, directory: str | Path, unit: str) -> None:
        self.path = Path(directory) / f"{unit}.hold.json"

    def read(self, now: float) -> Hold | None:
        """The hold in force at `now`; None when there is none, it ended, or the file is not ours."""
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(MAX_HOLD_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("hold file %s is unreadable (%s): no hold", self.path, exc)
            return None
        try:
            if len(raw) > MAX_HOLD_BYTES:
                raise ValueError(f"larger than {MAX_HOLD_BYTES} bytes")
            document = json.loads(raw.decode("utf-8"))
            until, reason = document["until"], document["reason"]
            if not (isinstance(until, (int, float)) and math.isfinite(until) and isinstance(reason, str)):
                raise ValueError("until must be a number, reason a string")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("hold file %s is not a hold (%s): ignored", self.path, exc)
            return None
        hold = Hold(float(until), reason)
        return hold if hold.active(now) else None

    def write(self, hold: Hold) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"until": hold.until, "reason": hold.reason}))
        os.replace(temporary, self.path)

    def remove(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
