"""NCCL RAS over real sockets: phasewatch's client against the fake RAS server (tools/ras_fake.py)
replaying what an H200's NCCL answered and documents built on NCCL's format; and the daemon's loop
(fake journal and clock) asking it while ranks are quiet: the culprit in the stall verdict's alert
when RAS answers, the same verdict at the same step when RAS is absent, slow or lying."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.sources.host.ras import RasSource
from phasewatch.sources.host.ras_client import RasAnswer, address_of, query
from phasewatch.stages.s4_judge.ras_report import RasAddress, parse_report
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import ras_fake  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "ras"


def fake_server(mode: str) -> Iterator[RasAddress]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    ready = threading.Event()
    threading.Thread(target=ras_fake.serve, args=(0, mode), kwargs={"ready": ready, "sock": listener},
                     daemon=True).start()
    ready.wait(5)
    yield RasAddress("127.0.0.1", listener.getsockname()[1])
    listener.close()


@pytest.fixture
def lagging() -> Iterator[RasAddress]:
    yield from fake_server("lag")


def test_json_is_asked_for_and_read(lagging: RasAddress) -> None:
    answer = query(lagging)
    assert answer.error is None and answer.format == "json" and answer.server_protocol == "2"
    assert [sent for sent, _ in answer.transcript] == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "SET FORMAT json", "STATUS"]
    assert parse_report(answer.report).comms[0].size == 8


def test_text_when_the_server_has_no_json() -> None:
    recorded = sorted(GOLDEN.glob("recorded-*status.txt")) or [GOLDEN / "built-8rank-allreduce-lag.txt"]
    for address in fake_server(f"replay:{recorded[0]}"):
        answer = query(address)
        assert answer.error is None and answer.format == "text", answer
        assert answer.transcript[2][1].startswith("ERROR: Unknown command")
        assert answer.report == recorded[0].read_text()


def test_a_server_that_never_answers_costs_the_querys_time_and_no_more() -> None:
    for address in fake_server("slow"):
        began = time.monotonic()
        answer = query(address, seconds=0.5)
        took = time.monotonic() - began
        assert answer.error == "no answer within the query's time" and 0.45 <= took < 1.0


def test_nobody_listening_is_an_answer_at_once() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    answer = query(RasAddress("127.0.0.1", port))
    assert answer.error is not None and "connection refused" in answer.error and answer.seconds < 0.5


def test_a_report_larger_than_the_cap_is_cut(lagging: RasAddress) -> None:
    answer = query(lagging, limit=100)
    assert answer.truncated and len(answer.report) == 100


def test_the_address_comes_from_the_rank_processs_environment(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "environ").write_bytes(b"PATH=/bin\0NCCL_RAS_ADDR=127.0.0.1:28555\0")
    assert address_of([76, 77], tmp_path) == (RasAddress("127.0.0.1", 28555), "the environment of pid 77")
    assert address_of([76], tmp_path)[0] == RasAddress()


# -- the daemon's loop ---------------------------------------------------------------------------------

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
PIDS = {4240 + n: n for n in range(8)}
CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(3600, 60)})


def unit_tree(root: Path, port: int) -> ProcessTable:
    """Eight rank processes titled as SGLang's, in the unit's cgroup, with NCCL_RAS_ADDR set."""
    (root / "cg" / "u").mkdir(parents=True)
    (root / "cg" / "u" / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in PIDS))
    for pid, n in PIDS.items():
        (root / "proc" / str(pid)).mkdir(parents=True)
        (root / "proc" / str(pid) / "cmdline").write_bytes(f"sglang::scheduler_TP{n}\0".encode())
        (root / "proc" / str(pid) / "environ").write_bytes(f"NCCL_RAS_ADDR=127.0.0.1:{port}\0".encode())
    return ProcessTable(proc=str(root / "proc"), cgroup_roots=(str(root / "cg"),))


def run_until_stalled(tmp_path: Path, ask: Callable[[RasAddress], RasAnswer]) -> tuple[list[dict[str, str]], int]:
    """Ranks in weight loading go quiet; the step at which the stall is alerted (one a second)."""
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group="/u", started_at=T0))
    alerter = RecordingAlerter(UNIT)
    app: Daemon = compose(CONFIG, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                                store=StateStore(tmp_path, UNIT), clock=clock, processes=unit_tree(tmp_path, 28555)))
    [advisor] = [s for s in app.sources if isinstance(s, RasSource)]
    advisor.ask = ask
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0, pid=pid,
                                 invocation_id=INV) for pid, n in PIDS.items()))
    app.start()
    for second in range(1, 70):
        clock.jump(1)
        app.step(max_wait=0)
        if advisor.thread is not None:
            advisor.thread.join(0.5 if second < 40 else 0.0)  # (a slow one is left running)
        if alerter.sent:
            return alerter.sent, second
    raise AssertionError("never stalled")


def answered(mode: str) -> Callable[[RasAddress], RasAnswer]:
    def ask(address: RasAddress) -> RasAnswer:
        for real in fake_server(mode):
            return query(real)
        raise AssertionError
    return ask


RELEASE = threading.Event()


def never(address: RasAddress) -> RasAnswer:
    RELEASE.wait(30)  # a server that holds the query past the verdict (the real client gives up at 2 s)
    return RasAnswer(str(address), error="no answer within the query's time")


def test_the_stall_alert_names_the_culprit_and_every_ras_failure_leaves_it_as_it_was(tmp_path: Path) -> None:
    titles = ras_fake.titled_pids
    ras_fake.titled_pids = lambda proc=Path("/proc"): {n: pid for pid, n in PIDS.items()}  # type: ignore[assignment]
    try:
        outcomes = {mode: run_until_stalled(tmp_path / mode, ask) for mode, ask in (
            ("lag", answered("lag")), ("lie", answered("lie")), ("absent", lambda a: query(RasAddress("127.0.0.1", 1))),
            ("slow", never))}
    finally:
        ras_fake.titled_pids = titles  # type: ignore[assignment]
        RELEASE.set()
    alerts, second = outcomes["lag"]
    message = alerts[0]["MESSAGE"]
    assert "culprit (NCCL RAS): TP5, pid 4245, GPU 5, has launched AllReduce up to op 1233 while the others " \
           "are at 1234" in message, message
    for mode, (other, at) in outcomes.items():
        assert at == second == 61, (mode, at)  # on time: the stall window, whatever RAS did
        assert [(a["PHASEWATCH_VERDICT"], a["PHASEWATCH_RANK"], a["PHASEWATCH_PHASE"]) for a in other] == \
            [(a["PHASEWATCH_VERDICT"], a["PHASEWATCH_RANK"], a["PHASEWATCH_PHASE"]) for a in alerts], mode
    assert "no culprit from RAS: RAS's answer names no process of the unit (8 PID(s)" in \
        outcomes["lie"][0][0]["MESSAGE"]
    for mode in ("absent", "slow"):  # nobody listening, or still asking when the verdict came: nothing said
        assert "RAS" not in outcomes[mode][0][0]["MESSAGE"], mode


def test_an_unknown_cgroup_or_an_overdue_answer_never_spins_the_loop(tmp_path: Path) -> None:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    app: Daemon = compose(CONFIG, World(
            follower=journal, unit=unit, alerter=RecordingAlerter(UNIT), notifier=RecordingNotifier(),
                                store=StateStore(tmp_path, UNIT), clock=clock, processes=unit_tree(tmp_path, 28555)))
    [advisor] = [s for s in app.sources if isinstance(s, RasSource)]
    journal.push(*(JournalRecord(f"[2026-11-29 08:00:00 TP{n}] Load weight begin. avail mem=137.95 GB", T0, pid=pid,
                                 invocation_id=INV) for pid, n in PIDS.items()))
    app.start()
    clock.jump(31)  # past half the stall window: RAS is due, but the unit's cgroup is not known
    app.step(max_wait=0)
    now = app.now()
    assert advisor.thread is None and (advisor.next_deadline(now) or 0) >= now.monotonic + 29
    advisor.in_flight_since = now.monotonic - 10  # an answer overdue (the client's bound makes it impossible)
    assert (advisor.next_deadline(now) or 0) >= now.monotonic + 1.0
