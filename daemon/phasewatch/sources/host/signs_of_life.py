"""Source: signs of life beyond log lines. While the unit starts and its cgroup is known, every
`vitals.period` its processes are sampled (procstat.py) and each rank's GPU judged from the NVML
readings taken in the period (gpu.py, stages/s4_judge/gpu_vitals.py); what moved since the last sample
becomes RANK_PROGRESS events, each rank's GPU a RANK_GPU event (stages/s4_judge/vitals.py)."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Sequence

from ...config.load import Config
from ...records import Event, EventKind
from ...stages.s3_track.snapshot import InvocationView, UnitState
from ...stages.s4_judge.gpu_vitals import GpuBaseline, baselines_after
from ...stages.s4_judge.vitals import Sample, Vitals, compare, progress_events, with_gpus
from ..base import Current, Instant
from .gpu import NvmlSource
from .procstat import ProcSampler
from .unit_processes import UnitFactsReader

logger = logging.getLogger(__name__)


class SignsOfLifeSource:
    def __init__(self, config: Config, sampler: ProcSampler, facts: UnitFactsReader, current: Current,
                 gpu: NvmlSource | None = None) -> None:
        self.config = config
        self.gpu = gpu if config.vitals.gpu else None  # None: /proc only
        self.baselines: dict[int, GpuBaseline] = {}
        self.gpu_states: dict[str, tuple[str, float]] = {}  # rank -> (its GPU's state, since)
        self.sampler = sampler
        self.facts = facts
        self.current = current
        self.sample: Sample | None = None
        self.vitals: Vitals | None = None
        # The vitals last said (the metrics' /status, Step.shown_vitals): kept over a new start-up
        # until its first sample or the sampling's end.
        self.shown: Vitals | None = None
        self.last_sample = -math.inf  # monotonic

    def carrying(self, old: SignsOfLifeSource | None) -> SignsOfLifeSource:
        """This source (a reloaded config's) with `old`'s samples, vitals and GPU baselines; NVML sampling
        stops when the new config reads /proc only."""
        if old is not None:
            self.baselines, self.gpu_states, self.sample = old.baselines, old.gpu_states, old.sample
            self.vitals, self.shown, self.last_sample = old.vitals, old.shown, old.last_sample
            if old.gpu is not None and self.gpu is None:
                old.gpu.want(False)
        return self

    def new_startup(self) -> None:
        self.sample, self.vitals, self.last_sample = None, None, -math.inf
        self.gpu_states = {}
        if self.gpu is not None:
            self.gpu.take()  # readings of the last start-up's end are not this one's

    def fds(self) -> Sequence[int]:
        return ()

    def sampling(self, inv: InvocationView | None) -> bool:
        """While the unit starts and its cgroup is known: every `vitals.period`."""
        return (self.config.vitals.enabled and inv is not None and inv.state is UnitState.STARTING
                and inv is not None and self.facts.control_group_of(inv) is not None)

    def next_deadline(self, now: Instant) -> float | None:
        return self.last_sample + self.config.vitals.period if self.sampling(self.current()) else None

    def collect(self, now: Instant, readable: Sequence[int]) -> list[Event]:
        inv = self.current()
        wanted = self.sampling(inv)
        if self.gpu is not None:
            self.gpu.want(wanted)
        if not wanted:
            if self.vitals is not None and (inv is None or inv.state is not UnitState.STARTING):
                self.sample, self.vitals = None, None
                self.shown = None
            return []
        if inv is None or now.monotonic - self.last_sample < self.config.vitals.period - 0.05:
            return []
        self.last_sample = now.monotonic
        try:
            sample = self.sampler.sample(self.facts.control_group_of(inv) or "", now.wall)
        except OSError as exc:  # a cgroup or /proc oddity: no sign of life this time, the loop goes on
            logger.warning("[%s] cannot sample the unit's processes: %s", self.config.unit, exc)
            return []
        vitals = compare(self.sample, sample, before=self.vitals)
        if self.gpu is not None:
            readings, infos = self.gpu.take(), self.gpu.infos()
            if self.sample is not None:  # the first sample has no period yet
                vitals = with_gpus(vitals, sample, readings, infos, self.baselines)
            self.baselines = baselines_after(infos, readings, self.baselines)
            state, problem = self.gpu_state()
            vitals = replace(vitals, gpu_source=state, gpu_problem=problem, gpu_since=self._since(vitals))
        self.vitals, self.sample = vitals, sample
        self.shown = vitals
        gpus = [Event(EventKind.RANK_GPU, vitals.at, rank=r.rank, cause=r.gpu.state, text=r.gpu.text(),
                      invocation_id=inv.invocation_id) for r in vitals.ranks if r.gpu is not None]
        return [*progress_events(self.vitals, inv.invocation_id), *gpus]

    def _since(self, vitals: Vitals) -> dict[str, float]:
        """Since when each rank's GPU is in the state it is in now (kept over periods)."""
        out = {}
        for rank in vitals.ranks:
            if rank.gpu is None:
                continue
            state, since = self.gpu_states.get(rank.rank, (None, vitals.at))
            out[rank.rank] = since if state == rank.gpu.state else vitals.at
            self.gpu_states[rank.rank] = (rank.gpu.state, out[rank.rank])
        return out

    def gpu_state(self) -> tuple[str, str | None]:
        """The GPU source: `off` (vitals.gpu false, or not asked yet), `ok`, `unavailable`, `stuck`,
        `failed`; and why not."""
        if self.gpu is None:
            return "off", "vitals.gpu is false"
        return self.gpu.state(), self.gpu.problem()
