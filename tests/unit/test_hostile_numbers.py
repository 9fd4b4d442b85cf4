"""Numbers in the server's output longer than Python converts (4300 digits): each class goes through
the daemon's step and through `replay`, and neither dies; the watchdog still catches a real stall."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fakes import ScriptedJournal
from phasewatch.app import Daemon
from phasewatch.cli import main
from phasewatch.clock import FakeClock
from phasewatch.compose import World, compose
from phasewatch.config.load import DEFAULT_LIMITS, Config, PhaseLimits
from phasewatch.pipeline import Pipeline
from phasewatch.prefixes import bounded_int
from phasewatch.records import JournalRecord, Phase
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier
from phasewatch.sinks.state.store import StateStore
from phasewatch.sources.host.procs import ProcessTable
from phasewatch.systemd_unit import RecordingUnit, UnitFacts

UNIT = "sglang-kimi.service"
INV = "0123456789abcdef0123456789abcdef"
T0 = 1_800_000_000.0
HUGE = "9" * 5000  # past sys.get_int_max_str_digits() (4300)
CONFIG = Config(unit=UNIT, phases={**DEFAULT_LIMITS, Phase.WEIGHT_LOAD: PhaseLimits(60, None)})

HOSTILE_LINES = {
    "rank_tag": f"[2026-11-29 08:00:00 DP0 TP{HUGE}] Load weight begin. avail mem=137.95 GB",
    "rank_tag_dp": f"[2026-11-29 08:00:00 DP{HUGE} TP1] Load weight begin. avail mem=137.95 GB",
    "rank_tag_time_only": f"[08:00:00 TP{HUGE}] Load weight begin.",
    "gpu_id": f"[gpu_id={HUGE}] Load weight begin.",
    "legacy_rank": f"Rank {HUGE}: load weight begin.",
    "c10d_rank": f"[rank{HUGE}]: [W socket.cpp:464] [c10d] The server socket has started to listen",
    "tqdm_count": f"Loading safetensors checkpoint shards:  50% Completed | {HUGE}/30 [00:24<00:24,  1.63s/it]",
    "tqdm_total": f"Loading safetensors checkpoint shards:  50% Completed | 15/{HUGE} [00:24<00:24,  1.63s/it]",
    "tqdm_bs": f"Loading pt checkpoint shards (bs={HUGE} avail_mem=1.00 GB):  50%|#####     | 1/2 [00:01<00:01]",
    "server_args": f"[2026-11-29 08:00:00] server_args=ServerArgs(tp_size={HUGE}, dp_size={HUGE}, port={HUGE})",
}


def _daemon(tmp_path: Path) -> tuple[Daemon, ScriptedJournal, RecordingUnit, RecordingAlerter, FakeClock]:
    clock = FakeClock(wall=T0)
    journal = ScriptedJournal()
    unit = RecordingUnit(UnitFacts("activating", "start", INV, control_group=None, started_at=T0))
    alerter = RecordingAlerter(UNIT)
    app = compose(CONFIG, World(follower=journal, unit=unit, alerter=alerter, notifier=RecordingNotifier(),
                        store=StateStore(tmp_path, UNIT), clock=clock,
                        processes=ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))))
    return app, journal, unit, alerter, clock


@pytest.mark.parametrize("hostile", sorted(HOSTILE_LINES))
def test_huge_number_in_the_daemon_step_does_not_stop_the_watchdog(tmp_path: Path, hostile: str) -> None:
    app, journal, unit, alerter, clock = _daemon(tmp_path)
    journal.push(JournalRecord("[2026-11-29 08:00:00 TP0] Load weight begin. avail mem=137.95 GB", T0, pid=100,
                               invocation_id=INV))
    app.start()
    journal.push(JournalRecord(HOSTILE_LINES[hostile], T0 + 1, pid=101, invocation_id=INV, cursor="hostile"))
    clock.jump(5)
    app.step(max_wait=0)
    assert app.pipeline.quarantined == 0  # bounded before int(): nothing even needed quarantine
    clock.jump(120)
    app.step(max_wait=0)
    assert unit.restarts == [INV], "the real stall of TP0 must still be caught"
    stalls = [a for a in alerter.sent if a["PHASEWATCH_VERDICT"] == "stalled"]
    assert stalls and "TP0" in stalls[0]["PHASEWATCH_RANK"]


@pytest.mark.parametrize("hostile", sorted(HOSTILE_LINES))
def test_huge_number_replays(tmp_path: Path, hostile: str, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "hostile.log"
    log.write_text("[2026-11-29 08:00:00 TP0] Load weight begin.\n" + HOSTILE_LINES[hostile] + "\n"
                   "[2026-11-29 08:00:05 TP0] Load weight end.\n", "utf-8")
    assert main(["replay", "--json", str(log)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["invocations"]


def test_huge_pid_in_a_short_journal_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "short.log"
    log.write_text(f"Nov 29 08:00:00 host python[{HUGE}]: [2026-11-29 08:00:00 TP0] Load weight begin.\n"
                   f"Nov 29 08:00:01 host systemd-journald[{HUGE}]: Suppressed {HUGE} messages from "
                   f"{UNIT}\n", "utf-8")
    assert main(["replay", "--json", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["invocations"]


def test_bounded_int_refuses_what_int_cannot_take() -> None:
    assert bounded_int("0042") == 42
    assert bounded_int("0" * 5000 + "7") == 7  # leading zeros are not digits of the value
    assert bounded_int(HUGE) is None
    assert bounded_int("9" * 19) is None


def test_a_record_a_stage_cannot_take_is_quarantined_and_the_rest_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pipeline = Pipeline(CONFIG, fast=False)  # the mapper is what breaks: no fast path around it
    original = pipeline.mapper.map_line

    def breaks_on_poison(line):  # type: ignore[no-untyped-def]
        if "poison" in line.message:
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return original(line)

    monkeypatch.setattr(pipeline.mapper, "map_line", breaks_on_poison)
    with caplog.at_level(logging.WARNING, logger="phasewatch.pipeline"):
        for n, text in enumerate(["[2026-11-29 08:00:00 TP0] Load weight begin.", "[2026-11-29 08:00:01 TP0] poison",
                                  "[2026-11-29 08:00:02 TP0] poison", "[2026-11-29 08:00:03 TP0] Load weight end."]):
            pipeline.feed(JournalRecord(text, T0 + n, pid=100, invocation_id=INV, cursor=f"s=c{n}"), T0 + n)
    assert pipeline.quarantined == 2
    inv = pipeline.snapshot().current
    assert inv is not None and (rank := inv.rank("TP0")) is not None and rank.phase_ended
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and "s=c1" in warnings[0] and "s=c2" in warnings[1]
