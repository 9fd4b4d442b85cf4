"""vLLM: record prefixes, process names, launch arguments and the ranks they promise.

A vLLM line is `[wrapper] [(Process pid=N) ...] LEVEL MM-DD HH:MM:SS [file.py:line] message`:
- the wrapper is whatever ran vLLM (docker compose `svc  | `, TorchServe's log4j line, a CI time
  stamp, a k9s frame) and is skipped;
- process tags name the process that wrote the line, the innermost last (Ray and Ray Serve nest
  them): `(APIServer pid=1)`, `(EngineCore_DP0 pid=7)`, `(Worker_TP3 pid=9)`,
  `(Worker_DP0_TP3_EP3 pid=9)`, `(VllmWorker rank=5 pid=9)`, `(VllmWorkerProcess pid=9)`,
  `(RayWorkerWrapper pid=9, ip=10.0.0.2)`; a line may carry tags and no header (a tqdm bar's
  newline, Python's own `Process EngineCore_DP0:` traceback, uvicorn's `INFO:` lines);
- the header has no year (`INFO 06-02 11:03:11`); V0 wrote `model_runner.py:732]` without the
  opening bracket. A logged traceback repeats the whole prefix on every line.

Ranks: a worker tag with numbers is that rank (`Worker_DP0_TP3` -> `DP0 TP3`, `VllmWorker rank=5`
-> `TP5`). V0 workers and Ray actors carry only a PID: they are ranks named `pid<N>` (`@ip` for
another node), and the untagged driver in the same log is TP0 (an untagged header line is TP0
while the log shows no numbered worker tag, else a coordinator's). An engine core (`EngineCore_DP1`)
holds the GPU itself when no worker tag appears (one GPU per engine): then it is `DP1` (`TP0` for a
bare `EngineCore`); with workers it is a coordinator, like the API server (`main`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..prefixes import Prefix, bounded_int, canonical_rank, epoch, rank_number
from ..records import MAIN
from . import Engine
from ._json_logs import text_of_json_line

if TYPE_CHECKING:
    from . import ServerInfo

_NAME = r"[A-Za-z_][\w:.-]{0,120}?"
_IP = r"[0-9a-fA-F.:]{1,45}"
TAG_RE = re.compile(r"\((?:(?P<name>" + _NAME + r")(?: rank=(?P<rank>\d{1,6}))? )?pid=(?P<pid>\d{1,10})"
                    r"(?:, ip=(?P<ip>" + _IP + r"))?\)")
TAGS_RE = re.compile(r"(?:\((?:" + _NAME + r"(?: rank=\d{1,6})? )?pid=\d{1,10}(?:, ip=" + _IP + r")?\) ?)+")
HEADER_RE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d{1,6})? "
    r"\[?(?P<file>[\w./-]{1,200}\.py):(?P<line>\d{1,7})\] ?"
)
# Where a prefix may start: tags or a header, at the start of the segment or after a wrapper's
# separator (space, `|`, `]`, `-`, a box-drawing bar).
START_RE = re.compile(
    r"(?:^|(?<=[\s|\]\-\u2502]))(?:\((?:[A-Za-z_][\w:.-]{0,120}?(?: rank=\d{1,6})? )?pid=\d"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d)"
)
ISO_YEAR_RE = re.compile(r"(?<!\d)(?P<year>(?:19|20)\d\d)-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d")
WORKER_NAME_RE = re.compile(r"^Worker((?:_(?:DP|PP|TP|EP)\d{1,6})+)$")
ENGINE_CORE_RE = re.compile(r"^EngineCore(?:_(?:DP)?(?P<dp>\d{1,6}))?$")
ANONYMOUS_WORKERS = frozenset({"VllmWorkerProcess", "RayWorkerWrapper", "RayWorkerProc", "Worker", None})
# Titles vLLM (>= 0.11) gives its processes: VLLM::Worker_TP3 (the prefix is VLLM_PROCESS_NAME_PREFIX).
TITLE_RE = re.compile(r"^[\w.-]{1,64}::Worker((?:_(?:DP|PP|TP|EP)\d{1,6})+)\b")
_SURE_RE = re.compile(
    r"\((?:APIServer|ApiServer_\d+|EngineCore(?:_DP\d+|_\d+)?|Worker_(?:DP|PP|TP)\d+\w*|VllmWorker(?:Process)?"
    r"|RayWorkerWrapper)(?: rank=\d+)? pid=\d+|vLLM API server version|Initializing an? (?:V1 )?LLM engine \(v"
)


def _tag_rank(name: str | None, rank: str | None, pid: str, ip: str | None) -> tuple[str | None, str | None, bool]:
    """(rank, untagged_rank, anonymous) that one process tag names."""
    if rank is not None and name is not None and name.startswith("VllmWorker"):
        number = rank_number(rank)
        return (None if number is None else f"TP{number}"), None, False
    worker = WORKER_NAME_RE.match(name or "")
    if worker:
        return canonical_rank(worker.group(1).replace("_", " ")), None, False
    if name in ANONYMOUS_WORKERS:
        return f"pid{bounded_int(pid, MAX_PID_DIGITS)}" + (f"@{ip}" if ip else ""), None, True
    core = ENGINE_CORE_RE.match(name or "")
    if core:
        dp = core.group("dp")
        number = rank_number(dp) if dp is not None else None
        return None, ("TP0" if number is None else f"DP{number}"), False
    return None, MAIN, False


MAX_PID_DIGITS = 10


def _prefix_at(segment: str, start: int, dated_from: int) -> Prefix | None:
    """The prefix (tags, then a header) that starts at `start`, or None; a wrapper's date is looked
    for from `dated_from` (the end of the previous prefix: each byte is read once)."""
    position = start
    rank: str | None = None
    untagged: str | None = None
    anonymous = False
    process: int | None = None
    names: list[str] = []
    tags = TAGS_RE.match(segment, position)
    core = False
    if tags:
        for tag in TAG_RE.finditer(segment, tags.start(), tags.end()):
            names.append(tag.group("name") or "")
            # The innermost process wrote the line: the last tag that says anything wins.
            tag_rank, tag_untagged, tag_anonymous = _tag_rank(tag.group("name"), tag.group("rank"),
                                                              tag.group("pid"), tag.group("ip"))
            core = core or ENGINE_CORE_RE.match(tag.group("name") or "") is not None
            if tag_rank is not None:
                rank, untagged, anonymous = tag_rank, None, tag_anonymous
                process = bounded_int(tag.group("pid"), MAX_PID_DIGITS)
            elif rank is None or tag_untagged != MAIN:
                if rank is None:
                    untagged = tag_untagged if untagged in (None, MAIN) else untagged
        position = tags.end()
    header = HEADER_RE.match(segment, position)
    if header is None and not tags:
        return None
    dated = [m.group("year") for m in ISO_YEAR_RE.finditer(segment, dated_from, start)]  # wrappers' dates
    year = int(dated[-1]) if dated else None
    if header is None:
        # Tags only: the message is someone else's text (a bar's newline, multiprocessing, uvicorn).
        following = ISO_YEAR_RE.match(segment, position)
        year = int(following.group("year")) if following else year
        return Prefix(start, position, rank, None, year=year, untagged_rank=untagged, anonymous=anonymous,
                      engine_core=core, process_pid=process)
    if not tags:
        # No process tag: V0's driver or a one-process engine (then TP0), or beside numbered workers
        # the engine core or API server of 0.8-0.10, which tagged only its workers (then main).
        untagged = "TP0"
    return Prefix(start, header.end(), rank, None, time_only=header.group("time"), month_day=header.group("md"),
                  year=year, untagged_rank=untagged, anonymous=anonymous, engine_core=core, process_pid=process,
                  header=f"{' '.join(names)} {header.group('level')} {header.group('file')}:{header.group('line')}")


# A line of whoever launched vLLM, dated with its year (GPUStack, TorchServe's frontend): the launcher's
# record (the main process); its year dates the vLLM lines after it.
DATED_LINE_RE = re.compile(r"^\[?(?P<date>(?P<year>(?:19|20)\d\d)-[01]\d-[0-3]\d)[T ](?P<time>[0-2]\d:[0-5]\d:[0-5]\d)")


def find_prefixes(segment: str) -> list[Prefix]:
    """Every vLLM prefix in `segment`: the first one anywhere a prefix may start, later ones only
    when they carry a header (a tag-like text inside a message is not a new record)."""
    if "pid=" not in segment and "-" not in segment:
        return []
    found = _find(segment)
    if not found:
        dated = DATED_LINE_RE.match(segment)
        if dated:
            # Its own clock, read as UTC like every prefix (a zone suffix is not applied).
            ts = epoch(dated.group("date"), dated.group("time"), None)
            return [Prefix(0, 0, None, ts, year=int(dated.group("year")), untagged_rank=MAIN)]
    return found


def _find(segment: str) -> list[Prefix]:
    found: list[Prefix] = []
    position = 0
    while position < len(segment):
        start = START_RE.search(segment, position)
        if start is None:
            break
        prefix = _prefix_at(segment, start.start(), found[-1].end if found else 0)
        if prefix is None or (found and prefix.header is None):
            position = start.start() + 1
            continue
        found.append(prefix)
        position = max(prefix.end, start.start() + 1)
    return found


def rank_from_title(argv0: str) -> str | None:
    """`VLLM::Worker_DP0_TP3` -> `DP0 TP3`; None for other processes (the engine core and the API
    server are not ranks by title: with workers they coordinate)."""
    match = TITLE_RE.match(argv0)
    return canonical_rank(match.group(1).replace("_", " ")) if match else None


_ARG_ALIASES = (
    ("tp_size", ("tensor_parallel_size",)),
    ("pp_size", ("pipeline_parallel_size",)),
    ("dp_size", ("data_parallel_size",)),
    ("nnodes", ("nnodes",)),
    ("node_rank", ("node_rank",)),
    ("model_path", ("model",)),
    ("host", ("host",)),
    ("port", ("port",)),
    ("enable_expert_parallel", ("enable_expert_parallel",)),
    # read for remedies (stages/s4_judge/remedies.py)
    *((name, (name,)) for name in ("gpu_memory_utilization", "max_num_seqs", "max_model_len", "enforce_eager",
                                   "cuda_graph_sizes", "max_num_batched_tokens", "tokenizer", "kv_cache_dtype",
                                   "quantization", "distributed_executor_backend")),
)
_VALUE = r"('[^']*'|\"[^\"]*\"|[^,)}\s]+)"
VERSION_RE = re.compile(r"LLM engine \(v(?P<v>[\w.+-]+)\)|vLLM API server version (?P<w>[\w.+-]+)")
SPEC_METHOD_RE = re.compile(r"speculative_config=\S*?(?:method|model)['\"]?\s*[=:]\s*['\"]?(?P<m>[\w./-]+)")


def parse_server_args(message: str) -> dict[str, str]:
    """The launch arguments in `non-default args: {...}`, `Initializing a V1 LLM engine (v..) with
    config: ...`, V0's `args: Namespace(...)` and `vLLM API server version X`, in the common keys."""
    found: dict[str, str] = {"engine": "vllm"}
    for key, names in _ARG_ALIASES:
        for name in names:
            match = re.search(r"[(,{\s]'?" + name + r"'?\s*[=:]\s*" + _VALUE, message)
            if match:
                found[key] = match.group(1).strip("'\"")
                break
    version = VERSION_RE.search(message)
    if version:
        found["version"] = version.group("v") or version.group("w")
    spec = SPEC_METHOD_RE.search(message)
    if spec and spec.group("m") != "None":
        found["speculative_algorithm"] = spec.group("m")
    if found.get("enable_expert_parallel") == "True":
        tp = int(found.get("tp_size", "1")) if found.get("tp_size", "1").isdigit() else 1
        dp = int(found.get("dp_size", "1")) if found.get("dp_size", "1").isdigit() else 1
        found["ep_size"] = str(tp * dp)
    return found


def expected_ranks(server: ServerInfo) -> tuple[str, ...]:
    """The worker ranks (`Worker_DP0_TP3_EP3` naming) of a one-node engine of vLLM >= 0.11. None
    for older versions (V0's workers carry no rank), one GPU per engine core (its label depends on
    the version) or several nodes (which ranks are local is not logged)."""
    if server.tp * server.pp <= 1 or server.nnodes > 1 or not _numbered_workers(server.version):
        return ()
    labels = []
    for dp in range(server.dp):
        for pp in range(server.pp):
            for tp in range(server.tp):
                tags = [f"DP{dp}"] if server.dp > 1 else []
                tags += [f"PP{pp}"] if server.pp > 1 else []
                tags += [f"TP{tp}"] if server.tp > 1 else []
                tags += [f"EP{dp * server.tp + tp}"] if server.ep > 1 else []
                labels.append(" ".join(tags))
    return tuple(labels)


def _numbered_workers(version: str | None) -> bool:
    """From 0.11 on (V0 removed) every worker's tag carries its rank; before, V0's did not."""
    numbers = re.match(r"(\d+)\.(\d+)", version or "")
    return numbers is not None and (int(numbers.group(1)), int(numbers.group(2))) >= (0, 11)


def detect(line: str) -> int:
    if _SURE_RE.search(line) or '"vllm_process_name"' in line:
        return 2
    return 1 if HEADER_RE.search(line) else 0


ENGINE = Engine("vllm", find_prefixes, rank_from_title, parse_server_args, expected_ranks, detect,
                rewrite=text_of_json_line)
