"""NCCL RAS's status report, read. Pure: the report's text -> `RasReport`; the rank process's
environment -> the address its RAS answers on (`ras_address`).

NCCL (2.24+) runs a RAS thread in every process that made a communicator; `STATUS` asks it for each
communicator's ranks (PID, GPU, host, state, the collectives each rank has launched) and the ranks
it could not reach (src/ras/client_support.cc). Two shapes:

- JSON (`SET FORMAT json`, NCCL 2.28.7+): every rank of every communicator, with
  `collective_counts`, and `missing_ranks` (`unresponsive`, `considered_dead`). NCCL 2.28's writer
  leaves out the comma after a missing rank's `nvml_dev`: a document that does not load is loaded
  again with the commas that NCCL's line-per-key layout implies, and the report says so.
- text (any version): the summary table, then only the outliers: "Rank 5 has launched up to
  operation 1233 -- GPU 5 managed by process 4242 on node 10.0.0.5" under "Communicator ranks have
  different AllReduce operation counts" (the majority's count on "7 ranks have launched up to
  operation 1234"), missing ranks under "INCOMPLETE", unreachable processes under "DEAD".

What the text leaves out (the majority's ranks, communicators without trouble) is not there to read:
`RasComm.majority` holds the count the unnamed ranks are at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 28028
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


@dataclass(frozen=True)
class RasAddress:
    """Where a rank process's RAS answers (NCCL_RAS_ADDR, default localhost:28028); `enabled`
    false when its environment sets NCCL_RAS_ENABLE=0."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    enabled: bool = True
    problem: str | None = None  # NCCL_RAS_ADDR that does not read as host:port (NCCL fails its bind too)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def ras_address(environment: Mapping[str, str]) -> RasAddress:
    """The address from a process's (or a unit's) environment, as NCCL reads it."""
    enabled = environment.get("NCCL_RAS_ENABLE", "1").strip() != "0"
    text = environment.get("NCCL_RAS_ADDR")
    if text is None or not text.strip():
        return RasAddress(enabled=enabled)
    text = text.strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^\s:\[\]]+):(\d{1,5})", text)
    port = int(match.group(2) or match.group(4)) if match else 0
    if match is None or not 0 < port < 65536:
        return RasAddress(enabled=enabled, problem=f"NCCL_RAS_ADDR={text!r} is not host:port")
    return RasAddress(match.group(1) or match.group(3), port, enabled)


@dataclass(frozen=True)
class RasRank:
    """One rank that answered for its communicator."""

    rank: int
    pid: int | None
    host: str | None
    gpu: int | None  # CUDA device
    nvml_gpu: int | None
    counts: Mapping[str, int] = field(default_factory=dict)  # collective -> operations launched
    state: str = "running"  # running, init, finalize, abort, error


@dataclass(frozen=True)
class RasMissing:
    """A rank RAS has no data from: its process did not answer (`unresponsive`, maybe `dead`), or
    answered without this communicator (never made it, or destroyed it)."""

    rank: int
    pid: int | None
    host: str | None
    gpu: int | None
    nvml_gpu: int | None
    unresponsive: bool = True
    dead: bool = False


@dataclass(frozen=True)
class RasComm:
    hash: str
    size: int | None  # None: the text report does not say per communicator
    ranks: tuple[RasRank, ...] = ()
    missing: tuple[RasMissing, ...] = ()
    majority: Mapping[str, int] = field(default_factory=dict)  # text: the count the unnamed ranks are at


@dataclass(frozen=True)
class RasReport:
    format: str  # "json" or "text"
    nccl_version: str | None
    comms: tuple[RasComm, ...]
    dead_pids: tuple[int, ...] = ()  # text: processes RAS considers dead
    missing_pids: tuple[int, ...] = ()  # text: processes that sent no communicator data
    timeouts: int = 0
    notes: tuple[str, ...] = ()  # what the reading had to mend or could not read


class RasFormatError(ValueError):
    """A report that is neither NCCL's JSON nor its text."""


def parse_report(text: str) -> RasReport:
    """A STATUS answer, JSON or text, by its first character."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_json(stripped)
    if "Communicators" in text or text.startswith("NCCL version"):
        return parse_text(text)
    raise RasFormatError(f"not a RAS status report: {text[:80]!r}")


# -- JSON ------------------------------------------------------------------------------------------

# A line that ends a value (a number, true/false/null, a string, a closing brace or bracket) followed
# by a line that opens the next key: NCCL writes a key a line, so the comma belongs between them.
_MISSING_COMMA = re.compile(r'(-?\d+|true|false|null|"|\}|\])[ \t]*\n([ \t]*")')


def parse_json(text: str) -> RasReport:
    notes: list[str] = []
    try:
        document = json.loads(text)
    except json.JSONDecodeError as first:
        try:
            document = json.loads(_MISSING_COMMA.sub(r"\1,\n\2", text))
        except json.JSONDecodeError:
            raise RasFormatError(f"RAS JSON does not load: {first}") from None
        notes.append("mended missing commas in NCCL's JSON (NCCL 2.28's missing_ranks writer)")
    if not isinstance(document, dict):
        raise RasFormatError("RAS JSON is not an object")
    comms = []
    for item in _list(document.get("communicators")):
        if not isinstance(item, dict):
            continue
        ranks = tuple(_json_rank(r) for r in _list(item.get("ranks")) if isinstance(r, dict))
        missing = tuple(_json_missing(m) for m in _list(item.get("missing_ranks")) if isinstance(m, dict))
        comms.append(RasComm(str(item.get("hash", "?")), _int(item.get("size")), ranks, missing))
    ras = _dict(document.get("ras"))
    version = document.get("nccl_version")
    return RasReport("json", str(version) if version is not None else None, tuple(comms),
                     timeouts=_int(ras.get("timeouts_count")) or 0, notes=tuple(notes))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pid(value: Any) -> int | None:
    pid = _int(value)
    return pid if pid is not None and pid > 0 else None  # NCCL writes -1 for a process it cannot name


def _host(value: Any) -> str | None:
    return value if isinstance(value, str) and value and value != "unknown" else None


def _json_rank(item: dict[str, Any]) -> RasRank:
    status, counts = _dict(item.get("status")), _dict(item.get("collective_counts"))
    if status.get("abort_flag"):
        state = "abort"
    elif status.get("finalize_called") or status.get("destroy_flag"):
        state = "finalize"
    elif status.get("init_state", 0) not in (0, 7):  # ncclSuccess, ncclInProgress
        state = "error"
    elif status.get("async_error", 0) not in (0, 7):
        state = "error"
    else:
        state = "running"
    return RasRank(_int(item.get("rank")) or 0, _pid(item.get("pid")), _host(item.get("host")),
                   _int(item.get("cuda_dev")), _int(item.get("nvml_dev")),
                   {str(k): v for k, v in counts.items() if _int(v) is not None}, state)


def _json_missing(item: dict[str, Any]) -> RasMissing:
    status = _dict(item.get("status"))
    return RasMissing(_int(item.get("rank")) or 0, _pid(item.get("pid")), _host(item.get("host")),
                      _int(item.get("cuda_dev")), _int(item.get("nvml_dev")),
                      bool(status.get("unresponsive", True)), bool(status.get("considered_dead", False)))


# -- text ------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^NCCL version (\S+)")
_COMM = re.compile(r"^#\d+-\d+ \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)")
_DIFFERENT = re.compile(r"^ {2}Communicator ranks have different (\w+) operation counts")
_MANY = re.compile(r"^ {2}(\d+) ranks have (?:launched up to operation (\d+)|not launched any operations)")
_ONE = re.compile(r"^ {2}Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)"
                  r" -- (?:GPU (\d+)(?: \(NVML (\d+)\))? managed by process (\d+) on node (\S*)|\[process)")
_LISTED = re.compile(r"^ {2}Rank (\d+) -- (?:GPU (\d+)(?: \(NVML (\d+)\))? managed by process (\d+) on node (\S*)"
                     r"|\[process)")
_PROCESS = re.compile(r"^ {2}Process (\d+) on node (\S*) managing GPUs? ")
_TIMEOUTS = re.compile(r"^ {2}Encountered (\d+) communication timeout")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+([\d-]+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+(\S+)\s*$")


@dataclass
class _TextComm:
    hash: str
    ranks: dict[int, RasRank] = field(default_factory=dict)
    missing: list[RasMissing] = field(default_factory=list)
    majority: dict[str, int] = field(default_factory=dict)


def parse_text(text: str) -> RasReport:
    version = None
    comms: dict[str, _TextComm] = {}
    comm: _TextComm | None = None
    section = ""  # "Errors" or "Warnings", with the block's kind
    collective: str | None = None
    many: int | None = None  # the count of the "N ranks have ..." line above a list of ranks
    dead: list[int] = []
    missing_pids: list[int] = []
    timeouts = 0
    sizes: list[int] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following.startswith("===") and line.strip():
            section, comm, collective = line.strip(), None, None
            continue
        if (match := _VERSION.match(line)) is not None:
            version = match.group(1)
        elif (match := _TABLE_ROW.match(line)) is not None and section.startswith("Communicators"):
            sizes.append(int(match.group(5)))
        elif line in ("INCOMPLETE", "DEAD"):
            section, comm = f"Errors {line}", None
        elif (match := _COMM.match(line)) is not None:
            comm = comms.setdefault(match.group(1), _TextComm(f"0x{match.group(1).lstrip('0') or '0'}"))
            section, collective, many = f"comm {match.group(2)}", None, None
        elif (match := _TIMEOUTS.match(line)) is not None:
            timeouts = int(match.group(1))
        elif (match := _PROCESS.match(line)) is not None:
            (dead if section == "Errors DEAD" else missing_pids).append(int(match.group(1)))
        elif comm is not None and (match := _DIFFERENT.match(line)) is not None:
            collective, many = match.group(1), None
        elif comm is not None and collective is not None and (match := _MANY.match(line)) is not None:
            many = int(match.group(2) or 0)
            comm.majority.setdefault(collective, many)  # the most frequent count comes first
        elif comm is not None and collective is not None and (match := _ONE.match(line)) is not None:
            _count(comm, int(match.group(1)), collective, int(match.group(2) or 0), match.groups()[2:])
        elif comm is not None and (match := _LISTED.match(line)) is not None:
            rank, rest = int(match.group(1)), match.groups()[1:]
            if section == "comm INCOMPLETE":
                comm.missing.append(RasMissing(rank, *_gpu_pid_host(rest)))
            elif collective is not None and many is not None:
                _count(comm, rank, collective, many, rest)
    size = sizes[0] if len(sizes) == 1 else None  # one group of communicators: its size is theirs
    for c in comms.values():  # a missing rank whose process is under DEAD is dead
        c.missing = [replace(m, dead=m.pid in dead) for m in c.missing]
    return RasReport("text", version, tuple(RasComm(c.hash, size, tuple(c.ranks.values()), tuple(c.missing),
                                                    dict(c.majority)) for c in comms.values()),
                     tuple(dead), tuple(missing_pids), timeouts)


def _gpu_pid_host(groups: tuple[str | None, ...]) -> tuple[int | None, str | None, int | None, int | None]:
    gpu, nvml, pid, host = groups[0], groups[1], groups[2], groups[3]
    cuda = int(gpu) if gpu is not None else None
    return (int(pid) if pid is not None else None, host or None, cuda,
            int(nvml) if nvml is not None else cuda)


def _count(comm: _TextComm, rank: int, collective: str, count: int, groups: tuple[str | None, ...]) -> None:
    pid, host, gpu, nvml = _gpu_pid_host(groups)
    known = comm.ranks.get(rank)
    counts = {**(known.counts if known else {}), collective: count}
    comm.ranks[rank] = RasRank(rank, pid if pid is not None else (known.pid if known else None),
                               host or (known.host if known else None),
                               gpu if gpu is not None else (known.gpu if known else None),
                               nvml if nvml is not None else (known.nvml_gpu if known else None), counts)
