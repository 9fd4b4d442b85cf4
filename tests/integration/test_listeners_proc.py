"""sources/host/listeners.py on this machine's real /proc: the process listening on a port is named (for
the port_in_use remedy), a free port has no holder."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from phasewatch.sources.host.listeners import port_holders


def test_the_process_listening_on_a_port_is_named() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        comm = Path("/proc/self/comm").read_text().strip()
        assert port_holders([port]) == {port: f"{comm} (pid {os.getpid()})"}
    assert port_holders([port]) == {}  # closed: nobody holds it


def test_no_ports_asked_reads_nothing(tmp_path: Path) -> None:
    assert port_holders([], proc=tmp_path) == {}
    assert port_holders([0, 70000], proc=tmp_path) == {}
    assert port_holders([8000], proc=tmp_path) == {}  # no /proc/net there: nothing known
