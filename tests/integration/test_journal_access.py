"""sources/journal/access.py over the real things: a system bus socket that answers and one nobody
listens on, and a real journal directory (systemd-journal-remote's) whose unit names, with the
configs in a directory of the test's own, are the names said beside an unknown unit. The checks that
need neither: tests/unit/test_access.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from journal_dirs import write_journal
from phasewatch.errors import EXIT_UNKNOWN_UNIT, NoSuchUnit
from phasewatch.sources.journal.access import known_units, preflight, system_bus_problem

T0 = 1_800_000_000


def bus(path: Path) -> dict[str, str]:
    return {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={path},guid=0123456789abcdef"}


def test_a_bus_that_answers_is_no_problem_and_a_stale_socket_is_said(tmp_path: Path) -> None:
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(tmp_path / "bus"))
    listening.listen(1)
    try:
        assert system_bus_problem(bus(tmp_path / "bus")) is None
    finally:
        listening.close()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "stale"))  # bound, never listening: the file of a bus that died
    stale.close()
    assert system_bus_problem(bus(tmp_path / "stale")) == (f"the system bus at {tmp_path / 'stale'} does not answer "
                                                           "(Connection refused)")


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    def entry(n: int, **fields: str) -> dict[str, str]:
        return {"__REALTIME_TIMESTAMP": str((T0 + n) * 1_000_000), "_PID": str(100 + n), "MESSAGE": f"line {n}",
                **fields}

    return write_journal(tmp_path / "journal", [
        entry(0, _SYSTEMD_UNIT="sglang-kimi.service"),
        entry(1, _PID="1", UNIT="vllm-llama.service", MESSAGE="Started vllm-llama.service."),
        entry(2, _SYSTEMD_UNIT="cron.service"),
        entry(3, _SYSTEMD_UNIT="sglang-bench.scope"),  # no service
    ])


def test_the_names_like_an_unknown_unit_come_from_the_journal_and_the_configs(journal: Path, tmp_path: Path) -> None:
    configs = tmp_path / "etc"
    configs.mkdir()
    (configs / "sglang-qwen.yaml").write_text("unit: sglang-qwen.service\n")
    (configs / "llama-guard.service.yaml").write_text("unit: llama-guard.service\n")
    assert known_units("sglang-kimi2.service", str(configs), str(journal)) == [
        "sglang-kimi.service", "sglang-qwen.service", "vllm-llama.service", "llama-guard.service", "cron.service"]
    # nothing like it: the inference servers it knows, by their names (services only)
    assert known_units("pg", str(configs), str(journal)) == ["sglang-kimi.service", "sglang-qwen.service",
                                                             "vllm-llama.service"]
    assert "sglang-kimi.service" not in known_units("sglang-kimi.service", str(configs), str(journal))  # not itself


def test_preflight_over_a_copied_journal(journal: Path) -> None:
    preflight("sglang-kimi.service", str(journal))  # its own output
    preflight("vllm-llama.service", str(journal))  # PID 1's entries about it
    with pytest.raises(NoSuchUnit) as unknown:
        preflight("sglang-kimi2.service", str(journal))
    assert str(unknown.value) == f"sglang-kimi2.service: no such unit (nothing of it in the journal in {journal})"
    assert unknown.value.hint is not None and unknown.value.hint.startswith(
        "units it knows like it: sglang-kimi.service")
    assert unknown.value.exit_status == EXIT_UNKNOWN_UNIT
