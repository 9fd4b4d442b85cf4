"""Pure stage: a vitals period's NVML readings of one GPU -> is that GPU alive, and if not, why.

Measured on an H200 (docs/phases.md, GPU signs): a GPU that computes draws several times its idle
power (a CUDA graph capture: p10 454 W, median 663 W of 700 W) and moves data over PCIe (tens of
MB/s); a weight load moves GB/s over PCIe at idle power; a kernel spinning on a flag (an NCCL
kernel waiting for a missing peer) shows "SM util 100 %" at 134 W, flat within a watt, with no
transfers. "SM util" says only that some kernel is resident, so it never counts as progress here.

Every rule is relative to the GPU's own numbers, so an A100 or an MI300 is judged as an H200 is:
- power: the period's mean above the GPU's floor (the quietest it was seen, at most 20 % of its
  power limit: an idle H200 draws 80-125 W of 700 W) by at least 12 % of its limit is computing;
  a mean only a little above the floor but swinging by 8 % of the limit within the period is too
  (short kernels between host work);
- PCIe: RX + TX at least 8 MB/s and 10x the GPU's quietest reading (idle chatter: 0.4-1.3 MB/s);
- memory: a rank's processes growing their GPU memory by 256 MiB in the period (allocating).
Not alive and a kernel resident (SM util >= 80 %) with power flat (within 3 % of the limit): the
waiting signature; flat, resident and less than 30 % of the limit above the floor is waiting even
where the level alone would say computing (a spinning kernel draws more on some GPUs than others).
A waiting kernel that polls a flag in host memory (NCCL's network transport) moves PCIe traffic:
reads of a few bytes, RX about twice TX, 73-104 MB/s measured; with the waiting signature, balanced
traffic below 500 MB/s is its polls, not a transfer (`_polls`, docs/phases.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuThresholds:
    floor_cap: float = 0.20  # the floor is at most this share of the power limit
    computing: float = 0.12  # mean power above the floor, as a share of the limit
    swing: float = 0.08  # max - min power within the period, as a share of the limit
    swing_above_floor: float = 0.04  # ... with the mean at least this far above the floor
    flat: float = 0.03  # max - min below this share of the limit: flat
    pcie_floor_kbps: float = 8000.0  # 8 MB/s
    pcie_over_quiet: float = 10.0
    allocating_bytes: int = 256 * MIB
    resident_sm_util: float = 80.0
    # Flat power with a kernel resident and no transfers, less than this share of the limit above the
    # floor, is waiting whatever its level (a spinning kernel draws more on some GPUs than others).
    waiting_below: float = 0.30
    # PCIe traffic of a waiting GPU (flat, resident, low) is a kernel polling host memory, not a
    # transfer, while RX and TX are within this factor of each other and their sum below the cap (_polls).
    polling_balance: float = 4.0
    polling_max_kbps: float = 500_000.0  # 500 MB/s
    # A rank using this much of a core while its GPU shows at most this SM util: host work (vitals.host_work).
    host_cpu_share: float = 0.9
    idle_sm_util: float = 2.0
    # ... and only while it touched the system (a fault, a read, a read/write call) within this many
    # seconds: an in-process compile was seen quiet 5 s at most, a spinning loop is quiet for good.
    host_quiet: float = 6.0


DEFAULT_THRESHOLDS = GpuThresholds()


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str = ""
    power_limit_mw: int | None = None
    memory_total_bytes: int | None = None


@dataclass(frozen=True)
class GpuReading:
    """One NVML sample of one GPU (None: NVML did not give it)."""

    at: float
    index: int
    sm_util: float | None = None
    mem_util: float | None = None
    power_mw: float | None = None
    pcie_rx_kbps: float | None = None
    pcie_tx_kbps: float | None = None
    processes: Mapping[int, int] = field(default_factory=dict)  # host pid -> GPU memory used, bytes
    process_sm_util: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuBaseline:
    """What the GPU was seen to do when quietest, carried from period to period (per GPU)."""

    quietest_power_mw: float | None = None
    quietest_pcie_kbps: float | None = None


@dataclass(frozen=True)
class GpuPeriod:
    """One GPU over one period, as it concerns one rank."""

    index: int
    samples: int
    power_w: float | None  # mean
    power_swing_w: float | None  # max - min
    limit_w: float | None
    floor_w: float | None
    pcie_mbps: float | None  # RX + TX mean, MB/s
    sm_util: float | None  # mean
    memory_bytes: int | None  # the rank's processes at the period's end
    memory_growth: int  # over the period
    reasons: tuple[str, ...]  # computing, transferring, allocating
    state: str  # computing | transferring | allocating | waiting | idle | unknown
    polling: bool = False  # waiting, and its PCIe traffic is a kernel polling host memory (_polls)

    @property
    def alive(self) -> bool:
        return bool(self.reasons)

    def text(self) -> str:
        """`GPU computing 663 W of 700 W, PCIe 50 MB/s`, `GPU waiting: 134 W flat, SM util 100 %: a kernel
        waits, likely a collective`, `GPU idle: 81 W of 700 W`."""
        power = f"{self.power_w:.0f} W" if self.power_w is not None else "power unknown"
        limit = f" of {self.limit_w:.0f} W" if self.limit_w is not None else ""
        pcie = f", PCIe {self.pcie_mbps:.1f} MB/s" if self.pcie_mbps is not None else ""
        if self.state == "waiting" and self.polling:
            return (f"GPU {self.index} waiting: {power} flat{limit}, SM util {self.sm_util:.0f} %, PCIe "
                    f"{self.pcie_mbps:.1f} MB/s of polls: a kernel polls host memory, likely a collective waiting "
                    "for a peer on another node")
        if self.state == "waiting":
            return (f"GPU {self.index} waiting: {power} flat{limit}, SM util {self.sm_util:.0f} %, no transfers: "
                    "a kernel waits, likely a collective")
        if self.alive:
            grown = f", +{self.memory_growth / MIB:.0f} MiB" if "allocating" in self.reasons else ""
            return f"GPU {self.index} {'+'.join(self.reasons)}: {power}{limit}{pcie}{grown}"
        if self.state == "unknown":
            return f"GPU {self.index}: no readings"
        return f"GPU {self.index} idle: {power}{limit}{pcie}"


def baseline_after(info: GpuInfo, readings: Sequence[GpuReading], baseline: GpuBaseline) -> GpuBaseline:
    """The baseline with this period's readings: the quietest power and PCIe samples seen."""
    powers = [r.power_mw for r in readings if r.power_mw is not None]
    pcie = [v for v in (_pcie(r) for r in readings) if v is not None]
    quiet_power, quiet_pcie = baseline.quietest_power_mw, baseline.quietest_pcie_kbps
    if powers:
        quiet_power = min(powers) if quiet_power is None else min(quiet_power, min(powers))
    if pcie:
        quiet_pcie = min(pcie) if quiet_pcie is None else min(quiet_pcie, min(pcie))
    return GpuBaseline(quiet_power, quiet_pcie)


def judge(info: GpuInfo, readings: Sequence[GpuReading], baseline: GpuBaseline, pids: Iterable[int] = (),
          thresholds: GpuThresholds = DEFAULT_THRESHOLDS) -> GpuPeriod:
    """The period of one GPU (its readings in the period, oldest first) for the rank whose processes are
    `pids`; `baseline` is the one before this period (the period's own readings count in it too)."""
    mine = [r for r in readings if r.index == info.index]
    base = baseline_after(info, mine, baseline)
    powers = [r.power_mw for r in mine if r.power_mw is not None]
    utils = [r.sm_util for r in mine if r.sm_util is not None]
    limit = info.power_limit_mw
    mean = sum(powers) / len(powers) if powers else None
    swing = max(powers) - min(powers) if powers else None
    floor = None
    if base.quietest_power_mw is not None:
        floor = base.quietest_power_mw if not limit else min(base.quietest_power_mw, thresholds.floor_cap * limit)
    pcie = _pcie_mean(mine)
    sm = sum(utils) / len(utils) if utils else None
    wanted = set(pids)
    memory = [sum(v for p, v in r.processes.items() if p in wanted) for r in mine if r.processes is not None]
    growth = memory[-1] - memory[0] if len(memory) >= 2 else 0
    reasons = []
    flat = swing is not None and limit is not None and limit > 0 and swing / limit < thresholds.flat
    resident = sm is not None and sm >= thresholds.resident_sm_util
    spinning = False
    if mean is not None and floor is not None and limit:
        above = (mean - floor) / limit
        spinning = flat and resident and above < thresholds.waiting_below
        if not spinning and (above >= thresholds.computing or (above >= thresholds.swing_above_floor
                                             and swing is not None and swing / limit >= thresholds.swing)):
            reasons.append("computing")
    polling = False
    if pcie is not None:
        quiet = base.quietest_pcie_kbps or 0.0
        if pcie >= thresholds.pcie_floor_kbps and pcie >= thresholds.pcie_over_quiet * quiet:
            polling = spinning and _polls(mine, pcie, thresholds)
            if not polling:
                reasons.append("transferring")
    if growth >= thresholds.allocating_bytes:
        reasons.append("allocating")
    if reasons:
        state = reasons[0]
    elif not mine or mean is None:
        state = "unknown"
    elif resident and flat:
        state = "waiting"
    else:
        state = "idle"
    return GpuPeriod(info.index, len(mine), _w(mean), _w(swing), _w(limit), _w(floor),
                     None if pcie is None else pcie / 1000.0, sm, memory[-1] if memory else None, growth,
                     tuple(reasons), state, polling)


def rank_gpus(readings: Sequence[GpuReading], pids: Iterable[int]) -> tuple[int, ...]:
    """The GPUs on which any of `pids` (a rank's process and its descendants) holds a context in the period."""
    wanted = set(pids)
    return tuple(sorted({r.index for r in readings if wanted & set(r.processes)}))


def judge_rank(infos: Mapping[int, GpuInfo], readings: Sequence[GpuReading], baselines: Mapping[int, GpuBaseline],
               pids: Iterable[int], thresholds: GpuThresholds = DEFAULT_THRESHOLDS) -> tuple[GpuPeriod, ...]:
    """Each GPU the rank uses, judged over the period (none: the rank has no GPU context yet)."""
    pids = tuple(pids)
    return tuple(judge(infos.get(i, GpuInfo(i)), readings, baselines.get(i, GpuBaseline()), pids, thresholds)
                 for i in rank_gpus(readings, pids))


def baselines_after(infos: Mapping[int, GpuInfo], readings: Sequence[GpuReading],
                    baselines: Mapping[int, GpuBaseline]) -> dict[int, GpuBaseline]:
    out = dict(baselines)
    for index in sorted({r.index for r in readings}):
        info = infos.get(index, GpuInfo(index))
        mine = [r for r in readings if r.index == index]
        out[index] = baseline_after(info, mine, baselines.get(index, GpuBaseline()))
    return out


def summary(periods: Sequence[GpuPeriod]) -> GpuPeriod | None:
    """The rank's GPU that says most: an alive one, else a waiting one, else the first."""
    if not periods:
        return None
    alive = [p for p in periods if p.alive]
    waiting = [p for p in periods if p.state == "waiting"]
    return (alive or waiting or list(periods))[0]


def _polls(readings: Sequence[GpuReading], pcie_kbps: float, thresholds: GpuThresholds) -> bool:
    """PCIe traffic of a kernel polling host memory, not a transfer: reads of a few bytes, so the
    GPU's requests (TX) and the completions that answer them (RX) are of one size, within
    `polling_balance` of each other (measured RX/TX 1.9-2.2; a copy or a kernel reading host data
    gets payload back: 5-8; one writing to the host sends it: below 0.5), and at most
    `polling_max_kbps` in all (measured 73-104 MB/s from 8 to 132 polling warps on an H200;
    bulk data moves GB/s). Without TX (an older recording) nothing is called polling."""
    rx = [r.pcie_rx_kbps for r in readings if r.pcie_rx_kbps is not None]
    tx = [r.pcie_tx_kbps for r in readings if r.pcie_tx_kbps is not None]
    if not rx or not tx or pcie_kbps > thresholds.polling_max_kbps:
        return False
    rx_mean, tx_mean = sum(rx) / len(rx), sum(tx) / len(tx)
    return tx_mean > 0 and rx_mean > 0 and max(rx_mean / tx_mean, tx_mean / rx_mean) <= thresholds.polling_balance


def _pcie(reading: GpuReading) -> float | None:
    if reading.pcie_rx_kbps is None and reading.pcie_tx_kbps is None:
        return None
    return (reading.pcie_rx_kbps or 0.0) + (reading.pcie_tx_kbps or 0.0)


def _pcie_mean(readings: Sequence[GpuReading]) -> float | None:
    values = [v for v in (_pcie(r) for r in readings) if v is not None]
    return sum(values) / len(values) if values else None


def _w(mw: float | None) -> float | None:
    return None if mw is None or not math.isfinite(mw) else mw / 1000.0

