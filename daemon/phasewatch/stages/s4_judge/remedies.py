"""Stage: a verdict -> what to do about it (a `Remedy`), from what phasewatch knows of the server.

Pure. The facts are the launch arguments (server_args= / vLLM's non-default args, else the unit's
ExecStart=), the unit's Environment= and device settings, the verdict's rank and phase, and numbers
read from the failing lines (how much capture tried to allocate, how much was free, which port). The
profile's `remedies:` table (profile/remedy_table.py) is tried in order; the first remedy whose condition
holds and whose text's facts are all known is the answer, else there is none."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ...profile.remedy_table import FACT_RE, RemedyRule
from ...records import MAIN
from ..s3_track.snapshot import InvocationView

MAX_VALUE = 120  # characters of a fact shown in a remedy
MAX_TEXTS = 64  # failing lines read for numbers (the first ones: the exception is near the start)
FALSE_VALUES = frozenset({"", "False", "false", "None", "none", "null", "no"})
# Launch argument spellings -> the key server_args= uses (vLLM's flags, SGLang's short forms).
ALIASES = {"tensor_parallel_size": "tp_size", "tp": "tp_size", "pipeline_parallel_size": "pp_size",
           "data_parallel_size": "dp_size", "model": "model_path", "model_name_or_path": "model_path"}
# Numbers and names in a failing line: (fact, pattern); group 1 is the value.
LINE_FACTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("line.tried", r"Tried to allocate ([\d.]+ ?[KMGT]i?B)"),
    ("line.free", r"of which ([\d.]+ ?[KMGT]i?B) is free"),
    ("line.total", r"total capacity of ([\d.]+ ?[KMGT]i?B)"),
    ("line.startup_free", r"Free memory on device \(([\d.]+)/[\d.]+ GiB\)"),
    ("line.startup_total", r"Free memory on device \([\d.]+/([\d.]+) GiB\)"),
    ("line.kv_needed", r"\(([\d.]+ ?GiB) KV cache is needed"),
    ("line.kv_available", r"available KV cache memory \(([\d.]+ ?GiB)\)"),
    ("line.max_len", r"estimated maximum model length is (\d+)"),
    ("line.no_cache_memory", r"(No available memory for the cache blocks)"),
    ("line.mem_fraction_static", r"mem_fraction_static=([\d.]+)"),
    ("line.port", r"bind on address \([^)]*?, ?(\d{1,5})\)"),
    ("line.port", r"[Aa]ddress already in use[^\d]{0,40}?:(\d{1,5})\b"),
    ("line.repo", r"huggingface\.co/(?:api/models/)?([\w.-]+/[\w.-]+)"),
    ("line.path", r"'([^']{1,200})' is not a local folder"),
    ("line.path", r"Invalid repository ID or local directory specified: '([^']{1,200})'"),
    ("line.path", r"Cannot find any model weights with `([^`]{1,200})`"),
    ("line.no_gpu", r"(No CUDA GPUs are available|no CUDA-capable device is detected|cudaErrorNoDevice|"
                    r"Found no NVIDIA driver|invalid device ordinal)"),
    ("line.symbol", r"undefined symbol: (\w{1,120})"),
    ("line.module", r"No module named '([\w.]{1,120})'"),
    ("line.library", r"(\S{1,120}\.so[\w.]*): cannot open shared object file"),
    ("line.build_failure", r"(ninja: build stopped[^\n]{0,80}|Ninja build failed"
                           r"|Error building extension '[\w.-]{1,80}'|collect2: error: ld returned \d+ exit status"
                           r"|/ld: cannot find [^\s]{1,80}|nvcc fatal[^\n]{0,80}"
                           r"|Command '\['ninja'[^\]]{0,200}\]' returned non-zero exit status \d+)"),
))


@dataclass(frozen=True)
class UnitSettings:
    """What the watched unit says of the server (read over D-Bus by the daemon; none in replay)."""

    exec_start: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)  # PrivateDevices=, DeviceAllow=...
    port_holders: Mapping[int, str] = field(default_factory=dict)  # port -> the process listening on it


@dataclass(frozen=True)
class Remedy:
    id: str
    text: str
    arguments: Mapping[str, str]  # the launch arguments it names, with their values now


NO_UNIT = UnitSettings()


def argv_arguments(argv: Sequence[str]) -> dict[str, str]:
    """`--mem-fraction-static 0.88`, `--port=30000`, `--enforce-eager` -> {key: value} in
    server_args= spelling; `vllm serve MODEL`'s positional model too."""
    found: dict[str, str] = {}
    words = list(argv)
    if len(words) == 1 and " " in words[0]:
        try:
            words = shlex.split(words[0])
        except ValueError:
            return found
    index = 1
    while index < len(words):
        word = words[index]
        index += 1
        if word == "serve" and index < len(words) and not words[index].startswith("-"):
            found["model_path"] = words[index]
            index += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name, equals, value = word.lstrip("-").partition("=")
        if not equals:
            if index < len(words) and not words[index].startswith("-"):
                value = words[index]
                index += 1
            else:
                value = "True"
        key = name.replace("-", "_")
        found[ALIASES.get(key, key)] = value
    return found


def line_facts(texts: Iterable[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for count, text in enumerate(texts):
        if count >= MAX_TEXTS:
            break
        for name, pattern in LINE_FACTS:
            if name not in found:
                match = pattern.search(text[:4096])
                if match:
                    found[name] = match.group(1)
    return found


def facts_for(verdict_rank: str | None, phase: str | None, inv: InvocationView, unit: UnitSettings,
              texts: Iterable[str]) -> dict[str, str]:
    facts: dict[str, str] = {}
    launch = {**argv_arguments(unit.exec_start), **inv.server_args}  # the log says what really ran
    facts.update({f"arg.{ALIASES.get(k, k)}": v for k, v in launch.items()})
    facts.update({f"env.{k}": v for k, v in unit.environment.items()})
    facts.update({f"unit.{k}": v for k, v in unit.properties.items()})
    facts.update(line_facts(texts))
    port = facts.get("line.port") or facts.get("arg.port") or ""
    if port.isdigit() and len(port) <= 5 and int(port) in unit.port_holders:  # a port, not 5000 digits
        facts["host.port_holder"] = unit.port_holders[int(port)]
    if inv.heartbeat is not None:
        facts[f"heartbeat.{inv.heartbeat}"] = "True"
    if verdict_rank is not None and verdict_rank != MAIN:
        facts["rank"] = verdict_rank
    if phase is not None:
        facts["phase"] = phase
    return {k: v[:MAX_VALUE] for k, v in facts.items() if v is not None}


def _applies(rule: RemedyRule, kind: str, cause: str | None, phase: str | None, facts: Mapping[str, str]) -> bool:
    if rule.kind != kind or (rule.causes and cause not in rule.causes) or (rule.phases and phase not in rule.phases):
        return False
    if any(facts.get(n, "") in FALSE_VALUES for n in rule.needs):
        return False
    return all(facts.get(n, "") in FALSE_VALUES for n in rule.absent)


def choose(table: Sequence[RemedyRule], kind: str, cause: str | None, phase: str | None,
           facts: Mapping[str, str]) -> Remedy | None:
    rule = next((r for r in table if _applies(r, kind, cause, phase, facts)), None)
    if rule is None:
        return None
    text = FACT_RE.sub(lambda m: facts[m.group(1)], rule.text)
    return Remedy(rule.id, text, {name: facts[f"arg.{name}"] for name in rule.arguments})


EVIDENCE_FILE = "the evidence file"  # what the profiles' remedies call the stacks evidence captures


def naming_evidence(text: str, path: str | None) -> str:
    """A remedy or alert text with "the evidence file" named: its path when one was written; else
    what to run for the same facts (the rank's stack, by py-spy, as evidence takes it)."""
    if EVIDENCE_FILE not in text:
        return text
    if path is not None:
        return text.replace(EVIDENCE_FILE, path)
    return text.replace(EVIDENCE_FILE, "`py-spy dump --pid <the rank's PID>`")


def remedy_for(kind: str, cause: str | None, phase: str | None, rank: str | None, inv: InvocationView,
               table: Sequence[RemedyRule], unit: UnitSettings = NO_UNIT) -> Remedy | None:
    """The remedy for a verdict (its kind, cause, phase, rank) of `inv`, or None."""
    if not table:
        return None
    texts = [t for f in inv.fatals if rank is None or f.rank in (rank, None, MAIN) for t in f.texts]
    if rank is not None and not texts:
        texts = [t for f in inv.fatals for t in f.texts]
    return choose(table, kind, cause, phase, facts_for(rank, phase, inv, unit, texts))
