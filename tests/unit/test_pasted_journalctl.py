"""What an operator pastes from journalctl (issue 34): `[NB blob data]` is a line journalctl did not
print (a progress frame), not a lost one; journalctl's identifier names the unit; systemd's
`Starting` begins the next start-up of a pasted restart. Families over journalctl's short formats."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.cli import main
from phasewatch.records import JournalRecord
from phasewatch.sources.journal.formats import parse_source

FAMILY = settings(max_examples=8, deadline=None, derandomize=True)
FORMATS = ("short", "short-precise", "short-iso", "short-full")
YEAR = datetime.now(timezone.utc).year  # a short stamp has no year: replay takes this one
CAPTURE_BEGIN = "Capture cuda graph begin. This can take up to several minutes. avail mem=20.12 GB"


def stamp(form: str, at: datetime) -> str:
    if form == "short":
        return at.strftime("%b %d %H:%M:%S")
    if form == "short-precise":
        return at.strftime("%b %d %H:%M:%S.%f")
    if form == "short-iso":
        return at.strftime("%Y-%m-%dT%H:%M:%S+0000")
    return at.strftime("%a %Y-%m-%d %H:%M:%S UTC")


def journalctl(form: str, lines: list[tuple[datetime, str, str]], host: str = "llm-two") -> str:
    """(time, identifier[pid], message) as `journalctl -o FORM` prints them."""
    return "".join(f"{stamp(form, at)} {host} {who}: {text}\n" for at, who, text in lines)


def replayed(text: str, *args: str) -> tuple[list[dict[str, Any]], str]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "paste.log"
        path.write_text(text, "utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main(["replay", "--json", *args, str(path)]) == 0
    return json.loads(out.getvalue())["invocations"], err.getvalue()


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


BLOB_AT = datetime(YEAR, 3, 1, 10, 49, 20, tzinfo=timezone.utc)
FIVE_BLOBS = [(BLOB_AT, "sglang-kimi[201200]", "[87B blob data]")] * 5


@pytest.mark.parametrize("form", FORMATS)
def test_the_operators_five_blob_lines_are_hidden_lines_of_sglang_kimi(form: str) -> None:
    paste = journalctl(form, FIVE_BLOBS)
    [inv], warnings = replayed(paste, "--now", "+1m")
    assert inv["lines_lost"] == 0
    assert not [v for v in inv["verdicts"] if v["kind"] == "lines_lost"]
    assert inv["last_line_at"] == iso(BLOB_AT)  # time stamps read: durations, not "no time stamps"
    assert "not lost" in warnings and "journalctl -a" in warnings
    assert "LogRateLimit" not in warnings
    [late], _ = replayed(paste, "--now", "+2h")
    assert all(v["message"].startswith("sglang-kimi.service: ") for v in late["verdicts"])
    table = io.StringIO()
    with tempfile.TemporaryDirectory() as directory, contextlib.redirect_stdout(table), \
            contextlib.redirect_stderr(io.StringIO()):
        path = Path(directory) / "paste.log"
        path.write_text(paste, "utf-8")
        assert main(["replay", "--now", "+1m", str(path)]) == 0
    assert "5 line(s) journalctl did not print (journalctl -a shows them)" in " ".join(table.getvalue().split())
    assert "lost" not in table.getvalue()


@FAMILY
@given(form=st.sampled_from(FORMATS), ranks=st.integers(2, 8), blobs=st.integers(1, 12),
       gap_minutes=st.integers(2, 20), host=st.sampled_from(["llm-two", ""]),
       size=st.sampled_from(["87B", "110B", "4.3K"]))
def test_blobs_after_capture_begin_date_the_bar_owners_last_activity(form: str, ranks: int, blobs: int,
                                                                     gap_minutes: int, host: str, size: str) -> None:
    begin = datetime(YEAR, 3, 1, 10, 40, 10, tzinfo=timezone.utc)
    lines = [(begin, "sglang-kimi[201200]", f"[{begin:%Y-%m-%d %H:%M:%S} TP{rank}] {CAPTURE_BEGIN}")
             for rank in range(ranks)]
    last = begin + timedelta(minutes=gap_minutes)
    lines += [(last, "sglang-kimi[201200]", f"[{size} blob data]")] * blobs
    paste = journalctl(form, lines, host).replace("  ", " ")
    [inv], _ = replayed(paste, "--now", "+1m")
    assert inv["lines_lost"] == 0
    assert inv["last_line_at"] == iso(last)
    assert inv["ranks"]["TP0"]["last_activity"] == iso(last)  # SGLang draws the capture bar on TP0
    assert inv["ranks"]["TP1"]["last_activity"] == iso(begin)
    assert inv["ranks"]["TP0"]["phase"] == "cuda_graph_capture"
    assert not any(v["rank"] == "TP0" for v in inv["verdicts"])


def test_journald_suppression_is_still_lines_lost() -> None:
    at = datetime(YEAR, 3, 1, 10, 49, 20, tzinfo=timezone.utc)
    paste = journalctl("short-iso", [(at, "sglang-kimi[201200]", "[87B blob data]"),
                                     (at, "systemd-journald[99]", "Suppressed 17 messages from sglang-kimi.service")])
    [inv], _ = replayed(paste)
    assert inv["lines_lost"] == 17
    assert [v["cause"] for v in inv["verdicts"] if v["kind"] == "lines_lost"] == ["journald_rate_limit"]


VLLM_FAILED = [
    "(EngineCore_DP0 pid=1100) INFO 03-01 10:40:10 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='m'",
    "(EngineCore_DP0 pid=1100) ERROR 03-01 10:40:20 [core.py:700] EngineCore failed to start.",
]
VLLM_NEXT = "(APIServer pid=2000) INFO 03-01 10:40:30 [api_server.py:1000] vLLM API server version 0.11.0"


@FAMILY
@given(form=st.sampled_from(FORMATS), counter=st.integers(1, 9), described=st.booleans(), stopped=st.booleans(),
       consumed=st.booleans(), blob_first=st.booleans())
def test_a_pasted_restart_is_two_start_ups(form: str, counter: int, described: bool, stopped: bool, consumed: bool,
                                           blob_first: bool) -> None:
    at = datetime(YEAR, 3, 1, 10, 40, 10, tzinfo=timezone.utc)
    later = at.replace(second=30)
    name = "vLLM server" if described else "vllm.service - vLLM server"
    systemd = [
        "vllm.service: Main process exited, code=exited, status=1/FAILURE",
        "vllm.service: Failed with result 'exit-code'.",
        *(["vllm.service: Consumed 1min 2.345s CPU time."] if consumed else []),
        f"vllm.service: Scheduled restart job, restart counter is at {counter}.",
        *([f"Stopped {name}."] if stopped else []),
        f"Starting {name}...",
    ]
    lines = [(at, "vllm[1000]", text) for text in VLLM_FAILED]
    lines += [(at.replace(second=21), "systemd[1]", text) for text in systemd]
    lines += [(later, "vllm[2000]", "[110B blob data]")] if blob_first else []
    lines += [(later, "vllm[2000]", VLLM_NEXT)]
    invocations, _ = replayed(journalctl(form, lines))
    assert len(invocations) == 2
    first, second = invocations
    assert first["outcome"] == "crashed"
    assert second["outcome"] == "starting" and second["started_at"] == iso(at.replace(second=21))  # its Starting
    assert second["lines_lost"] == 0


def records(*entries: tuple[str | None, str | None, int | None]) -> list[JournalRecord]:
    return [JournalRecord(message="x", pid=pid, unit=unit, extra={"SYSLOG_IDENTIFIER": ident} if ident else {})
            for ident, unit, pid in entries]


def test_the_unit_is_named_by_systemd_first_then_by_an_identifier_of_its_own() -> None:
    from phasewatch.sources.journal.pastes import unit_named

    assert unit_named(records(("sglang-kimi", None, 201200))) == "sglang-kimi.service"
    assert unit_named(records(("sglang-kimi", None, 1), ("systemd", "kimi.service", 1))) == "kimi.service"
    assert unit_named(records(("llm@kimi.service", None, 7))) == "llm@kimi.service"
    for program in ("python3", "python3.11", "python", "bash", "vllm", "sglang", "torchrun", "kernel", "systemd"):
        assert unit_named(records((program, None, 4242))) is None, program
    assert unit_named(records(("käse", None, 4242))) is None
    assert unit_named(records(("sglang-kimi", None, 5), ("python3", None, 6), ("python3", None, 6))) == \
        "sglang-kimi.service"


def test_a_starting_line_followed_by_started_leaves_one_start() -> None:
    parsed = parse_source(journalctl("short-iso", [
        (BLOB_AT, "systemd[1]", "Starting sglang-kimi.service - SGLang Kimi..."),
        (BLOB_AT, "systemd[1]", "Started sglang-kimi.service - SGLang Kimi."),
        (BLOB_AT, "sglang-kimi[5]", "hello"),
    ]).encode())
    assert [r.message_id is not None for r in parsed.records] == [False, True, False]


def vllm_v1_lines(tp: int, dp: int, suffix: str, base_pid: int, loaded: int) -> list[str]:
    """A vLLM V1 start-up whose workers are `(Worker pid=N)` until they know their rank."""
    lines = ["(APIServer pid=7800) INFO 10-12 10:00:00 [api_server.py:1885] vLLM API server version 0.11.0",
             "(APIServer pid=7800) INFO 10-12 10:00:00 [utils.py:233] non-default args: {'model': 'm', "
             f"'tensor_parallel_size': {tp}" + (f", 'data_parallel_size': {dp}" if dp > 1 else "") + "}"]
    workers = [(d, t, base_pid + d * tp + t) for d in range(dp) for t in range(tp)]
    lines += [f"(Worker pid={pid}) INFO 10-12 10:00:10 [__init__.py:216] Automatically detected platform cuda."
              for _, _, pid in workers]
    lines += [f"(Worker pid={pid}) INFO 10-12 10:00:12 [parallel_state.py:1208] rank {d * tp + t} in world size "
              f"{tp * dp} is assigned as DP rank {d}, PP rank 0, TP rank {t}, EP rank {d * tp + t}"
              for d, t, pid in workers]

    def name(d: int, t: int) -> str:
        return {"tp": f"Worker_TP{t}", "dp_tp": f"Worker_DP{d}_TP{t}",
                "tp_ep": f"Worker_TP{t}_EP{d * tp + t}", "dp_tp_ep": f"Worker_DP{d}_TP{t}_EP{d * tp + t}"}[suffix]

    lines += [f"({name(d, t)} pid={pid}) INFO 10-12 10:00:13 [gpu_model_runner.py:2602] Starting to load model m..."
              for d, t, pid in workers]
    lines += [f"({name(d, t)} pid={pid}) INFO 10-12 10:00:40 [default_loader.py:267] Loading weights took 25.10 "
              "seconds" for d, t, pid in workers[:loaded]]
    # A late line under the anonymous tag again (a library's own logger, a warning before the rename took)
    lines += [f"(Worker pid={workers[-1][2]}) WARNING 10-12 10:00:41 [custom_all_reduce.py:144] Custom allreduce is "
              "disabled because it's not supported on more than two PCIe-only GPUs."]
    return lines


@FAMILY
@given(tp=st.sampled_from([2, 4, 8]), dp=st.sampled_from([1, 2]), suffix=st.sampled_from(["tp", "dp_tp", "tp_ep",
                                                                                           "dp_tp_ep"]),
       base_pid=st.integers(1000, 4_000_000), journal=st.booleans(), loaded=st.integers(0, 2))
def test_a_vllm_v1_worker_renamed_with_its_rank_is_one_rank(tp: int, dp: int, suffix: str, base_pid: int,
                                                            journal: bool, loaded: int) -> None:
    if dp > 1 and suffix in ("tp", "tp_ep"):
        suffix = "dp_" + suffix  # (vLLM names the DP rank of a worker whenever there are several)
    lines = vllm_v1_lines(tp, dp, suffix, base_pid, loaded)
    at = datetime(YEAR, 10, 12, 10, 0, 0, tzinfo=timezone.utc)
    text = journalctl("short-iso", [(at, "vllm[7800]", line) for line in lines]) if journal else \
        "\n".join(lines) + "\n"
    [inv], _ = replayed(text, "--now", "+1h")
    assert not [rank for rank in inv["ranks"] if rank.startswith("pid")]
    workers = [rank for rank in inv["ranks"] if rank != "main"]
    assert len(workers) == tp * dp
    for rank in workers:
        assert inv["ranks"][rank]["phase"] == "weight_load", rank
    for verdict in inv["verdicts"]:
        assert "pid" not in (verdict["rank"] or ""), verdict


def test_a_jit_build_failing_in_capture_gets_the_compilers_remedy() -> None:
    build_error = ["/usr/bin/ld: cannot find -lcuda: No such file or directory",
                   "collect2: error: ld returned 1 exit status", "ninja: build stopped: subcommand failed."]
    lines = ["[2026-03-01 10:40:10 TP0] Capture cuda graph begin. This can take up to several minutes. "
             "avail mem=20.12 GB",
             "[2026-03-01 10:40:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__',
             "    self.capture()",
             '  File "/usr/lib/python3/dist-packages/flashinfer/jit/cpp_ext.py", line 240, in run_ninja',
             "    raise RuntimeError(msg) from e",
             "RuntimeError: Ninja build failed. Ninja output:", "FAILED: batch_decode.so", *build_error,
             "Exception: Capture cuda graph failed: Ninja build failed. Ninja output:",
             "Possible solutions:", "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)"]
    [inv], _ = replayed("\n".join(lines) + "\n")
    [crash] = [v for v in inv["verdicts"] if v["kind"] == "crashed"]
    assert crash["cause"] == "cuda_graph_capture_failed"
    assert crash["remedy"] is not None and "JIT build failed" in crash["remedy"]["text"]
    assert "--cuda-graph-max-bs" not in crash["remedy"]["text"]


@pytest.mark.parametrize("form", FORMATS)
def test_the_load_barriers_line_pasted_alone_names_its_writer_and_gets_a_remedy(form: str) -> None:
    at = datetime(YEAR, 3, 1, 10, 50, 10, tzinfo=timezone.utc)
    paste = journalctl(form, [
        (at, "sglang-kimi[201200]", "ValueError: TP rank 1 could finish the model loading, but there are other "
                                    "ranks that didn't finish loading. It is likely due to unexpected failures "
                                    "(e.g., OOM) or a slow node.")])
    [inv], _ = replayed(paste)
    [crash] = [v for v in inv["verdicts"] if v["kind"] == "crashed"]
    assert crash["cause"] == "load_barrier_timeout"
    assert list(inv["ranks"]) == ["TP1"]  # the line's writer, by its own words
    assert crash["rank"] != "TP1" and "healthy: TP1" in crash["message"]  # it finished: not the one that failed
    assert crash["remedy"] is not None and "monitoredBarrier" in crash["remedy"]["text"]


def test_vllms_rank_assignment_line_without_a_prefix_is_that_ranks() -> None:
    from phasewatch.profile.load import load_builtin_profile
    from phasewatch.records import Line, LineKind
    from phasewatch.stages.s2_interpret.events import EventMapper

    mapper = EventMapper(load_builtin_profile("vllm"))
    text = "rank 3 in world size 4 is assigned as DP rank 0, PP rank 0, TP rank 3, EP rank 3"
    events = mapper.map_line(Line(text=text, message=text, kind=LineKind.RECORD, rank=None, ts=1.0, pid=None))
    assert {event.rank for event in events} == {"TP3"}
