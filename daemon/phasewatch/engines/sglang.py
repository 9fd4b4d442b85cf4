"""SGLang: record prefixes `[2026-02-22 23:59:15 DP0 TP3]` (the default grammar of stages/s1_read/lines.py),
scheduler titles `sglang::scheduler_DP0_TP3`, `server_args=ServerArgs(...)`, and the scheduler ranks
its parallelism promises."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..prefixes import Prefix, canonical_rank, epoch, rank_number
from . import Engine

if TYPE_CHECKING:
    from . import ServerInfo

_TAG = r"(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+"
# [2026-02-22 23:59:15 DP0 TP3], with optional .mmm; [12:01:02 TP3] (2024); [gpu_id=3], [gpu=3] (2024).
PREFIX_RE = re.compile(
    r"\[(?:(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?P<ms>\.\d{3})?"
    r"(?P<tags>(?: " + _TAG + r")*)"
    r"|(?P<stime>\d{2}:\d{2}:\d{2})(?P<stags>(?: " + _TAG + r")+)"
    r"|gpu(?:_id)?=(?P<gpu>\d+))\] ?"
)
# v0.1 (2024) router era: "Rank 1: load weight begin." at the start of a line.
LEGACY_RANK_RE = re.compile(r"^Rank (?P<n>\d+): ")
TITLE_RE = re.compile(r"^sglang::scheduler((?:_(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)")
SERVER_ARG_KEYS = ("tp_size", "dp_size", "pp_size", "ep_size", "nnodes", "node_rank", "enable_dp_attention",
                   "speculative_algorithm", "model_path", "speculative_draft_model_path", "cuda_graph_max_bs",
                   "cuda_graph_bs", "moe_dp_size", "attn_cp_size", "version", "host", "port",
                   "watchdog_timeout", "soft_watchdog_timeout", "dist_timeout", "disaggregation_mode",
                   # read for remedies (stages/s4_judge/remedies.py)
                   "mem_fraction_static", "max_running_requests", "chunked_prefill_size", "max_total_tokens",
                   "context_length", "dist_init_addr", "disable_cuda_graph", "tokenizer_path", "kv_cache_dtype",
                   "speculative_num_steps", "enable_torch_compile", "quantization", "cuda_graph_max_bs_decode")
_SURE_RE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: (?:DP|PP|TP|EP)\d+)*\] |server_args=")


def find_prefixes(segment: str) -> list[Prefix]:
    """SGLang's prefixes in `segment`: where each is and the rank and time it names."""
    found: list[Prefix] = []
    if "[" in segment:
        for match in PREFIX_RE.finditer(segment):
            date, time, ms, tags = match.group("date", "time", "ms", "tags")
            if date:
                found.append(Prefix(match.start(), match.end(), canonical_rank(tags or ""), epoch(date, time, ms),
                                    date=date))
            elif match.group("stime"):
                found.append(Prefix(match.start(), match.end(), canonical_rank(match.group("stags")), None,
                                    time_only=match.group("stime")))
            else:
                gpu = rank_number(match.group("gpu"))
                found.append(Prefix(match.start(), match.end(), None if gpu is None else f"TP{gpu}", None))
    if not found:
        legacy = LEGACY_RANK_RE.match(segment)
        if legacy:
            number = rank_number(legacy.group("n"))
            found.append(Prefix(0, legacy.end(), None if number is None else f"TP{number}", None))
    return found


# The dated form of PREFIX_RE alone, on bytes, anchored at the line's start (the catch-up fast path).
FAST_PREFIX_RE = re.compile(
    rb"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(\.\d{3})?((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?")
_FAST_MEMO: dict[bytes, Prefix] = {}
# FAST_PREFIX_RE's HH:MM:SS: `[YYYY-MM-DD ` is 12 bytes (Engine.run_time_digits)
TIME_DIGITS = (12, 20)


def fast_prefix(message: bytes) -> Prefix | None:
    """The dated prefix at the start of `message`, as `find_prefixes` finds it (PREFIX_RE tries its
    dated form first); every prefix holds a '[' (PREFIX_MARKS)."""
    match = FAST_PREFIX_RE.match(message)
    if match is None:
        return None
    head = match.group(0)
    found = _FAST_MEMO.get(head)
    if found is None:
        date, time, ms, tags = (g.decode() if g is not None else None for g in match.groups())
        found = Prefix(0, match.end(), canonical_rank(tags or ""), epoch(date or "", time or "", ms), date=date)
        if len(_FAST_MEMO) >= 4096:
            _FAST_MEMO.clear()
        _FAST_MEMO[head] = found
    return found


def rank_from_title(argv0: str) -> str | None:
    """`sglang::scheduler_DP0_TP3` -> `DP0 TP3`; None for other processes."""
    match = TITLE_RE.match(argv0)
    if match is None:
        return None
    return canonical_rank(match.group(1).replace("_", " ")) or "TP0"


def parse_server_args(message: str) -> dict[str, str]:
    """Values from `server_args=ServerArgs(k=v, ...)` (v0.5.9) or `server_args={'k': v, ...}` (v0.5.23)."""
    found: dict[str, str] = {}
    for key in SERVER_ARG_KEYS:
        match = re.search(r"[(,{\s]'?" + key + r"'?\s*[=:]\s*('[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^,)}\s]+)", message)
        if match:
            found[key] = match.group(1).strip("'\"")
    return found


def expected_rank_count(server: ServerInfo) -> int:
    """How many scheduler ranks `expected_ranks()` names (computed without naming them)."""
    if server.dp > 1 and not server.dp_attention:
        return server.dp * server.tp
    slots = server.pp * server.tp
    per_node = max(slots // server.nnodes, 1)
    return max(min(per_node, slots - server.node_rank * per_node), 0)


def expected_ranks(server: ServerInfo) -> tuple[str, ...]:
    """Scheduler rank labels this node should print, in SGLang's tag order."""
    def label(dp: int | None, pp: int | None, tp: int) -> str:
        tags = []
        if dp is not None:
            tags.append(f"DP{dp}")
        if pp is not None:
            tags.append(f"PP{pp}")
        if server.tp > 1:
            tags.append(f"TP{tp}")
        if server.ep > 1:
            tags.append(f"EP{tp // max(server.tp // server.ep, 1)}")
        return " ".join(tags) or "TP0"

    if server.dp > 1 and not server.dp_attention:
        return tuple(label(d, None, t) for d in range(server.dp) for t in range(server.tp))
    per_dp_group = max(server.tp // server.dp, 1)
    slots = [(p, t) for p in range(server.pp) for t in range(server.tp)]
    per_node = max(len(slots) // server.nnodes, 1)
    mine = slots[server.node_rank * per_node:(server.node_rank + 1) * per_node]
    return tuple(label(t // per_dp_group if server.dp > 1 else None, p if server.pp > 1 else None, t)
                 for p, t in mine)


def detect(line: str) -> int:
    if _SURE_RE.search(line):
        return 2
    return 1 if "sglang" in line or LEGACY_RANK_RE.match(line) else 0


ENGINE = Engine("sglang", find_prefixes, rank_from_title, parse_server_args, expected_ranks, detect, fast_prefix,
                (b"[",), TIME_DIGITS)
