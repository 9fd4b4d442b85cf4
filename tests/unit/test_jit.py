"""The jit_compile sub-phase: DeepGEMM / FlashInfer / torch.compile lines keep the rank in its phase,
judge it by jit_compile's own limits while it compiles, mark the start-up cold, and keep cold and
warm start-ups apart in the history and the ETA."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits, load_config
from phasewatch.output.render import invocation_json, to_table
from phasewatch.pipeline import Judgement, Pipeline
from phasewatch.records import Phase
from phasewatch.sinks.history import History, fingerprint, summarize
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s3_track.snapshot import InvocationView
from phasewatch.stages.s4_judge.learn import eta_seconds

ARGS = "[2026-02-22 23:50:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tp_size=2, port=30000)"
LOADED = [ARGS] + [f"[2026-02-22 23:50:0{i} TP{i}] Load weight end. type=DeepseekV3ForCausalLM, avail mem=40 GB"
                   for i in range(2)]
DEEPGEMM = ("[2026-02-22 23:51:00 TP{0}] Entering DeepGEMM JIT Pre-Compile session. It may take a long time "
            "(typically 10-20 mins) if you have not run `sglang.compile_deep_gemm`.")
CONFIG = Config(unit="sglang.service", phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(120, 60),
                                              Phase.JIT_COMPILE: PhaseLimits(1200, 600)})
T_JIT = 1771804260.0  # 2026-02-22 23:51:00 UTC


def feed(lines: list[str], config: Config = CONFIG) -> Pipeline:
    pipeline = Pipeline(config)
    pipeline.feed_all(parse_source(("\n".join(lines) + "\n").encode(), default_year=2026).records, None)
    return pipeline


def judge(pipeline: Pipeline, now: float) -> Judgement:
    [judgement] = pipeline.judge(now)
    return judgement


def current(pipeline: Pipeline) -> InvocationView:
    inv = pipeline.snapshot().current
    assert inv is not None
    return inv


def test_a_compiling_rank_keeps_its_phase_and_is_judged_by_jit_limits() -> None:
    pipeline = feed([*LOADED, DEEPGEMM.format(0), DEEPGEMM.format(1)])
    inv = current(pipeline)
    assert inv.cold
    tp0 = inv.rank("TP0")
    assert tp0 is not None and tp0.phase is Phase.WEIGHT_LOAD and tp0.compiling
    # 9 minutes silent: past weight_load's stall window (1m), inside jit_compile's (10m)
    assert judge(pipeline, T_JIT + 540).verdicts == ()
    stalled = judge(pipeline, T_JIT + 660).verdicts
    assert {(v.kind, v.phase, v.cause) for v in stalled} == {("stalled", "jit_compile", "no_progress")}
    assert "stalled in jit_compile" in stalled[0].message and "-1 other" not in stalled[0].message


def test_the_compile_ends_at_the_next_phase_line_and_shows_in_the_timeline() -> None:
    pipeline = feed([*LOADED, DEEPGEMM.format(0),
                     "[2026-02-22 23:55:00 TP0] KV Cache is allocated. #tokens: 1000, K size: 1 GB, V size: 1 GB"])
    inv = current(pipeline)
    tp0 = inv.rank("TP0")
    assert tp0 is not None and not tp0.compiling and tp0.jit is not None
    assert tp0.jit.first == T_JIT and tp0.jit.end == T_JIT + 240 and tp0.jit.parent is Phase.WEIGHT_LOAD
    judgement = judge(pipeline, T_JIT + 240)
    document = invocation_json(judgement, T_JIT + 240)
    assert document["cold"] is True
    assert document["ranks"]["TP0"]["jit_compile"] == {
        "in": "weight_load", "first": "2026-02-22T23:51:00.000Z", "start": "2026-02-22T23:51:00.000Z",
        "end": "2026-02-22T23:55:00.000Z", "compiling": False}
    assert "jit_compile" not in document["ranks"]["TP1"]
    table = to_table([judgement], T_JIT + 240)
    columns = next(line for line in table.splitlines() if line.startswith("RANK"))  # under the main-process line
    assert "cold (JIT compiled)" in table and "jit_compile" in columns


def test_untagged_flashinfer_lines_count_for_every_rank_and_a_finished_bar_ends_deepgemm() -> None:
    pipeline = feed([*LOADED,
                     "2026-02-22 23:51:00,633 - INFO - flashinfer.jit: Loading JIT ops: batch_prefill_with_kv_cache"])
    inv = current(pipeline)
    assert all(r.compiling for r in inv.scheduler_ranks)
    pipeline = feed([*LOADED, DEEPGEMM.format(0),
                     "DeepGEMM warmup: 100%|██████████| 16384/16384 [03:02<00:00, 89.6it/s]"])
    tp0 = current(pipeline).rank("TP0")
    assert tp0 is not None and tp0.jit is not None and tp0.jit.end is not None


def test_a_warm_start_up_is_not_cold_and_keeps_its_old_fingerprint() -> None:
    inv = current(feed(LOADED))
    assert not inv.cold and all(r.jit is None for r in inv.ranks)
    assert invocation_json(judge(feed(LOADED), T_JIT), T_JIT)["cold"] is False
    assert fingerprint(inv.server) == fingerprint(inv.server, cold=False) != fingerprint(inv.server, cold=True)


def test_cold_and_warm_start_ups_are_kept_apart_in_the_history(tmp_path: Path) -> None:
    ready = ["[2026-02-22 23:58:00] The server is fired up and ready to roll!"]
    cold = current(feed([*LOADED, DEEPGEMM.format(0), DEEPGEMM.format(1),
                         "[2026-02-22 23:57:00 TP0] Capture cuda graph begin. This can take up to several minutes.",
                         "[2026-02-22 23:57:00 TP1] Capture cuda graph begin. This can take up to several minutes.",
                         *ready]))
    warm = current(feed([*LOADED, *ready]))
    history = History(tmp_path / "h.sqlite3")
    for ident, inv in (("cold", cold), ("warm", warm)):
        record = summarize("sglang.service", replace(inv, invocation_id=ident), "ready", None, T_JIT + 420)
        assert record is not None and history.add(record)
    records = {r.invocation_id: r for r in history.startups("sglang.service")}
    cold_record, warm_record = records["cold"], records["warm"]
    assert cold_record.cold and not warm_record.cold and cold_record.fingerprint != warm_record.fingerprint
    jit = cold_record.phase("jit_compile")
    assert jit is not None and jit.duration == 360
    assert history.durations("sglang.service", fingerprint(warm.server), "jit_compile") == []
    assert history.durations("sglang.service", fingerprint(cold.server, cold=True), "jit_compile") == [360]


def test_the_eta_never_counts_jit_compile_as_a_phase_ahead() -> None:
    inv = current(feed(LOADED))
    typical = {Phase.KV_CACHE_ALLOC: 60.0, Phase.JIT_COMPILE: 900.0}
    assert eta_seconds(inv, T_JIT, typical) == 60.0


def test_jit_compile_limits_are_configurable(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("unit: sglang.service\nphases:\n  jit_compile: {deadline: 45m, stall: 20m}\n")
    assert load_config(str(path)).limits(Phase.JIT_COMPILE) == PhaseLimits(2700, 1200)
