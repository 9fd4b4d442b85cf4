"""`phasewatch status`: the daemon's /status when one answers, the same document from the journal when
none does, the table, exit statuses, and --watch's output in a log."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sglang_sim import Faults, build, journal_json

from journal_dirs import write_journal
from phasewatch.cli import main
from phasewatch.commands.status import ForeignDaemon, ask_daemon, local_time
from phasewatch.config.load import load_config
from status_documents import DAEMON_INVOCATION, STALLED, UNIT, document

HOUR_AGO = time.time() - 3600


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def config_for(tmp_path: Path, port: int, unit: str = UNIT, extra: str = "") -> str:
    path = tmp_path / "phasewatch.yaml"
    path.write_text(f"unit: {unit}\nmetrics:\n  listen: 127.0.0.1:{port}\n{extra}")
    return str(path)


class StubDaemon(http.server.ThreadingHTTPServer):
    body: bytes = b"{}"
    status: int = 200
    asked: int = 0


class Handler(http.server.BaseHTTPRequestHandler):
    server: StubDaemon

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.asked += 1
        if self.path != "/status":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def daemon() -> Iterator[StubDaemon]:
    server = StubDaemon(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("outcome", "verdicts", "code"), [
    ("ready", [], 0), ("serving", [], 0), ("starting", [], 1), ("stalled", STALLED, 2),
    ("crashed", [{**STALLED[0], "kind": "crashed", "cause": "oom"}], 2), ("stopped", [], 2),
    ("starting", [{**STALLED[0], "kind": "rank_died", "cause": "process_exited"}], 2),
    ("ready", [{**STALLED[0], "kind": "unhealthy", "rank": None}], 2),
])
def test_json_and_exit_status_come_from_the_daemon(daemon: StubDaemon, tmp_path: Path, outcome: str,
                                                   verdicts: list[dict[str, Any]], code: int,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    canned = document(outcome, verdicts)
    daemon.body = json.dumps(canned).encode()
    got, out, err = run(["status", "--json", "--config", config_for(tmp_path, daemon.server_address[1])], capsys)
    assert (got, err) == (code, "")
    assert json.loads(out) == {**canned, "source": "daemon"}
    assert daemon.asked == 1


def test_table_from_the_daemon(daemon: StubDaemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.body = json.dumps(document("stalled", STALLED)).encode()
    port = daemon.server_address[1]
    code, out, _ = run(["status", UNIT, "--plain", "--config", config_for(tmp_path, port)], capsys)  # unwrapped
    assert code == 2
    lines = out.splitlines()
    assert lines[0] == f"{UNIT}: stalled, phase draft_cuda_graph_capture (the slowest rank's), 20m since start"
    assert lines[1].startswith("invocation 5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d, started ")
    assert lines[1].endswith(f", last line 2s ago; from the phasewatch daemon (127.0.0.1:{port})")
    since = local_time(dt.datetime(2026, 11, 30, 8, 16, 48, tzinfo=dt.timezone.utc).timestamp(), with_date=False)
    assert lines[3] == f"main process: waiting for 8 ranks since {since}"  # 08:20:00 less its 192 s
    assert lines[4].split() == ["RANK", "PHASE", "PROGRESS", "IN", "PHASE", "LAST", "ACTIVITY", "VERDICT"]
    rows = {line.split()[0]: line for line in lines[5:13]}
    assert "main" not in rows
    assert rows["TP0"].split() == ["TP0", "draft_cuda_graph_capture", "7/23", "bs=64", "3m12s/20m", "2s", "ago"]
    assert rows["TP3"].split()[-2:] == ["stalled", "(deadline)"]
    assert f"  stalled: {UNIT}: TP3 stalled in draft_cuda_graph_capture for 20m1s (limit 20m)" in lines
    assert "restart budget: state armed, remaining 3, window 6h" in lines


def test_status_refuses_foreign_daemon(daemon: StubDaemon, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever answers on metrics.listen must be this unit's phasewatch daemon; else exit 4 and say so."""
    port = daemon.server_address[1]
    config = config_for(tmp_path, port)
    daemon.body = json.dumps(document("ready", unit="other.service")).encode()
    code, out, err = run(["status", "--config", config], capsys)
    assert (code, out) == (4, "")
    said = " ".join(err.split())  # (wrapped within 100 columns)
    assert f"http://127.0.0.1:{port}/status is the phasewatch daemon of 'other.service', not of {UNIT}" in said
    # a process that took the port first and serves something else (here: a lookalike without `daemon`)
    impostor = document("ready")
    del impostor["daemon"]
    daemon.body = json.dumps(impostor).encode()
    code, out, err = run(["status", "--config", config], capsys)
    assert (code, out) == (4, "")
    assert "answers (HTTP 200), but not with a phasewatch /status" in err
    daemon.status, daemon.body = 500, b"oops"
    assert run(["status", "--config", config], capsys)[0] == 4
    assert daemon.asked == 3


def test_status_checks_the_daemons_invocation_against_systemd(daemon: StubDaemon, tmp_path: Path) -> None:
    daemon.body = json.dumps(document("ready")).encode()
    config = load_config(config_for(tmp_path, daemon.server_address[1]))
    found = ask_daemon(config, expected_invocation=lambda unit: DAEMON_INVOCATION)
    assert found is not None and found["invocation"]["outcome"] == "ready"
    with pytest.raises(ForeignDaemon, match=f"names daemon invocation '{DAEMON_INVOCATION}', but "
                                            "phasewatch@sglang-kimi.service runs as invocation 1234"):
        ask_daemon(config, expected_invocation=lambda unit: "1234")
    assert ask_daemon(config, expected_invocation=lambda unit: None) is not None  # not run by systemd


@pytest.mark.parametrize(("outcome", "verdicts", "eta", "line", "code"), [
    ("starting", [], 240.0, "sglang-kimi: draft_cuda_graph_capture 8/8 3m12s/20m ETA 4m", 1),
    ("starting", [], None, "sglang-kimi: draft_cuda_graph_capture 8/8 3m12s/20m", 1),
    ("stalled", STALLED, None, "sglang-kimi: stalled draft_cuda_graph_capture 8/8 3m12s/20m [stalled: TP3]", 2),
    ("ready", [], None, "sglang-kimi: ready (20m since start)", 0),
])
def test_oneline_and_its_exit_status(daemon: StubDaemon, tmp_path: Path, outcome: str,
                                     verdicts: list[dict[str, Any]], eta: float | None, line: str, code: int,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    daemon.body = json.dumps({**document(outcome, verdicts), "eta_seconds": eta}).encode()
    got, out, err = run(["status", "sglang-kimi", "--oneline", "--config",
                         config_for(tmp_path, daemon.server_address[1])], capsys)
    assert (got, out, err) == (code, line + "\n", "")


def test_nothing_listening_falls_back_to_the_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    # Neither a daemon, nor a system bus, nor anything of the unit in the journal: said, not an
    # empty table (it used to be "no start-up in the journal", exit 3, whatever the cause).
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={tmp_path}/no-bus")
    code, out, err = run(["status", "--config", config_for(tmp_path, port)], capsys)
    assert (code, out) == (69, "")
    said = " ".join(err.split())  # (wrapped within 100 columns)
    assert "the journal has nothing of it and systemd cannot be asked (no system bus" in said
    assert f"(no phasewatch daemon answered on 127.0.0.1:{port})" in said


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("status-journals")
    plans = {"healthy": Faults(), "hang": Faults(hang={3: "draft_cuda_graph_capture"}),
             "crash": Faults(oom={5: "cuda_graph_capture"})}
    out = {name: write_journal(root / name, journal_json(build(faults=faults), base=HOUR_AGO, unit=UNIT))
           for name, faults in plans.items()}
    other = list(journal_json(build(), base=HOUR_AGO, unit="other.service"))
    out["other"] = write_journal(root / "other", other)
    return out


def test_healthy_start_up_from_the_journal_is_ready(journals: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["status", UNIT, "--json", "--directory", str(journals["healthy"])], capsys)
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert (document["unit"], document["source"], document["restart_budget"]) == (UNIT, "journal", None)
    inv = document["invocation"]
    assert inv["invocation_id"] == "5e1f3c9a0b7d4e21a6c8f00d1e2b3c4d"
    assert (inv["outcome"], inv["phase"]) == ("ready", "ready")
    assert set(inv["ranks"]) == {"main", *(f"TP{n}" for n in range(8))}
    assert all(r["phase"] == "ready" for r in inv["ranks"].values())
    # The journal was written an hour before this module was loaded, however long ago that was.
    assert abs(inv["elapsed_seconds"] - (time.time() - HOUR_AGO)) < 60


def test_hang_from_the_journal_is_stalled_with_time_against_the_limit(journals: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", "sglang-kimi", "--json", "--directory", str(journals["hang"])], capsys)
    assert code == 2
    inv = json.loads(out)["invocation"]
    assert inv["outcome"] == "stalled"
    [verdict] = inv["verdicts"]
    assert (verdict["kind"], verdict["rank"], verdict["cause"]) == ("stalled", "TP3", "deadline")
    tp3 = inv["ranks"]["TP3"]
    assert tp3["phase"] == "draft_cuda_graph_capture"
    assert tp3["deadline_seconds"] == 1200
    assert tp3["elapsed_seconds"] > 1200
    code, out, _ = run(["status", UNIT, "--directory", str(journals["hang"])], capsys)
    assert code == 2
    [row] = [line for line in out.splitlines() if line.startswith("TP3 ")]
    assert row.split()[2].endswith("/20m")
    assert row.split()[-2:] == ["stalled", "(deadline)"]


def test_crash_from_the_journal(journals: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", UNIT, "--json", "--directory", str(journals["crash"])], capsys)
    inv = json.loads(out)["invocation"]
    assert (code, inv["outcome"]) == (2, "crashed")
    assert [(v["kind"], v["rank"], v["cause"]) for v in inv["verdicts"]] == [("crashed", "TP5", "oom")]


def test_a_journal_without_the_unit_says_so_with_status_3(journals: dict[str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["status", UNIT, "--json", "--directory", str(journals["other"])], capsys)
    assert (code, out) == (3, "")  # nothing of the unit in a copied journal: a wrong name, said as one
    assert f"{UNIT}: no such unit" in err


def test_the_journal_document_has_the_daemons_schema(journals: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", UNIT, "--json", "--directory", str(journals["hang"])], capsys)
    ours = json.loads(out)
    canned = document("stalled", STALLED)
    assert set(ours) == set(canned) | {"source", "active_state"}
    assert set(ours["invocation"]) == set(canned["invocation"])
    assert set(ours["invocation"]["ranks"]["TP0"]) == set(canned["invocation"]["ranks"]["TP0"])
