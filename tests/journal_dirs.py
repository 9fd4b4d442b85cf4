"""Real journal files for tests: the simulator's entries written by systemd-journal-remote."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path
from typing import Any, Iterable

import pytest

JOURNAL_REMOTE = next((p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
                       if os.path.exists(p)), None)


def export_bytes(entries: Iterable[dict[str, Any] | list[tuple[str, Any]]]) -> bytes:
    """Journal export format; fields holding control characters use the binary-safe form."""
    out = bytearray()
    for entry in entries:
        # (a list of pairs: a field may be given twice)
        for key, value in (entry.items() if isinstance(entry, dict) else entry):
            raw = bytes(value) if isinstance(value, list) else str(value).encode()
            if any(b < 32 and b != 9 for b in raw):
                out += key.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n"
            else:
                out += key.encode() + b"=" + raw + b"\n"
        out += b"\n"
    return bytes(out)


def require_journal_remote() -> str:
    if JOURNAL_REMOTE is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-journal-remote is missing in CI (scripts/setup.sh installs it)")
        pytest.skip("systemd-journal-remote not installed")
    return JOURNAL_REMOTE


def write_journal(directory: Path, entries: Iterable[dict[str, Any] | list[tuple[str, Any]]],
                  name: str = "remote") -> Path:
    """Append `entries` to `directory/NAME.journal` (a journal directory python-systemd can read)."""
    remote = require_journal_remote()
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([remote, "-o", str(directory / f"{name}.journal"), "-"], input=export_bytes(entries),
                   check=True, capture_output=True)
    return directory
