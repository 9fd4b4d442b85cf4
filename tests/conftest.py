import sys
from pathlib import Path

import pytest

from corpus_paths import corpus_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))  # the SGLang simulator lives outside the installed package


TIERS = ("unit", "integration", "golden", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries the marker of its tier, the directory under tests/ it lives in
    (`pytest -m unit`, `-m "not e2e"`)."""
    tests = Path(__file__).resolve().parent
    for item in items:
        tier = item.path.resolve().relative_to(tests).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def corpus() -> Path:
    found = corpus_dir()
    if found is None:
        pytest.fail("the corpus is missing: tests/golden/corpus (or $PHASEWATCH_CORPUS, which must exist)")
    return found
