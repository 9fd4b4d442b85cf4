"""NVIDIA's XID codes as data (profile/xid.yaml: meaning and recommended action of each, from the
Xid catalog it names) and the driver's kernel line read: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234,
name=python3, GPU has fallen off the bus.` -> XidLine(pci="0000:3b:00", code=79, ...).

Actions: none, restart_app, reset_gpu, reboot, drain; `unknown` for a code the table lacks or one
whose catalog action phasewatch cannot decide (a workflow). A GPU whose action is reset_gpu, reboot
or drain must not be restarted onto (BLOCKING); `unknown` never blocks."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Mapping

import yaml

ACTIONS = ("none", "restart_app", "reset_gpu", "reboot", "drain")
UNKNOWN = "unknown"
BLOCKING = frozenset({"reset_gpu", "reboot", "drain"})
# What to do, said to an operator (the remedy of a gpu_fault verdict and of the restart gate).
ACTION_WORDS = {
    "none": "nothing for the GPU (informational)",
    "restart_app": "restart the server; the GPU is fine",
    "reset_gpu": "reset the GPU (stop the unit, then `nvidia-smi -r -i <gpu>`) or reboot the node, then start "
                 "the unit again yourself; phasewatch does not restart onto it",
    "reboot": "reboot the node (the GPU cannot be reset while it is off the bus); phasewatch does not restart "
              "onto it",
    "drain": "take the node out of service and contact NVIDIA support (RMA); do not restart onto this GPU",
    UNKNOWN: "look the XID up in NVIDIA's Xid catalog",
}
# NVML's GPU recovery action (nvmlDeviceGetFieldValues NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) and
# XID 154's "(GPU Reset Required)" words, in phasewatch's actions.
RECOVERY_ACTIONS: Mapping[int, str] = {0: "none", 1: "reset_gpu", 2: "reboot", 3: "drain", 4: "reset_gpu"}
RECOVERY_WORDS = {"none": "none", "gpu reset required": "reset_gpu", "node reboot required": "reboot",
                  "drain p2p": "drain", "drain and reset": "reset_gpu"}

XID_RE = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2})(?:\.\d)?\): "
                    r"(?P<code>\d{1,5})\b,?\s*(?P<rest>.{0,400})")
PID_RE = re.compile(r"\bpid=(?P<pid>\d{1,10})")
NAME_RE = re.compile(r"\bname=(?P<name>[^,]{1,64})")
RECOVERY_RE = re.compile(r"to 0x[0-9a-fA-F]+ \((?P<words>[A-Za-z0-9 ]{1,40})\)")


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str
    meaning: str
    action: str
    application: bool

    @property
    def blocks(self) -> bool:
        return self.action in BLOCKING and not self.application


@dataclass(frozen=True)
class XidLine:
    """One XID the driver logged: the GPU's PCI address (`0000:3b:00`, lower case), the code, the
    process named, and the text after the code."""

    pci: str
    code: int
    pid: int | None
    name: str | None
    text: str


@dataclass(frozen=True)
class XidTable:
    version: str
    entries: Mapping[int, XidEntry]

    def entry(self, code: int, text: str = "") -> XidEntry:
        """The code's entry; 154 with the action its line names; a code not listed is `unknown`."""
        found = self.entries.get(code)
        if found is None:
            return XidEntry(code, "UNKNOWN", f"XID {code} (not in {self.version})", UNKNOWN, False)
        if code == 154:
            words = RECOVERY_RE.search(text)
            action = RECOVERY_WORDS.get(words.group("words").strip().lower()) if words else None
            if words is not None and action is not None:
                return XidEntry(code, found.name, f"{found.meaning}: {words.group('words')}", action, False)
        return found


def pci_key(address: str) -> str | None:
    """`00000000:3B:00.0` (NVML), `0000:3b:00` (the driver's line) -> `0000:3b:00`: domain, bus, device."""
    match = re.fullmatch(r"\s*([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\s*", address)
    if match is None:
        return None
    domain, bus, device = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def parse_xid(message: str) -> XidLine | None:
    """The XID a driver's kernel line reports; None for any other line."""
    match = XID_RE.search(message)
    if match is None:
        return None
    pci = pci_key(match.group("pci"))
    if pci is None:
        return None
    rest = match.group("rest").strip()
    pid = PID_RE.search(rest)
    name = NAME_RE.search(rest)
    return XidLine(pci, int(match.group("code")), int(pid.group("pid")) if pid else None,
                   name.group("name").strip() if name else None, rest)


def parse_table(document: object) -> XidTable:
    """profile/xid.yaml's document checked: ValueError naming the code and key that is wrong."""
    if not isinstance(document, dict) or not isinstance(document.get("xids"), dict):
        raise ValueError("expected a mapping with `version` and `xids`")
    entries = {}
    for code, row in document["xids"].items():
        if not isinstance(code, int) or code <= 0:
            raise ValueError(f"xids: {code!r} is not an XID code (a positive integer)")
        if not isinstance(row, dict) or set(row) != {"name", "meaning", "action", "application"}:
            raise ValueError(f"xids.{code}: expected the keys name, meaning, action, application")
        if row["action"] not in (*ACTIONS, UNKNOWN):
            raise ValueError(f"xids.{code}.action: {row['action']!r} is not one of {', '.join((*ACTIONS, UNKNOWN))}")
        if not isinstance(row["application"], bool):
            raise ValueError(f"xids.{code}.application: expected true or false")
        entries[code] = XidEntry(code, str(row["name"]), str(row["meaning"]), row["action"], row["application"])
    return XidTable(str(document.get("version", "")), entries)


@functools.cache
def xid_table() -> XidTable:
    """The packaged table (read once)."""
    text = resources.files("phasewatch").joinpath("profile", "xid.yaml").read_text(encoding="utf-8")
    return parse_table(yaml.safe_load(text))
