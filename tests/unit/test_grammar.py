"""The line grammar's generalisations (issue 11 point 1): phase order as a model, families of words
(profile/families.py) after the exact rules, times from other loggers, a one-GPU paste as TP0, and never a 1970 date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.cli import main
from phasewatch.config.load import Config
from phasewatch.errors import ProfileError
from phasewatch.output.render import iso, to_json, to_table
from phasewatch.pipeline import Pipeline
from phasewatch.prefixes import canonical_rank
from phasewatch.profile.load import load_builtin_profile, parse_profile
from phasewatch.records import JournalRecord, Phase
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s1_read.lines import LineSplitter
from phasewatch.stages.s1_read.timestamps import DATED_FROM, foreign_time, is_dated
from phasewatch.stages.s2_interpret.phaseorder import Anomaly, backwards, before
from phasewatch.stages.s3_track.snapshot import InvocationView

P = Phase


def replay_text(text: str) -> tuple[Pipeline, InvocationView]:
    pipeline = Pipeline(Config(unit="sglang.service"))
    pipeline.feed_all(parse_source(text.encode("utf-8"), default_year=2026).records, None)
    [inv] = pipeline.snapshot().invocations
    return pipeline, inv


def phases(inv: InvocationView, rank: str) -> list[str]:
    view = inv.rank(rank)
    assert view is not None, [r.rank for r in inv.ranks]
    return [s.phase.value for s in view.spans]


# --- phase order -------------------------------------------------------------------------------


def test_the_order_is_partial_target_and_draft_weights_either_way() -> None:
    assert before(P.DIST_INIT, P.CUDA_GRAPH_CAPTURE) and before(P.LAUNCH, P.DRAFT_CUDA_GRAPH_CAPTURE)
    assert before(P.WEIGHT_LOAD, P.DRAFT_WEIGHT_LOAD) and before(P.CUDA_GRAPH_CAPTURE, P.DRAFT_CUDA_GRAPH_CAPTURE)
    # v0.5.9 loads the draft after the target's graphs, v0.5.23 before any memory pool
    assert not before(P.DRAFT_WEIGHT_LOAD, P.KV_CACHE_ALLOC) and not before(P.KV_CACHE_ALLOC, P.DRAFT_WEIGHT_LOAD)
    assert not before(P.DRAFT_WEIGHT_LOAD, P.CUDA_GRAPH_CAPTURE)
    assert backwards(P.CUDA_GRAPH_CAPTURE, P.KV_CACHE_ALLOC) and not backwards(P.KV_CACHE_ALLOC, P.CUDA_GRAPH_CAPTURE)
    assert not backwards(P.DRAFT_WEIGHT_LOAD, P.DRAFT_WEIGHT_LOAD)


V0_5_9 = """\
[2026-02-22 23:55:14 TP0] Init torch distributed begin.
[2026-02-22 23:55:16 TP0] Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB
[2026-02-22 23:55:16 TP0] Load weight begin. avail mem=137.95 GB
[2026-02-22 23:56:07 TP0] Load weight end. elapsed=50.89 s, type=LlamaForCausalLM, avail mem=120.41 GB.
[2026-02-22 23:56:08 TP0] KV Cache is allocated. #tokens: 2600000, K size: 49.59 GB, V size: 49.59 GB
[2026-02-22 23:56:08 TP0] Memory pool end. avail mem=20.59 GB
[2026-02-22 23:56:09 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.38 GB
[2026-02-22 23:56:19 TP0] Capture cuda graph end. Time elapsed: 10.12 s. mem usage=1.17 GB. avail mem=19.21 GB.
[2026-02-22 23:56:19 TP0] Init torch distributed begin.
[2026-02-22 23:56:19 TP0] Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB
[2026-02-22 23:56:19 TP0] Load weight begin. avail mem=19.23 GB
[2026-02-22 23:56:21 TP0] Load weight end. elapsed=1.42 s, type=LlamaForCausalLMEagle3, avail mem=18.79 GB.
[2026-02-22 23:56:21 TP0] KV Cache is allocated. #tokens: 2600000, K size: 0.62 GB, V size: 0.62 GB
[2026-02-22 23:56:21 TP0] Memory pool end. avail mem=17.55 GB
[2026-02-22 23:56:21 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=17.52 GB
[2026-02-22 23:56:33 TP0] Capture draft cuda graph end. Time elapsed: 12.04 s. mem usage=0.38 GB. avail mem=17.14 GB.
"""

V0_5_23 = """\
[2026-10-30 10:00:00 TP0] Init parallel begin.
[2026-10-30 10:00:02 TP0] Init parallel ends. elapsed=1.90 s
[2026-10-30 10:00:02 TP0] Memory baseline taken. mem usage=1.35 GB
[2026-10-30 10:00:02 TP0] Load weight begin. avail mem=137.95 GB
[2026-10-30 10:00:50 TP0] Load weight end. elapsed=48.00 s, type=DeepseekV3ForCausalLM, avail mem=60.00 GB.
[2026-10-30 10:00:50 TP0] Memory baseline taken. mem usage=0.00 GB
[2026-10-30 10:00:50 TP0] Load weight begin. avail mem=60.00 GB
[2026-10-30 10:00:52 TP0] Load weight end. elapsed=2.00 s, type=DeepseekV3ForCausalLMNextN, avail mem=58.00 GB.
[2026-10-30 10:00:53 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2600000, K size: 20.00 GB
[2026-10-30 10:00:53 TP0] draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2600000, K size: 0.20 GB
[2026-10-30 10:00:54 TP0] Capture target prefill CUDA graph begin. backend=breakable, avail mem=17.00 GB
[2026-10-30 10:00:58 TP0] Capture target prefill CUDA graph end. elapsed=4.00 s, mem usage=0.30 GB, avail mem=16.70 GB.
[2026-10-30 10:00:58 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, avail mem=16.70 GB
[2026-10-30 10:01:08 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=10.12 s, avail mem=15.50 GB.
[2026-10-30 10:01:08 TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1, 2, 4], avail mem=15.50 GB
[2026-10-30 10:01:14 TP0] Capture draft decode CUDA graph end. elapsed=6.00 s, mem usage=0.20 GB, avail mem=15.30 GB.
[2026-10-30 10:01:14 TP0] Capture draft extend CUDA graph begin. backend=full, bs=[1, 2, 4], avail mem=15.30 GB
[2026-10-30 10:01:20 TP0] Capture draft extend CUDA graph end. elapsed=6.00 s, mem usage=0.20 GB, avail mem=15.10 GB.
"""


@pytest.mark.parametrize(("log", "expected"), [
    (V0_5_9, ["launch", "dist_init", "weight_load", "kv_cache_alloc", "cuda_graph_capture", "draft_weight_load",
              "draft_cuda_graph_capture"]),
    (V0_5_23, ["launch", "dist_init", "weight_load", "draft_weight_load", "kv_cache_alloc", "cuda_graph_capture",
               "draft_cuda_graph_capture"]),
], ids=["v0.5.9", "v0.5.23"])
def test_both_release_orders_are_forward_moves_without_anomalies(log: str, expected: list[str]) -> None:
    _, inv = replay_text(log)
    assert phases(inv, "TP0") == expected
    assert inv.anomalies == ()


def test_a_line_that_would_move_a_rank_backwards_is_refused_and_recorded() -> None:
    # A window that starts in capture: the KV pool line after it was never entered, but it is
    # before capture in the order. The old tracker moved the rank back to kv_cache_alloc.
    _, inv = replay_text("[2026-02-22 23:56:09 TP2] Capture cuda graph begin. avail mem=20.38 GB\n"
                         "[2026-02-22 23:56:10 TP2] Memory pool end. avail mem=20.59 GB\n")
    assert phases(inv, "TP2") == ["launch", "cuda_graph_capture"]
    assert inv.anomalies == (Anomaly("TP2", "cuda_graph_capture", "kv_cache_alloc", "pool_end",
                                     inv.anomalies[0].ts, "exact"),)
    assert iso(inv.anomalies[0].ts) == "2026-02-22T23:56:10.000Z"


def test_a_weight_line_past_the_target_weights_is_the_drafts_even_in_a_window() -> None:
    _, inv = replay_text("[2026-02-22 23:56:09 TP2] Capture cuda graph begin. avail mem=20.38 GB\n"
                         "[2026-02-22 23:56:19 TP2] Load weight begin. avail mem=19.23 GB\n"
                         "[2026-02-22 23:56:21 TP2] Load weight end. elapsed=1.42 s, type=X, avail mem=18.79 GB\n")
    assert phases(inv, "TP2") == ["launch", "cuda_graph_capture", "draft_weight_load"]
    assert inv.anomalies == ()


def test_anomalies_are_shown_in_the_json_and_the_table() -> None:
    pipeline, inv = replay_text("[2026-02-22 23:56:09 TP2] Capture cuda graph begin. avail mem=20.38 GB\n"
                                "[2026-02-22 23:56:10 TP2] Using KV cache dtype: torch.bfloat16\n")
    judgements = pipeline.judge(inv.last_ts or 0.0)
    [document] = to_json(judgements, inv.last_ts or 0.0)["invocations"]
    assert document["anomalies"] == [{"rank": "TP2", "from": "cuda_graph_capture", "to": "kv_cache_alloc",
                                      "rule": "kv_dtype", "at": "2026-02-22T23:56:10.000Z", "confidence": "exact"}]
    assert "TP2: cuda_graph_capture -> kv_cache_alloc refused (rule kv_dtype" in to_table(judgements, 0.0)


# --- families -----------------------------------------------------------------------------------


def test_a_family_line_moves_a_rank_with_family_confidence_and_an_exact_line_confirms_it() -> None:
    text = ("[2026-02-22 23:56:00 TP0] Load weight end. elapsed=50 s, type=X, avail mem=20 GB\n"
            "[2026-02-22 23:56:01 TP0] Start capturing HIP graphs for decode. avail mem=20.38 GB\n")
    pipeline, inv = replay_text(text)
    view = inv.rank("TP0")
    assert view is not None and view.phase is P.CUDA_GRAPH_CAPTURE and view.spans[-1].confidence == "family"
    judgements = pipeline.judge(inv.last_ts or 0.0)
    document = to_json(judgements, 0.0)["invocations"][0]["ranks"]["TP0"]
    assert document["confidence"] == "family" and document["phases"][-1]["confidence"] == "family"
    table = to_table(judgements, inv.last_ts or 0.0)
    assert "cuda_graph_capture (family)" in table and "~" in table and "read by a family rule" in table
    _, confirmed = replay_text(text + "[2026-02-22 23:56:02 TP0] Capture cuda graph begin. avail mem=20.0 GB\n")
    view = confirmed.rank("TP0")
    assert view is not None and view.spans[-1].confidence == "exact"


@pytest.mark.parametrize(("message", "phase"), [
    ("Loading draft model weights from /models/eagle3", "draft_weight_load"),
    ("Start capturing NextN cuda graphs", "draft_cuda_graph_capture"),
    ("MTP graph capture begins", "draft_cuda_graph_capture"),
    ("Loading weights took 12.3 seconds", "weight_load"),
    ("Allocating memory pool for 2600000 tokens", "kv_cache_alloc"),
    ("Initializing torch.distributed with world_size=8", "dist_init"),
])
def test_families_name_phases_and_the_draft_words_qualify_them(message: str, phase: str) -> None:
    found = load_builtin_profile("sglang").families.classify(message)
    assert found is not None and found.phase.value == phase


@pytest.mark.parametrize("message", [
    "CUDA graph is disabled because of the attention backend",
    "Failed to load weights for layer 3",
    "KV cache pool is full. Retract requests. #retracted_reqs: 1",
    "Prefill batch, #new-seq: 1, cuda graph: False",
    "x" * 600 + " capturing cuda graph begin",
])
def test_families_stay_silent_on_failures_runtime_lines_and_dumps(message: str) -> None:
    assert load_builtin_profile("sglang").families.classify(message) is None


def test_families_do_not_read_traceback_lines() -> None:
    _, inv = replay_text("[2026-02-22 23:56:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                         "  File \"/x/model_runner.py\", line 3, in start capturing cuda graph begin\n")
    view = inv.rank("TP0")
    assert view is not None and view.phase is P.LAUNCH


@pytest.mark.parametrize(("families", "key"), [
    ({"rules": [{"id": "f", "event": "phase_begin", "phase": "weight_load", "all": ["("]}]},
     "families.rules[0].all[0]"),
    ({"rules": [{"id": "f", "event": "nope", "phase": "weight_load", "all": ["x"]}]}, "families.rules[0].event"),
    ({"rules": [{"id": "f", "event": "phase_begin", "phase": "weight_load", "all": ["x"], "colour": 1}]},
     "families.rules[0].colour"),
    ({"draft_phases": {"weight_load": "nope"}, "rules": []}, "families.draft_phases.weight_load"),
])
def test_a_malformed_family_names_its_key(families: dict[str, object], key: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile({"engine": "x", "rules": [], "families": families}, "x.yaml")
    assert caught.value.key == key


# --- times from other loggers; never 1970 ---------------------------------------------------------


def test_foreign_times() -> None:
    docker = foreign_time("2025-06-25T11:25:58.633123456Z Load weight begin.")
    assert docker is not None and iso(docker.ts) == "2025-06-25T11:25:58.633Z"
    assert "2025-06-25T11:25:58.633123456Z Load weight begin."[docker.end:] == "Load weight begin."
    flashinfer = foreign_time("2025-06-25 11:25:58,633 - INFO - flashinfer.jit: Loading JIT ops: norm")
    assert flashinfer is not None and flashinfer.date == "2025-06-25"
    assert "2025-06-25 11:25:58,633 - INFO - flashinfer.jit: x"[flashinfer.end:] == "flashinfer.jit: x"
    zoned = foreign_time("2025-06-25T13:25:58+02:00 x")
    assert zoned is not None and iso(zoned.ts) == "2025-06-25T11:25:58.000Z"
    glog = "[rank3]:[E0222 23:59:15.123456789 ProcessGroupNCCL.cpp:685] [Rank 3] Watchdog caught"
    assert foreign_time(glog) is None  # no year known: not a date
    dated = foreign_time(glog, "2026-02-22")
    assert dated is not None and iso(dated.ts) == "2026-02-22T23:59:15.123Z" and dated.end == 0
    syslog = foreign_time("Nov 30 01:45:07 gpu1 python[4711]: Load weight begin.", "2026-11-29")
    assert syslog is not None and iso(syslog.ts) == "2026-11-30T01:45:07.000Z"
    assert foreign_time("Loading safetensors checkpoint shards:  50%") is None
    assert foreign_time("2025-13-45T99:00:00Z x") is None


def test_a_paste_without_the_engine_prefix_takes_the_outer_time_and_its_message() -> None:
    _, inv = replay_text("2025-06-25T11:25:58.633123456Z Load weight begin. avail mem=70 GB\n"
                         "2025-06-25T11:26:40.000000000Z Load weight end. type=Qwen2ForCausalLM, avail mem=50 GB\n")
    view = inv.rank("TP0")
    assert view is not None and [s.phase.value for s in view.spans] == ["launch", "weight_load"]
    assert view.phase_ended and iso(inv.started_at) == "2025-06-25T11:25:58.633Z"
    assert view.spans[-1].end is not None and view.spans[-1].start is not None
    assert round(view.spans[-1].end - view.spans[-1].start, 3) == 41.367


def test_the_engine_clock_wins_over_other_loggers_once_seen() -> None:
    splitter = LineSplitter()
    first = splitter.feed(JournalRecord("[2026-02-22 23:55:14 TP0] Init torch distributed begin."))
    other = splitter.feed(JournalRecord("2026-02-22T15:55:20.000Z some UTC logger line"))
    assert first[0].ts == other[0].ts  # the UTC outer stamp is not mixed with the engine's local time


def test_a_paste_with_no_time_at_all_is_one_rank_without_durations_and_no_date(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "paste.log"
    log.write_text("Load weight begin. avail mem=10 GB\nLoad weight end. type=X, avail mem=2 GB\n"
                   "KV Cache is allocated. #tokens: 5, K size: 0.1 GB, V size: 0.1 GB\n"
                   "Capture cuda graph begin. This can take up to several minutes.\n")
    assert main(["replay", str(log)]) == 0
    table = capsys.readouterr().out
    assert "1970" not in table and "no time stamps in the log (no durations)" in table
    assert "TP0   cuda_graph_capture" in table and "0s" not in table
    assert main(["replay", "--json", str(log)]) == 0
    [inv] = json.loads(capsys.readouterr().out)["invocations"]
    assert inv["started_at"] is None and inv["judged_at"] is None and inv["phase"] == "cuda_graph_capture"
    assert [p["name"] for p in inv["ranks"]["TP0"]["phases"]] == ["launch", "weight_load", "kv_cache_alloc",
                                                                  "cuda_graph_capture"]


def test_an_unprefixed_traceback_in_a_paste_is_not_made_tp0s() -> None:
    _, inv = replay_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                         "ImportError: undefined symbol: foo\n")
    assert inv.rank("TP0") is None


def test_times_of_day_without_a_date_keep_durations_but_show_no_date() -> None:
    pipeline, inv = replay_text("[12:01:02 TP0] Load weight begin. avail mem=10 GB\n"
                                "[12:01:32 TP0] Load weight end. type=X, avail mem=2 GB\n")
    assert inv.started_at is not None and not is_dated(inv.started_at)
    judgements = pipeline.judge(inv.last_ts or 0.0)
    table = to_table(judgements, inv.last_ts or 0.0)
    assert "started 12:01:02 (no date)" in table and "30s" in table and "1970" not in table
    assert to_json(judgements, inv.last_ts or 0.0)["invocations"][0]["started_at"] is None


UNDATED_VOCABULARY = [
    "Init torch distributed begin.", "Load weight begin. avail mem=1 GB", "Load weight end. type=X",
    "KV Cache is allocated. #tokens: 5", "Memory pool end. avail mem=1 GB", "Capture cuda graph begin.",
    "Capture cuda graph end. Time elapsed: 1 s", "Capture draft cuda graph begin.", "Loading draft weights",
    "INFO:     Uvicorn running on http://0.0.0.0:30000", "The server is fired up and ready to roll!",
    "Scheduler hit an exception: Traceback (most recent call last):", "RuntimeError: boom",
    "\rLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.17s/it]",
    "[12:00:01 TP1] Load weight begin.", "[rank3]:[E0222 23:59:15.1 x.cpp:1] Watchdog caught collective",
    "[gpu_id=0] Capture cuda graph begin.", "Rank 1: load weight begin.",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(UNDATED_VOCABULARY),
                          st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)),
                min_size=1, max_size=25))
def test_a_random_undated_paste_is_never_dated_1970(lines: list[str]) -> None:
    text = "\n".join(line.replace("\x00", "") for line in lines) + "\n"
    try:
        records = parse_source(text.encode("utf-8")).records
    except Exception:  # noqa: BLE001 - InputError on binary-looking noise: not this test's concern
        return
    pipeline = Pipeline(Config(unit="sglang.service"))
    pipeline.feed_all(records, None)
    snapshot = pipeline.snapshot()
    last = max((inv.last_ts for inv in snapshot.invocations if inv.last_ts is not None), default=None)
    timeless = last is None
    if timeless:
        pipeline = Pipeline(Config(unit="sglang.service"))
        pipeline.feed_all(records, 0.0)
    now = last if last is not None else 0.0
    judgements = pipeline.judge(now)
    assert "1970" not in to_table(judgements, now, timeless=timeless)
    assert "1970" not in json.dumps(to_json(judgements, now))
    assert all(ts is None or ts < DATED_FROM for inv in pipeline.snapshot().invocations
               for ts in (inv.started_at, inv.last_ts))


# --- rank labels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("tags", "label"), [
    (" TP3 PP1", "PP1 TP3"),  # v0.4.6 wrote TP before PP
    (" PP1 TP0", "PP1 TP0"),
    (" DP3 TP3 EP3", "DP3 TP3 EP3"),
    (" TP5 EP5", "TP5 EP5"),
    (" DP1 PP0 ATTN_CP1 MOE_DP0 TP4", "DP1 PP0 ATTN_CP1 MOE_DP0 TP4"),
])
def test_rank_labels_are_canonical(tags: str, label: str) -> None:
    assert canonical_rank(tags) == label


def test_pp_and_dp_labels_are_ranks_of_their_own() -> None:
    _, inv = replay_text("[2026-02-22 23:56:09 PP1 TP0] Capture cuda graph begin. avail mem=20 GB\n"
                         "[2026-02-22 23:56:09 PP0 TP0] Load weight begin. avail mem=20 GB\n"
                         "[2026-02-22 23:56:09 DP3 TP3] KV Cache is allocated. #tokens: 5\n")
    assert {r.rank: r.phase.value for r in inv.ranks} == {
        "PP0 TP0": "weight_load", "PP1 TP0": "cuda_graph_capture", "DP3 TP3": "kv_cache_alloc"}


def test_a_pd_server_names_its_role() -> None:
    pipeline, inv = replay_text(
        "[2026-02-22 23:55:02] server_args=ServerArgs(model_path='m', tp_size=2, disaggregation_mode='decode')\n"
        "[2026-02-22 23:55:03 TP0] Init torch distributed begin.\n")
    assert inv.server is not None and inv.server.role == "decode"
    document = to_json(pipeline.judge(inv.last_ts or 0.0), 0.0)["invocations"][0]
    assert document["server"]["role"] == "decode"
    _, unified = replay_text("[2026-02-22 23:55:02] server_args=ServerArgs(model_path='m', "
                             "disaggregation_mode='null')\n")
    assert unified.server is not None and unified.server.role is None


def test_2024_gpu_tags_and_init_nccl() -> None:
    _, inv = replay_text("[gpu=0] Init nccl begin.\n[gpu_id=1] Init nccl begin.\n"
                         "[gpu_id=1] Load weight begin. avail mem=3 GB\n")
    assert {r.rank: r.phase.value for r in inv.ranks} == {"TP0": "dist_init", "TP1": "weight_load"}


def test_a_second_end_line_of_the_same_load_is_not_the_drafts() -> None:
    _, inv = replay_text("[2026-02-22 23:55:16 TP0] Load weight begin. avail mem=70 GB\n"
                         "[2026-02-22 23:56:07 TP0] Loading weights took 50.71 seconds\n"
                         "[2026-02-22 23:56:07 TP0] Model loading took 17.54 GiB and 51.0 seconds\n")
    assert phases(inv, "TP0") == ["launch", "weight_load"]


@pytest.mark.parametrize("wrapped", [
    "sglang-1  | 2025-06-25T11:25:58.633123456Z Load weight begin. avail mem=70 GB",
    "[pod/sglang-0/server] 2025-06-25T11:25:58.633123456Z Load weight begin. avail mem=70 GB",
])
def test_wrapped_lines_with_an_outer_time_stamp(wrapped: str) -> None:
    _, inv = replay_text(wrapped + "\n")
    assert phases(inv, "TP0") == ["launch", "weight_load"] and iso(inv.started_at) == "2025-06-25T11:25:58.633Z"


@pytest.mark.parametrize(("message", "family", "phase"), [
    ("Capture target verify graph begin. backend=full", "family_graph_begin", "cuda_graph_capture"),
    ("Capture draft extend graph end (step 2). elapsed=6.87 s", "family_graph_end", "draft_cuda_graph_capture"),
])
def test_a_future_rename_without_the_device_word_is_still_a_graph(message: str, family: str, phase: str) -> None:
    found = load_builtin_profile("sglang").families.classify(message)
    assert found is not None and (found.family.id, found.phase.value) == (family, phase)
