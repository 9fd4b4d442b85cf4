import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))  # the SGLang simulator lives outside the installed package


def corpus_dir() -> Path | None:
    """../shared/corpus/real beside the checkout (CI lays shared/ there), or $PHASEWATCH_CORPUS."""
    override = os.environ.get("PHASEWATCH_CORPUS")
    candidates = [Path(override)] if override else []
    candidates.append(REPO.parent / "shared" / "corpus" / "real")
    return next((c for c in candidates if c.is_dir()), None)


@pytest.fixture(scope="session")
def corpus() -> Path:
    found = corpus_dir()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("the shared corpus (../shared/corpus/real) is missing in CI")
        pytest.skip("../shared/corpus/real not found (set PHASEWATCH_CORPUS)")
    return found
