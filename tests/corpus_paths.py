"""Where the shared real-log corpus is: ../shared/corpus/real beside the checkout (CI lays shared/
there), or $PHASEWATCH_CORPUS."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def corpus_dir() -> Path | None:
    """../shared/corpus/real beside the checkout (CI lays shared/ there), or $PHASEWATCH_CORPUS."""
    override = os.environ.get("PHASEWATCH_CORPUS")
    candidates = [Path(override)] if override else []
    candidates.append(REPO.parent / "shared" / "corpus" / "real")
    return next((c for c in candidates if c.is_dir()), None)
