"""Fixtures for the end-to-end tests: one booted sandbox per session with the units installed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2e_env import CONFIG_PATH, REPO, SIM_UNIT, STATE_DIR, UNIT, WATCHER, WATCHER_DROPIN, Scenario
from sandbox import Sandbox, can_boot


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = can_boot()
    if reason is None:
        return
    for item in items:
        if "e2e" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=f"real-systemd tests: {reason}"))


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    box.boot()
    try:
        box.write("/run/systemd/system/sglang-kimi.service", SIM_UNIT)
        box.write("/run/systemd/system/phasewatch@.service", (REPO / "units" / "phasewatch@.service").read_text())
        box.write("/run/systemd/system/phasewatch@.service.d/e2e.conf", WATCHER_DROPIN)
        box.write("/run/systemd/system/other.service",
                  "[Service]\nExecStart=/bin/sleep infinity\n")
        box.systemctl("daemon-reload")
        yield box
    finally:
        box.shutdown()


@pytest.fixture
def scenario(sandbox: Sandbox) -> Iterator[Scenario]:
    sandbox.systemctl("stop", WATCHER, UNIT, check=False)
    sandbox.systemctl("reset-failed", check=False)
    sandbox.run("rm", "-rf", STATE_DIR, CONFIG_PATH, check=False)
    time.sleep(0.2)  # distinct timestamps between scenarios
    yield Scenario(sandbox)
    sandbox.systemctl("stop", WATCHER, UNIT, check=False)
    sandbox.systemctl("reset-failed", check=False)

