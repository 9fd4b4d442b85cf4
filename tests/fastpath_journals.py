"""Generated journals for the catch-up fast path's tests (tests/unit/test_fastpath*.py): a start-up of
a two-rank SGLang server, then serving-heavy and crash-heavy pieces, as journald stores them."""

from __future__ import annotations

import time

from hypothesis import strategies as st

from phasewatch.records import MID_STARTED, MID_STOPPED, JournalRecord

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


def journal(pieces: list[tuple[str | None, str, str]], steps: list[float], startup: bool = True,
            stamped_from: float | None = None) -> list[JournalRecord]:
    """Records as journald would store the pieces: a start-up first, then the pieces in order. With
    `stamped_from`, the journal's clock starts there and each line's prefix shows its time (UTC), as a
    server's do (else every prefix shows STAMP)."""
    out: list[JournalRecord] = []
    clock = [T0 if stamped_from is None else stamped_from]
    invocation = ["inv-1"]

    def add(message: bytes | None, pid: int | None, **fields: object) -> None:
        clock[0] += steps[len(out) % len(steps)]
        if stamped_from is not None and message is not None and message.startswith(b"[" + STAMP.encode()):
            shown = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(clock[0]))
            message = b"[" + shown.encode() + message[1 + len(STAMP):]
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
# where a stamped journal's clock starts: every prefix STAMP, or the clock's time from the afternoon or
# from just before midnight (the date changes under a run)
stamped_from = st.sampled_from([None, T0, T0 + 12_795.5])
