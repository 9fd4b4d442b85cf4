"""Who a crash is about: facts read from the failure lines' own text. Pure.

Two things a crash verdict needs that a line's rank prefix does not give:
- the phase a traceback died in: its deepest frame that names a phase (a draft worker's frames make
  target phases draft ones: `init_cuda_graphs` under `eagle_worker.py` is draft capture);
- which ranks are healthy and which are culprits, when the ranks are named inside the message text:
  "TP rank N could finish the model loading" (N healthy), Gloo's "Rank N failed to pass
  monitoredBarrier" / "Ranks 1, 3 failed to pass monitoredBarrier" (culprits), "Rank N successfully
  reached monitoredBarrier, but received errors while waiting for send/recv from rank M" (N healthy,
  M suspect), NCCL's "[Rank k] Watchdog caught collective operation timeout" (k waited in a
  collective that some other rank never joined: k is NOT the culprit).

Where only the healthy or waiting ranks speak, the culprits are found by elimination against the rank
set `server_args` promises (tp_size, dp_size, pp_size, nnodes/node_rank).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

from ...prefixes import rank_number
from ...records import MAIN, Phase

# A traceback frame, with or without its indentation (pastes lose it) and with `__init__` possibly
# rendered as `init` (markdown ate the underscores).
FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"\n]{1,4096})", line \d+, in (?P<func>[\w.<>]{1,200})\s*$')
CHAIN_RE = re.compile(r"^\s*(?:During handling of the above exception|The above exception was the direct cause)")

# Which phase a frame names, by function name or by file. Target phases; a draft context maps them.
_FUNC_PHASES: dict[str, Phase] = {
    **dict.fromkeys(("init_torch_distributed", "init_distributed_environment", "initialize_model_parallel",
                     "init_process_group", "init_world_group", "init_model_parallel_group", "rendezvous",
                     "_create_c10d_store", "_store_based_barrier"), Phase.DIST_INIT),
    **dict.fromkeys(("load_model", "load_weights", "load_weights_and_postprocess", "_load_weights",
                     "load_checkpoint", "safetensors_weights_iterator"), Phase.WEIGHT_LOAD),
    **dict.fromkeys(("init_memory_pool", "profile_max_num_token", "init_memory_pool_and_cache", "_init_pools",
                     "alloc_kv_cache"), Phase.KV_CACHE_ALLOC),
    **dict.fromkeys(("init_cuda_graphs", "init_device_graphs", "capture", "capture_one_batch_size", "capture_one",
                     "init_piecewise_cuda_graphs", "init_forward_metadata_capture_cuda_graph"),
                    Phase.CUDA_GRAPH_CAPTURE),
    **dict.fromkeys(("_execute_server_warmup", "_wait_and_warmup"), Phase.WARMUP),
}
_FILE_PHASES: tuple[tuple[re.Pattern[str], Phase], ...] = (
    (re.compile(r"/model_loader/|/weight_utils\.py$"), Phase.WEIGHT_LOAD),
    (re.compile(r"/(?:mem(?:ory)?_pool\w*|kv_cache\w*)\.py$"), Phase.KV_CACHE_ALLOC),
    (re.compile(r"(?:cuda_graph_runner|graph_runner|cuda_graph_backend)\w*\.py$"), Phase.CUDA_GRAPH_CAPTURE),
)
# A frame in a speculative-decoding draft worker or runner: target phases below it are the draft's.
_DRAFT_FRAME = re.compile(r"(?:^|[/_])(?:eagle|draft|nextn|mtp|medusa|speculative)[\w/]*", re.IGNORECASE)
_DRAFT_OF = {Phase.DIST_INIT: Phase.DRAFT_WEIGHT_LOAD, Phase.WEIGHT_LOAD: Phase.DRAFT_WEIGHT_LOAD,
             Phase.KV_CACHE_ALLOC: Phase.DRAFT_WEIGHT_LOAD, Phase.CUDA_GRAPH_CAPTURE: Phase.DRAFT_CUDA_GRAPH_CAPTURE}
# Torch and the standard library: their frames name no phase of the engine (`capture` in
# torch/cuda/graphs.py is under whatever runner called it).
_ORDER = {phase: index for index, phase in enumerate(Phase)}  # start-up order
_LIBRARY_FILE = re.compile(r"/(?:torch|triton|threading|asyncio|concurrent|multiprocessing|contextlib)/")


def frame_phase(file: str, func: str) -> Phase | None:
    """The target phase one frame names, or None."""
    if _LIBRARY_FILE.search(file):
        return None
    phase = _FUNC_PHASES.get(func.rsplit(".", 1)[-1])
    if phase is not None:
        return phase
    return next((p for pattern, p in _FILE_PHASES if pattern.search(file)), None)


def traceback_phase(texts: Iterable[str]) -> Phase | None:
    """The phase a traceback died in: the deepest frame that names a phase, in the first traceback of
    a chain that names one (the first is the original exception, raised deepest); frames of a draft
    worker above it make it a draft phase. A deeper frame naming an earlier phase than the frames
    above it is a later phase's use of that code (a graph capture's forward writes the KV pool in
    `memory_pool.py`'s `set_kv_buffer`): the phase stays the later one."""
    draft = False
    found: Phase | None = None
    for text in texts:
        if CHAIN_RE.match(text):
            if found is not None:
                break
            draft = False
            continue
        frame = FRAME_RE.match(text)
        if frame is None:
            continue
        file, func = frame.group("file"), frame.group("func")
        # The file and its directory: `/speculative/ngram_worker.py` is a draft's too.
        if _DRAFT_FRAME.search("/".join(file.rsplit("/", 2)[-2:])) or _DRAFT_FRAME.search(func):
            draft = True
        phase = frame_phase(file, func)
        if phase is not None and draft:
            phase = _DRAFT_OF.get(phase, phase)
        if phase is not None and (found is None or _ORDER[phase] >= _ORDER[found]):
            found = phase
        elif draft and found is not None:
            found = _DRAFT_OF.get(found, found)
    return found


class Role(enum.Enum):
    HEALTHY = "healthy"  # it finished the phase the others did not (its own words or a peer's)
    WAITING = "waiting"  # it timed out waiting in a collective: alive, and not the one that hung
    CULPRIT = "culprit"  # named as the rank that failed
    SUSPECT = "suspect"  # named as the peer whose errors a healthy rank saw (may itself be collateral)


@dataclass(frozen=True)
class RankMention:
    """One rank named in one failure line. `number` is the rank as the text gives it (global for
    torch's process groups, the TP rank for SGLang's own messages); `reporter` prints the line."""

    number: int
    role: Role
    rule: str
    reporter: str | None
    tp_rank: bool = False  # the text says "TP rank N" (a TP rank, not a global one)
    local: bool = False  # N indexes this node's scheduler processes (the launcher's own numbering)
    seq: int | None = None  # NCCL: the collective's sequence number and type, when given
    op: str | None = None


_RANK_LIST = r"\d{1,6}(?:\s*,\s*\d{1,6}){0,1023}"
# (rule, pattern, role, numbering): "tp" a TP rank, "local" this node's scheduler index, "" a global rank
_MENTIONS: tuple[tuple[str, re.Pattern[str], Role, str], ...] = (
    ("load_barrier_finished", re.compile(r"\bTP rank (\d{1,6}) could finish the model loading"), Role.HEALTHY, "tp"),
    ("gloo_barrier_failed", re.compile(rf"\bRanks? ({_RANK_LIST}) failed to pass monitoredBarrier"), Role.CULPRIT,
     ""),
    ("gloo_barrier_reached", re.compile(r"\bRank (\d{1,6}) successfully reached monitoredBarrier"), Role.HEALTHY,
     ""),
    ("gloo_barrier_peer", re.compile(r"\bmonitoredBarrier, but received errors while waiting for send/recv from "
                                     r"rank (\d{1,6})"), Role.SUSPECT, ""),
    # torch >= 2.3 writes "[PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog caught ..."
    ("nccl_watchdog", re.compile(r"\[(?:PG ID \d{1,9} PG GUID [^\]]{0,200}? )?Rank (\d{1,6})\]:? ?Watchdog caught "
                                 r"collective operation timeout"), Role.WAITING, ""),
    ("scheduler_died", re.compile(r"\bRank (\d{1,6}) scheduler died during initialization"), Role.CULPRIT,
     "local"),
    ("subprocess_crashed", re.compile(r"\bSubprocess scheduler_(\d{1,6}) \(pid=\d+\) crashed with exit code"),
     Role.CULPRIT, "local"),
)
# The post-load barrier: whoever did not reach it was still loading weights.
LOAD_BARRIER_RULES = frozenset({"load_barrier_finished", "gloo_barrier_failed", "gloo_barrier_reached",
                                "gloo_barrier_peer"})
_WORK_RE = re.compile(r"WorkNCCL\(SeqNum=(\d{1,12}), OpType=(\w{1,40})")


def mentions_in(text: str, reporter: str | None) -> list[RankMention]:
    """The ranks one failure line names, and what it says of each."""
    out: list[RankMention] = []
    for rule, pattern, role, numbering in _MENTIONS:
        for match in pattern.finditer(text):
            work = _WORK_RE.search(text) if rule == "nccl_watchdog" else None
            seq = rank_number(work.group(1)) if work else None
            for digits in re.findall(r"\d+", match.group(1)):
                number = rank_number(digits)
                if number is not None:
                    out.append(RankMention(number, role, rule, reporter, tp_rank=numbering == "tp",
                                           local=numbering == "local", seq=seq,
                                           op=work.group(2) if work else None))
    return out


@dataclass(frozen=True)
class ServerRanks:
    """The rank layout `server_args` promises (the fields of tracker.ServerInfo this needs)."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    dp_attention: bool = False
    local: tuple[str, ...] = ()  # this node's expected labels
    every: tuple[str, ...] = ()  # every node's, in global rank order (pp-major, then tp)


@dataclass(frozen=True)
class CrashFacts:
    """Ranks by role (labels, sorted), and how the culprits were found: `named` (a line names them),
    `suspect` (a healthy rank names the peer it saw fail), `elimination` (expected ranks that are
    neither healthy nor waiting), `minority` (NCCL reporters stuck in a different collective than
    the rest), or "" (no culprit known)."""

    healthy: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    culprits: tuple[str, ...] = ()
    found_by: str = ""
    remote: bool = False  # the culprits are expected on another node
    phase: Phase | None = None  # where the culprits were, when the lines say (the post-load barrier: loading)

    @property
    def known(self) -> bool:
        return bool(self.healthy or self.waiting or self.culprits)

    def bystanders(self) -> frozenset[str]:
        return frozenset(self.healthy) | frozenset(self.waiting)


def _tag_number(label: str, tag: str) -> int | None:
    part = next((p for p in label.split() if p.startswith(tag) and p[len(tag):].isdigit()), None)
    return rank_number(part[len(tag):]) if part is not None else None


def rank_label(mention: RankMention, layout: ServerRanks | None, known: Sequence[str]) -> str:
    """The label a rank number in the text means. A global rank indexes the expected layout (pp-major,
    tp-minor); without one, the known label with that TP number and the reporter's DP/PP tags."""
    number = mention.number
    reporter = mention.reporter if mention.reporter not in (None, MAIN) else None
    if mention.role is Role.WAITING and reporter is not None:
        return reporter  # the rank that timed out prints it; its number may be a sub-group's rank
    if mention.local and layout is not None and number < len(layout.local):
        return layout.local[number]
    if layout is not None and layout.every and not mention.tp_rank and not (layout.dp > 1 and not layout.dp_attention):
        if number < len(layout.every):
            return layout.every[number]
    tp = number
    pp = dp = None
    if layout is not None and not mention.tp_rank and layout.tp > 0 and layout.pp > 1:
        pp, tp = divmod(number, layout.tp)
    if reporter is not None:
        dp = _tag_number(reporter, "DP") if dp is None else dp
        pp = _tag_number(reporter, "PP") if pp is None else pp
    candidates = [k for k in known if k != MAIN and _tag_number(k, "TP") == tp
                  and (dp is None or _tag_number(k, "DP") in (dp, None))
                  and (pp is None or _tag_number(k, "PP") in (pp, None))]
    if len(candidates) == 1:
        return candidates[0]
    tags = ([f"DP{dp}"] if dp is not None else []) + ([f"PP{pp}"] if pp is not None else []) + [f"TP{tp}"]
    return " ".join(tags)


def crash_facts(fatal_texts: Iterable[tuple[str | None, Sequence[str]]], layout: ServerRanks | None,
                known: Sequence[str], earlier: Iterable[str] = ()) -> CrashFacts:
    """Facts from every failure record's lines, given as (reporter, texts).

    `known` are the labels the journal shows; `earlier` the ranks that never left an earlier phase
    than the one the healthy and waiting ranks finished (the tracker knows; used without a layout).
    """
    mentions = [m for reporter, texts in fatal_texts for t in texts for m in mentions_in(t, reporter)]
    if not mentions:
        return CrashFacts()
    labels = list(known) + [k for k in (layout.local if layout else ()) if k not in known]
    by_role: dict[Role, list[str]] = {role: [] for role in Role}
    for m in mentions:
        label = rank_label(m, layout, labels)
        if label not in by_role[m.role]:
            by_role[m.role].append(label)
    # A rank that passed the barrier is healthy whatever else a peer suspected of it.
    healthy = set(by_role[Role.HEALTHY])
    waiting = set(by_role[Role.WAITING]) - healthy
    named = [r for r in by_role[Role.CULPRIT] if r not in healthy]
    suspects = [r for r in by_role[Role.SUSPECT] if r not in healthy and r not in waiting]
    found_by, remote = "", False
    culprits: list[str] = []
    if named:
        culprits, found_by = named, "named"
    else:
        minority = _minority(mentions, layout, labels)
        if minority:
            culprits, found_by = minority, "minority"
            waiting -= set(minority)
        elif layout is not None and layout.local:
            bystanders = healthy | waiting | set(suspects)
            local = [r for r in layout.local if r not in bystanders]
            if local and len(local) <= len(healthy | waiting):
                # Most ranks reported: the few silent ones are the culprits. (With only a few reports in,
                # the others may simply not have reported yet: no elimination.)
                culprits, found_by = local, "elimination"
            elif suspects:
                culprits, found_by = suspects, "suspect"
            else:
                others = [r for r in layout.every if r not in bystanders and r not in layout.local]
                if others and not local:
                    culprits, found_by, remote = others, "elimination", True
        elif suspects:
            culprits, found_by = suspects, "suspect"
        else:
            behind = [r for r in earlier if r not in healthy and r not in waiting]
            if behind:
                culprits, found_by = behind, "elimination"
    key = _label_key
    phase = Phase.WEIGHT_LOAD if any(m.rule in LOAD_BARRIER_RULES for m in mentions) else None
    return CrashFacts(tuple(sorted(healthy, key=key)), tuple(sorted(waiting, key=key)),
                      tuple(sorted(culprits, key=key)), found_by, remote, phase)


def _minority(mentions: Sequence[RankMention], layout: ServerRanks | None, labels: Sequence[str]) -> list[str]:
    """NCCL reporters that time out in a different collective (sequence number or type) than most:
    they called a collective the others never did (a desync), or are a collective behind."""
    works: dict[tuple[int | None, str | None], list[str]] = {}
    for m in mentions:
        if m.role is Role.WAITING and m.seq is not None:
            label = rank_label(m, layout, labels)
            works.setdefault((m.seq, m.op), [])
            if label not in works[(m.seq, m.op)]:
                works[(m.seq, m.op)].append(label)
    if len(works) < 2:
        return []
    groups = sorted(works.values(), key=len)
    if len(groups[0]) >= len(groups[-1]):
        return []  # no majority to stand out from
    return [r for group in groups[:-1] for r in group]


def _label_key(label: str) -> tuple[int, ...]:
    return tuple(rank_number("".join(ch for ch in part if ch.isdigit())) or 0 for part in label.split())


def describe(facts: CrashFacts) -> str:
    """The facts as the verdict message says them ("" when there are none)."""
    parts: list[str] = []
    if facts.culprits:
        how = {"named": "named in the failure lines", "suspect": "named by a healthy rank as the peer that failed",
               "elimination": "by elimination: expected, and neither healthy nor waiting",
               "minority": "stuck in a different collective than the other ranks"}[facts.found_by]
        where = " on another node" if facts.remote else ""
        parts.append(f"culprit(s){where}: {_short(facts.culprits)} ({how})")
    else:
        parts.append("culprit: not shown (the ranks that failed did not report)")
    if facts.healthy:
        parts.append(f"healthy: {_short(facts.healthy)}")
    if facts.waiting:
        parts.append(f"timed out waiting: {_short(facts.waiting)}")
    return "; ".join(parts)


def _short(labels: Sequence[str], most: int = 16) -> str:
    text = ", ".join(labels[:most])
    return text + (f" and {len(labels) - most} more" if len(labels) > most else "")


# A reporter labelled by TP alone (or TP and EP alike): the TP rank a message names can be labelled.
TAGS_RE = re.compile(r"TP\d{1,6}( EP\d{1,6})?")


def ranks_named(reporter: str, text: str, known: Container[str]) -> list[str]:
    """Ranks another rank's failure line names ("TP rank 1 could finish the model loading") that are
    not `known` (printed nothing themselves), labelled as the reporter is (TPn, or TPn EPn)."""
    tags = TAGS_RE.fullmatch(reporter)
    if tags is None or "could finish" not in text:
        return []
    labels = [f"TP{m.number}" + (f" EP{m.number}" if tags.group(1) else "")
              for m in mentions_in(text, reporter) if m.tp_rank]
    return [label for label in dict.fromkeys(labels) if label not in known]
