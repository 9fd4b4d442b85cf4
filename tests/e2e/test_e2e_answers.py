"""No empty answer: each operator command, for each failure an operator meets first (no permission,
no system bus, an unknown unit, input that is not a log), says what is wrong and what to do and
exits with the status of the one table (errors.EXIT_STATUSES), against a real systemd, journald
and D-Bus. Each cell: (exit status, what stderr must say)."""

from __future__ import annotations

import pytest
from e2e_env import UNIT, VENV, Scenario

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
NO_BUS = ("env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/no-such-bus")
EMPTY_DIR = "/run/matrix-empty"
PROSE = "/run/matrix-prose.txt"
STATE = "/run/matrix-state"  # a state directory as the daemon keeps it: 0700, not for other users
TYPO = "sglang-kimmi"  # one letter off the sandbox's sglang-kimi.service
JOIN = "join the systemd-journal group"
NO_SYSTEMD = "systemd cannot be asked (no system bus: /run/no-such-bus does not exist)"
KNOWN = f"units it knows like it: {UNIT}"
NOT_JOURNAL = f"{EMPTY_DIR}: no journal file (*.journal) in it"

# command -> failure -> (prefix, argv, exit status, what stderr says); None: the failure cannot happen
# to the command (report reads only its state directory; init has no journal --directory).
MATRIX: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...], int, str] | None]] = {
    "status": {
        "no_permission": (NOBODY, ("status", "matrix-quiet"), 77, JOIN),
        "no_system_bus": (NO_BUS, ("status", "no-such-unit"), 69, NO_SYSTEMD),
        "unknown_unit": ((), ("status", TYPO), 3, KNOWN),
        "not_a_log": ((), ("status", UNIT, "--directory", EMPTY_DIR), 65, NOT_JOURNAL),
    },
    "logs": {
        "no_permission": (NOBODY, ("logs", "matrix-quiet"), 77, JOIN),
        "no_system_bus": (NO_BUS, ("logs", "no-such-unit"), 69, NO_SYSTEMD),
        "unknown_unit": ((), ("logs", TYPO), 3, KNOWN),
        "not_a_log": ((), ("logs", UNIT, "--directory", EMPTY_DIR), 65, NOT_JOURNAL),
    },
    "wait-ready": {
        "no_permission": (NOBODY, ("wait-ready", "matrix-quiet", "--timeout", "5s"), 77, JOIN),
        "no_system_bus": (NO_BUS, ("wait-ready", "no-such-unit", "--timeout", "5s"), 69, NO_SYSTEMD),
        "unknown_unit": ((), ("wait-ready", TYPO, "--timeout", "5s"), 3, KNOWN),
        "not_a_log": ((), ("wait-ready", UNIT, "--timeout", "5s", "--directory", EMPTY_DIR), 65, NOT_JOURNAL),
    },
    "replay": {
        "no_permission": (NOBODY, ("replay", "--unit", "matrix-quiet", "--since", "30m"), 77, JOIN),
        "no_system_bus": (NO_BUS, ("replay", "--unit", "no-such-unit"), 69, NO_SYSTEMD),
        "unknown_unit": ((), ("replay", "--unit", TYPO, "--since", "30m"), 3, KNOWN),
        "not_a_log": ((), ("replay", PROSE), 65, "no line of a start-up phasewatch knows (SGLang, vLLM) in it"),
    },
    "init": {
        "no_permission": (NOBODY, ("init", "matrix-sglang", "--config-dir", "/run/matrix-etc"), 77,
                          "Permission denied for nobody: run as root"),
        "no_system_bus": (NO_BUS, ("init", "matrix-sglang"), 69,
                          "systemd cannot be asked about it (no system bus: /run/no-such-bus does not exist)"),
        "unknown_unit": ((), ("init", TYPO), 3, KNOWN),
        "not_a_log": None,
    },
    "report": {
        "no_permission": (NOBODY, ("report", UNIT, "--state-dir", STATE), 77, "run as root"),
        "no_system_bus": None,
        "unknown_unit": ((), ("report", TYPO, "--state-dir", STATE), 66,
                         f"no history for {TYPO}.service in {STATE} (phasewatch run records start-ups there) "
                         f"units with a history like it: {UNIT}"),
        "not_a_log": ((), ("report", UNIT, "--state-dir", STATE), 65,
                      "not a readable history (file is not a database)"),
    },
}
CELLS = [(command, failure) for command, row in MATRIX.items() for failure, cell in row.items() if cell]


@pytest.fixture
def world(scenario: Scenario) -> Scenario:
    box = scenario.box
    box.run("sh", "-c", f"rm -rf {EMPTY_DIR} {STATE} /run/matrix-etc && mkdir -p {EMPTY_DIR} /run/matrix-etc "
            f"&& install -d -m 0700 {STATE} && chmod 0555 /run/matrix-etc")
    box.write(PROSE, "Hello there, this is prose.\nAnother line of text.\n")
    # A history that is not one (report's "not a log"): its unit then "has a history".
    box.write(f"{STATE}/{UNIT}.history.sqlite3", "not a database\n" * 100)
    # A unit that logged once (so the journal knows it) and one that runs SGLang (init reads it).
    box.run("systemd-run", "--wait", "--quiet", "--unit=matrix-quiet", "/bin/echo", "one line")
    box.write("/run/systemd/system/matrix-sglang.service", "[Service]\nExecStart=/usr/bin/python3 -m "
              "sglang.launch_server --model-path /models/x --tp 8\n")
    box.systemctl("daemon-reload")
    return scenario


@pytest.mark.parametrize(("command", "failure"), CELLS, ids=[f"{c}-{f}" for c, f in CELLS])
def test_each_command_says_what_is_wrong_with_the_tables_status(world: Scenario, command: str,
                                                                 failure: str) -> None:
    cell = MATRIX[command][failure]
    assert cell is not None
    prefix, argv, status, says = cell
    result = world.box.run(*prefix, f"{VENV}/bin/phasewatch", *argv, check=False, timeout=60)
    assert result.returncode == status, (argv, result.returncode, result.stdout, result.stderr)
    assert says in " ".join(result.stderr.split()), (argv, result.stderr)
    assert result.stdout == "" or command == "init", result.stdout  # nothing that looks like an answer
    assert "None" not in result.stderr and "Traceback" not in result.stderr


def test_every_cell_is_a_status_of_the_table() -> None:
    from phasewatch.errors import EXIT_STATUSES

    codes = {code for code, _ in EXIT_STATUSES}
    assert {cell[2] for row in MATRIX.values() for cell in row.values() if cell} <= codes
    assert all(set(row) == {"no_permission", "no_system_bus", "unknown_unit", "not_a_log"} for row in MATRIX.values())
