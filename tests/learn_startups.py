"""Simulated start-ups run through the pipeline and summarised: shared by the learning tests of the unit
and integration tiers (one copy)."""

from __future__ import annotations

from sglang_sim import Faults, build, journal_json

from phasewatch.config.load import Adaptive, Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import record_from_fields
from phasewatch.sinks.history import StartupRecord, summarize

UNIT = "sglang-kimi.service"
BASE = 1_800_000_000.0
ADAPTIVE = Adaptive(enabled=True, k=1.5, min_samples=5, floor=0.25, ceiling=2.0)
CONFIG = Config(unit=UNIT, adaptive=ADAPTIVE)
LOADS = [1.0, 0.9, 1.1, 1.05, 0.95, 1.2]


def run(n: int, faults: Faults | None = None, config: Config = CONFIG) -> Pipeline:
    pipeline = Pipeline(config)
    plan = build(1.0, faults or Faults())
    for entry in journal_json(plan, base=BASE + n * 10_000, unit=UNIT, invocation=f"{n:032x}"):
        pipeline.feed(record_from_fields(entry), None)
    pipeline.flush(None)
    return pipeline


def finished(n: int, slow_load: float) -> StartupRecord:
    inv = run(n, Faults(slow_load=slow_load)).snapshot().current
    assert inv is not None and inv.state.value == "ready"
    record = summarize(UNIT, inv, "ready", None, inv.last_ts or 0.0)
    assert record is not None
    return record
