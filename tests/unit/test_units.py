"""The systemd integration files stay in step with the daemon: catalog ids, exit status, names."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from phasewatch.config.load import load_config
from phasewatch.errors import EX_CONFIG
from phasewatch.records import AlertKind, MessageId, VerdictKind
from phasewatch.stages.s5_act.respond import MESSAGE_IDS, PRIORITY

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "units"


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_catalog_has_one_entry_per_message_id_and_nothing_else() -> None:
    text = (UNITS / "phasewatch.catalog").read_text()
    ids = re.findall(r"^-- ([0-9a-f]{32})$", text, flags=re.M)
    assert sorted(ids) == sorted(MESSAGE_IDS.values())
    for entry in re.split(r"^-- [0-9a-f]{32}$", text, flags=re.M)[1:]:
        headers = entry.strip().split("\n\n", 1)[0]
        assert re.search(r"^Subject: .+", headers, flags=re.M)
        assert re.search(r"^Defined-By: phasewatch$", headers, flags=re.M)


def test_daemon_unit_restarts_but_never_retries_a_config_error() -> None:
    settings = unit_settings(UNITS / "phasewatch@.service")
    assert settings["RestartPreventExitStatus"] == [str(EX_CONFIG)]
    assert settings["Type"] == ["notify"]
    assert settings["User"] == ["phasewatch"]
    assert "DynamicUser" not in settings
    assert settings["ExecStart"] == ["/usr/local/bin/phasewatch run --config /etc/phasewatch/%i.yaml --instance %i"]
    # Back after any end but a config error (a clean exit included); `systemctl reload` checks the
    # config the daemon will read, as it will read it, then sends SIGHUP.
    assert settings["Restart"] == ["always"]
    assert settings["ExecReload"] == ["/usr/local/bin/phasewatch check-config --instance %i /etc/phasewatch/%i.yaml",
                                      "/bin/kill -HUP $MAINPID"]
    # It must see other users' /proc/<pid>/cmdline.
    assert settings.get("ProtectProc", ["default"]) == ["default"]
    assert "ProcSubset" not in settings


def test_daemon_unit_is_not_bound_to_the_watched_unit() -> None:
    settings = unit_settings(UNITS / "phasewatch@.service")
    for key in ("PartOf", "BindsTo", "Requires", "Requisite"):
        assert not any("%i" in value for value in settings.get(key, [])), key


def test_example_server_pulls_in_its_watchdog_by_the_doubled_name() -> None:
    settings = unit_settings(UNITS / "sglang-kimi.service")
    assert "phasewatch@sglang-kimi.service" in " ".join(settings["Wants"]).split()
    assert settings["KillMode"] == ["control-group"]


def test_polkit_rule_allows_the_user_to_restart_the_example_config_unit() -> None:
    rule = (UNITS / "polkit" / "50-phasewatch.rules").read_text()
    config = load_config(REPO / "config" / "phasewatch.yaml")
    assert f'"{config.unit}"' in rule
    assert 'subject.user == "phasewatch"' in rule
    assert 'action.lookup("verb") == "restart"' in rule


def test_sysusers_user_matches_the_unit_and_reads_the_journal() -> None:
    lines = [line.split() for line in (UNITS / "sysusers.d" / "phasewatch.conf").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines[0][:2] == ["u", "phasewatch"]
    assert ["m", "phasewatch", "systemd-journal"] in lines


def test_example_server_lifts_the_log_rate_limit_for_itself_with_a_finite_burst() -> None:
    # A unit's LogRateLimitBurst=0 is never passed to journald (the global limit stays): finite and
    # large, for the server unit only (tests/e2e/test_e2e_deb.py measures both).
    for path in (UNITS / "sglang-kimi.service", UNITS / "sglang-log-rate.conf"):
        settings = unit_settings(path)
        assert settings["LogRateLimitIntervalSec"] == ["30s"], path
        [burst] = settings["LogRateLimitBurst"]
        assert int(burst) >= 100_000, path
    assert "[Service]" in (UNITS / "sglang-log-rate.conf").read_text().splitlines()
    assert not (UNITS / "journald.conf.d").exists()


def test_tmpfiles_state_directory_belongs_to_the_sysusers_user() -> None:
    [entry] = [line.split() for line in (UNITS / "tmpfiles.d" / "phasewatch.conf").read_text().splitlines()
               if line and not line.startswith("#")]
    assert entry == ["d", "/var/lib/phasewatch", "0700", "phasewatch", "phasewatch", "-"]
    assert unit_settings(UNITS / "phasewatch@.service")["StateDirectory"] == ["phasewatch"]


def pyproject_floors() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in project["dependencies"]:
        name, _, floor = requirement.partition(">=")
        floors[name.strip().lower()] = floor.strip()
    return floors


def test_debian_package_depends_on_the_floors_of_pyproject() -> None:
    debian_names = {"systemd-python": "python3-systemd", "pystemd": "python3-pystemd", "httpx": "python3-httpx",
                    "prometheus-client": "python3-prometheus-client", "pyyaml": "python3-yaml"}
    control = (REPO / "debian" / "control").read_text()
    package = control[control.index("Package: phasewatch"):]
    depends = dict(re.findall(r"(python3-[a-z-]+) \(>= ([^)]+)\)", package))
    assert depends == {debian_names[name]: floor for name, floor in pyproject_floors().items()}
    assert "polkitd" in package
    # Debian 12's versions (the e2e test installs the .deb on them).
    assert pyproject_floors() == {"systemd-python": "235", "pystemd": "0.11", "httpx": "0.23",
                                  "pyyaml": "6.0", "prometheus-client": "0.16"}


def test_debian_changelog_names_the_version_of_pyproject() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    first = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    assert first.startswith(f"phasewatch ({version}) ")


def test_license_is_the_apache_license_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == {"text": "Apache-2.0"}


@pytest.mark.parametrize("kind", [*VerdictKind, *AlertKind], ids=str)
def test_every_kind_end_to_end_kind_message_id_catalog_docs(kind: str) -> None:
    """A kind of alert has its MESSAGE_ID (records.MessageId), the alert carries it, the catalog
    explains it, and docs/operations.md lists it with that id."""
    message_id = MessageId[kind.upper()]
    assert MESSAGE_IDS[kind] == message_id and kind in PRIORITY
    catalog = (UNITS / "phasewatch.catalog").read_text()
    entry = re.search(rf"^-- {message_id}$\n(.*?)(?=^-- |\Z)", catalog, flags=re.M | re.S)
    assert entry is not None and re.search(r"^Subject: .+", entry.group(1), flags=re.M)
    operations = (REPO / "docs" / "operations.md").read_text()
    assert re.search(rf"^\| {kind} \| `{message_id}` \| {PRIORITY[kind]} ", operations, flags=re.M), kind


def test_message_ids_name_every_kind_and_nothing_else() -> None:
    assert {m.name.lower() for m in MessageId} == {*VerdictKind, *AlertKind}


def test_the_debian_package_is_built_without_compiled_code() -> None:
    """debian/control says `Architecture: all`: debian/rules builds without the C journal reader
    (setup.py), so no arch-dependent .so ends up in it silently."""
    control = (REPO / "debian" / "control").read_text()
    assert "\nArchitecture: all\n" in control
    rules = (REPO / "debian" / "rules").read_text().splitlines()
    assert "export PHASEWATCH_PURE_PYTHON = 1" in rules
    assert "PHASEWATCH_PURE_PYTHON" in (REPO / "setup.py").read_text()


def test_receiver_socket_unit_hands_its_port_to_the_daemon_by_the_name_it_looks_for() -> None:
    from phasewatch.sources.receiver.listen_fds import RECEIVER_NAME

    settings = unit_settings(UNITS / "phasewatch-receiver@.socket")
    assert settings["Service"] == ["phasewatch@%i.service"]
    assert settings["FileDescriptorName"] == [RECEIVER_NAME]
    # The docs' port, on every address: PID 1 holds it before any user can.
    assert settings["ListenStream"] == ["9878"]
    assert "9878" in (REPO / "docs" / "multi-node.md").read_text()
    # Its connections are the socket unit's: the same loopback-only default as the service.
    service = unit_settings(UNITS / "phasewatch@.service")
    assert settings["IPAddressDeny"] == service["IPAddressDeny"] == ["any"]
    assert settings["IPAddressAllow"] == service["IPAddressAllow"]
    assert settings["WantedBy"] == ["sockets.target"]
    assert "phasewatch-receiver@.socket" in (REPO / "Makefile").read_text()
