"""The XID table (data/xid.yaml) and the driver's kernel line read (xid_table.py)."""

from __future__ import annotations

import pytest
import yaml

from phasewatch.xid_table import ACTIONS, BLOCKING, UNKNOWN, parse_table, parse_xid, pci_key, xid_table


def test_every_code_parses_with_a_known_action_and_the_table_names_its_source() -> None:
    table = xid_table()
    assert "Xid" in table.version and "R57" in table.version
    assert len(table.entries) >= 25
    for code, entry in table.entries.items():
        assert entry.code == code and entry.action in ACTIONS and entry.meaning and entry.name


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_errors_never_block(code: int) -> None:
    entry = xid_table().entry(code)
    assert entry.application and not entry.blocks


@pytest.mark.parametrize(("code", "action"), [(48, "reset_gpu"), (63, "reset_gpu"), (64, "drain"),
                                              (74, "reset_gpu"), (79, "reboot"), (95, "reset_gpu"),
                                              (119, "reset_gpu"), (120, "reset_gpu")])
def test_hardware_faults_block_with_the_catalogs_action(code: int, action: str) -> None:
    entry = xid_table().entry(code)
    assert entry.action == action and entry.action in BLOCKING and entry.blocks


@pytest.mark.parametrize(("code", "action"), [(92, "none"), (94, "restart_app"), (8, "restart_app")])
def test_faults_the_application_restart_clears_do_not_block(code: int, action: str) -> None:
    entry = xid_table().entry(code)
    assert entry.action == action and not entry.blocks


def test_an_unknown_code_is_unknown_and_does_not_block() -> None:
    entry = xid_table().entry(9999)
    assert entry.action == UNKNOWN and not entry.blocks and "9999" in entry.meaning


def test_xid_154_takes_the_recovery_action_its_line_names() -> None:
    text = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    assert xid_table().entry(154, text).action == "reset_gpu"
    assert xid_table().entry(154, "from 0x0 (None) to 0x2 (Node Reboot Required)").action == "reboot"
    assert xid_table().entry(154, "garbled").action == "none"


def test_the_drivers_line_is_read() -> None:
    line = parse_xid("NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
    assert line is not None
    assert (line.pci, line.code, line.pid, line.name) == ("0000:3b:00", 79, 4242, "python3")
    assert "fallen off the bus" in line.text
    old = parse_xid("NVRM: Xid (PCI:0000:0A:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0)")
    assert old is not None and (old.pci, old.code, old.pid) == ("0000:0a:00", 13, None)
    assert parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 550.54.15") is None
    assert parse_xid("Xid 79 without the driver's form") is None


def test_pci_addresses_of_nvml_and_the_driver_are_one_key() -> None:
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == "0000:3b:00"
    assert pci_key("not a bus id") is None


def test_a_broken_table_names_the_code_and_key() -> None:
    with pytest.raises(ValueError, match=r"xids\.79\.action"):
        parse_table(yaml.safe_load("xids: {79: {name: X, meaning: y, action: explode, application: false}}"))
    with pytest.raises(ValueError, match=r"xids\.13\.application"):
        parse_table(yaml.safe_load("xids: {13: {name: X, meaning: y, action: none, application: maybe}}"))
