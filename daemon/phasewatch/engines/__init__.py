"""What differs between inference engines beyond the rule table: the per-engine module a profile
names (`module:` in profiles/<engine>.yaml, the engine's name by default).

An engine module gives:
- `find_prefixes(segment)`: where the engine's record prefixes are in a line, and the rank, time and
  process each names (prefixes.Prefix);
- `rank_from_title(argv0)`: the rank a process title names (procs.py), or None;
- `parse_server_args(message)`: the launch arguments a `server_args` rule's line holds, in the common
  vocabulary (tp_size, dp_size, pp_size, ep_size, nnodes, node_rank, model_path, host, port, ...);
- `expected_ranks(server)`: the rank labels those arguments promise on this node, in the labels
  `find_prefixes` gives (empty when the engine's labels cannot be foretold);
- `detect(line)`: how sure a line makes us that the log is this engine's (0 none, 1 a hint, 2 sure);
- optionally, for the catch-up fast path (stages/s3_track/fastpath.py), `fast_prefix(message)`: the prefix at
  the start of a MESSAGE (bytes), as `find_prefixes` would find it first, or None when unsure (the
  line then takes the full path); a prefix ending at `end` before the message does must follow from
  `message[:end + 1]` alone (a run of lines the same up to there is given one prefix: FastPath.apply's
  `repeats`; a line that ends with its prefix is never repeated); and
  `prefix_marks`: bytes of which every prefix holds one, so a text without any holds no further prefix;
  and `run_time_digits`: (start, end), where a fast prefix keeps its time of day: a message that
  differs from one with a fast prefix only in digits there has the same prefix but for its `ts`
  (which the fast path does not read), so a run may go on across the prefix's seconds; and
  `rewrite(message)`: a message in another form the engine can log in (vLLM's JSON lines) as its own
  text format would print it, or None when it is not in that form.

Adding an engine is a profile YAML and, when its prefixes or titles differ, one such module in this
package (found by its file name; nothing else to register).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import cache
from typing import Callable, Iterable, Mapping

from ..prefixes import MAX_NUMBER_DIGITS, Prefix

# Scheduler ranks one node is expected to run, at most. The largest SGLang deployments run 8-16 GPUs
# per node (a few hundred ranks over all nodes). `server_args` asking for more (tp_size=1000000000)
# is an anomaly: no silent rank is expected (only ranks the journal shows are judged), and nothing
# is allocated per claimed rank.
MAX_EXPECTED_RANKS = 1024
TIMER_ARGS = ("watchdog_timeout", "soft_watchdog_timeout", "dist_timeout", "disaggregation_mode")


@dataclass(frozen=True)
class Engine:
    name: str
    find_prefixes: Callable[[str], list[Prefix]]
    rank_from_title: Callable[[str], str | None]
    parse_server_args: Callable[[str], dict[str, str]]
    expected_ranks: Callable[[ServerInfo], tuple[str, ...]]
    detect: Callable[[str], int]
    fast_prefix: Callable[[bytes], Prefix | None] | None = None
    prefix_marks: tuple[bytes, ...] = ()
    run_time_digits: tuple[int, int] | None = None
    rewrite: Callable[[str], str | None] | None = None  # a line in another form (JSON) -> the engine's own text


# The engine modules of this package: every module not starting with "_".
KNOWN: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


@cache
def _registry() -> dict[str, Engine]:
    engines = (importlib.import_module(f"{__name__}.{name}").ENGINE for name in KNOWN)
    return {engine.name: engine for engine in engines}


def engine_module(name: str) -> Engine:
    """The module `name` (an engine's name); ValueError names the known ones."""
    found = _registry().get(name)
    if found is None:
        raise ValueError(f"no engine module {name!r} (known: {', '.join(KNOWN)})")
    return found


def rank_from_any_title(argv0: str) -> str | None:
    """A process title read from /proc, tried against every engine: a unit runs one engine, and no
    engine's rank titles look like another's."""
    for engine in _registry().values():
        rank = engine.rank_from_title(argv0)
        if rank is not None:
            return rank
    return None


@dataclass(frozen=True)
class ServerInfo:
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dp_attention: bool = False
    speculative: str | None = None
    model_path: str | None = None
    draft_model_path: str | None = None
    host: str | None = None
    port: int | None = None
    cuda_graph_max_bs: str | None = None
    cuda_graph_bs: str | None = None
    role: str | None = None  # prefill/decode disaggregation: "prefill" or "decode"; None when unified
    timer_args: Mapping[str, str] = field(default_factory=dict)  # the engine's timers (timerlint.py)
    engine: str = "sglang"  # whose rank labels expected_ranks() names (this package)
    version: str | None = None

    @staticmethod
    def from_args(args: Mapping[str, str]) -> ServerInfo:
        def number(key: str, default: int) -> int:
            text = args.get(key)
            if text is None or len(text) > MAX_NUMBER_DIGITS:
                return default  # Python's int() refuses past 4300 digits; no size needs 19
            try:
                return max(int(text), 0)
            except ValueError:
                return default

        speculative = args.get("speculative_algorithm")
        return ServerInfo(
            tp=max(number("tp_size", 1), 1), dp=max(number("dp_size", 1), 1), pp=max(number("pp_size", 1), 1),
            ep=max(number("ep_size", 1), 1), nnodes=max(number("nnodes", 1), 1), node_rank=number("node_rank", 0),
            dp_attention=args.get("enable_dp_attention") == "True",
            speculative=None if speculative in (None, "None") else speculative,
            model_path=args.get("model_path"),
            draft_model_path=args.get("speculative_draft_model_path"),
            host=args.get("host"),
            port=number("port", 0) or None,
            cuda_graph_max_bs=args.get("cuda_graph_max_bs"),
            cuda_graph_bs=args.get("cuda_graph_bs"),
            role=args.get("disaggregation_mode") if args.get("disaggregation_mode") in ("prefill", "decode") else None,
            timer_args={k: v[:32] for k in TIMER_ARGS if (v := args.get(k)) is not None},
            engine=args.get("engine", "sglang"),
            version=args.get("version"),
        )

    @property
    def expected_rank_count(self) -> int:
        """How many scheduler ranks `expected_ranks()` names at most (computed without naming them)."""
        if self.dp > 1 and not self.dp_attention:
            return self.dp * self.tp * (self.pp if self.engine != "sglang" else 1)
        slots = self.pp * self.tp
        per_node = max(slots // self.nnodes, 1)
        return max(min(per_node, slots - self.node_rank * per_node), 0)

    @property
    def plausible(self) -> bool:
        """False when the arguments ask for more than MAX_EXPECTED_RANKS ranks on this node."""
        return self.expected_rank_count <= MAX_EXPECTED_RANKS

    def expected_ranks(self) -> tuple[str, ...]:
        """Rank labels this node should print, as the engine names them (this package); none when
        the arguments are implausible (more than MAX_EXPECTED_RANKS)."""
        cached: tuple[str, ...] | None = self.__dict__.get("_expected_ranks")
        if cached is None:  # asked a few times a step; the fields never change
            cached = engine_module(self.engine).expected_ranks(self) if self.plausible else ()
            object.__setattr__(self, "_expected_ranks", cached)
        return cached


DETECT_LINES = 2000


def detect_engine(lines: Iterable[str], default: str = "sglang") -> str:
    """The engine whose lines a log shows: the first engine a line is sure of, else `default` if
    any line hints at it, else the one with the most hints among the first DETECT_LINES lines."""
    engines = list(_registry().values())
    hints = dict.fromkeys((e.name for e in engines), 0)
    for index, line in enumerate(lines):
        if index >= DETECT_LINES:
            break
        for engine in engines:
            score = engine.detect(line)
            if score >= 2:
                return engine.name
            hints[engine.name] += score
    if hints.get(default, 0) > 0:
        return default  # SGLang's 2024 logs carry vLLM's loader lines: a hint of the default wins
    best = max(hints.values())
    if best == 0:
        return default
    return next(name for name, count in hints.items() if count == best)
