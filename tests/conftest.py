import sys
from pathlib import Path

import pytest

from corpus_paths import corpus_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))  # the SGLang simulator lives outside the installed package


@pytest.fixture(scope="session")
def corpus() -> Path:
    found = corpus_dir()
    if found is None:
        pytest.fail("the corpus is missing: tests/golden/corpus (or $PHASEWATCH_CORPUS, which must exist)")
    return found
