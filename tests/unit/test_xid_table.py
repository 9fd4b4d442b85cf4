"""The XID table (profile/xid.yaml) and the driver's kernel line read (profile/xid_table.py)."""

from __future__ import annotations

import pytest
import yaml

from phasewatch.profile.xid_table import ACTIONS, BLOCKING, UNKNOWN, parse_table, parse_xid, pci_key, xid_table


def test_every_code_parses_with_a_known_action_and_the_table_names_its_source() -> None:
    table = xid_table()
    assert "Xid Catalog" in table.version and "NVSentinel" in table.version
    assert len(table.entries) >= 25
    for code, entry in table.entries.items():
        assert entry.code == code and entry.action in (*ACTIONS, UNKNOWN) and entry.meaning and entry.name


@pytest.mark.parametrize("code", [13, 31, 43, 45, 69])
def test_application_errors_never_block(code: int) -> None:
    entry = xid_table().entry(code)
    assert entry.application and not entry.blocks


# NVIDIA's Xid Catalog, Resolution Bucket (Immediate Action), as NVIDIA/NVSentinel's
# xiderrorsmapping.csv carries it: RESET_GPU (46, 62, 64, 95, 109, 119, 120, 140, 143),
# WORKFLOW_XID_48 (solo: RESET_GPU), RESTART_BM (79).
@pytest.mark.parametrize(("code", "action"), [(46, "reset_gpu"), (48, "reset_gpu"), (62, "reset_gpu"),
                                              (64, "reset_gpu"), (79, "reboot"), (95, "reset_gpu"),
                                              (109, "reset_gpu"), (119, "reset_gpu"), (120, "reset_gpu"),
                                              (140, "reset_gpu"), (143, "reset_gpu")])
def test_hardware_faults_block_with_the_catalogs_action(code: int, action: str) -> None:
    entry = xid_table().entry(code)
    assert entry.action == action and entry.action in BLOCKING and entry.blocks


# IGNORE (38, 63, 92, 121) and RESTART_APP (8, 94) in the same catalog.
@pytest.mark.parametrize(("code", "action"), [(92, "none"), (94, "restart_app"), (8, "restart_app"),
                                              (63, "none"), (38, "none"), (121, "none")])
def test_faults_the_application_restart_clears_do_not_block(code: int, action: str) -> None:
    entry = xid_table().entry(code)
    assert entry.action == action and not entry.blocks


def test_an_unknown_code_is_unknown_and_does_not_block() -> None:
    entry = xid_table().entry(9999)
    assert entry.action == UNKNOWN and not entry.blocks and "9999" in entry.meaning


def test_a_code_whose_catalog_action_is_a_workflow_we_do_not_decode_is_unknown_and_does_not_block() -> None:
    entry = xid_table().entry(74)  # WORKFLOW_NVLINK_ERR: the action depends on register bits
    assert entry.action == UNKNOWN and not entry.blocks
    table = parse_table(yaml.safe_load("xids: {74: {name: X, meaning: y, action: unknown, application: false}}"))
    assert table.entry(74).action == UNKNOWN and not table.entry(74).blocks


def test_codes_the_catalog_marks_unused_on_data_centre_gpus_are_not_listed() -> None:
    for code in (1, 9, 56, 57, 61, 123):
        assert xid_table().entry(code).action == UNKNOWN


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
