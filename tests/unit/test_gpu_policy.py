"""The GPU stall window (stages/s4_judge/gpu_policy.py through policy.py) and the timer lint's window in force."""

from __future__ import annotations

import time
import types
from typing import Any

from phasewatch.config.load import DEFAULT_LIMITS, Config, VitalsSampling
from phasewatch.pipeline import Pipeline
from phasewatch.records import Event, EventKind, JournalRecord, Phase
from phasewatch.stages.s4_judge import policy
from phasewatch.stages.s4_judge.timerlint import UnitTimers, lint

T0 = 1_800_000_000.0
INV = "0123456789abcdef0123456789abcdef"
UNIT = "sglang-kimi.service"
WAITING = "GPU 0 waiting: 134 W flat of 700 W, SM util 100 %, no transfers: a kernel waits, likely a collective"


def _capturing(pipeline: Pipeline) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0))
    for n in range(2):
        pipeline.feed(JournalRecord(f"[{stamp} TP{n}] Capture cuda graph begin. This can take up to several "
                                    "minutes. avail mem=24.60 GB", T0, pid=101 + n, invocation_id=INV), T0)


def _gpu(pipeline: Pipeline, rank: str, at: float, state: str, text: str, alive: bool) -> None:
    pipeline.tracker.apply(Event(EventKind.RANK_GPU, at, rank=rank, cause=state, text=text, invocation_id=INV), at)
    if alive:
        pipeline.tracker.apply(Event(EventKind.RANK_PROGRESS, at, rank=rank, invocation_id=INV), at)


def test_a_waiting_gpu_is_judged_by_the_short_window_and_named_a_computing_one_is_alive() -> None:
    config = Config(unit=UNIT)
    pipeline = Pipeline(config)
    _capturing(pipeline)
    for t in range(5, 600, 5):
        _gpu(pipeline, "TP0", T0 + t, "computing", "GPU 0 computing: 650 W of 700 W", True)
        _gpu(pipeline, "TP1", T0 + t, "waiting", WAITING, False)
    inv = pipeline.snapshot().current
    assert inv is not None
    gpu_stall = DEFAULT_LIMITS[Phase.CUDA_GRAPH_CAPTURE].gpu_stall
    assert gpu_stall == 180
    assert policy.evaluate(inv, T0 + gpu_stall - 1, config) == []
    assert policy.next_deadline(inv, T0 + 10, config) == T0 + gpu_stall
    verdicts = policy.evaluate(inv, T0 + gpu_stall + 1, config)
    assert [(v.rank, v.cause) for v in verdicts] == [("TP1", "no_progress")]
    assert "stall window 3m" in verdicts[0].message
    assert "GPU waiting 2m56s" in verdicts[0].message  # first seen waiting at +5 s
    assert "134 W flat" in verdicts[0].message
    assert "likely a collective" in verdicts[0].message
    assert [v.rank for v in policy.evaluate(inv, T0 + 595, config)] == ["TP1"]  # TP0 computes: never stalled


def test_without_gpu_observations_or_with_vitals_gpu_off_the_long_window_stands() -> None:
    for config, observe in ((Config(unit=UNIT), False),
                            (Config(unit=UNIT, vitals=VitalsSampling(gpu=False)), True)):
        pipeline = Pipeline(config)
        _capturing(pipeline)
        if observe:
            for t in range(5, 300, 5):
                _gpu(pipeline, "TP1", T0 + t, "waiting", WAITING, False)
        inv = pipeline.snapshot().current
        assert inv is not None
        assert policy.evaluate(inv, T0 + 300, config) == []
        assert policy.next_deadline(inv, T0 + 10, config) == T0 + 1200


def test_a_gpu_no_longer_observed_gives_back_the_long_window() -> None:
    config = Config(unit=UNIT)
    pipeline = Pipeline(config)
    _capturing(pipeline)
    _gpu(pipeline, "TP1", T0 + 5, "waiting", WAITING, False)  # then NVML stops answering
    inv = pipeline.snapshot().current
    assert inv is not None
    assert policy.evaluate(inv, T0 + 190, config) == []  # observed 185 s ago: more than the 3 m window


def test_the_default_config_raises_no_timer_lint_and_a_real_finding_still_does() -> None:
    sglang_defaults: dict[str, str] = {}
    assert lint(Config(unit=UNIT), sglang_defaults, UnitTimers()) == []
    no_gpu = lint(Config(unit=UNIT, vitals=VitalsSampling(gpu=False)), sglang_defaults, UnitTimers())
    assert {w.code for w in no_gpu} >= {"stall_after_nccl", "warmup_stall_after_watchdog"}
    short = lint(Config(unit=UNIT), {"dist_timeout": "120"}, UnitTimers())
    assert {("stall_after_nccl", "cuda_graph_capture"), ("stall_after_nccl", "draft_cuda_graph_capture")} <= {
        (w.code, w.phase) for w in short}  # a 2 m NCCL timeout pre-empts even the 3 m GPU window


def test_the_evidence_file_says_what_each_ranks_gpu_did() -> None:
    from phasewatch.sinks.evidence import EvidenceTaker
    from phasewatch.stages.s5_act.respond import Action
    from phasewatch.systemd_unit import UnitFacts

    class Writer:
        settings = types.SimpleNamespace(peers=True)
        message = ""

        def capture(self, invocation: Any, verdict: Any, message: str, targets: Any, gpu: Any = None) -> None:
            Writer.message = message

    pipeline = Pipeline(Config(unit=UNIT))
    _capturing(pipeline)
    _gpu(pipeline, "TP1", T0 + 5, "waiting", WAITING, False)
    inv = pipeline.snapshot().current
    assert inv is not None
    action = Action(kind="evidence", message="TP1 stalled", verdict_kind="stalled", priority=0, invocation_id=INV,
                    phase="cuda_graph_capture", rank="TP1")
    EvidenceTaker(Writer(), lambda group: []).take(inv, [action], UnitFacts("activating", "start", INV))  # type: ignore[arg-type]
    assert "=== GPUs ===" in Writer.message and "TP1: GPU waiting since" in Writer.message
    assert "likely a collective" in Writer.message


def test_init_writes_both_windows_and_its_config_lints_clean() -> None:
    from pathlib import Path

    from phasewatch.config.load import parse_config
    from phasewatch.stages.s4_judge.init_config import UnitCommand, engine_facts, exec_argv, render_config

    facts = engine_facts(exec_argv("python3 -m sglang.launch_server --model-path m --tp 8 "
                                   "--speculative-algorithm EAGLE3"))
    text = render_config(UnitCommand("sglang.service", ()), facts)
    config = parse_config(text)
    for phase in (Phase.CUDA_GRAPH_CAPTURE, Phase.DRAFT_CUDA_GRAPH_CAPTURE, Phase.WARMUP):
        limits = config.limits(phase)
        assert limits.gpu_stall == 180 and limits.stall is not None and limits.stall > limits.gpu_stall, phase
    assert "gpu_stall: 3m" in text
    assert lint(config, {}, UnitTimers()) == []
    shipped = parse_config((Path(__file__).resolve().parents[2] / "config" / "phasewatch.yaml").read_text())
    assert shipped.limits(Phase.CUDA_GRAPH_CAPTURE).gpu_stall == 180
    assert lint(shipped, {}, UnitTimers()) == []  # the default install: no timer lint alert
