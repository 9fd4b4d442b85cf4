"""Pure: limits and an ETA learned from past start-ups of the same fingerprint.

Adaptive limits (`adaptive: {enabled: true, ...}`): once a phase has `min_samples` past durations,
its deadline is `clamp(k x p95(durations), floor x configured, ceiling x configured)`, and its stall
window `clamp(k x p95(longest silences), floor x configured, ceiling x configured)`. The configured
values are the fallback, and the floor and ceiling are multiples of them, so a limit never leaves
the range the operator allowed. A phase configured without a limit stays without one.

ETA to ready: the typical (median) duration of every phase still ahead, plus what is left of the
current one. Within a phase with a progress bar the rank's own pace is extrapolated; CUDA graph
capture goes from the largest batch size to the smallest and a large batch takes longer, so its bar
is weighted by batch size.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ...config.load import Adaptive, Config, PhaseLimits
from ...durations import format_duration
from ...records import FINAL_PHASES, MAIN, UNIT_PHASES, Phase
from ..s3_track.snapshot import InvocationView, RankView


@dataclass(frozen=True)
class LimitInForce:
    phase: Phase
    limits: PhaseLimits
    source: str  # "configured" or "learned"
    reason: str


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(value, high))


def limits_in_force(config: Config, adaptive: Adaptive, durations: Mapping[Phase, Sequence[float]],
                    silences: Mapping[Phase, Sequence[float]]) -> dict[Phase, LimitInForce]:
    out: dict[Phase, LimitInForce] = {}
    for phase, configured in config.phases.items():
        samples = list(durations.get(phase, ()))
        quiet = list(silences.get(phase, ()))
        if not adaptive.enabled or phase in FINAL_PHASES:
            out[phase] = LimitInForce(phase, configured, "configured", "configured")
            continue
        if len(samples) < adaptive.min_samples:
            out[phase] = LimitInForce(phase, configured, "configured",
                                      f"configured ({len(samples)} of {adaptive.min_samples} samples)")
            continue
        deadline = configured.deadline
        if deadline is not None:
            deadline = _clamp(adaptive.k * p95(samples), adaptive.floor * deadline, adaptive.ceiling * deadline)
        stall = configured.stall
        if stall is not None and len(quiet) >= adaptive.min_samples:
            stall = _clamp(adaptive.k * p95(quiet), adaptive.floor * stall, adaptive.ceiling * stall)
        reason = (f"learned: {adaptive.k:g} x p95 {format_duration(p95(samples))} of {len(samples)} start-ups, "
                  f"within {adaptive.floor:g}-{adaptive.ceiling:g} x configured")
        cap = adaptive.ceiling * configured.deadline if configured.deadline is not None else None
        out[phase] = LimitInForce(phase, PhaseLimits(deadline, stall, cap, configured.gpu_stall), "learned", reason)
    return out


def adapted(config: Config, limits: Mapping[Phase, LimitInForce]) -> Config:
    """The config the policy judges with: learned limits in place of the configured ones."""
    return replace(config, phases={phase: item.limits for phase, item in limits.items()})


def typical_durations(durations: Mapping[Phase, Sequence[float]]) -> dict[Phase, float]:
    return {phase: statistics.median(values) for phase, values in durations.items() if values}


def capture_sizes(total: int, speculative: bool) -> list[int]:
    """SGLang's default capture batch sizes (SGLANG-LOGS §2.2), the `total` smallest."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, 1025, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, 1025, 32)]
    return sizes[:total]


def done_fraction(rank: RankView, speculative: bool) -> float | None:
    progress = rank.progress
    if progress is None or not progress.total or rank.progress_phase is not rank.phase:
        return None
    if rank.phase in (Phase.CUDA_GRAPH_CAPTURE, Phase.DRAFT_CUDA_GRAPH_CAPTURE):
        sizes = capture_sizes(progress.total, speculative)
        done = sorted(sizes, reverse=True)[:progress.n]  # largest first
        return sum(done) / sum(sizes) if sum(sizes) else None
    return progress.n / progress.total


def eta_seconds(inv: InvocationView, now: float, typical: Mapping[Phase, float]) -> float | None:
    """Seconds until ready, or None without history (or once ready)."""
    if not typical or inv.state.value != "starting":
        return None
    ranks = [r for r in inv.ranks if r.rank != MAIN and r.seen]
    main = inv.rank(MAIN)
    current_phases = {r.phase for r in ranks} | ({main.phase} if main is not None else set())
    entered = {s.phase for r in inv.ranks for s in r.spans}
    # jit_compile runs inside other phases (their durations include it): never a phase ahead.
    ahead = [p for p in typical if p not in entered and p not in FINAL_PHASES and p is not Phase.JIT_COMPILE]
    remaining = sum(typical[p] for p in ahead)
    in_progress = [r for r in ranks if not r.phase_ended and r.phase not in UNIT_PHASES] or ranks
    speculative = inv.server is not None and inv.server.speculative is not None
    left_now = 0.0
    for phase in current_phases - FINAL_PHASES:
        if phase not in typical:
            continue
        members = [r for r in in_progress if r.phase is phase]
        if not members and main is not None and main.phase is phase:
            members = [main]
        starts = [r.phase_start for r in members if r.phase_start is not None]
        if not starts:
            continue
        elapsed = now - min(starts)
        fractions = [f for r in members if (f := done_fraction(r, speculative)) is not None]
        if fractions and min(fractions) > 0.05:
            left = elapsed * (1 - min(fractions)) / min(fractions)  # its own pace
        else:
            left = max(typical[phase] - elapsed, 0.0)
        left_now = max(left_now, left)
    return remaining + left_now


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=20, method="inclusive")[-1]
