"""The GPU's signs of life (stages/s4_judge/gpu_vitals.py, vitals.with_gpus): over real H200 recordings
(tests/golden/gpu-traces), and the same signals on GPUs with other limits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from phasewatch.stages.s4_judge import vitals_trace
from phasewatch.stages.s4_judge.gpu_vitals import GpuBaseline, GpuInfo, GpuReading, judge
from phasewatch.stages.s4_judge.vitals import ProcessSample, RankVitals, Sample, Vitals, compare, host_work, with_gpus

TRACES = Path(__file__).resolve().parents[1] / "golden" / "gpu-traces"
H200 = GpuInfo(0, "H200", 700_000)
IDLE = GpuBaseline(80_000, 450)


def readings(power_w: list[float], sm: float = 0.0, pcie_kbps: float = 500.0, gpu: int = 0,
             processes: dict[int, int] | None = None, tx_kbps: float = 0.0) -> list[GpuReading]:
    return [GpuReading(100.0 + i, gpu, sm, 0.0, w * 1000, pcie_kbps, tx_kbps, processes or {10: 1 << 30})
            for i, w in enumerate(power_w)]


def window_periods(name: str, expect: str) -> list[RankVitals]:
    trace = vitals_trace.parse((TRACES / name).read_text().splitlines())
    window = next(w for w in trace.windows if w.expect == expect)
    return [r for p in vitals_trace.replay(trace, 5.0) if p.begin >= window.begin and p.end <= window.end
            for r in p.vitals.ranks]


def test_a_capture_computes_and_a_wait_kernel_waits_on_the_real_recordings() -> None:
    capture = window_periods("cuda-graph-capture.jsonl", "progress")
    assert capture and all(r.alive and r.gpu is not None and "computing" in r.gpu.reasons for r in capture)
    waiting = window_periods("hang-wait-kernel.jsonl", "no_progress")[1:]
    assert waiting and all(not r.alive and r.gpu is not None and r.gpu.state == "waiting" for r in waiting)
    assert "134 W flat" in waiting[0].text() and "likely a collective" in waiting[0].text()


def test_a_weight_load_moves_data_over_pcie_at_idle_power() -> None:
    load = window_periods("weight-load-cold.jsonl", "progress")
    assert load and all(r.gpu is not None and "transferring" in r.gpu.reasons for r in load)
    assert all(r.gpu is not None and r.gpu.power_w is not None and r.gpu.power_w < 130 for r in load)


def test_a_small_capture_at_low_power_is_alive_by_its_transfers() -> None:
    small = window_periods("cuda-graph-capture-small.jsonl", "progress")
    assert small and all(r.gpu is not None and "transferring" in r.gpu.reasons for r in small)


def test_an_in_process_compiler_is_host_work_with_the_gpu_idle() -> None:
    nvrtc = window_periods("jit-cupy-nvrtc.jsonl", "progress")
    assert nvrtc and all(r.alive for r in nvrtc)
    assert any(r.progress == ("host_work",) for r in nvrtc)


def test_hangs_without_a_gpu_context_or_cpu_are_nothing() -> None:
    for name in ("hang-gloo-allreduce.jsonl", "idle-blocked-recv.jsonl", "hang-python-lock.jsonl"):
        periods = window_periods(name, "no_progress")[2:]
        assert periods and not any(r.alive for r in periods), name


@pytest.mark.parametrize("limit_w, idle_w", [(700, 80), (400, 55), (750, 140), (300, 30)])
def test_the_rules_are_relative_to_the_gpus_own_limit_and_floor(limit_w: int, idle_w: int) -> None:
    info = GpuInfo(0, "any", limit_w * 1000)
    base = GpuBaseline(idle_w * 1000, 400)
    # a spin: 7 % of the limit over idle, flat, a kernel resident: waiting on every GPU
    spin = judge(info, readings([idle_w + 0.07 * limit_w] * 5, sm=100), base, [10])
    assert (spin.alive, spin.state) == (False, "waiting")
    # compute: 40 % of the limit over idle, swinging
    load = [idle_w + 0.4 * limit_w + d for d in (0, 30, -20, 10, -30)]
    assert judge(info, readings(load, sm=90), base, [10]).reasons == ("computing",)


def test_flat_resident_and_low_is_waiting_even_above_the_computing_level() -> None:
    """A spinning kernel that draws more (20 % over the floor) stays waiting while flat and resident."""
    period = judge(H200, readings([80 + 140] * 5, sm=100), IDLE, [10])
    assert (period.alive, period.state) == (False, "waiting")
    assert judge(H200, readings([80 + 140] * 5, sm=40), IDLE, [10]).reasons == ("computing",)


def test_pcie_counts_over_the_gpus_own_quiet_and_allocation_counts() -> None:
    assert judge(H200, readings([120] * 5, pcie_kbps=20_000), IDLE, [10]).reasons == ("transferring",)
    noisy = GpuBaseline(80_000, 30_000)  # a host whose idle link chatters at 30 MB/s
    assert judge(H200, readings([120] * 5, pcie_kbps=60_000), noisy, [10]).reasons == ()
    growing = [replace(r, processes={10: (1 + i) << 30}) for i, r in enumerate(readings([120] * 5))]
    assert judge(H200, growing, IDLE, [10]).reasons == ("allocating",)


def test_the_floor_is_capped_so_a_gpu_first_seen_busy_still_has_a_low_floor() -> None:
    busy_first = judge(H200, readings([600, 650, 620]), GpuBaseline(), [10])
    assert busy_first.floor_w == 140.0 and "computing" in busy_first.reasons


def test_a_rank_gets_the_gpu_its_process_or_child_holds() -> None:
    rank = ProcessSample(10, 1, "python3", "TP0", 0, 0, 0)
    child = ProcessSample(11, 10, "python3", None, 0, 0, 0)
    other = ProcessSample(20, 1, "python3", "TP1", 0, 0, 0)
    sample = Sample(105.0, (rank, child, other))
    vitals = Vitals(105.0, (RankVitals("TP0", 10, 5.0, 0, 0, 0.0, 0.0, 0.0, 0.0, (), ()),
                            RankVitals("TP1", 20, 5.0, 0, 0, 0.0, 0.0, 0.0, 0.0, (), ())))
    seen = with_gpus(vitals, sample, readings([600, 650, 620, 640], processes={11: 1 << 30}, gpu=3),
                     {3: replace(H200, index=3)}, {3: IDLE})
    tp0, tp1 = seen.ranks
    assert tp0.gpu is not None and tp0.gpu.index == 3 and tp0.alive and "computing" in tp0.progress
    assert tp1.gpu is None and not tp1.alive  # no context on any GPU: not observed, as today


def test_host_work_needs_the_gpu_observed_idle_and_a_busy_core() -> None:
    idle = judge(H200, readings([120] * 5, sm=0), IDLE, [10])
    busy = RankVitals("TP0", 10, 5.0, 0, 0, 0.0, 0.0, 0.0, 1.0, (), ())
    assert host_work(busy, idle)
    assert not host_work(replace(busy, cpu_share=0.3), idle)
    waiting = judge(H200, readings([134] * 5, sm=100), IDLE, [10])
    assert not host_work(busy, waiting)  # a host spinning in synchronize on a waiting kernel


def test_a_bad_trace_line_is_named() -> None:
    with pytest.raises(vitals_trace.TraceError, match="line 2"):
        vitals_trace.parse(['{"format": "phasewatch-vitals-trace/1"}', "{not json"])
    with pytest.raises(vitals_trace.TraceError, match="line 1: not a phasewatch-vitals-trace/1"):
        vitals_trace.parse(['{"format": "other"}'])


def test_a_kernel_polling_host_memory_waits_on_the_real_recording() -> None:
    """Three pollers (8, 132 warps, and one backing off with __nanosleep): 73-104 MB/s of PCIe, RX about
    twice TX, 126 W flat, SM util 100 %: waiting, the traffic named as polls (issue 35)."""
    trace = vitals_trace.parse((TRACES / "hang-poll-host-memory.jsonl").read_text().splitlines())
    periods = vitals_trace.replay(trace, 5.0)
    for window in (w for w in trace.windows if w.expect == "no_progress"):
        ranks = [r for p in periods if p.begin >= window.begin + 5 and p.end <= window.end for r in p.vitals.ranks]
        assert ranks and all(not r.alive and r.gpu is not None and r.gpu.state == "waiting" and r.gpu.polling
                             for r in ranks), window.name
        assert all(r.gpu is not None and r.gpu.pcie_mbps is not None and r.gpu.pcie_mbps > 50 for r in ranks)
    assert "of polls: a kernel polls host memory" in ranks[0].text()


@pytest.mark.parametrize("limit_w, idle_w", [(700, 80), (400, 55), (300, 30)])
def test_balanced_pcie_of_a_spinning_kernel_is_polling_and_payload_is_a_transfer(limit_w: int, idle_w: int) -> None:
    info = GpuInfo(0, "any", limit_w * 1000)
    base = GpuBaseline(idle_w * 1000, 1000)
    flat = [idle_w + 0.06 * limit_w] * 5
    poll = judge(info, readings(flat, sm=100, pcie_kbps=50_000, tx_kbps=25_000), base, [10])
    assert (poll.alive, poll.state, poll.polling) == (False, "waiting", True)
    # a kernel reading host data gets payload back (RX 6x TX), one writing to the host sends it out
    for rx, tx in ((150_000, 25_000), (5_000, 60_000)):
        assert judge(info, readings(flat, sm=100, pcie_kbps=rx, tx_kbps=tx), base, [10]).reasons == ("transferring",)
    # balanced but GB/s: a socket-transport collective moving data both ways
    bulk = judge(info, readings(flat, sm=100, pcie_kbps=900_000, tx_kbps=800_000), base, [10])
    assert bulk.reasons == ("transferring",)
    # the same balanced traffic with no kernel resident (a launch-bound stream, a copy): a transfer
    assert judge(info, readings(flat, sm=20, pcie_kbps=50_000, tx_kbps=25_000), base, [10]).reasons == ("transferring",)
    # no TX reading (an older binding or recording): never called polling
    assert judge(info, readings(flat, sm=100, pcie_kbps=75_000), base, [10]).reasons == ("transferring",)


def test_a_python_spin_after_gpu_work_is_not_host_work_past_its_first_seconds() -> None:
    """A counting loop and a loop polling an empty queue: a whole core, no fault, read or write call, the
    GPU idle with its memory held: host work only while the last touch is within 6 s (issue 35)."""
    trace = vitals_trace.parse((TRACES / "hang-python-spin.jsonl").read_text().splitlines())
    periods = vitals_trace.replay(trace, 5.0)
    for window in (w for w in trace.windows if w.expect == "no_progress"):
        ranks = [r for p in periods if p.begin >= window.begin + 10 and p.end <= window.end for r in p.vitals.ranks]
        assert ranks and all(not r.alive and r.cpu_share > 0.9 and r.quiet_seconds > 6 for r in ranks), window.name
        assert all(r.gpu is not None and r.gpu.state == "idle" for r in ranks)


def test_host_work_ends_when_the_rank_stops_touching_the_system() -> None:
    idle = judge(H200, readings([120] * 5, sm=0), IDLE, [10])
    busy = RankVitals("TP0", 10, 5.0, 0, 0, 0.0, 0.0, 0.0, 1.0, (), ())
    assert host_work(replace(busy, quiet_seconds=5.0), idle)
    assert not host_work(replace(busy, quiet_seconds=10.0), idle)


def test_quiet_seconds_add_up_until_a_fault_a_read_or_a_call() -> None:
    def sample(at: float, faults: int = 0, rchar: int = 0, calls: int = 0, cpu: int = 0) -> Sample:
        return Sample(at, (ProcessSample(10, 1, "python3", "TP0", faults, 0, cpu, rchar, 0, calls),))

    first = compare(sample(0.0), sample(5.0, cpu=500))
    second = compare(sample(5.0, cpu=500), sample(10.0, cpu=1000), before=first)
    assert [first.ranks[0].quiet_seconds, second.ranks[0].quiet_seconds] == [5.0, 10.0]
    for touched in (sample(15.0, faults=1, cpu=1500), sample(15.0, rchar=40, cpu=1500),
                    sample(15.0, calls=1, cpu=1500)):
        assert compare(sample(10.0, cpu=1000), touched, before=second).ranks[0].quiet_seconds == 0.0


def test_the_nvml_hint_names_what_installs_it_where_phasewatch_is() -> None:
    """Issue 36: a .deb install was told to `pip install 'phasewatch[gpu]'`."""
    from phasewatch.sources.host.gpu import nvml_install_hint

    deb = nvml_install_hint("/usr/lib/python3/dist-packages/phasewatch/sources/host/gpu.py")
    assert "apt install python3-pynvml" in deb and "pip" not in deb
    venv = nvml_install_hint("/opt/phasewatch/.venv/lib/python3.11/site-packages/phasewatch/sources/host/gpu.py")
    assert venv.startswith("pip install 'phasewatch[gpu]'")
    assert nvml_install_hint("/usr/local/lib/python3.11/dist-packages/phasewatch/sources/host/gpu.py") == venv
