"""The catch-up fast path (stages/fastpath.py): lines that change nothing but last activity skip the
stages, and every output and every piece of the stages' state stays what the full path makes of them.
Generated serving-heavy and crash-heavy journals go through a pipeline with and one without it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath_compare import assert_same, run
from phasewatch.config import Config
from phasewatch.pipeline import Pipeline
from phasewatch.records import MID_STARTED, MID_STOPPED, JournalRecord
from phasewatch.stages.engines.sglang import fast_prefix, find_prefixes

T0 = 1_780_000_000.0
STAMP = "2026-05-28 20:26:40"
STARTUP = [  # (rank or None for the main process, message)
    (None, "server_args=ServerArgs(model_path='m', tp_size=2, dp_size=1, host='127.0.0.1', port=30000)"),
    ("TP0", "Init torch distributed begin."), ("TP1", "Init torch distributed begin."),
    ("TP0", "Init torch distributed ends. mem usage=1.77 GB"),
    ("TP1", "Init torch distributed ends. mem usage=1.77 GB"),
    ("TP0", "Load weight begin. avail mem=78.12 GB"), ("TP1", "Load weight begin. avail mem=78.12 GB"),
    ("TP0", "Load weight end. type=X, dtype=torch.bfloat16, avail mem=40.1 GB, mem usage=38.0 GB."),
    ("TP1", "Load weight end. type=X, dtype=torch.bfloat16, avail mem=40.1 GB, mem usage=38.0 GB."),
    ("TP0", "KV Cache is allocated. #tokens: 1000, K size: 1.0 GB, V size: 1.0 GB"),
    ("TP1", "KV Cache is allocated. #tokens: 1000, K size: 1.0 GB, V size: 1.0 GB"),
    ("TP0", "Capture cuda graph begin. This can take up to several minutes. avail mem=30.0 GB"),
    ("TP1", "Capture cuda graph begin. This can take up to several minutes. avail mem=30.0 GB"),
    ("TP0", "Capture cuda graph end. Time elapsed: 10.0 s. mem usage=1.0 GB. avail mem=29.0 GB."),
    ("TP1", "Capture cuda graph end. Time elapsed: 10.0 s. mem usage=1.0 GB. avail mem=29.0 GB."),
    (None, "INFO:     Started server process [100]"),
    (None, "INFO:     Waiting for application startup."),
    (None, "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"),
    (None, 'INFO:     127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK'),
    (None, "The server is fired up and ready to roll!"),
]
ASGI = ["ERROR:    Exception in ASGI application", "Traceback (most recent call last):",
        '  File "/x/http_server.py", line 611, in generate_request', "    raise ValueError(",
        "ValueError: The input (262401 tokens) is longer than the model's context length (262144 tokens)."]
PIDS = {None: 100, "TP0": 101, "TP1": 102, "TP2": 103}


def prefixed(rank: str | None, text: str) -> str:
    return f"[{STAMP}{' ' + rank if rank else ''}] {text}"


def decode(n: int) -> str:
    return f"Decode batch, #running-req: {n % 37}, #token: {48213 + 97 * n}, token usage: 0.{n % 90 + 10}, " \
           f"gen throughput (token/s): {900 + n % 400}.{n % 97:02d}, #queue-req: {n % 3}"


# One piece of a journal: (rank or None, text, how it is written).
piece = st.one_of(
    st.tuples(st.sampled_from(["TP0", "TP0", "TP1", "TP2"]), st.integers(0, 10_000).map(decode), st.just("line")),
    st.tuples(st.just("TP0"), st.integers(0, 999).map(lambda n: f"Prefill batch, #new-seq: 1, #new-token: {n}"),
              st.just("line")),
    st.tuples(st.none(), st.integers(0, 65_000).map(
        lambda n: f'INFO:     127.0.0.1:{n} - "POST /{"generate" if n % 2 else "v1/chat/completions"} HTTP/1.1" '
                  f'{200 if n % 7 else 400} OK'), st.just("line")),
    st.tuples(st.none(), st.just("asgi"), st.just("asgi")),
    st.tuples(st.sampled_from(["TP0", "TP1"]), st.integers(1, 60).map(lambda n: "Batch dump: " + "{'rid': 1}, " * n),
              st.just("line")),
    st.tuples(st.sampled_from(["TP0", "TP1"]),
              st.just("Scheduler hit an exception: Traceback (most recent call last):"), st.just("line")),
    st.tuples(st.sampled_from([None, "TP0"]), st.sampled_from(
        ['  File "/x/scheduler.py", line 3, in run', "torch.OutOfMemoryError: CUDA out of memory.",
         "Received sigquit from a child process.", "Decode batch ending with a colon:", "caf\u00e9 Decode batch",
         "\x1b[32mDecode batch, #running-req: 1\x1b[0m", "Decode batch, #token: 1\rDecode batch, #token: 2",
         "[2026-05-28 20:26:41 TP1] Decode batch, #token: 3"]), st.just("raw")),
    st.tuples(st.sampled_from(["TP0", "TP1"]), st.integers(0, 99).map(decode), st.just("cut")),
    st.tuples(st.none(), st.sampled_from(["start", "stop"]), st.just("systemd")),
    st.tuples(st.none(), st.just("restart"), st.just("restart")),
    st.tuples(st.sampled_from(["TP0", "TP1"]), st.integers(0, 99).map(decode), st.just("bytes")),
)


def journal(pieces: list[tuple[str | None, str, str]], steps: list[float], startup: bool = True) -> list[JournalRecord]:
    """Records as journald would store the pieces: a start-up first, then the pieces in order."""
    out: list[JournalRecord] = []
    clock = [T0]
    invocation = ["inv-1"]

    def add(message: bytes | None, pid: int | None, **fields: object) -> None:
        clock[0] += steps[len(out) % len(steps)]
        out.append(JournalRecord(message=message, realtime=clock[0], pid=pid, invocation_id=invocation[0],
                                 **fields))  # type: ignore[arg-type]

    def start() -> None:
        out.append(JournalRecord(message=b"Started sglang.service.", realtime=clock[0], pid=1, message_id=MID_STARTED,
                                 unit="sglang.service", extra={"INVOCATION_ID": invocation[0]}))
        if startup:
            for rank, text in STARTUP:
                add(prefixed(rank, text).encode(), PIDS[rank])

    start()
    for rank, text, how in pieces:
        pid = PIDS[rank]
        if how == "line":
            add(prefixed(rank, text).encode(), pid)
        elif how == "bytes":
            add(prefixed(rank, text).encode() + b" \xff\xfe", pid)
        elif how == "raw":
            add(text.encode(), pid)
        elif how == "cut":  # journald cut the line where another process wrote
            whole = prefixed(rank, text).encode()
            add(whole[:40], pid, line_break="pid-change")
            add(whole[40:], pid)
        elif how == "asgi":
            for line in ASGI:
                add(prefixed(None, line).encode() if line.startswith("ERROR") else line.encode(), pid)
        elif how == "systemd":
            mid = MID_STARTED if text == "start" else MID_STOPPED
            out.append(JournalRecord(message=text.encode(), realtime=clock[0], pid=1, message_id=mid,
                                     unit="sglang.service", extra={"INVOCATION_ID": invocation[0]}))
        else:  # the unit started again: a new invocation, its start-up, then on
            invocation[0] = f"inv-{len(out)}"
            start()
    return out


steps = st.lists(st.sampled_from([0.0, 0.001, 0.25, 3.0, -0.5]), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None)
@given(st.lists(piece, max_size=60), steps, st.booleans())
def test_fast_and_full_paths_agree_on_generated_journals(pieces: list[tuple[str | None, str, str]],
                                                         step: list[float], startup: bool) -> None:
    assert_same(journal(pieces, step, startup))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=50, max_size=300), st.lists(piece, max_size=10))
def test_a_serving_heavy_journal_takes_the_fast_path_and_agrees(batches: list[int], others: list[Any]) -> None:
    pieces = [("TP0", decode(n), "line") for n in batches] + others
    taken = assert_same(journal(pieces, [0.001]))
    assert taken >= len(batches) - 2  # the first Decode line after ready moves the unit to serving


def test_a_crash_heavy_journal_agrees() -> None:
    pieces: list[tuple[str | None, str, str]] = []
    for _ in range(6):
        pieces += [("TP0", decode(n), "line") for n in range(30)]
        pieces += [("TP1", "Batch dump: " + "{'rid': 1}, " * 300, "line"), (None, "asgi", "asgi")]
        pieces += [("TP0", "Scheduler hit an exception: Traceback (most recent call last):", "line"),
                   ("TP0", '  File "/x/scheduler.py", line 3, in run', "raw"),
                   ("TP0", "torch.OutOfMemoryError: CUDA out of memory.", "raw"), (None, "stop", "systemd"),
                   (None, "restart", "restart")]
    assert_same(journal(pieces, [0.002, 0.01]))


def test_the_fast_prefix_is_the_first_prefix_find_prefixes_finds() -> None:
    for line in ("[2026-05-28 20:26:40 TP0] Decode batch", "[2026-05-28 20:26:40.123 DP1 TP3 EP3] x",
                 "[2026-05-28 20:26:40] INFO:     127.0.0.1:1 - x", "[2026-05-28 20:26:40 TP0]Decode"):
        fast = fast_prefix(line.encode())
        assert fast is not None and fast == find_prefixes(line)[0]
    for line in ("[20:26:40 TP0] Decode batch", "[gpu_id=3] x", "Rank 1: load weight begin.",
                 "x [2026-05-28 20:26:40] y"):
        assert fast_prefix(line.encode()) is None


def test_lines_that_change_more_than_last_activity_take_the_full_path() -> None:
    records = journal([("TP0", decode(1), "line")], [0.001])
    pipeline = Pipeline(Config(unit="sglang.service"), default_year=2026)
    for record in records:
        pipeline.feed(record, None)
    assert pipeline.fast is not None
    assert pipeline.current() is not None and pipeline.current().state.value == "serving"  # type: ignore[union-attr]
    taken = pipeline.fast.taken  # (not the first Decode line after ready: it moved the unit to serving)
    later = replace(records[-1], realtime=T0 + 100)
    pipeline.feed(later, None)
    assert pipeline.fast.taken == taken + 1
    for text in ("Load weight begin. avail mem=1 GB", "Scheduler hit an exception: Traceback (most recent call last):"):
        pipeline.feed(replace(later, message=prefixed("TP0", text).encode()), None)
    pipeline.feed(replace(later, message=prefixed("TP3", decode(2)).encode(), pid=104), None)  # a rank not seen yet
    assert pipeline.fast.taken == taken + 1


def test_the_fast_path_is_off_where_it_cannot_be_exact() -> None:
    assert Pipeline(Config(unit="u"), fast=False).fast is None
    assert run([], True, engine="vllm").taken == 0  # no fast prefix for vLLM's grammar yet
    from phasewatch.stages.ruletally import RuleTally

    assert Pipeline(Config(unit="u"), RuleTally()).fast is None  # replay --rules sees every line
