"""What the server's output can make phasewatch spend: one regression test per defect found (issue 9,
"cost driven by content"), and a property: time per byte of a line stays flat whatever its shape.

Timings compare the same work at two sizes (ratios, not absolute times): linear work grows 8x from
8 KB to 64 KB, quadratic work 64x. Made for a shared 2-core machine: each size is timed at least 3
times, the two sizes interleaved, and the fastest run of each counts; a ratio over its bound is
measured again (up to 3 rounds) and only a ratio over the bound in every round fails, as quadratic
work is every time while a busy neighbour is not. Absolute bounds stay only where they are far from
the measured value (a tenth of it or less)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fakes import ScriptedJournal
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import Config
from phasewatch.engines import MAX_EXPECTED_RANKS, ServerInfo
from phasewatch.errors import EX_CONFIG
from phasewatch.pipeline import Pipeline
from phasewatch.prefixes import _RANK_MEMO, RANK_MEMO_KEY_CHARS, canonical_rank
from phasewatch.profile.load import MAX_PATTERN_REPEAT, load_builtin_profile
from phasewatch.records import JournalRecord
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.journal.formats import parse_source
from phasewatch.stages.s1_read.lines import MAX_STREAMS, LineSplitter, parse_progress
from phasewatch.stages.s2_interpret.events import pattern_view
from phasewatch.stages.s3_track import tracker, tracker_state
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
PROFILE = load_builtin_profile("sglang")
# Linear: 8x; quadratic: 64x. Between, a noisy 2-core machine.
MAX_GROWTH = 24.0


REPEATS = 3
ROUNDS = 3


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def cost(work: Callable[[], object], repeats: int = REPEATS) -> float:
    """The fastest of `repeats` runs: the run a busy neighbour disturbed least."""
    return min(timed(work) for _ in range(repeats))


def settled_ratio(little: Callable[[], object], big: Callable[[], object], bound: float,
                  floor: float = 1e-4, repeats: int = REPEATS) -> float:
    """big's cost over little's, each the fastest of `repeats` interleaved runs (little's with a floor
    against timer noise); over `bound`, measured again, up to ROUNDS rounds: the lowest ratio seen."""
    return settled_ratio_of(lambda: timed(little), lambda: timed(big), bound, floor, repeats)


def settled_ratio_of(little: Callable[[], float], big: Callable[[], float], bound: float,
                     floor: float = 1e-4, repeats: int = REPEATS) -> float:
    """settled_ratio for measurements that time themselves (returning seconds)."""
    best = float("inf")
    for _ in range(ROUNDS):
        little_runs, big_runs = [], []
        for _ in range(repeats):
            little_runs.append(little())
            big_runs.append(big())
        best = min(best, min(big_runs) / max(min(little_runs), floor))
        if best < bound:
            break
    return best


def growth(make: Callable[[int], str], work: Callable[[str], object], small: int = 8 * 1024) -> float:
    """How much longer `work` takes on an input 8 times as long."""
    little, big = make(small), make(8 * small)
    return settled_ratio(lambda: work(little), lambda: work(big), MAX_GROWTH)


def rule(rule_id: str) -> re.Pattern[str]:
    return next(r.pattern for r in PROFILE.rules if r.id == rule_id)


def cause(cause_id: str) -> re.Pattern[str]:
    return next(c.pattern for c in PROFILE.causes if c.id == cause_id)


# --- expected ranks ----------------------------------------------------------------------------

def test_tp_size_billion_does_not_allocate() -> None:
    server = ServerInfo.from_args({"tp_size": "1000000000", "dp_size": "8"})
    assert not server.plausible and server.expected_ranks() == ()
    pipeline = Pipeline(Config(unit="sglang.service"))
    for n, text in enumerate(["[2026-11-29 08:00:00] server_args=ServerArgs(tp_size=1000000000, pp_size=1000000000)",
                              "[2026-11-29 08:00:01 TP0] Load weight begin."]):
        pipeline.feed(JournalRecord(text, T0 + n, pid=100, invocation_id=INV), T0)
    inv = pipeline.snapshot().current
    assert inv is not None and [r.rank for r in inv.scheduler_ranks] == ["TP0"]  # only what the journal shows


def test_expected_ranks_up_to_the_maximum_are_still_expected() -> None:
    server = ServerInfo(tp=MAX_EXPECTED_RANKS)
    assert server.plausible and len(server.expected_ranks()) == MAX_EXPECTED_RANKS
    assert ServerInfo(tp=MAX_EXPECTED_RANKS * 2).expected_ranks() == ()
    assert ServerInfo(tp=8, nnodes=2, node_rank=1).expected_ranks() == ("TP4", "TP5", "TP6", "TP7")


# The peak is the process's own (VmHWM of its memory map, made new by exec), not ru_maxrss: Linux keeps
# across exec the high-water mark of the image it replaced, here the test runner's (over 1 GB after the
# e2e tests in one run).
REPLAY_MEASURED = """
import re, sys, time
from phasewatch.cli import main
start = time.perf_counter()
code = main(["replay", "--json", sys.argv[1]])
with open("/proc/self/status") as status:
    peak_kb = re.search(r"^VmHWM:\\s+(\\d+) kB", status.read(), re.M).group(1)
print(code, time.perf_counter() - start, peak_kb, file=sys.stderr)
"""


def replay_measured(log: Path) -> tuple[int, float, float]:
    """Exit code, seconds and peak resident MB of `phasewatch replay --json log` in its own process."""
    done = subprocess.run([sys.executable, "-c", REPLAY_MEASURED, str(log)], capture_output=True, text=True,
                          timeout=120, check=False)
    code, seconds, peak_kb = done.stderr.strip().splitlines()[-1].split()
    return int(code), float(seconds), int(peak_kb) / 1024


@pytest.mark.perf
def test_replay_with_tp_size_billion_finishes_in_seconds_under_500_mb(tmp_path: Path) -> None:
    log = tmp_path / "tp.log"
    log.write_text("[2026-11-29 08:00:00] server_args=ServerArgs(tp_size=1000000000, dp_size=1, port=30000)\n"
                   "[2026-11-29 08:00:01 TP0] Load weight begin.\n", "utf-8")
    code, seconds, peak_mb = replay_measured(log)
    assert code == 0 and seconds < 10 and peak_mb < 500


@pytest.mark.perf
def test_replay_with_20000_rank_tags_finishes_in_seconds_under_500_mb(tmp_path: Path) -> None:
    log = tmp_path / "ranks.log"
    log.write_text("".join(f"[2026-11-29 08:{n // 600 % 60:02d}:{n // 10 % 60:02d} TP{n}] Load weight begin.\n"
                           for n in range(20_000)), "utf-8")
    code, seconds, peak_mb = replay_measured(log)
    assert code == 0 and seconds < 30 and peak_mb < 500


# --- judging ---------------------------------------------------------------------------------

def _ranks(n: int) -> Pipeline:
    pipeline = Pipeline(Config(unit="sglang.service"))
    for i in range(n):
        pipeline.feed(JournalRecord(f"[2026-11-29 08:00:00 TP{i}] Load weight begin.", T0, pid=1000 + i,
                                    invocation_id=INV), T0)
    return pipeline


@pytest.mark.perf
def test_judging_10000_ranks_is_linear() -> None:
    small, big = _ranks(1000), _ranks(10_000)

    def judge(pipeline: Pipeline) -> None:
        pipeline.judge(T0 + 3600)  # every rank stalled: the most judging there is
    ratio = settled_ratio(lambda: judge(small), lambda: judge(big), 30)
    assert ratio < 30, f"10x the ranks cost {ratio:.0f}x (quadratic: 100x)"
    assert cost(lambda: judge(big)) < 5  # was 48.7 s for one idle step


# --- patterns ----------------------------------------------------------------------------------

@pytest.mark.perf
def test_tqdm_pattern_linear_on_spaces_then_percent() -> None:
    assert growth(lambda n: " " * n + "%", parse_progress) < MAX_GROWTH
    assert cost(lambda: parse_progress(" " * 30_000 + "%")) < 1  # was 24 s


def test_tqdm_pattern_still_reads_bars() -> None:
    parsed = parse_progress("  Loading safetensors checkpoint shards:  50% Completed | 15/30 [00:24<00:24,  1.63s/it]")
    assert parsed is not None and parsed[0].desc == "Loading safetensors checkpoint shards" and parsed[0].n == 15


@pytest.mark.perf
def test_dist_store_timeout_linear_on_repeated_socket() -> None:
    pattern = rule("dist_store_timeout")
    assert growth(lambda n: "Socket " * (n // 7), pattern.search) < MAX_GROWTH
    assert cost(lambda: pattern.search("Socket " * 20_000)) < 0.5  # was 4 s


@pytest.mark.perf
def test_dist_init_timeout_cause_linear_on_repeated_socket() -> None:
    assert growth(lambda n: "TCPStore " * (n // 9), cause("dist_init_timeout").search) < MAX_GROWTH


@pytest.mark.perf
def test_nccl_timeout_cause_linear_on_repeated_nccl_operation() -> None:
    assert growth(lambda n: "NCCL operation " * (n // 15), cause("nccl_timeout").search) < MAX_GROWTH


@pytest.mark.perf
def test_cuda_graph_capture_failed_cause_linear_on_repeated_capture() -> None:
    assert growth(lambda n: "Capture " * (n // 8), cause("cuda_graph_capture_failed").search) < MAX_GROWTH


@pytest.mark.perf
def test_frame_cuda_graph_linear_on_repeated_init_cuda_graphs() -> None:
    assert growth(lambda n: "in init_cuda_graphs " * (n // 20) + "eagle",
                  rule("frame_cuda_graph").search) < MAX_GROWTH


REWRITES = [
    (rule("dist_store_timeout"),
     r"DistStoreError|Timed out after \d+ seconds waiting for clients"
     r"|(?:TCPStore|waitForInput|Socket)\b.*timed out after \d+ ?ms",
     ["[E socket.cpp:957] [c10d] The client socket has timed out after 600000ms while trying to connect",
      "TCPStore: Sockets timed out after 5ms", "Socketx timed out after 5ms; Socket y timed out after 7 ms",
      "waitForInput timed out after 12 ms", "Socket timed out after ms",
      "Timed out after 300 seconds waiting for clients"]),
    (rule("frame_cuda_graph"),
     r'/(?:piecewise_)?cuda_graph_runner\.py"|in init_device_graphs\b|in init_cuda_graphs\b(?!.*eagle)',
     ['  File "/sglang/model_executor/model_runner.py", line 1, in init_cuda_graphs',
      "in init_cuda_graphs eagle in init_cuda_graphs", "in init_cuda_graphs in init_cuda_graphs eagle",
      "in init_cuda_graphsx"]),
    (cause("nccl_timeout"),
     r"Watchdog caught collective operation timeout|NCCL (?:communicator|operation).*tim(?:ed|e) ?out",
     ["NCCL communicator was aborted: timed out", "NCCL operation foo NCCL communicator time out", "NCCL op timeout"]),
    (cause("dist_init_timeout"), r"DistStoreError|waiting for clients|(?:TCPStore|waitForInput|Socket)\b.*timed out",
     ["TCPStoreX Socket timed out", "Sockets TCPStore: timed out", "TCPStore timed"]),
    (cause("cuda_graph_capture_failed"), r"Capture cuda graph failed|Capture .*graph failed",
     ["Capture cuda graph failed", "Capture piecewise graph failed", "Capture x Capture y graph failed",
      "Capturegraph failed"]),
]


@pytest.mark.parametrize(("pattern", "old", "samples"), REWRITES)
def test_linear_rewrites_match_what_the_quadratic_patterns_matched(pattern: re.Pattern[str], old: str,
                                                                   samples: list[str]) -> None:
    before = re.compile(old)
    for sample in samples:
        assert bool(pattern.search(sample)) == bool(before.search(sample)), sample


TOKENS = ["Socket", "Sockets", "TCPStore", "waitForInput", " ", "timed out", " after ", "12", "ms", "x", ":",
          "NCCL ", "communicator", "operation", "time out", "Capture ", "cuda ", "graph failed", "eagle",
          "in init_cuda_graphs", "_x", "DistStoreError", "waiting for clients"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=12).map("".join))
def test_linear_rewrites_agree_with_the_old_patterns_on_any_mix(text: str) -> None:
    for pattern, old, _ in REWRITES:
        assert bool(pattern.search(text)) == bool(re.search(old, text)), (old, text)


def test_rejoined_420kb_line_costs_one_step_of_a_64kb_one() -> None:
    line = ("Socket " * 3000 + "in init_cuda_graphs " * 1000 + " " * 10_000 + "NCCL operation " * 1000) * 7
    assert len(line) > 400_000 and len(pattern_view(line)) <= 64 * 1024 + 1
    pipeline = Pipeline(Config(unit="sglang.service"))
    assert cost(lambda: pipeline.feed(JournalRecord(line, T0, pid=100, invocation_id=INV), T0), repeats=1) < 2


def test_a_user_pattern_repeating_4294967296_times_is_a_config_error(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("unit: sglang.service\npatterns:\n  - {id: x, event: activity, match: 'a{4294967296}'}\n")
    assert main(["check-config", str(config)]) == EX_CONFIG
    err = capsys.readouterr().err
    assert "patterns[0].match" in err and str(config) in err and "line 3" in err and "Traceback" not in err


def test_a_user_pattern_with_5000_nested_parentheses_is_a_config_error(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("unit: sglang.service\npatterns:\n  - id: x\n    event: activity\n"
                      f"    match: '{'(' * 5000}a{')' * 5000}'\n")
    assert main(["check-config", str(config)]) == EX_CONFIG
    err = capsys.readouterr().err
    assert "patterns[0].match" in err and "line 5" in err and len(err) < 2000


@pytest.mark.parametrize("pattern", ["a" * 1001, f"a{{{MAX_PATTERN_REPEAT + 1}}}",
                                     f"(?:ab){{2,{MAX_PATTERN_REPEAT * 10}}}"])
def test_user_patterns_past_the_limits_are_refused(tmp_path: Path, pattern: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"unit: sglang.service\npatterns:\n  - {{id: x, event: activity, match: '{pattern}'}}\n")
    assert main(["check-config", str(config)]) == EX_CONFIG
    assert "patterns[0].match" in capsys.readouterr().err


# --- replay's bad lines ------------------------------------------------------------------------

@pytest.mark.perf
def test_replay_bad_json_lines_linear() -> None:
    def source(n: int) -> bytes:
        return b'{"MESSAGE": "x", "__REALTIME_TIMESTAMP": "1"}\n' + b"{bad json\n" * n
    little, big = source(5_000), source(40_000)
    ratio = settled_ratio(lambda: parse_source(little), lambda: parse_source(big), MAX_GROWTH, floor=1e-3)
    assert ratio < MAX_GROWTH, f"8x the bad lines cost {ratio:.1f}x"
    parsed = parse_source(big)
    assert parsed.warnings[0].startswith("40000 JSON lines could not be parsed (first: line 2:")


def test_replay_bad_json_line_numbers_are_right() -> None:
    parsed = parse_source(b'{"MESSAGE": "a"}\n{bad\n{"MESSAGE": "b"}\n\n{"MESSAGE": "c"}{"MESSAGE": "d"}\n')
    assert [r.message for r in parsed.records] == ["a", "b", "c", "d"]
    assert "1 JSON lines could not be parsed (first: line 2:" in parsed.warnings[0]


# --- bookkeeping of the splitter ----------------------------------------------------------------

def test_rank_memo_keeps_no_long_tag_text() -> None:
    tags = " TP1" * 10_000
    assert canonical_rank(tags) == "TP1"
    assert tags not in _RANK_MEMO and all(len(key) <= RANK_MEMO_KEY_CHARS for key in _RANK_MEMO)


def test_split_buffers_are_bounded_and_pruned() -> None:
    splitter = LineSplitter()
    out = []
    for pid in range(MAX_STREAMS + 50):  # every writer leaves half a line behind, and never returns
        out.extend(splitter.feed(JournalRecord(f"half of {pid}", T0, pid=pid, invocation_id=INV,
                                               line_break="line-max")))
    assert len(splitter._streams) <= MAX_STREAMS
    released = [line.text for line in out]
    assert released[:50] == [f"half of {pid}" for pid in range(50)]  # the oldest came out, nothing lost
    assert len(splitter.flush()) == MAX_STREAMS


def test_held_fragments_are_bounded_in_total() -> None:
    splitter = LineSplitter()
    chunk = "x" * (3 * 1024 * 1024)
    released = 0
    for pid in range(20):  # 60 MB of unfinished lines
        released += len(splitter.feed(JournalRecord(chunk, T0, pid=pid, invocation_id=INV, line_break="line-max")))
    assert splitter._pending_chars <= 32 * 1024 * 1024 and released > 0


# --- the property ------------------------------------------------------------------------------

PROPERTY_CONFIG = Config(unit="sglang.service")
SHAPES = [" ", " %", "Socket ", "a", "a.", "TCPStore ", "9", "[", "[2026-11-29 08:00:00 TP1", ": ", "\t", "x:",
          "Aa.", "in init_cuda_graphs ", "NCCL operation ", "Capture ", "INFO: ", "[rank1]:", "Rank 1", "1/", "|",
          "\x1b[", "\x1b]", "Traceback ", "/speculative/a_", '"POST /v1/', "server_args=", " TP1", "bs=1 "]


@pytest.mark.perf
@settings(max_examples=25, deadline=None, derandomize=True)
@example([" "], "%")  # the shapes found quadratic before (issue 9): always tried
@example(["Socket "], "")
@example(["TCPStore "], "")
@example(["NCCL operation "], "")
@example(["Capture "], "")
@example(["in init_cuda_graphs "], "eagle")
@given(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3), st.sampled_from(["", "%", ":", "timed out", "!",
                                                                                   "Error", "%|", "eagle"]))
def test_time_per_byte_stays_flat_for_adversarial_lines(units: list[str], tail: str) -> None:
    unit = "".join(units)

    def line(size: int) -> str:
        return unit * (size // len(unit)) + tail

    def one_step(text: str) -> Callable[[], float]:
        """Seconds one line takes through every stage (the pipeline's set-up not counted)."""
        def run() -> float:
            pipeline = Pipeline(PROPERTY_CONFIG)
            start = time.perf_counter()
            pipeline.feed(JournalRecord(text, T0, pid=100, invocation_id=INV), T0)
            pipeline.judge(T0 + 1)
            return time.perf_counter() - start
        return run
    ratio = settled_ratio_of(one_step(line(8 * 1024)), one_step(line(64 * 1024)), MAX_GROWTH, repeats=5)
    assert ratio < MAX_GROWTH, f"{unit!r} * n + {tail!r}: 8x the bytes cost {ratio:.1f}x"


def test_replay_json_of_a_hostile_journal_is_a_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "hostile.json"
    log.write_text("\n".join(json.dumps({"MESSAGE": m, "_PID": "100", "__REALTIME_TIMESTAMP": "1800000000000000"})
                             for m in [" " * 30_000 + "%", "Socket " * 20_000, "{bad"]) + "\n{bad json\n", "utf-8")
    assert main(["replay", "--json", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["invocations"]


# --- what the tracker keeps per start-up --------------------------------------------------------

def test_ranks_past_the_maximum_are_counted_not_tracked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracker, "MAX_RANKS", 100)
    pipeline = _ranks(150)
    inv = pipeline.snapshot().current
    assert inv is not None and len(inv.ranks) == 100 and inv.ranks_ignored == 50


def test_a_flood_of_fatal_lines_keeps_a_bounded_amount() -> None:
    pipeline = Pipeline(Config(unit="sglang.service"))
    pipeline.feed(JournalRecord("[2026-11-29 08:00:00 TP0] Scheduler hit an exception: Traceback (most recent "
                                "call last):", T0, pid=100, invocation_id=INV), T0)
    for n in range(5000):  # one record's traceback: 5000 lines that each read as fatal
        pipeline.feed(JournalRecord(f"RuntimeError: {n}" + "x" * 1000, T0, pid=100, invocation_id=INV), T0)
    for n in range(3000):  # then 3000 fatal records of their own
        pipeline.feed(JournalRecord(f"[2026-11-29 08:00:01 TP1] Scheduler hit an exception {n}", T0, pid=101,
                                    invocation_id=INV), T0)
    inv = pipeline.snapshot().current
    assert inv is not None
    assert len(inv.fatals) <= tracker_state.MAX_FATALS
    assert all(len(f.texts) <= tracker_state.MAX_FATAL_TEXTS for f in inv.fatals)
    assert inv.fatals[0].rank == "TP0"  # the first decides the culprit, as before
    [judgement] = pipeline.judge(T0 + 10)
    assert judgement.outcome == "crashed"


@pytest.mark.perf
def test_daemon_idle_step_with_10000_ranks_is_linear(tmp_path: Path) -> None:
    def step_with(n: int) -> Callable[[], float]:
        clock = FakeClock(wall=T0)
        journal = ScriptedJournal()
        unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
        store = tmp_path / str(n)
        store.mkdir()
        app = compose(Config(unit="sglang.service"), World(
                follower=journal, unit=unit, alerter=RecordingAlerter("sglang.service"),
                            notifier=RecordingNotifier(), store=StateStore(store, "sglang.service"), clock=clock,
                            processes=ProcessTable(proc=str(store / "proc"), cgroup_roots=(str(store / "cg"),))))
        journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{i}] Load weight begin.", T0, pid=1000 + i,
                                     invocation_id=INV) for i in range(n)))
        app.start()

        def idle_step() -> float:
            clock.jump(5)
            return timed(lambda: app.step(max_wait=0))
        return idle_step
    small, big = step_with(1000), step_with(10_000)
    ratio = settled_ratio_of(small, big, 30, floor=1e-3)
    assert ratio < 30, f"10x the ranks made an idle step {ratio:.0f}x as long (quadratic: 100x)"
    assert cost(big) < 5, "one idle step with 10,000 ranks took 5 s or more (was 48.7 s)"


@pytest.mark.perf
def test_unclaimed_bar_frames_with_4000_ranks_cost_linear() -> None:
    def frames_with(n: int) -> Callable[[], float]:
        def frames() -> float:
            pipeline = _ranks(n)
            start = time.perf_counter()
            for i in range(n):  # one frame per rank, from a PID that never printed a tag
                pipeline.feed(JournalRecord(f"Loading safetensors checkpoint shards:  50% Completed | {i % 30}/30 "
                                            "[00:24<00:24,  1.63s/it]", T0, pid=99, invocation_id=INV), T0)
            return time.perf_counter() - start
        return frames
    ratio = settled_ratio_of(frames_with(500), frames_with(4000), 24, floor=1e-3)
    assert ratio < 24, f"8x the ranks made their unclaimed frames cost {ratio:.0f}x (quadratic: 64x)"
    assert cost(frames_with(4000)) < 5  # was 37 s: the owner was looked for among all ranks at every frame


def test_an_unclaimed_bar_still_goes_to_tp0_of_the_ranks_in_its_phase() -> None:
    pipeline = _ranks(4)
    pipeline.feed(JournalRecord("[2026-11-29 08:00:01 TP2] Capture cuda graph begin.", T0, pid=1002,
                                invocation_id=INV), T0)
    for n in (1, 2):
        pipeline.feed(JournalRecord(f"Loading safetensors checkpoint shards:  50% Completed | {n}/30 [00:24<00:24]",
                                    T0 + n, pid=99, invocation_id=INV), T0)
    inv = pipeline.snapshot().current
    assert inv is not None
    owners = [r.rank for r in inv.scheduler_ranks if r.progress is not None]
    assert owners == ["TP0"]
    pipeline.feed(JournalRecord("Capturing batches (bs=1 avail_mem=1.00 GB):  50%|#####     | 1/2 [00:01<00:01]",
                                T0 + 3, pid=99, invocation_id=INV), T0)
    inv = pipeline.snapshot().current
    assert inv is not None and (tp2 := inv.rank("TP2")) is not None and tp2.progress is not None
