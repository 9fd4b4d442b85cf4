"""vLLM's JSON logs (engines/_json_logs.py): each NDJSON record is read as the text line vLLM
would have printed; a pasted application JSON line is a text log, never journald's lost lines; and
the simulators' own OOM start-ups get a remedy naming their arguments."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.config.load import Config
from phasewatch.engines._json_logs import text_of_json_line
from phasewatch.pipeline import Pipeline
from phasewatch.records import JournalRecord, record_from_fields
from phasewatch.sources.journal.formats import parse_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from sglang_sim import Faults, build, journal_json  # noqa: E402

NAMES = st.sampled_from(["Worker_TP0", "Worker_TP3", "EngineCore_DP0", "APIServer", "VLLM::Worker_TP1"])


def record(name: str, pid: int, message: str, level: str = "INFO", when: str = "2026-03-01 10:03:00,123") -> str:
    return json.dumps({"asctime": when, "levelname": level, "name": "vllm.v1.worker.gpu_worker", "message": message,
                       "processName": name.rsplit("::", 1)[-1], "process": pid, "vllm_process_name": name,
                       "vllm_pid": pid})


@settings(max_examples=40, deadline=None, derandomize=True)
@given(NAMES, st.integers(1, 99999), st.sampled_from(["INFO", "DEBUG", "WARNING", "ERROR"]),
       st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80))
def test_a_json_record_reads_as_vllms_text_line(name: str, pid: int, level: str, message: str) -> None:
    text = text_of_json_line(record(name, pid, message, level))
    assert text == f"({name.rsplit('::', 1)[-1]} pid={pid}) {level} 03-01 10:03:00 [gpu_worker.py:1] {message}"


def test_not_a_log_record_is_left_as_it_is() -> None:
    for line in ('{"MESSAGE": "x", "__CURSOR": "s=1"}', '{"message": 3}', '{"message": "x", "levelname": "LOUD"}',
                 "{not json", '["message"]'):
        assert text_of_json_line(line) is None


def test_an_exception_in_the_record_comes_out_as_its_lines() -> None:
    line = json.dumps({"asctime": "2026-03-01 10:03:00,001", "levelname": "ERROR", "name": "vllm.v1.executor",
                       "message": "WorkerProc failed to start.", "vllm_process_name": "Worker_TP1", "vllm_pid": 8,
                       "exc_info": "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                                   "torch.OutOfMemoryError: CUDA out of memory."})
    text = text_of_json_line(line)
    assert text is not None
    assert text.splitlines()[-1] == "(Worker_TP1 pid=8) torch.OutOfMemoryError: CUDA out of memory."


VLLM_START = [record("APIServer", 1, "non-default args: {'model': '/m', 'tensor_parallel_size': 2, "
                                     "'gpu_memory_utilization': 0.93}", when="2026-03-01 10:00:00,000"),
              record("Worker_TP0", 7, "Starting to load model /m...", when="2026-03-01 10:01:00,000"),
              record("Worker_TP1", 8, "Starting to load model /m...", when="2026-03-01 10:01:00,000"),
              record("Worker_TP1", 8, "Available KV cache memory: 10.50 GiB", when="2026-03-01 10:03:00,000"),
              record("Worker_TP1", 8, "WorkerProc failed to start.", "ERROR", "2026-03-01 10:03:01,000"),
              record("Worker_TP1", 8, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                     "ERROR", "2026-03-01 10:03:01,000")]


def _judged(records: list[JournalRecord]) -> tuple[dict[str, str], list[tuple[str, str | None, str | None]], str]:
    pipeline = Pipeline(Config(unit="vllm.service", engine="vllm", crash_cause_wait=0.0), default_year=2026)
    pipeline.feed_all(records, now=None)
    [judgement] = pipeline.judge(1772359381.0 + 60)
    return ({r.rank: r.phase.value for r in judgement.invocation.ranks},
            [(v.kind, v.rank, v.remedy.id if v.remedy else None) for v in judgement.verdicts], judgement.outcome)


def test_pasted_ndjson_is_a_text_log_and_judged_as_its_text() -> None:
    pasted = parse_source(("\n".join(VLLM_START) + "\n").encode(), default_year=2026)
    assert pasted.format != "json" and not pasted.warnings
    text = [text_of_json_line(line) for line in VLLM_START]
    as_text = parse_source(("\n".join(t for t in text if t) + "\n").encode(), default_year=2026)
    phases, verdicts, outcome = _judged(list(pasted.records))
    assert (phases, verdicts, outcome) == _judged(list(as_text.records))
    assert phases["TP1"] == "kv_cache_alloc" and outcome == "crashed"
    assert ("crashed", "TP1", "oom_kv") in verdicts
    assert not any(kind == "lines_lost" for kind, _, _ in verdicts)


def test_ndjson_in_the_journal_is_read_as_its_text() -> None:
    records = [JournalRecord(line, 1772359200.0 + i, pid=7 + i % 2, invocation_id="i") for i, line in
               enumerate(VLLM_START)]
    phases, verdicts, _ = _judged(records)
    assert phases["TP1"] == "kv_cache_alloc"
    assert ("crashed", "TP1", "oom_kv") in verdicts


def test_the_sglang_simulators_oom_gets_a_remedy_with_its_arguments() -> None:
    """tools/sglang_sim.py's --oom TP5:cuda_graph_capture as journald holds it: the remedy names the
    simulated server's cuda_graph_max_bs=512 and mem_fraction_static=0.85, and what capture needed."""
    plan = build(0.01, Faults(oom={5: "cuda_graph_capture"}))
    pipeline = Pipeline(Config(unit="sglang-kimi.service", crash_cause_wait=0.0))
    pipeline.feed_all([record_from_fields(e) for e in journal_json(plan)], now=None)
    inv = pipeline.snapshot().current
    assert inv is not None and inv.last_ts is not None
    [crash] = [v for j in pipeline.judge(inv.last_ts + 5) for v in j.verdicts if v.kind == "crashed"]
    assert crash.remedy is not None and crash.remedy.id == "oom_capture"
    assert "--cuda-graph-max-bs (512 now)" in crash.remedy.text and "(0.85 now)" in crash.remedy.text
    assert crash.remedy.arguments == {"cuda_graph_max_bs": "512", "mem_fraction_static": "0.85"}
