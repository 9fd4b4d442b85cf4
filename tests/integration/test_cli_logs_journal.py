"""`phasewatch logs` over real journal files (the simulator's entries written by systemd-journal-remote):
whole decoded lines where journalctl shows `[N blob data]`, bars collapsed, every line tagged with
its rank and phase, tracebacks whole."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main
from phasewatch.commands.logs import LineFilter, Printer, show_logs
from phasewatch.config.load import Config
from phasewatch.records import PHASE_NAMES
from phasewatch.sources.journal.current import StartPoint, wait_for_journal
from phasewatch.sources.journal.follow import JournalFollower

UNIT = "sglang-kimi.service"
BASE = time.time() - 3600
NCCL = "NCCL INFO comm 0x5581 rank 2 nRanks 8 - Init COMPLETE"
LINE_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (\S+(?: \S+)?)\s+(" + "|".join(PHASE_NAMES) + r") +\| (.*)$")


def crash_entries() -> list[dict[str, Any]]:
    """TP4 fails in capture; TP2 (another process) writes between its record and its traceback."""
    entries = list(journal_json(build(faults=Faults(exception={4: "cuda_graph_capture"})), base=BASE, unit=UNIT))
    at = next(i for i, e in enumerate(entries) if "Scheduler hit an exception" in str(e["MESSAGE"]))
    tp2 = next(e for e in entries if "TP2] Capture cuda graph begin" in str(e["MESSAGE"]))
    entries.insert(at + 1, {**tp2, "__REALTIME_TIMESTAMP": entries[at]["__REALTIME_TIMESTAMP"],
                            "MESSAGE": f"[2026-11-29 12:00:00 TP2] {NCCL}"})
    return entries


def logs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    code = main(["logs", *argv])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    return captured.out.splitlines()


def parsed(lines: list[str]) -> list[tuple[str, str, str, str]]:
    out = []
    for line in lines:
        match = LINE_RE.match(line)
        assert match is not None, line
        stamp, rank, phase, text = match.groups()
        out.append((stamp, rank, phase, text))
    return out


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("logs-journals")
    return {"healthy": write_journal(root / "healthy", journal_json(build(), base=BASE, unit=UNIT)),
            "crash": write_journal(root / "crash", crash_entries())}


def test_journalctl_shows_blobs_where_logs_shows_whole_lines(journals: dict[str, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    journalctl = subprocess.run(["journalctl", "-D", str(journals["healthy"]), "-u", UNIT, "-o", "short-iso"],
                                check=True, capture_output=True, text=True).stdout
    assert "blob data]" in journalctl
    lines = logs([UNIT, "--directory", str(journals["healthy"])], capsys)
    assert not any("blob data" in line or "\r" in line or "\x1b" in line for line in lines)
    rows = parsed(lines)
    assert rows[0][1:] == ("systemd", "launch", f"Started {UNIT} - SGLang Kimi-K2.5.")
    assert rows[-1][1:] == ("main", "ready", "The server is fired up and ready to roll!")


def test_bars_are_collapsed_to_one_line_per_step(journals: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rows = parsed(logs([UNIT, "--directory", str(journals["healthy"])], capsys))
    assert all(text.count("%|") + text.count("% Completed") <= 1 for _, _, _, text in rows)
    # Each capture bar's frames were in one journal entry: only its last frame is printed.
    captures = [(rank, phase, text) for _, rank, phase, text in rows if "Capturing batches" in text or "%|" in text]
    assert [(rank, phase) for rank, phase, _ in captures] == [
        ("TP0", "cuda_graph_capture"), ("TP0", "draft_cuda_graph_capture"), ("TP0", "draft_cuda_graph_capture")]
    assert all("| 23/23 [" in text for _, _, text in captures)
    # The shard bar, one frame per journal entry: one line per shard, in order, on TP0 in weight_load.
    shards = [(rank, phase, text) for _, rank, phase, text in rows if "/64 [" in text]
    assert [int(re.search(r"\| (\d+)/64", text).group(1)) for _, _, text in shards] == list(range(65))
    assert {(rank, phase) for rank, phase, _ in shards} == {("TP0", "weight_load")}


def test_every_line_carries_its_ranks_phase_at_that_moment(journals: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    rows = parsed(logs([UNIT, "--directory", str(journals["healthy"]), "--utc"], capsys))
    begins = [(rank, phase) for _, rank, phase, text in rows if text.startswith("Load weight begin.")]
    assert begins[:8] == [(f"TP{n}", "weight_load") for n in (0, 3, 6, 1, 7, 5, 2, 4)]
    assert {phase for _, phase in begins[8:]} == {"draft_weight_load"}
    ends = [(rank, phase) for _, rank, phase, text in rows if text.startswith("Capture draft cuda graph end.")]
    assert {phase for _, phase in ends} == {"draft_cuda_graph_capture"} and len(ends) == 8
    uvicorn = [(rank, phase) for _, rank, phase, text in rows if text.startswith("INFO:     Uvicorn running")]
    assert uvicorn == [("main", "http_server_start")]
    # --utc: the journal's own time, in UTC; the SGLang prefix is not repeated.
    assert rows[0][0] == dt.datetime.fromtimestamp(BASE, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert not any(text.startswith("[2026-") for _, _, _, text in rows)


def test_a_traceback_stays_whole_after_its_record(journals: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rows = parsed(logs([UNIT, "--directory", str(journals["crash"])], capsys))
    start = next(i for i, row in enumerate(rows) if "Scheduler hit an exception" in row[3])
    block = rows[start:start + 6]
    assert {(rank, phase) for _, rank, phase, _ in block} == {("TP4", "cuda_graph_capture")}
    assert [text for _, _, _, text in block] == [
        "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3079, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2147, in '
        "init_device_graphs",
        "    self.graph_runner = graph_runners[self.device](self)",
        "RuntimeError: CUDA error: an illegal memory access was encountered"]
    # TP2's line, written in between, comes after the whole traceback.
    assert rows[start + 6][1:] == ("TP2", "cuda_graph_capture", NCCL)
    assert [row[1:3] for row in rows[-2:]] == [("systemd", "cuda_graph_capture")] * 2
    assert rows[-1][3] == f"{UNIT}: Failed with result 'signal'."


def test_filters_by_rank_and_phase(journals: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tp3 = parsed(logs(["sglang-kimi", "--directory", str(journals["crash"]), "--rank", "tp3"], capsys))
    assert tp3 and {rank for _, rank, _, _ in tp3} == {"TP3"}
    tp4 = parsed(logs([UNIT, "--directory", str(journals["crash"]), "--rank", "TP4",
                       "--phase", "cuda_graph_capture"], capsys))
    assert [text for _, _, _, text in tp4][-1] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    loading = parsed(logs([UNIT, "--directory", str(journals["healthy"]), "--phase", "weight_load"], capsys))
    assert {phase for _, _, phase, _ in loading} == {"weight_load"}
    assert sum("Load weight begin." in text for _, _, _, text in loading) == 8
    assert sum("/64 [" in text for _, _, _, text in loading) == 65


def test_bad_filters_are_usage_errors(journals: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", UNIT, "--directory", str(journals["healthy"]), "--phase", "loading"]) == 64
    assert "--phase: expected one of launch" in capsys.readouterr().err
    assert main(["logs", UNIT, "--directory", str(journals["healthy"]), "--rank", "GPU3"]) == 64


def test_since_prints_later_lines_with_the_phases_they_had(journals: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    begin = next(e for e in journal_json(build(), base=BASE, unit=UNIT)
                 if "Capture cuda graph begin" in str(e["MESSAGE"]))
    since = dt.datetime.fromtimestamp(int(str(begin["__REALTIME_TIMESTAMP"])) / 1e6, dt.timezone.utc)
    rows = parsed(logs([UNIT, "--directory", str(journals["healthy"]), "--since", since.isoformat()], capsys))
    assert rows[0][1:] == ("TP0", "cuda_graph_capture",
                           "Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB")
    assert not any(text.startswith("Load weight begin") and phase == "weight_load" for _, _, phase, text in rows)


def test_follow_prints_new_entries_as_they_come(tmp_path: Path) -> None:
    entries = list(journal_json(build(scale=0.01), base=time.time() - 60, unit=UNIT))
    half = len(entries) // 2
    directory = write_journal(tmp_path / "live", entries[:half])
    follower = JournalFollower(UNIT, str(directory))
    out = io.StringIO()
    stop = threading.Event()
    result: list[int] = []

    def wait(seconds: float) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        wait_for_journal(follower, min(seconds, 0.1))

    thread = threading.Thread(target=lambda: result.append(show_logs(
        Config(unit=UNIT), follower, StartPoint(None, None, "head"), LineFilter(), Printer(out), follow=True,
        wait=wait)))
    thread.start()
    try:
        deadline = time.time() + 10
        while "Load weight begin" not in out.getvalue() and time.time() < deadline:
            time.sleep(0.05)
        assert "fired up" not in out.getvalue()
        write_journal(directory, entries[half:])
        while "fired up" not in out.getvalue() and time.time() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(5)
        follower.close()
    assert result == [0]
    last = out.getvalue().splitlines()[-1]
    assert last.endswith("main    ready                    | The server is fired up and ready to roll!")


VLLM_UNIT = "vllm-json.service"
VLLM_INVOCATION = "b" * 32
# (seconds after the start, pid, process name, level, message): a TP=2 start-up that vLLM logs as NDJSON
VLLM_JSON = [(1, 100, "APIServer", "INFO", "non-default args: {'model': '/m', 'tensor_parallel_size': 2}"),
             (60, 107, "Worker_TP0", "INFO", "Starting to load model /m..."),
             (60, 108, "Worker_TP1", "INFO", "Starting to load model /m..."),
             (180, 108, "Worker_TP1", "INFO", "Available KV cache memory: 10.50 GiB"),
             (181, 108, "Worker_TP1", "ERROR", "torch.OutOfMemoryError: CUDA out of memory.")]


def vllm_json_entries() -> list[dict[str, Any]]:
    def at(seconds: float) -> str:
        return str(int((BASE + seconds) * 1e6))

    started = {"__REALTIME_TIMESTAMP": at(0), "_PID": "1", "_UID": "0", "UNIT": VLLM_UNIT,
               "MESSAGE_ID": "39f53479d3a045ac8e11786248231fbf", "INVOCATION_ID": VLLM_INVOCATION,
               "JOB_TYPE": "start", "JOB_RESULT": "done", "MESSAGE": f"Started {VLLM_UNIT}."}
    def asctime(seconds: float) -> str:
        return dt.datetime.fromtimestamp(BASE + seconds).strftime("%Y-%m-%d %H:%M:%S,000")

    return [started, *({"__REALTIME_TIMESTAMP": at(t), "_PID": str(pid), "_SYSTEMD_UNIT": VLLM_UNIT,
                        "_SYSTEMD_INVOCATION_ID": VLLM_INVOCATION, "SYSLOG_IDENTIFIER": "vllm", "PRIORITY": "6",
                        "MESSAGE": json.dumps({"asctime": asctime(t), "levelname": level,
                                               "name": "vllm.v1.worker.gpu_worker", "message": text,
                                               "processName": name, "process": pid, "vllm_process_name": name,
                                               "vllm_pid": pid})}
                       for t, pid, name, level, text in VLLM_JSON)]


def test_a_vllm_unit_that_logs_json_shows_its_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's JSON logging: `logs` reads each line as the engine's rewrite makes it (the daemon's own
    stages), tagged with the rank and phase it names, not the JSON object journald holds."""
    journal = write_journal(tmp_path / "journal", vllm_json_entries())
    config = tmp_path / "vllm.yaml"
    config.write_text(f"unit: {VLLM_UNIT}\nengine: vllm\n")
    rows = parsed(logs([VLLM_UNIT, "--directory", str(journal), "--config", str(config)], capsys))
    assert not any(text.startswith("{") for _, _, _, text in rows)
    assert [(rank, text) for _, rank, _, text in rows[1:]] == [
        ("main", "non-default args: {'model': '/m', 'tensor_parallel_size': 2}"),
        ("TP0", "Starting to load model /m..."), ("TP1", "Starting to load model /m..."),
        ("TP1", "Available KV cache memory: 10.50 GiB"), ("TP1", "torch.OutOfMemoryError: CUDA out of memory.")]
    assert [phase for _, rank, phase, _ in rows if rank == "TP1"] == ["weight_load", "kv_cache_alloc",
                                                                     "kv_cache_alloc"]
