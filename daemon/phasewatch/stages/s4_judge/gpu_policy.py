"""Pure stage: the stall window in force for a rank whose GPU is observed, and the verdict's words
about that GPU (policy.py). A phase's `gpu_stall` applies while the rank's GPU was observed within
it; the main process (judged in the unit's phases, warm-up among them) goes by its schedulers' GPUs."""

from __future__ import annotations

from ...config.load import Config, PhaseLimits
from ...durations import format_duration
from ...records import MAIN
from ..s3_track.snapshot import GpuSeen, InvocationView, RankView

IDLE_STATES = ("waiting", "idle", "unknown")


def rank_gpu(inv: InvocationView, rank: RankView) -> GpuSeen | None:
    """The rank's GPU as last observed; for the main process (judged in the unit's phases, warm-up
    among them) the schedulers' GPUs: the one seen most recently doing something, else the latest."""
    if rank.rank != MAIN:
        return rank.gpu
    seen = [r.gpu for r in inv.scheduler_ranks if r.gpu is not None]
    if not seen:
        return None
    busy = [g for g in seen if g.state not in IDLE_STATES]
    return max(busy or seen, key=lambda g: g.seen)


def stall_window(inv: InvocationView, rank: RankView, now: float, limits: PhaseLimits,
                  config: Config) -> tuple[float | None, GpuSeen | None]:
    """The stall window in force: the phase's `gpu_stall` while the rank's GPU is observed (within
    that window), else its `stall`; with the GPU shown in the verdict where it was observed."""
    gpu = rank_gpu(inv, rank) if config.vitals.gpu else None
    if gpu is not None and limits.gpu_stall is not None and now - gpu.seen <= limits.gpu_stall:
        return limits.gpu_stall, gpu
    return limits.stall, gpu


def gpu_words(gpu: GpuSeen | None, now: float) -> str:
    """`; GPU waiting 14m: 124 W flat ...`: what its GPU did, as last observed."""
    if gpu is None:
        return ""
    text = gpu.text.split(": ", 1)[1] if ": " in gpu.text else gpu.text
    return f"; GPU {gpu.state} {format_duration(max(now - gpu.since, 0.0))}: {text}"
