"""The event mapper (lines -> events) on its own: journal records go through the real LineSplitter,
the lines through one EventMapper of the built-in SGLang profile, and the tests read the events."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.profile.load import load_builtin_profile
from phasewatch.records import (
    MAIN,
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STARTING,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    Event,
    EventKind,
    JournalRecord,
    Phase,
)
from phasewatch.stages.s1_read.lines import LineSplitter
from phasewatch.stages.s2_interpret.events import (
    LONG_MEMO_CHARS,
    MEMO_MAX_CHARS,
    EventMapper,
    is_lifecycle_record,
    lifecycle_event,
)
from phasewatch.stages.s2_interpret.pattern_needles import digit_blind

PROFILE = load_builtin_profile("sglang")
INV = "3c2b1a09f8e7d6c5b4a3928170f6e5d4"
T0 = 1_800_000_000.0
STAMP = "[2026-11-29 08:00:00"


class Mapper:
    """A splitter and a mapper as the pipeline chains them; `feed` returns one record's events."""

    def __init__(self, profile: object = PROFILE) -> None:
        self.splitter = LineSplitter()
        self.mapper = EventMapper(PROFILE if profile is PROFILE else profile)  # type: ignore[arg-type]

    def feed(self, message: str, pid: int = 100, invocation: str = INV) -> list[Event]:
        record = JournalRecord(message, T0, pid=pid, invocation_id=invocation)
        lines = self.splitter.feed(record)
        return [event for line in lines for event in self.mapper.map_line(line)]

    def flush(self) -> list[Event]:
        return [event for line in self.splitter.flush() for event in self.mapper.map_line(line)]


def summary(events: list[Event]) -> list[tuple[str, str | None, str | None]]:
    return [(e.kind.value, e.rule, e.rank) for e in events]


@pytest.fixture
def m() -> Mapper:
    return Mapper()


# --- rule order ----------------------------------------------------------------------------------

def test_a_line_matching_several_rules_gives_their_events_in_profile_order(m: Mapper) -> None:
    events = m.feed(f"{STAMP}] Initialization failed. warmup error: connection refused")
    assert [e.rule for e in events] == ["warmup_failed_phase", "warmup_failed", "init_failed"]
    assert [e.kind for e in events] == [EventKind.PHASE_HINT, EventKind.FATAL, EventKind.FATAL]
    assert events[0].phase is Phase.WARMUP


def test_a_digit_sensitive_rule_keeps_its_place_among_memoised_ones(m: Mapper) -> None:
    # http_access_log is digit-blind (memoised), warmup_request is not (searched every time): the
    # events still come in profile order, the phase hint before the warm-up begin.
    events = m.feed(f'{STAMP}] INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK')
    assert [e.rule for e in events] == ["http_access_log", "warmup_request"]
    rules = [r.id for r in PROFILE.rules]
    assert rules.index("http_access_log") < rules.index("warmup_request")


def test_a_line_no_rule_matches_is_activity_of_its_rank(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP} TP5] Using model weights format ['*.safetensors']")
    assert (event.kind, event.rule, event.rank) == (EventKind.ACTIVITY, None, "TP5")


def test_a_blank_line_gives_no_event(m: Mapper) -> None:
    assert m.feed("   ") == []


# --- scope: main and rank ------------------------------------------------------------------------

def test_a_main_scope_line_without_a_tag_is_the_main_process(m: Mapper) -> None:
    m.feed(f"{STAMP} TP0] Load weight begin. avail mem=137.95 GB")  # a multi-rank server
    assert summary(m.feed("Received sigquit from a child process. It usually means the child failed.", pid=1)) == [
        ("fatal", "parent_sigquit", MAIN)]


def test_a_tagged_line_keeps_its_rank_whatever_the_rules_scope(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP} TP3] The server is fired up and ready to roll!")
    assert (event.rule, event.rank) == ("ready", "TP3")


def test_an_untagged_rank_scope_line_is_main_once_the_server_has_tagged_ranks(m: Mapper) -> None:
    m.feed(f"{STAMP} TP0] Load weight begin. avail mem=137.95 GB", pid=200)
    [event] = m.feed(f"{STAMP}] Load weight begin. avail mem=137.95 GB", pid=100)
    assert (event.rule, event.rank) == ("load_begin", MAIN)


def test_untagged_single_gpu_lines_become_tp0(m: Mapper) -> None:
    [begin] = m.feed(f"{STAMP}] Load weight begin. avail mem=77.95 GB", pid=300)
    assert (begin.kind, begin.phase, begin.rank) == (EventKind.PHASE_BEGIN, Phase.WEIGHT_LOAD, "TP0")
    # the same process's later lines, even those no rank-scope rule matches, are TP0's
    [other] = m.feed(f"{STAMP}] Using model weights format ['*.safetensors']", pid=300)
    assert other.rank == "TP0"
    # another process of the same start-up (the HTTP server) stays main
    [uvicorn] = m.feed(f"{STAMP}] INFO:     Started server process [4711]", pid=301)
    assert (uvicorn.rule, uvicorn.rank) == ("uvicorn_started", MAIN)


def test_the_single_gpu_guess_is_per_start_up(m: Mapper) -> None:
    m.feed(f"{STAMP} TP1] Load weight begin.", invocation="a" * 32)
    [event] = m.feed(f"{STAMP}] Load weight begin.", invocation="b" * 32)
    assert event.rank == "TP0"


def test_torch_rank_prefix_names_the_tp_rank(m: Mapper) -> None:
    [event] = m.feed("[rank3]:[E1129 08:00:00.000000000 ProcessGroupNCCL.cpp:632] Watchdog caught collective "
                     "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds")
    assert (event.kind, event.rule, event.cause, event.rank) == (EventKind.FATAL, "nccl_watchdog", "nccl_timeout",
                                                                 "TP3")


# --- echo lines ----------------------------------------------------------------------------------

def test_echo_lines_are_fatal_and_marked_echo(m: Mapper) -> None:
    [echo] = m.feed("Received sigquit from a child process. It usually means the child failed.", pid=1)
    [dead] = m.feed(f"{STAMP}] Rank 3 scheduler is dead. Please check if there are relevant logs.", pid=2)
    assert (echo.kind, echo.echo) == (EventKind.FATAL, True)
    assert (dead.rule, dead.cause, dead.echo) == ("rank_dead", "exit_code", True)


def test_a_culprits_own_line_is_fatal_and_not_an_echo(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP} TP2] Scheduler hit an exception: Traceback (most recent call last):")
    assert (event.kind, event.rule, event.cause, event.rank, event.echo) == (
        EventKind.FATAL, "scheduler_exception", "python_exception", "TP2", False)
    assert event.prefixed


# --- tracebacks ----------------------------------------------------------------------------------

TRACEBACK = ("\nTraceback (most recent call last):\n  File \"/sglang/srt/entrypoints/http_server.py\", line 1"
             "\nValueError: bad")


def test_the_traceback_under_a_harmless_record_is_not_fatal(m: Mapper) -> None:
    events = m.feed(f"{STAMP}] Exception in ASGI application{TRACEBACK}") + m.flush()
    assert events[0].rule == "asgi_request_error" and events[0].kind is EventKind.ACTIVITY
    assert all(e.kind is EventKind.ACTIVITY for e in events), summary(events)


def test_the_same_traceback_under_a_scheduler_record_is_fatal(m: Mapper) -> None:
    events = m.feed(f"{STAMP} TP1] Scheduler hit an exception:{TRACEBACK}") + m.flush()
    fatal = [(e.rule, e.rank) for e in events if e.kind is EventKind.FATAL]
    assert fatal == [("scheduler_exception", "TP1"), ("logged_traceback", "TP1"),  # continuations keep the rank
                     ("uncaught_exception", "TP1")]


def test_harmlessness_ends_with_its_record(m: Mapper) -> None:
    m.feed(f"{STAMP}] Exception in ASGI application{TRACEBACK}", pid=400)
    events = m.feed(f"{STAMP}] Something else{TRACEBACK}", pid=400) + m.flush()
    assert ("fatal", "uncaught_exception", MAIN) in summary(events)


def test_continuations_take_only_fatal_and_hint_rules(m: Mapper) -> None:
    events = m.feed(f"{STAMP} TP0] Scheduler hit an exception:\nLoad weight begin. avail mem=1 GB") + m.flush()
    assert "load_begin" not in [e.rule for e in events]


# A traceback's frame that begins a record: the log lost the traceback's header (a paste from inside it).
FRAMES = ('  File "/sglang/srt/managers/scheduler.py", line 2310, in run_scheduler_process\n'
          '    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n'
          '    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n'
          '  File "/sglang/srt/model_executor/model_runner.py", line 431, in initialize\n'
          '    self.init_device_graphs()')


@pytest.mark.parametrize("cut", [0, 1, 2], ids=["at-a-frame", "at-its-source", "at-its-carets"])
def test_a_paste_that_begins_inside_a_traceback_is_one_fatal_record(cut: int) -> None:
    m = Mapper()
    events = [e for line in FRAMES.split("\n")[cut:] for e in m.feed(line, pid=None)] + m.flush()  # type: ignore[arg-type]
    fatal = [e for e in events if e.kind is EventKind.FATAL]
    assert [e.rule for e in fatal] == ["traceback_frames"] and fatal[0].cause == "python_exception"
    assert fatal[0].text.lstrip().startswith('File "/sglang/srt/')


def test_the_frames_under_a_traceback_header_add_no_fatal_record(m: Mapper) -> None:
    events = m.feed(f"{STAMP} TP1] Traceback (most recent call last):\n{FRAMES}") + m.flush()
    fatal = [e for e in events if e.kind is EventKind.FATAL]
    assert {e.record_id for e in fatal} == {fatal[0].record_id} and fatal[0].rule == "logged_traceback"
    assert "traceback_frames" not in [e.rule for e in events]  # a frame continuing a record is not a head


def test_a_traceback_under_another_first_line_keeps_its_frames_in_its_record(m: Mapper) -> None:
    events = m.feed(f"{STAMP} TP1] Scheduler died\nTraceback (most recent call last):\n{FRAMES}") + m.flush()
    fatal = [e for e in events if e.kind is EventKind.FATAL]
    assert [e.rule for e in fatal] == ["logged_traceback"], summary(events)
    assert len({e.record_id for e in events}) == 1


@pytest.mark.parametrize("head", [
    "Stack (most recent call last):",  # logging's stack_info=True: a stack, no exception
    'Thread 0x00007f3a2bfff640 (most recent call first):\n  File "/usr/lib/python3.12/threading.py", line 355 in wait',
])
def test_a_stack_that_is_no_traceback_is_not_fatal(m: Mapper, head: str) -> None:
    events = m.feed(f"{STAMP} TP1] Scheduler watchdog dump: {head}\n{FRAMES}") + m.flush()
    assert not [e for e in events if e.kind is EventKind.FATAL], summary(events)


def test_faulthandlers_frames_are_no_traceback_of_their_own(m: Mapper) -> None:
    events = [e for line in ('  File "/usr/lib/python3.12/threading.py", line 355 in wait',
                             '  File "/sglang/srt/managers/scheduler.py", line 2310 in event_loop_normal')
              for e in m.feed(line, pid=None)] + m.flush()  # type: ignore[arg-type]
    assert not [e for e in events if e.kind is EventKind.FATAL], summary(events)


# --- server_args ---------------------------------------------------------------------------------

def test_server_args_of_v0_5_9_are_parsed(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP}] server_args=ServerArgs(model_path='meta-llama/Llama-3.3-70B-Instruct', "
                     "tp_size=8, dp_size=1, pp_size=1, host='0.0.0.0', port=30000, "
                     "speculative_algorithm='EAGLE3', cuda_graph_bs=[1, 2, 4], enable_dp_attention=False)")
    assert (event.kind, event.rank, event.rule) == (EventKind.SERVER_ARGS, MAIN, "server_args")
    assert event.args == {"tp_size": "8", "dp_size": "1", "pp_size": "1", "enable_dp_attention": "False",
                          "speculative_algorithm": "EAGLE3", "model_path": "meta-llama/Llama-3.3-70B-Instruct",
                          "cuda_graph_bs": "[1, 2, 4]", "host": "0.0.0.0", "port": "30000"}


def test_server_args_of_v0_5_23_are_parsed(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP}] server_args={{'model_path': 'moonshotai/Kimi-K2.5', 'tp_size': 16, "
                     "'nnodes': 2, 'node_rank': 1, 'ep_size': 16, 'version': '0.5.23'}")
    assert event.args == {"model_path": "moonshotai/Kimi-K2.5", "tp_size": "16", "nnodes": "2", "node_rank": "1",
                          "ep_size": "16", "version": "0.5.23"}


def test_a_key_inside_another_keys_name_is_not_taken(m: Mapper) -> None:
    [event] = m.feed(f"{STAMP}] server_args=ServerArgs(attn_tp_size=4, tp_size=2)")
    assert event.args["tp_size"] == "2"


# --- progress bars ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("frame", "rule", "phase"), [
    ("\rLoading safetensors checkpoint shards:  50% Completed | 15/30 [00:24<00:24,  1.63s/it]\n",
     "shard_bar", Phase.WEIGHT_LOAD),
    ("\rCapturing batches (bs=48 avail_mem=20.12 GB):  43%|####3     | 10/23 [00:04<00:05,  2.44it/s]",
     "capture_bar", Phase.CUDA_GRAPH_CAPTURE),
    ("\rDownloading something:  10%|#         | 1/10 [00:01<00:09,  1.00it/s]", None, None),
])
def test_a_bars_phase_comes_from_its_description(m: Mapper, frame: str, rule: str | None,
                                                 phase: Phase | None) -> None:
    events = m.feed(frame, pid=500) + m.flush()
    progress = [e for e in events if e.kind is EventKind.PROGRESS]
    assert progress, summary(events)
    assert {(e.rule, e.phase) for e in progress} == {(rule, phase)}
    assert all(e.progress is not None for e in progress)


# --- lifecycle: PID 1's records --------------------------------------------------------------------

def pid1(message_id: str, **extra: str) -> JournalRecord:
    return JournalRecord("a message from systemd", T0, pid=1, message_id=message_id, unit="sglang.service",
                         invocation_id=INV, extra=extra)


@pytest.mark.parametrize(("message_id", "kind"), [
    (MID_STARTED, EventKind.INVOCATION_START),
    (MID_STOPPING, EventKind.UNIT_STOPPING),
    (MID_STOPPED, EventKind.UNIT_STOPPED),
    (MID_DEACTIVATED, EventKind.UNIT_STOPPED),
    (MID_MAIN_EXITED, EventKind.UNIT_EXITED),
    (MID_FAILED, EventKind.UNIT_FAILED),
    (MID_RESTART_SCHEDULED, EventKind.RESTART_SCHEDULED),
])
def test_each_lifecycle_message_id_is_its_event(message_id: str, kind: EventKind) -> None:
    record = pid1(message_id, EXIT_CODE="exited", EXIT_STATUS="1")
    assert is_lifecycle_record(record)
    event = lifecycle_event(record)
    assert event is not None
    assert (event.kind, event.ts, event.invocation_id) == (kind, T0, INV)
    assert event.args == {"EXIT_CODE": "exited", "EXIT_STATUS": "1"}


def test_the_invocation_named_in_the_entry_wins_over_the_writers() -> None:
    event = lifecycle_event(pid1(MID_STARTED, INVOCATION_ID="f" * 32))
    assert event is not None and event.invocation_id == "f" * 32


def test_journalds_suppression_notice_is_lines_lost() -> None:
    record = JournalRecord("Suppressed 1234 messages from sglang.service", T0, pid=76, message_id=MID_SUPPRESSED,
                           n_dropped=1234)
    assert is_lifecycle_record(record)
    event = lifecycle_event(record)
    assert event is not None and (event.kind, event.count, event.cause) == (
        EventKind.LINES_LOST, 1234, "journald_rate_limit")


def test_other_message_ids_are_not_lifecycle() -> None:
    for record in (pid1(MID_STARTING), JournalRecord("Load weight begin.", T0, pid=100)):
        assert not is_lifecycle_record(record)
        assert lifecycle_event(record) is None


# --- the digit-masked memo -------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "blind"), [
    (r"^Rank \d+ scheduler is dead", True),
    (r"[0-9]+/\d+", True),
    (r"\S+:\d+ - \"GET", True),
    (r"HTTP/1\.1", False),
    (r"bs=[1-4]", False),
    (r"(a)\1", False),
    (r"[^5]", False),
])
def test_digit_blindness_of_a_pattern(pattern: str, blind: bool) -> None:
    assert digit_blind(re.compile(pattern)) is blind


SAMPLES = [
    f"{STAMP} TP3] Load weight begin. avail mem=137.95 GB",
    f"{STAMP}] Rank 3 scheduler is dead. Please check if there are relevant logs.",
    f'{STAMP}] INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK',
    f'{STAMP}] INFO:     10.0.3.17:40212 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    f'{STAMP}] INFO:     10.0.3.17:40212 - "POST /v2/chat/completions HTTP/2.0" 500 Internal',
    f"{STAMP} TP0] Decode batch, #running-req: 12, #token: 48213, token usage: 0.02",
    f"{STAMP}] Subprocess scheduler_0 (pid=4812) crashed with exit code -9",
    "  File \"/sglang/srt/speculative/eagle_worker.py\", line 213, in init_cuda_graphs",
]
# A digit-sensitive rule of a config's `patterns:` next to the built-in ones.
DIGIT_PROFILE = PROFILE.with_overrides([{"id": "exit_code_9", "event": "fatal", "match": r"exit code -9\b"}])


def renumbered(sample: str, digits: list[str]) -> str:
    pool = iter(digits)
    return re.sub(r"\d", lambda _: next(pool, "7"), sample)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SAMPLES), st.lists(st.sampled_from("0123456789"), min_size=40,
                                                                max_size=40), st.integers(0, 3)),
                min_size=1, max_size=12))
def test_the_memo_gives_the_answers_of_a_fresh_search(lines: list[tuple[str, list[str], int]]) -> None:
    """Also for lines longer than MEMO_MAX_CHARS (a memo of their own: the same answers)."""
    warm = EventMapper(DIGIT_PROFILE)
    for sample, digits, longer in lines:
        text = renumbered(sample + ", {'rid': 7, 'len': 1024}" * (60 * longer), digits)
        assert (len(text) > MEMO_MAX_CHARS) is (longer > 0)
        [line] = LineSplitter().feed(JournalRecord(text, T0, pid=100, invocation_id=INV))
        fresh = EventMapper(DIGIT_PROFILE)
        assert [e.rule for e in warm.map_line(line)] == [e.rule for e in fresh.map_line(line)], text
        # and the rules a plain search of every rule finds, in profile order
        assert warm._matching(line.message) == tuple(r for r in warm._line_rules if r.pattern.search(line.message))


def test_the_memo_does_not_carry_a_digit_sensitive_answer_to_another_number() -> None:
    mapper = EventMapper(DIGIT_PROFILE)
    [nine] = LineSplitter().feed(JournalRecord("Subprocess s (pid=1) crashed with exit code -9", T0, pid=1))
    [one] = LineSplitter().feed(JournalRecord("Subprocess s (pid=1) crashed with exit code -1", T0, pid=1))
    assert "exit_code_9" in [e.rule for e in mapper.map_line(nine)]
    assert "exit_code_9" not in [e.rule for e in mapper.map_line(one)]
    assert "exit_code_9" in [e.rule for e in mapper.map_line(nine)]


def test_the_memo_of_long_lines_is_bounded_by_its_keys_size() -> None:
    mapper = EventMapper(PROFILE)
    size = 0
    for n in range(200):
        text = f"{STAMP} TP0] Batch dump: " + "{'rid': 7}, " * (1000 + n)
        [line] = LineSplitter().feed(JournalRecord(text, T0, pid=100, invocation_id=INV))
        assert [e.kind for e in mapper.map_line(line)] == [EventKind.ACTIVITY]
        size = sum(map(len, mapper._long_memo))
        assert size == mapper._long_memo_chars <= LONG_MEMO_CHARS
    assert 0 < len(mapper._long_memo) < 200  # (cleared when full)
