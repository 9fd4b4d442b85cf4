"""NCCL RAS read and judged (stages/s4_judge/ras_report.py, ras_culprit.py): the reports recorded on
an H200 and those built on NCCL's format (tests/golden/ras/README.md says which is which), the
culprit named through the unit's PIDs, the blind spots said, a lying answer ignored and counted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from phasewatch.commands.status_render import _why_lines
from phasewatch.config.load import Config
from phasewatch.records import VerdictKind
from phasewatch.sinks.ras_metrics import ras_families
from phasewatch.stages.s4_judge.init_config import ras_dropin, ras_port_for
from phasewatch.stages.s4_judge.ras_culprit import FRESH, RasFinding, find_culprit, with_culprit
from phasewatch.stages.s4_judge.ras_report import RasAddress, RasFormatError, parse_report, ras_address
from phasewatch.stages.s4_judge.timerlint import UnitTimers, lint
from phasewatch.stages.s4_judge.verdict import Verdict

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ras"
INV = "0123456789abcdef0123456789abcdef"
PIDS = {4240 + n: f"TP{n}" for n in range(8)}  # the built fixtures' PIDs -> the unit's rank labels
CULPRIT = ("culprit (NCCL RAS): TP5, pid 4245, GPU 5, has launched AllReduce up to op 1233 while the others "
           "are at 1234")


def judged(name: str, labels: dict[int, str] = PIDS, unit: set[int] | None = None) -> RasFinding:
    text = (GOLDEN / name).read_text()
    return find_culprit(parse_report(text), INV, 100.0, "localhost:28028", labels,
                        set(labels) if unit is None else unit, text)


@pytest.mark.parametrize("name", ["built-8rank-allreduce-lag.json", "built-8rank-allreduce-lag.txt"])
def test_a_rank_behind_in_an_allreduce_is_named_with_its_pid_gpu_and_the_collective(name: str) -> None:
    finding = judged(name)
    assert finding.words() == CULPRIT
    [culprit] = finding.culprits
    assert (culprit.label, culprit.pid, culprit.gpu, culprit.collective, culprit.launched, culprit.others) == \
        ("TP5", 4245, 5, "AllReduce", 1233, 1234)
    assert ("TP5", "AllReduce", 1) in finding.lags and finding.ignored_pids == ()


def test_json_has_every_rank_and_its_counts() -> None:
    report = parse_report((GOLDEN / "built-8rank-allreduce-lag.json").read_text())
    [comm] = report.comms
    assert (report.format, report.nccl_version, comm.hash, comm.size) == ("json", "2.28.9+cuda13.0",
                                                                          "0x1d5a3e6f7a8b9c0d", 8)
    assert [r.pid for r in comm.ranks] == list(PIDS) and all(r.state == "running" for r in comm.ranks)
    assert comm.ranks[0].counts == {"Broadcast": 2, "Reduce": 0, "AllGather": 40, "ReduceScatter": 0,
                                    "AllReduce": 1234}


def test_text_names_only_the_outliers_and_the_majoritys_count() -> None:
    report = parse_report((GOLDEN / "built-8rank-allreduce-lag.txt").read_text())
    [comm] = report.comms
    assert comm.majority == {"AllReduce": 1234} and [(r.rank, dict(r.counts)) for r in comm.ranks] == \
        [(5, {"AllReduce": 1233})]
    assert comm.size == 8  # one group in the summary table: its size is the communicator's


@pytest.mark.parametrize("name", ["built-8rank-dead-rank.json", "built-8rank-dead-rank.txt"])
def test_a_rank_ras_cannot_reach_is_named_as_missing(name: str) -> None:
    finding = judged(name)
    assert finding.words() == ("culprit (NCCL RAS): TP5, pid 4245, GPU 5, sent RAS no data for communicator "
                               "0x1d5a3e6f7a8b9c0d (considered dead)")


def test_nccl_2_28s_missing_comma_is_mended_and_said() -> None:
    text = (GOLDEN / "built-8rank-dead-rank.json").read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # as NCCL 2.28 writes it
    report = parse_report(text)
    assert report.notes and "missing commas" in report.notes[0]
    assert [(m.rank, m.pid, m.dead, m.unresponsive) for m in report.comms[0].missing] == [(5, 4245, True, True)]


def test_ranks_in_step_are_no_culprit_and_the_blind_spots_are_said() -> None:
    finding = judged("built-8rank-in-step.json")
    assert finding.culprits == ()
    words = finding.words()
    assert words.startswith("no culprit from RAS: every rank of the unit launched the same collectives")
    for spot in ("CUDA graphs", "stuck inside a collective every rank launched", "custom all-reduce and Gloo"):
        assert spot in words


def test_an_answer_naming_pids_outside_the_unit_is_ignored_and_counted() -> None:
    finding = judged("built-8rank-allreduce-lag.json", unit={1, 2, 3})
    assert finding.culprits == () and len(finding.ignored_pids) == 8
    assert finding.words() == ("no culprit from RAS: RAS's answer names no process of the unit "
                               "(8 PID(s) in RAS's answer are not the unit's: ignored)")


def test_a_culprit_outside_the_unit_is_never_named() -> None:
    ours = {pid: rank for pid, rank in PIDS.items() if rank != "TP5"}  # TP5's PID is someone else's
    finding = judged("built-8rank-allreduce-lag.json", labels=ours)
    assert finding.culprits == () and finding.ignored_pids == (4245,)


def test_most_ranks_behind_is_no_single_culprit() -> None:
    text = (GOLDEN / "built-8rank-allreduce-lag.json").read_text().replace('"AllReduce": 1234', '"AllReduce": 1')
    finding = find_culprit(parse_report(text), INV, 0.0, "x", PIDS, set(PIDS))
    assert finding.culprits == () and "7 of 8 ranks are behind in AllReduce" in (finding.no_culprit or "")


@pytest.mark.parametrize("name", ["recorded-h200-status.txt", "recorded-h200-status.json", "recorded-h200-verbose.txt"])
def test_the_reports_recorded_on_the_h200_read(name: str) -> None:
    report = parse_report((GOLDEN / name).read_text())
    assert report.nccl_version == "2.28.9"
    assert len(report.comms) == (2 if report.format == "json" else 0)  # text lists only communicators in trouble
    finding = find_culprit(report, INV, 0.0, "x", {493: "TP0"}, {493})
    assert finding.culprits == () and finding.ignored_pids == ()


def test_the_recorded_json_has_the_one_rank_communicators() -> None:
    report = parse_report((GOLDEN / "recorded-h200-status.json").read_text())
    assert report.comms and all(c.size == 1 and len(c.ranks) == 1 for c in report.comms)
    rank = report.comms[0].ranks[0]
    assert rank.pid and rank.gpu == 0 and set(rank.counts) >= {"AllReduce", "Broadcast"}


def test_not_a_report_is_a_clear_error() -> None:
    with pytest.raises(RasFormatError):
        parse_report("ERROR: Unknown command STATUS\n")
    with pytest.raises(RasFormatError):
        parse_report("{ not json")


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, RasAddress("localhost", 28028, True)),
    ({"NCCL_RAS_ADDR": "127.0.0.1:28555"}, RasAddress("127.0.0.1", 28555, True)),
    ({"NCCL_RAS_ADDR": "[::1]:28029"}, RasAddress("::1", 28029, True)),
    ({"NCCL_RAS_ENABLE": "0"}, RasAddress("localhost", 28028, False)),
])
def test_the_address_is_read_from_the_environment_as_nccl_reads_it(environment: dict[str, str],
                                                                    expected: RasAddress) -> None:
    assert ras_address(environment) == expected


def test_an_address_that_is_not_host_port_is_said() -> None:
    assert ras_address({"NCCL_RAS_ADDR": "localhost"}).problem == "NCCL_RAS_ADDR='localhost' is not host:port"
    assert str(RasAddress("::1", 28029)) == "[::1]:28029"


def _verdict(kind: VerdictKind, inv: str = INV) -> Verdict:
    return Verdict(kind, inv, "cuda_graph_capture", "TP0", "no_progress", "TP0 stalled in cuda_graph_capture", 500.0)


def test_the_finding_is_told_in_this_startups_stall_verdicts_only_while_fresh() -> None:
    finding = judged("built-8rank-allreduce-lag.json")
    verdicts = [_verdict(VerdictKind.STALLED), _verdict(VerdictKind.STRAGGLER), _verdict(VerdictKind.STALLED, "other")]
    told = with_culprit(verdicts, finding, 200.0)
    assert told[0].message == f"TP0 stalled in cuda_graph_capture; {CULPRIT}"
    assert told[1:] == verdicts[1:]
    assert [(v.kind, v.at, v.key) for v in told] == [(v.kind, v.at, v.key) for v in verdicts]  # advice only
    assert with_culprit(verdicts, finding, 100.0 + FRESH + 1) == verdicts
    assert with_culprit(verdicts, None, 200.0) == verdicts


def test_metrics_give_the_lag_per_rank_and_collective() -> None:
    families = {f.name: f for f in ras_families(judged("built-8rank-allreduce-lag.json"), "u.service")}
    lags = {(s.labels["rank"], s.labels["collective"]): s.value for s in families["phasewatch_ras_collective_lag"]
            .samples}
    assert lags[("TP5", "AllReduce")] == 1.0 and lags[("TP4", "AllReduce")] == 0.0
    assert [s.labels["rank"] for s in families["phasewatch_ras_culprit"].samples] == ["TP5"]
    assert [s.value for s in families["phasewatch_ras_ignored_pids"].samples] == [0.0]
    assert all(not f.samples for f in ras_families(None, "u.service"))


def test_the_lint_says_when_the_unit_turns_ras_off_or_its_port_is_held_outside_it() -> None:
    config = Config(unit="u.service")
    codes = [w.code for w in lint(config, {}, UnitTimers(environment={"NCCL_RAS_ENABLE": "0"}))]
    assert "ras_off" in codes
    held = lint(config, {}, UnitTimers(environment={"NCCL_RAS_ADDR": "127.0.0.1:28555"}), None, "sleep (pid 9)")
    [shared] = [w for w in held if w.code == "ras_port_shared"]
    assert "127.0.0.1:28555 is held by sleep (pid 9)" in shared.message and "--ras-dropin" in shared.message
    assert not [w for w in lint(config, {}, UnitTimers()) if w.code.startswith("ras")]
    off = replace(config, vitals=replace(config.vitals, ras=False))
    assert not [w for w in lint(off, {}, UnitTimers(environment={"NCCL_RAS_ENABLE": "0"})) if w.code.startswith("ras")]


def test_init_gives_each_unit_a_ras_port_of_its_own_the_same_every_time() -> None:
    ports = {ras_port_for(f"sglang-{n}.service") for n in range(5)}
    assert len(ports) == 5 and all(28100 <= p < 29000 for p in ports)
    assert ras_port_for("sglang-kimi.service") == ras_port_for("sglang-kimi.service")
    text = ras_dropin("sglang-kimi.service", 28555)
    assert "[Service]\nEnvironment=NCCL_RAS_ADDR=127.0.0.1:28555\n" in text
    assert ras_address({"NCCL_RAS_ADDR": text.rsplit("=", 1)[1].strip()}) == RasAddress("127.0.0.1", 28555)


def test_status_shows_the_last_answer() -> None:
    finding = judged("built-8rank-allreduce-lag.json")
    assert f"NCCL RAS (localhost:28028): {CULPRIT}" in _why_lines({"ras": finding.document()})
    assert not [line for line in _why_lines({"ras": None}) if "RAS" in line]
