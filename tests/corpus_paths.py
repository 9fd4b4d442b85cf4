"""Where the real-log corpus is: $PHASEWATCH_CORPUS when set, else the copy inside the repository
(tests/golden/corpus, so a bare clone runs the golden tests)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IN_REPO = REPO / "tests" / "golden" / "corpus"


def corpus_dir() -> Path | None:
    """$PHASEWATCH_CORPUS when set (it must exist), else tests/golden/corpus."""
    override = os.environ.get("PHASEWATCH_CORPUS")
    candidate = Path(override) if override else IN_REPO
    return candidate if candidate.is_dir() else None
