"""Stage 1 (lines.py): journal records -> logical lines. Pure: no I/O, no clock."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.engines.sglang import find_prefixes
from phasewatch.prefixes import canonical_rank
from phasewatch.records import JournalRecord, Line, LineKind, Progress
from phasewatch.stages.s1_read import lines as lines_module
from phasewatch.stages.s1_read.lines import SEGMENT_SPLIT_RE, LineSplitter, decode, parse_progress, strip_ansi

T_2359_15 = 1771804755.0  # 2026-02-22 23:59:15 UTC (prefix times carry no zone; read as UTC)
T_2356_09 = 1771804569.0  # 2026-02-22 23:56:09 UTC
T_2356_15 = 1771804575.0  # 2026-02-22 23:56:15 UTC
RT = 1771804600.5  # a __REALTIME_TIMESTAMP

R, C, P = LineKind.RECORD, LineKind.CONTINUATION, LineKind.PROGRESS


def rec(message: bytes | str | None, pid: int | None = 100, line_break: str | None = None,
        realtime: float | None = None, inv: str | None = None) -> JournalRecord:
    return JournalRecord(message=message, realtime=realtime, pid=pid, invocation_id=inv,
                         line_break=line_break)


def feed(*records: JournalRecord) -> list[Line]:
    """A fresh splitter fed the records in order, then flushed."""
    splitter = LineSplitter()
    out = [line for record in records for line in splitter.feed(record)]
    return out + splitter.flush()


def kinds(lines: list[Line]) -> list[tuple[LineKind, str | None, str]]:
    return [(line.kind, line.rank, line.text) for line in lines]


def texts(lines: list[Line]) -> str:
    return "".join(line.text for line in lines)


def frame(desc: str, n: int, total: int, percent: int, bs: int | None = None,
          avail: float | None = None) -> Progress:
    return Progress(desc=desc, n=n, total=total, percent=percent, bs=bs, avail_mem_gb=avail)


# --- rank prefixes -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "rank", "message", "ts"), [
    ("[2026-02-22 23:59:15 TP3] Load weight begin.", "TP3", "Load weight begin.", T_2359_15),
    ("[2026-02-22 23:59:15 DP0 TP3] Load weight begin.", "DP0 TP3", "Load weight begin.", T_2359_15),
    ("[2026-02-22 23:59:15 PP1 TP3] Load weight begin.", "PP1 TP3", "Load weight begin.", T_2359_15),
    ("[2026-02-22 23:59:15 TP3 PP1] Load weight begin.", "PP1 TP3", "Load weight begin.", T_2359_15),
    ("[2026-02-22 23:59:15 ATTN_CP1 TP3] x", "ATTN_CP1 TP3", "x", T_2359_15),
    ("[2026-02-22 23:59:15 MOE_DP1 TP3] x", "MOE_DP1 TP3", "x", T_2359_15),
    ("[2026-02-22 23:59:15 TP3 EP3] x", "TP3 EP3", "x", T_2359_15),
    ("[2026-02-22 23:59:15 DP3 TP3 EP3] x", "DP3 TP3 EP3", "x", T_2359_15),
    ("[2026-02-22 23:59:15 DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6] x", "DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6", "x",
     T_2359_15),
    ("[2026-02-22 23:59:15 EP6 TP5 MOE_DP4 ATTN_CP3 PP2 DP1] x", "DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6", "x",
     T_2359_15),
    ("[2026-02-22 23:59:15.123 TP3] x", "TP3", "x", 1771804755.123),
    ("[gpu_id=2] Load weight begin.", "TP2", "Load weight begin.", None),
    ("Rank 1: load weight begin.", "TP1", "load weight begin.", None),
    ("[2026-02-22 23:59:15] The server is fired up and ready to roll!", None,
     "The server is fired up and ready to roll!", T_2359_15),
], ids=["tp", "dp-tp", "pp-tp", "old-order-tp-pp", "attn-cp", "moe-dp", "tp-ep", "dp-tp-ep", "all-six",
        "all-six-shuffled", "milliseconds", "gpu-id-2024", "rank-v0.1", "untagged"])
def test_prefix_variants(text: str, rank: str | None, message: str, ts: float | None) -> None:
    assert feed(rec(text, pid=7)) == [
        Line(text=text, message=message, kind=R, rank=rank, ts=ts, pid=7, has_prefix=True, record_id=1)
    ]


def test_time_only_prefix_2024_takes_the_date_of_the_last_dated_line() -> None:
    out = feed(rec("[2024-07-01 09:00:00] server_args=ServerArgs()"),
               rec("[12:01:02 TP3] Init torch distributed begin."))
    assert [(line.rank, line.message, line.ts, line.has_prefix) for line in out] == [
        (None, "server_args=ServerArgs()", 1719824400.0, True),
        ("TP3", "Init torch distributed begin.", 1719835262.0, True),  # 2024-07-01 12:01:02
    ]


def test_journal_time_wins_over_prefix_time_and_unprefixed_lines_keep_the_last_time() -> None:
    out = feed(rec("[2026-02-22 23:59:15 TP3] a", realtime=RT), rec("[2026-02-22 23:59:15 TP3] b"),
               rec("[Gloo] Rank 3 is connected"))
    assert [line.ts for line in out] == [RT, T_2359_15, T_2359_15]


def test_untagged_prefix_found_after_other_text_keeps_that_text() -> None:
    out = feed(rec("svc  | [2026-02-22 23:59:15 TP3] Load weight begin."))
    assert kinds(out) == [(R, "TP3", "svc  | [2026-02-22 23:59:15 TP3] Load weight begin.")]
    assert out[0].message == "Load weight begin."


def test_two_records_glued_in_one_entry_are_split() -> None:
    out = feed(rec("[2026-02-22 23:59:15 TP3] a[2026-02-22 23:59:15 TP4] b"))
    assert [(line.rank, line.text, line.message, line.record_id) for line in out] == [
        ("TP3", "[2026-02-22 23:59:15 TP3] a", "a", 1),
        ("TP4", "[2026-02-22 23:59:15 TP4] b", "b", 2),
    ]


@pytest.mark.parametrize(("tags", "rank"), [
    (" TP3", "TP3"), (" TP3 DP0", "DP0 TP3"), (" EP7 TP07", "TP7 EP7"), ("", None), (" XX1", None),
], ids=["one", "reordered", "leading-zero", "empty", "unknown"])
def test_canonical_rank(tags: str, rank: str | None) -> None:
    assert canonical_rank(tags) == rank


def test_find_prefixes_positions() -> None:
    segment = "bar[2026-02-22 23:59:15 TP3] a [gpu_id=1] b"
    assert [(p.start, p.end, p.rank, p.ts) for p in find_prefixes(segment)] == [
        (3, 29, "TP3", T_2359_15), (31, 42, "TP1", None)]
    assert find_prefixes("[Gloo] Rank 0 is connected to 7 peer ranks") == []
    assert find_prefixes("Capture cuda graph bs [1, 2, 3]") == []


# --- tqdm ----------------------------------------------------------------------------------------

CAPTURE = "Capturing batches (bs={} avail_mem={} GB)"
BAR_ENTRY = (
    "\r  0%|          | 0/23 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=48 avail_mem=20.12 GB):   0%|          | 0/23 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=48 avail_mem=20.12 GB):   4%|▍         | 1/23 [00:00<00:09,  2.44it/s]"
    "\rCapturing batches (bs=44 avail_mem=20.08 GB):   4%|▍         | 1/23 [00:00<00:09,  2.44it/s]"
    "\rCapturing batches (bs=1 avail_mem=19.24 GB): 100%|██████████| 23/23 [00:09<00:00,  2.44it/s]"
)


def test_glued_tqdm_frames_become_one_progress_line_each() -> None:
    out = feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda graph begin."), rec(BAR_ENTRY))
    assert out[0].kind is R
    bars = out[1:]
    assert [line.progress for line in bars] == [
        frame("", 0, 23, 0),
        frame(CAPTURE.format(48, "20.12"), 0, 23, 0, 48, 20.12),
        frame(CAPTURE.format(48, "20.12"), 1, 23, 4, 48, 20.12),
        frame(CAPTURE.format(44, "20.08"), 1, 23, 4, 44, 20.08),
        frame(CAPTURE.format(1, "19.24"), 23, 23, 100, 1, 19.24),
    ]
    assert [line.text for line in bars] == BAR_ENTRY.split("\r")[1:]
    assert {(line.kind, line.rank, line.message == line.text, line.has_prefix) for line in bars} == {
        (P, "TP0", True, False)}
    assert len({line.record_id for line in out}) == 6


def test_shard_bar_entry() -> None:
    text = "Loading safetensors checkpoint shards:  50% Completed | 15/30 [00:24<00:24,  1.63s/it]"
    out = feed(rec("\r" + text), rec(""))
    assert kinds(out) == [(P, None, text)]
    assert out[0].progress == frame("Loading safetensors checkpoint shards", 15, 30, 50)


def test_bar_glued_before_a_record_gives_a_progress_line_then_the_record() -> None:
    bar = "Capturing batches (bs=1 avail_mem=19.24 GB): 100%|██████████| 23/23 [00:09<00:00,  2.44it/s]"
    record = "[2026-02-22 23:56:19 TP0] Capture cuda graph end. Time elapsed: 10.12 s."
    out = feed(rec("\r" + bar + record))
    assert kinds(out) == [(P, None, bar), (R, "TP0", record)]
    assert out[0].progress == frame(CAPTURE.format(1, "19.24"), 23, 23, 100, 1, 19.24)
    assert out[1].message == "Capture cuda graph end. Time elapsed: 10.12 s."
    assert out[1].has_prefix


def test_bar_with_a_cxx_error_glued_after_it_gives_two_lines() -> None:
    bar = "Capturing batches (bs=48 avail_mem=20.12 GB):   0%|          | 0/23 [00:00<?, ?it/s]"
    error = "CUDA error (/src/csrc/x.cu:12): no kernel image is available for execution on the device"
    out = feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda graph begin."), rec("\r" + bar + error))
    assert kinds(out[1:]) == [(P, "TP0", bar), (R, "TP0", error)]
    assert out[1].progress == frame(CAPTURE.format(48, "20.12"), 0, 23, 0, 48, 20.12)
    assert out[2].message == error and not out[2].has_prefix
    assert out[2].record_id != out[1].record_id


@pytest.mark.parametrize("segment", [
    "Load weight begin. avail mem=137.97 GB",
    "50% done",
    "ratio 12% of 23/23",
], ids=["no-percent", "no-bar", "no-bar-pipes"])
def test_parse_progress_rejects_non_bars(segment: str) -> None:
    assert parse_progress(segment) is None


def test_parse_progress_returns_where_the_frame_ends() -> None:
    segment = "  0%|          | 0/23 [00:00<?, ?it/s]tail"
    assert parse_progress(segment) == (frame("", 0, 23, 0), len(segment) - 4)


# --- pid-change and line-max splits --------------------------------------------------------------


def test_pid_change_split_frames_are_reassembled_and_the_tail_is_held() -> None:
    splitter = LineSplitter()
    begin = splitter.feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda graph begin.", pid=100))
    assert kinds(begin) == [(R, "TP0", "[2026-02-22 23:56:09 TP0] Capture cuda graph begin.")]

    first = splitter.feed(rec("\rCapturing batches (bs=254 avail_mem=3.1 GB):   8%|#  | 2/23"
                              "\rCapturing batches (bs=253 av", pid=100, line_break="pid-change"))
    assert kinds(first) == [(P, "TP0", "Capturing batches (bs=254 avail_mem=3.1 GB):   8%|#  | 2/23")]
    assert first[0].progress == frame(CAPTURE.format(254, "3.1"), 2, 23, 8, 254, 3.1)

    other = splitter.feed(rec("[2026-02-22 23:56:09 TP1] Capture cuda graph begin.", pid=200))
    assert kinds(other) == [(R, "TP1", "[2026-02-22 23:56:09 TP1] Capture cuda graph begin.")]

    rest = splitter.feed(rec("ail_mem=3.0 GB):  12%|#  | 3/23 [00:01<00:09, 2.4it/s]", pid=100))
    whole = "Capturing batches (bs=253 avail_mem=3.0 GB):  12%|#  | 3/23 [00:01<00:09, 2.4it/s]"
    assert kinds(rest) == [(P, "TP0", whole)]
    assert rest[0].progress == frame(CAPTURE.format(253, "3.0"), 3, 23, 12, 253, 3.0)
    assert rest[0].pid == 100
    assert splitter.flush() == []


def test_bar_rank_comes_from_the_pid_once_it_printed_a_prefix() -> None:
    bar = "\r  0%|          | 0/23 [00:00<?, ?it/s]"
    splitter = LineSplitter()
    before = splitter.feed(rec(bar, pid=100))
    splitter.feed(rec("[2026-02-22 23:56:09 TP1] x", pid=200))
    after_other = splitter.feed(rec(bar, pid=100))
    splitter.feed(rec("[2026-02-22 23:56:09 TP0] x", pid=100))
    after_own = splitter.feed(rec(bar, pid=100))
    new_invocation = splitter.feed(rec(bar, pid=100, inv="b" * 32))
    assert [lines[0].rank for lines in (before, after_other, after_own, new_invocation)] == [
        None, None, "TP0", None]
    assert (splitter.pid_rank(None, 100), splitter.pid_rank(None, 200), splitter.pid_rank(None, 300),
            splitter.pid_rank("b" * 32, 100)) == ("TP0", "TP1", None, None)


def test_pid_change_without_a_pid_cannot_be_joined_and_is_emitted_at_once() -> None:
    splitter = LineSplitter()
    out = splitter.feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda gra", pid=None, line_break="pid-change"))
    assert kinds(out) == [(R, "TP0", "[2026-02-22 23:56:09 TP0] Capture cuda gra")]
    assert splitter.flush() == []


def test_line_max_entries_are_rejoined_into_one_record() -> None:
    prefix = "[2026-02-22 23:55:02 TP0] "
    body = "server_args=ServerArgs(" + "".join(f"arg{i}={i}, " for i in range(6000))
    whole = (prefix + body)[: 60 * 1024 - 1] + ")"
    assert len(whole) == 60 * 1024
    cut1, cut2 = 24 * 1024, 48 * 1024
    splitter = LineSplitter()
    assert splitter.feed(rec(whole[:cut1], line_break="line-max")) == []
    assert splitter.feed(rec(whole[cut1:cut2], line_break="line-max")) == []
    out = splitter.feed(rec(whole[cut2:], realtime=RT))
    assert out == [Line(text=whole, message=whole[len(prefix):], kind=R, rank="TP0", ts=RT, pid=100,
                        has_prefix=True, record_id=1)]
    assert splitter.flush() == []


def test_line_max_cut_inside_a_utf8_character_is_decoded_whole() -> None:
    # journald cuts bytes: here inside the 3-byte '█' of a bar, so both halves arrive as bytes.
    text = "Capturing batches (bs=1 avail_mem=19.24 GB): 100%|██████████| 23/23 [00:09<00:00,  2.44it/s]"
    raw = ("\r" + text).encode()
    cut = raw.index("█".encode()) + 1
    out = feed(rec(raw[:cut], line_break="line-max"), rec(raw[cut:]))
    assert kinds(out) == [(P, None, text)]


def test_oversized_held_tail_is_released_as_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_module, "MAX_PENDING_CHARS", 8)
    splitter = LineSplitter()
    out = splitter.feed(rec("short\rmuch too long", line_break="line-max"))
    assert [line.text for line in out] == ["short", "much too long"]
    assert [line.text for line in splitter.feed(rec("tail", line_break="line-max"))] == []
    assert [line.text for line in splitter.flush()] == ["tail"]


# --- decoding and escapes ------------------------------------------------------------------------


def test_invalid_utf8_becomes_replacement_characters() -> None:
    out = feed(rec(b"[2026-02-22 23:59:15 TP3] caf\xc3 \xff\xfe ok"))
    assert kinds(out) == [(R, "TP3", "[2026-02-22 23:59:15 TP3] caf\ufffd \ufffd\ufffd ok")]
    assert out[0].message == "caf\ufffd \ufffd\ufffd ok"


def test_str_and_bytes_messages_give_the_same_lines() -> None:
    text = "[2026-02-22 23:59:15 TP3] Load weight begin. avail mem=137.97 GB — ok"
    assert feed(rec(text)) == feed(rec(text.encode()))


def test_message_none_gives_no_lines() -> None:
    assert feed(rec(None)) == []
    assert decode(None) == "" and decode(b"\xff") == "\ufffd" and decode("x") == "x"


def test_ansi_escapes_are_stripped_from_text_and_message() -> None:
    out = feed(rec("\x1b[32m[2026-02-22 23:56:15 TP3]\x1b[0m Load \x1b]0;title\x07weight begin.\x1b[1;31m"))
    assert kinds(out) == [(R, "TP3", "[2026-02-22 23:56:15 TP3] Load weight begin.")]
    assert out[0].message == "Load weight begin."


def test_ansi_coloured_bar_still_parses() -> None:
    out = feed(rec("\r\x1b[32mCapturing batches (bs=8 avail_mem=2.5 GB):  50%|#####     | 1/2\x1b[0m"))
    assert kinds(out) == [(P, None, "Capturing batches (bs=8 avail_mem=2.5 GB):  50%|#####     | 1/2")]
    assert out[0].progress == frame(CAPTURE.format(8, "2.5"), 1, 2, 50, 8, 2.5)


@pytest.mark.parametrize(("raw", "clean"), [
    ("\x1b[32mgreen\x1b[0m", "green"),
    ("\x1b[1;31;48;5;236mbold\x1b[K", "bold"),
    ("\x1b]0;window title\x07text", "text"),
    ("\x1b]8;;http://example.invalid\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("no escapes [1;31m", "no escapes [1;31m"),
], ids=["sgr", "sgr-256-erase", "osc-bel", "osc-st", "none"])
def test_strip_ansi(raw: str, clean: str) -> None:
    assert strip_ansi(raw) == clean


# --- tracebacks and inherited ranks --------------------------------------------------------------

TRACEBACK = [
    '  File "/opt/sglang/srt/managers/scheduler.py", line 3101, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "RuntimeError: x",
]
HEADER = "[2026-02-22 23:56:15 TP3] Scheduler hit an exception: Traceback (most recent call last):"


@pytest.mark.parametrize("pid", [4242, None], ids=["journal-pid", "pasted-log"])
def test_traceback_lines_continue_the_record_that_opened_them(pid: int | None) -> None:
    out = feed(rec(HEADER, pid=pid), *(rec(line, pid=pid) for line in TRACEBACK),
               rec("[2026-02-22 23:56:16 TP3] next record", pid=pid))
    assert kinds(out) == [(R, "TP3", HEADER), *((C, "TP3", line) for line in TRACEBACK),
                          (R, "TP3", "[2026-02-22 23:56:16 TP3] next record")]
    header_id = out[0].record_id
    assert [line.record_id for line in out[:-1]] == [header_id] * (1 + len(TRACEBACK))
    assert out[-1].record_id != header_id
    assert [line.message for line in out[1:-1]] == TRACEBACK
    assert not any(line.has_prefix for line in out[1:-1])


def test_traceback_of_one_pid_is_not_joined_by_another_pids_lines() -> None:
    out = feed(rec(HEADER, pid=1), rec("[2026-02-22 23:56:15 TP2] x", pid=2), rec(TRACEBACK[0], pid=1),
               rec("[Gloo] Rank 2 is connected to 7 peer ranks", pid=2), rec(TRACEBACK[-1], pid=1))
    assert [(line.kind, line.rank, line.record_id) for line in out] == [
        (R, "TP3", 1), (R, "TP2", 2), (C, "TP3", 1), (R, "TP2", 3), (C, "TP3", 1)]


def test_docker_compose_wrapped_traceback_lines_are_continuations() -> None:
    frame_line = '  File "/opt/sglang/srt/managers/scheduler.py", line 3101, in run_scheduler_process'
    out = feed(rec("svc  | " + HEADER), rec("svc  | " + frame_line), rec("svc  | RuntimeError: x"))
    assert kinds(out) == [(R, "TP3", "svc  | " + HEADER), (C, "TP3", "svc  | " + frame_line),
                          (C, "TP3", "svc  | RuntimeError: x")]
    assert [line.message for line in out] == [HEADER.split("] ", 1)[1], frame_line, "RuntimeError: x"]
    assert {line.record_id for line in out} == {1}


def test_unprefixed_line_takes_its_pids_rank() -> None:
    gloo = "[Gloo] Rank 2 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7"
    out = feed(rec(gloo, pid=5), rec("[2026-02-22 23:55:14 TP2] Init torch distributed begin.", pid=5),
               rec(gloo, pid=5), rec(gloo, pid=6))
    assert [(line.kind, line.rank, line.pid, line.has_prefix, line.record_id) for line in out] == [
        (R, None, 5, False, 1), (R, "TP2", 5, True, 2), (R, "TP2", 5, False, 3), (R, None, 6, False, 4)]


def test_unprefixed_line_without_a_pid_has_no_rank() -> None:
    out = feed(rec("[2026-02-22 23:55:14 TP2] Init torch distributed begin.", pid=None),
               rec("[Gloo] Rank 2 is connected to 7 peer ranks", pid=None))
    assert kinds(out) == [(R, "TP2", "[2026-02-22 23:55:14 TP2] Init torch distributed begin."),
                          (R, None, "[Gloo] Rank 2 is connected to 7 peer ranks")]


# --- flush ---------------------------------------------------------------------------------------


def test_flush_releases_a_held_fragment_once_with_the_time_of_its_entry() -> None:
    splitter = LineSplitter()
    splitter.feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda graph begin.", pid=100, realtime=RT))
    fragment = b"\rCapturing batches (bs=48 avail_mem=20.12 GB):   4%|\xe2\x96"
    assert splitter.feed(rec(fragment, pid=100, line_break="pid-change", realtime=RT + 1)) == []
    splitter.feed(rec("[2026-02-22 23:56:20 TP1] later line of another rank", pid=200, realtime=RT + 50))
    out = splitter.flush()
    assert kinds(out) == [(R, "TP0", "Capturing batches (bs=48 avail_mem=20.12 GB):   4%|\ufffd")]
    assert (out[0].pid, out[0].ts) == (100, RT + 1)
    assert splitter.flush() == []


def test_flush_without_journal_time_uses_the_fragments_prefix_time() -> None:
    splitter = LineSplitter()
    splitter.feed(rec("[2026-02-22 23:59:15 TP1] later", pid=200))
    assert splitter.feed(rec("[2026-02-22 23:56:09 TP0] Capture cuda gra", line_break="pid-change")) == []
    out = splitter.flush()
    assert [(line.rank, line.message, line.ts) for line in out] == [("TP0", "Capture cuda gra", T_2356_09)]


# --- properties ----------------------------------------------------------------------------------

TOKENS = st.sampled_from([
    "a", "é", "█", " ", ":", "|", "%", "/", "[", "]", "0", "7", "\r", "\n", "\r\n", "\x1b", "\x07", "\\",
    "[2026-02-22 23:59:15 TP3] ", "[2026-02-22 23:59:15.123 DP0 TP1 EP1] ", "[2026-02-22 23:59:15] ",
    "[12:01:02 TP3] ", "[gpu_id=2] ", "Rank 1: ", "svc  | ", "\x1b[32m", "\x1b[0m", "\x1b]0;t\x07",
    "Capturing batches (bs=4 avail_mem=1.5 GB):  12%|#  | 3/23 [00:01<00:09, 2.4it/s]",
    "  0%|          | 0/23", " 50% Completed | 15/30 [00:24<00:24,  1.63s/it]",
    "Traceback (most recent call last):", '  File "x.py", line 1, in f', "RuntimeError: x",
    "hit an exception: ",
])
LOGLIKE = st.lists(TOKENS, max_size=25).map("".join)
MESSAGES = st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=200), LOGLIKE,
                     LOGLIKE.map(str.encode), st.binary(max_size=40).map(lambda b: b"\r\n[" + b))
LINE_BREAKS = st.sampled_from([None, "line-max", "pid-change", "eof"])
RECORDS = st.builds(JournalRecord, message=MESSAGES, pid=st.none() | st.integers(0, 3),
                    line_break=LINE_BREAKS, realtime=st.none() | st.floats(0, 2e9),
                    invocation_id=st.sampled_from([None, "a" * 32]))


def expected_text(message: str) -> str:
    return "".join(strip_ansi(part) for part in SEGMENT_SPLIT_RE.split(message))


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORDS, max_size=8))
def test_feed_never_raises(records: list[JournalRecord]) -> None:
    splitter = LineSplitter()
    for record in records:
        for line in splitter.feed(record):
            assert "\r" not in line.text and "\n" not in line.text
    splitter.flush()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), LOGLIKE, st.binary(), LOGLIKE.map(str.encode)), st.none() | st.integers(0, 3))
def test_no_character_is_lost(message: bytes | str, pid: int | None) -> None:
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    assert texts(LineSplitter().feed(rec(message, pid=pid))) == expected_text(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(LOGLIKE, st.text(max_size=60)), st.data())
def test_pid_change_split_gives_the_same_lines_as_the_whole(message: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(message)), label="cut")
    whole = feed(rec(message, pid=9))
    split = feed(rec(message[:cut], pid=9, line_break="pid-change"), rec(message[cut:], pid=9))
    assert texts(split) == texts(whole)
    assert kinds(split) == kinds(whole)


@settings(max_examples=300, deadline=None)
@given(LOGLIKE.map(str.encode), st.data())
def test_byte_split_anywhere_gives_the_same_lines_as_the_whole(message: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(message)), label="cut")
    whole = feed(rec(message, pid=9))
    split = feed(rec(message[:cut], pid=9, line_break="line-max"), rec(message[cut:], pid=9))
    assert texts(split) == texts(whole)
    assert kinds(split) == kinds(whole)
