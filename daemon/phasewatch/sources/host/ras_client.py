"""Edge: a client of NCCL's RAS socket, and the rank processes' environment that says where it is.

The protocol (NCCL src/ras/client_support.cc): newline-terminated commands over TCP, each answered
by a line; `CLIENT PROTOCOL 2` -> `SERVER PROTOCOL <n>`, `TIMEOUT <s>` -> `OK` (how long the RAS
thread waits for the other processes' data), `SET FORMAT json` -> `OK` (NCCL 2.28.7+; older ones
answer `ERROR: Unknown command ...` and keep the connection: the report then comes as text),
`STATUS` or `VERBOSE STATUS` -> the report, after which NCCL closes the connection.

Every query is bounded: one deadline for the whole exchange (connect, each read and write), and a
cap on the bytes read. Anything that goes wrong is an answer with `error` set, never an exception.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ...stages.s4_judge.ras_report import RasAddress, ras_address
from .listeners import port_holders

PROTOCOL = 2
QUERY_SECONDS = 2.0  # the whole exchange, connect to the report's last byte
REPORT_LIMIT = 4 << 20  # bytes of a report read at most (a 512-rank JSON report is about 300 KiB)
ENVIRON_LIMIT = 1 << 20


@dataclass(frozen=True)
class RasAnswer:
    address: str
    format: str | None = None  # "json" or "text" once the report was asked for
    report: str = ""
    transcript: tuple[tuple[str, str], ...] = ()  # (sent, answered) per command
    error: str | None = None
    truncated: bool = False
    seconds: float = 0.0
    server_protocol: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


class _Exchange:
    def __init__(self, sock: socket.socket, deadline: float, clock: Callable[[], float], limit: int) -> None:
        self.sock, self.deadline, self.clock, self.limit = sock, deadline, clock, limit
        self.buffer = b""

    def _left(self) -> float:
        left = self.deadline - self.clock()
        if left <= 0:
            raise TimeoutError("no answer within the query's time")
        return left

    def send(self, line: str) -> None:
        self.sock.settimeout(self._left())
        self.sock.sendall(line.encode() + b"\n")

    def line(self) -> str:
        while b"\n" not in self.buffer:
            if len(self.buffer) > 4096:
                raise ValueError("an answer line longer than 4096 bytes")
            self.sock.settimeout(self._left())
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def rest(self) -> tuple[bytes, bool]:
        """Up to EOF, the cap or the deadline (a deadline passed with some report read: what came)."""
        data = self.buffer
        while len(data) < self.limit:
            self.sock.settimeout(self._left())
            chunk = self.sock.recv(65536)
            if not chunk:
                return data, False
            data += chunk
        return data[:self.limit], True


def query(address: RasAddress, *, json: bool = True, verbose: bool = False, seconds: float = QUERY_SECONDS,
          limit: int = REPORT_LIMIT, clock: Callable[[], float] = time.monotonic) -> RasAnswer:
    """One STATUS exchange with the RAS server at `address`, within `seconds` in all."""
    start = clock()
    deadline = start + seconds
    transcript: list[tuple[str, str]] = []
    where = str(address)
    fmt: str | None = None
    protocol: str | None = None
    try:
        sock = socket.create_connection((address.host, address.port), timeout=max(deadline - clock(), 0.001))
    except OSError as exc:
        return RasAnswer(where, error=f"cannot connect: {_reason(exc)}", seconds=clock() - start)
    try:
        with sock:
            talk = _Exchange(sock, deadline, clock, limit)

            def ask(command: str) -> str:
                talk.send(command)
                answer = talk.line()
                transcript.append((command, answer))
                return answer

            hello = ask(f"CLIENT PROTOCOL {PROTOCOL}")
            if not hello.upper().startswith("SERVER PROTOCOL "):
                raise ValueError(f"not a RAS server: it answered {hello[:80]!r}")
            protocol = hello.split()[-1]
            # The RAS thread waits this long for the other processes' data (at least 1 s: NCCL's unit).
            wait = max(int(deadline - clock() - 0.5), 1)
            if ask(f"TIMEOUT {wait}").upper() != "OK":
                raise ValueError(f"TIMEOUT refused: {transcript[-1][1][:80]!r}")
            fmt = "text"
            if json:
                fmt = "json" if ask("SET FORMAT json").upper() == "OK" else "text"
            command = "VERBOSE STATUS" if verbose else "STATUS"
            talk.send(command)
            data, truncated = talk.rest()
            report = data.decode("utf-8", "replace")
            transcript.append((command, report))
            return RasAnswer(where, fmt, report, tuple(transcript), None, truncated, clock() - start, protocol)
    except (OSError, ValueError) as exc:
        return RasAnswer(where, fmt, "", tuple(transcript), _reason(exc), False, clock() - start, protocol)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "no answer within the query's time"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (no RAS listening: NCCL older than 2.24, RAS off, or no communicator yet)"
    return str(exc) or type(exc).__name__


def ras_port_holder(environment: Mapping[str, str], control_group: str | None,
                    proc: Path = Path("/proc")) -> str | None:
    """Who listens on the RAS port the unit's environment names, when not a process of the unit
    (sources/host/listeners.py); None: nobody, or the unit's own ranks."""
    address = ras_address(environment)
    if not address.enabled or address.problem is not None:
        return None
    holder = port_holders([address.port], proc).get(address.port)
    pid = re.search(r"\(pid (\d+)\)$", holder or "")
    if holder is None or pid is not None and control_group and _in_group(proc, int(pid.group(1)), control_group):
        return None
    return holder


def _in_group(proc: Path, pid: int, control_group: str) -> bool:
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return False
    return any((path := line.rpartition(":")[2]) == control_group or path.startswith(control_group.rstrip("/") + "/")
               for line in lines)


def read_environ(pid: int, proc: Path = Path("/proc"), limit: int = ENVIRON_LIMIT) -> dict[str, str] | None:
    """A process's environment (None: gone, or not ours to read: /proc/PID/environ needs the same
    user or CAP_SYS_PTRACE)."""
    try:
        with open(proc / str(pid) / "environ", "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return None
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def address_of(pids: list[int], proc: Path = Path("/proc"),
               unit_environment: Mapping[str, str] | None = None) -> tuple[RasAddress, str]:
    """The RAS address the unit's rank processes use (the first whose environment reads), and where
    that was read. When none reads (another user's processes: the shipped unit runs phasewatch as its
    own user without CAP_SYS_PTRACE), the unit's Environment= (D-Bus; what `init --ras-dropin` writes;
    an EnvironmentFile='s are not in it), else NCCL's default."""
    for pid in pids:
        environment = read_environ(pid, proc)
        if environment is not None:
            return ras_address(environment), f"the environment of pid {pid}"
    if unit_environment:
        return ras_address(unit_environment), "the unit's Environment= (no rank process's environment is readable)"
    return RasAddress(), "the default (no rank process's environment is readable)"
