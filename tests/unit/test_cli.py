"""`phasewatch replay` as a command: sources, --now, output, exit statuses."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from phasewatch.cli import main
from phasewatch.errors import EX_DATAERR, EX_NOINPUT, EX_OK

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STALL = EXAMPLES / "sglang-kimi-stall-draft-capture.json"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("seed", range(8))
def test_garbage_file_gives_a_clear_message_and_status_65(seed: int, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.bin"
    noise = random.Random(seed).randbytes(4096)
    garbage.write_bytes(b"\x89" + noise + b"\x00")
    code, out, err = run(["replay", str(garbage), "--wide"], capsys)
    assert code == EX_DATAERR == 65
    assert out == ""
    assert err.startswith(f"phasewatch: {garbage}: input is not a journal export, journalctl JSON/text, or a text log")
    # Noise that happens to open with a brace is taken for JSON, and says so (1 in 256 of os.urandom's).
    garbage.write_bytes(b"{" + noise + b"\x00")
    code, out, err = run(["replay", str(garbage), "--wide"], capsys)
    assert code == EX_DATAERR and out == ""
    assert err.startswith(f"phasewatch: {garbage}: input looks like journalctl JSON but no line parses as JSON")


def test_empty_file_reports_no_invocations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert run(["replay", "--json", str(empty)], capsys) == (EX_OK, '{\n  "invocations": []\n}\n', "")
    assert run(["replay", str(empty)], capsys) == (EX_OK, "no invocations found\n", "")


def test_missing_file_gives_status_66(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["replay", str(tmp_path / "nope.log"), "--wide"], capsys)
    assert code == EX_NOINPUT
    assert "No such file or directory" in err


def test_judged_at_last_line_the_hang_is_not_yet_a_stall(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", "--json", str(STALL)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert (code, inv["outcome"], inv["verdicts"]) == (EX_OK, "starting", [])
    assert inv["phase"] == "draft_cuda_graph_capture"


def test_now_after_the_last_line_judges_the_hang_stalled(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", "--json", "--now", "+25m", str(STALL)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert inv["outcome"] == "stalled"
    [verdict] = inv["verdicts"]
    assert (verdict["kind"], verdict["rank"], verdict["phase"], verdict["cause"]) == (
        "stalled", "TP3", "draft_cuda_graph_capture", "deadline")
    assert verdict["message"].startswith("sglang-kimi.service: TP3 stalled in draft_cuda_graph_capture for ")
    assert inv["ranks"]["TP3"]["phases"][-1] == {"name": "draft_cuda_graph_capture",
                                                 "start": inv["ranks"]["TP3"]["phases"][-1]["start"], "end": None,
                                                 "confidence": "exact"}


def test_now_as_an_iso_time(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["replay", "--json", "--now", "2030-01-01T00:00:00Z", str(STALL)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert inv["judged_at"] == "2030-01-01T00:00:00.000Z"
    assert inv["outcome"] == "stalled"


def test_standard_input_source(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(STALL.read_bytes())))
    code, out, _ = run(["replay", "--json", "-"], capsys)
    assert code == EX_OK
    assert json.loads(out)["invocations"][0]["invocation_id"] == "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"


def test_table_shows_each_rank_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["replay", "--plain", "--now", "+25m", str(STALL)], capsys)  # full names, unwrapped
    lines = out.splitlines()
    assert lines[0].startswith("invocation 5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d: stalled, phase draft_cuda_graph_capture")
    # The main process waits for the ranks through the whole load: a line, not a row "in launch for 25m".
    assert lines[1] == "main process: waiting for 8 ranks since 08:00:00"
    header = lines[2].split()
    assert header[:3] == ["RANK", "NOW", "PROGRESS"]
    assert "draft_cuda_graph_capture" in header and "ready" not in header
    rows = {line.split()[0]: line for line in lines[3:11]}
    assert set(rows) == {f"TP{n}" for n in range(8)}
    assert "29m18s+" in rows["TP3"] and "+" not in rows["TP0"]
    assert "draft_cuda_graph_capture (done)" in rows["TP0"] and "23/23 bs=1" in rows["TP0"]
    assert "(done)" not in rows["TP3"]
    assert any(line.startswith("  stalled: sglang-kimi.service: TP3 stalled in draft_cuda_graph_capture")
               for line in lines)


def test_table_names_the_main_process_s_own_phases_once_ready(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["replay", "--plain", str(STALL.with_name("sglang-kimi-healthy.json"))], capsys)
    lines = out.splitlines()
    assert lines[1] == "main process: ready since 08:18:43 (http_server_start 0s, warmup 2s)"
    assert [line for line in lines if line.split()[:1] == ["main"]] == [lines[1]]  # no rank row `main`
    assert lines[2].split()[-1] == "warmup"  # no column for `ready`: it has no duration


def test_source_and_unit_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", "--unit", "x.service", str(STALL)])
    assert exit_info.value.code == 64  # EX_USAGE: 2 means "will not become ready"
    assert "exactly one SOURCE" in capsys.readouterr().err


def test_a_stalled_start_up_that_was_restarted_replays_as_stalled(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    entries = [json.loads(line) for line in STALL.read_text().splitlines()]
    last = max(int(e["__REALTIME_TIMESTAMP"]) for e in entries)
    invocation = "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
    stop = {"_PID": "1", "_UID": "0", "UNIT": "sglang-kimi.service", "INVOCATION_ID": invocation}
    entries.append({**stop, "__REALTIME_TIMESTAMP": str(last + 1_500_000_000), "JOB_TYPE": "stop",
                    "MESSAGE_ID": "de5b426a63be47a7b6ac3eaac82e2f6f", "MESSAGE": "Stopping sglang-kimi.service..."})
    entries.append({**stop, "__REALTIME_TIMESTAMP": str(last + 1_501_000_000), "JOB_TYPE": "restart",
                    "MESSAGE_ID": "9d1aaa27d60140bd96365438aad20286", "MESSAGE": "Stopped sglang-kimi.service."})
    path = tmp_path / "restarted.json"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    _, out, _ = run(["replay", "--json", str(path)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert (inv["unit_state"], inv["outcome"]) == ("stopped", "stalled")
    assert [(v["kind"], v["rank"]) for v in inv["verdicts"]] == [("stalled", "TP3")]


def test_a_start_up_failed_by_wait_ready_after_a_stall_replays_as_stalled_not_crashed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ExecStartPost=phasewatch wait-ready exits 1 on the stall; systemd then fails the unit."""
    entries = [json.loads(line) for line in STALL.read_text().splitlines()]
    last = max(int(e["__REALTIME_TIMESTAMP"]) for e in entries)
    pid1 = {"_PID": "1", "_UID": "0", "UNIT": "sglang-kimi.service",
            "INVOCATION_ID": "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"}
    entries.append({**pid1, "__REALTIME_TIMESTAMP": str(last + 1_500_000_000), "UNIT_RESULT": "exit-code",
                    "MESSAGE_ID": "d9b373ed55a64feb8242e02dbe79a49c",
                    "MESSAGE": "sglang-kimi.service: Failed with result 'exit-code'."})
    path = tmp_path / "failed.json"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    _, out, _ = run(["replay", "--json", str(path)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert (inv["unit_state"], inv["outcome"]) == ("failed", "stalled")
    assert [(v["kind"], v["rank"]) for v in inv["verdicts"]] == [("stalled", "TP3")]


def test_since_takes_a_time_or_a_duration_ago_and_is_honoured_for_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    healthy = STALL.with_name("sglang-kimi-healthy.json")
    code, out, _ = run(["replay", "--json", "--since", "2026-11-30T08:10:00Z", str(healthy)], capsys)
    [inv] = json.loads(out)["invocations"]
    assert code == EX_OK and inv["started_at"] >= "2026-11-30T08:10:00"  # the earlier lines were not read
    # 30m ago (now): the example was written long before, so nothing of it is left.
    assert run(["replay", "--since", "30m", str(healthy)], capsys)[:2] == (EX_OK, "no invocations found\n")
    code, _, err = run(["replay", "--since", "soon", str(healthy)], capsys)
    assert code == 64 and "--since: expected an ISO time or a duration like 30m, got 'soon'" in err


def test_a_file_of_prose_is_not_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prose = tmp_path / "prose.txt"
    prose.write_text("Hello there, this is prose.\nAnother line of text.\n")
    for form in (["replay"], ["replay", "--json"]):
        code, out, err = run([*form, str(prose), "--wide"], capsys)
        assert (code, out) == (EX_DATAERR, "")
        assert f"{prose}: no line of a start-up phasewatch knows (SGLang, vLLM) in it" in err and "None" not in err
