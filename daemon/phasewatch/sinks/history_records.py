"""Past start-ups as records (`StartupRecord`, `PhaseRecord`), and the history file's rows read back
into them (`startup_from_row`): every value checked, a bad one dropped (sinks/history.py reads the file)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..records import PHASE_NAMES, Phase

logger = logging.getLogger(__name__)
MAX_JSON = 4 << 20  # a spans or verdicts value longer than this is not ours


@dataclass(frozen=True)
class PhaseRecord:
    phase: str
    duration: float  # first rank's begin to last rank's end: the phase's wall time
    spread: float  # last rank's end minus first rank's end
    progress_total: int | None  # shards, capture batch sizes, ...
    max_silence: float  # the longest time no rank in the phase showed a sign of life
    slowest_rank: str | None = None


@dataclass(frozen=True)
class StartupRecord:
    unit: str
    invocation_id: str
    fingerprint: str
    started_at: float
    ended_at: float
    outcome: str
    cause: str | None
    phases: tuple[PhaseRecord, ...]
    spans: dict[str, list[tuple[str, float | None, float | None]]] = field(default_factory=dict)  # rank -> phases
    verdicts: tuple[tuple[str, str | None, str | None, float], ...] = ()  # kind, rank, phase, at
    ended_by: str | None = None  # "restarted by the group: node 1 TP12 stalled in cuda_graph_capture"
    remedy: str | None = None  # what to do about its first verdict that has one (stages/s4_judge/remedies.py)
    failure: str | None = None  # a failed start-up's fingerprint (stages/s5_act/restart_gate.py)

    def phase(self, name: str) -> PhaseRecord | None:
        return next((p for p in self.phases if p.phase == name), None)

    @property
    def cold(self) -> bool:
        """It JIT-compiled (its jit_compile sub-phase is among its phases)."""
        return self.phase(Phase.JIT_COMPILE.value) is not None

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at


def valid_seconds(value: object) -> float | None:
    """A finite, non-negative number of seconds, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _timestamp(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _optional_text(value: object) -> bool:
    return value is None or isinstance(value, str)


def _phase_from_row(row: Sequence[Any]) -> PhaseRecord | None:
    phase, duration, spread, total, silence, slowest = row
    duration, spread, silence = valid_seconds(duration), valid_seconds(spread), valid_seconds(silence)
    if phase not in PHASE_NAMES or duration is None or spread is None or silence is None:
        return None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        total = None
    return PhaseRecord(phase, duration, spread, total, silence, slowest if isinstance(slowest, str) else None)


def _load_json(text: object) -> Any:
    if not isinstance(text, str) or len(text) > MAX_JSON:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _spans(text: object) -> dict[str, list[tuple[str, float | None, float | None]]] | None:
    document = _load_json(text)
    if not isinstance(document, dict):
        return None
    out: dict[str, list[tuple[str, float | None, float | None]]] = {}
    for rank, items in document.items():
        if not isinstance(items, list):
            return None
        spans = []
        for item in items:
            if not (isinstance(item, list) and len(item) == 3 and item[0] in PHASE_NAMES):
                return None
            start, end = (None if v is None else _timestamp(v) for v in item[1:])
            if (start is None) != (item[1] is None) or (end is None) != (item[2] is None):
                return None
            spans.append((item[0], start, end))
        out[rank] = spans
    return out


def _verdicts(text: object) -> tuple[tuple[str, str | None, str | None, float], ...] | None:
    document = _load_json(text)
    if not isinstance(document, list):
        return None
    out = []
    for item in document:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                and _optional_text(item[1]) and _optional_text(item[2])):
            return None
        at = _timestamp(item[3])
        if at is None:
            return None
        out.append((item[0], item[1], item[2], at))
    return tuple(out)


def startup_from_row(row: Sequence[Any], phase_rows: Sequence[Sequence[Any]]) -> StartupRecord | None:
    """A stored start-up, every value checked: None when a field it cannot do without is invalid; an
    invalid phase, span list or verdict list is left out."""
    _, unit, invocation, key, started, ended, outcome, cause, spans_text, verdicts_text, ended_by, remedy, failure = row
    started_at, ended_at = _timestamp(started), _timestamp(ended)
    if not all(isinstance(v, str) for v in (unit, invocation, key, outcome)) or not _optional_text(cause) \
            or not _optional_text(ended_by) or started_at is None or ended_at is None:
        return None
    phases = tuple(p for p in map(_phase_from_row, phase_rows) if p is not None)
    spans = _spans(spans_text)
    verdicts = _verdicts(verdicts_text)
    if len(phases) < len(phase_rows) or spans is None or verdicts is None:
        logger.warning("history: start-up %s has invalid phases, spans or verdicts: those left out", invocation)
    return StartupRecord(unit, invocation, key, started_at, ended_at, outcome, cause, phases, spans or {},
                         verdicts or (), ended_by, remedy if _optional_text(remedy) else None,
                         failure if _optional_text(failure) else None)
