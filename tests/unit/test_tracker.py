"""One test per tracker transition, named `test_<from>_to_<to>_<condition>`.

Events are built directly (the rule ids are the SGLang profile's), so these tests pin the state
machines, not the line grammar. Time is passed explicitly; nothing sleeps.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pytest

from phasewatch.engines import ServerInfo
from phasewatch.records import MAIN, Event, EventKind, Phase, Progress
from phasewatch.stages.s3_track.snapshot import InvocationView, PhaseSpan, RankView, Transition, UnitState
from phasewatch.stages.s3_track.tracker import Tracker

INV = "6f1c0c3a9a2b4e53a0f1d2c3b4a59687"
INV2 = "0d4e8a7b1c2f4a6b9e8d7c6b5a493827"
T0 = 1771804502.0  # 2026-02-22 23:55:02 UTC, the server_args line of SGLANG-LOGS.md §9.1
TP8 = tuple(f"TP{i}" for i in range(8))


# --- helpers -------------------------------------------------------------------------------------


def at(seconds: float) -> float:
    return T0 + seconds


def event(kind: EventKind, t: float, rank: str | None = "TP0", phase: Phase | None = None,
          rule: str | None = None, invocation_id: str | None = INV, **fields: object) -> Event:
    return Event(kind, at(t), rank=rank, phase=phase, rule=rule, invocation_id=invocation_id,
                 **fields)  # type: ignore[arg-type]


def begin(phase: Phase, t: float, rank: str | None = "TP0", rule: str | None = None,
          invocation_id: str | None = INV) -> Event:
    return event(EventKind.PHASE_BEGIN, t, rank, phase, rule, invocation_id)


def end(phase: Phase, t: float, rank: str | None = "TP0", rule: str | None = None) -> Event:
    return event(EventKind.PHASE_END, t, rank, phase, rule)


def hint(phase: Phase, t: float, rank: str = "TP0", rule: str | None = None) -> Event:
    return event(EventKind.PHASE_HINT, t, rank, phase, rule)


def started(t: float, invocation_id: str | None = INV) -> Event:
    """systemd's `Started sglang.service.` entry (MESSAGE_ID 39f53479…)."""
    return event(EventKind.INVOCATION_START, t, None, invocation_id=invocation_id, args={"JOB_TYPE": "start"})


def bar_event(progress: Progress, t: float) -> Event:
    """An unprefixed capture bar whose rank is not known (a pasted log has no PIDs)."""
    return event(EventKind.PROGRESS, t, None, Phase.CUDA_GRAPH_CAPTURE, rule="capture_bar", progress=progress)


def lifecycle(kind: EventKind, t: float, **args: str) -> Event:
    return event(kind, t, None, args=args)


def server_args(t: float, **args: str) -> Event:
    return event(EventKind.SERVER_ARGS, t, MAIN, rule="server_args", args=args)


def feed(tracker: Tracker, events: Iterable[Event]) -> list[Transition]:
    out: list[Transition] = []
    for e in events:
        out.extend(tracker.apply(e, e.ts if e.ts is not None else T0))
    return out


def current(tracker: Tracker) -> InvocationView:
    inv = tracker.snapshot().current
    assert inv is not None
    return inv


def rank_of(tracker: Tracker, label: str = "TP0") -> RankView:
    view = current(tracker).rank(label)
    assert view is not None, f"{label} not tracked"
    return view


def move(rank: str, source: str, target: str, t: float, rule: str | None = None,
         invocation_id: str = INV) -> Transition:
    return Transition(invocation_id, rank, source, target, at(t), rule)


def unit(source: str | None, target: str, t: float, rule: str | None, invocation_id: str = INV) -> Transition:
    return Transition(invocation_id, "unit", source, target, at(t), rule)


# The v0.5.9 order for one rank (SGLANG-LOGS.md §2), target then EAGLE3 draft, as (event, rule) pairs.
V059_TARGET = (
    (EventKind.PHASE_BEGIN, Phase.DIST_INIT, "dist_begin"),
    (EventKind.PHASE_END, Phase.DIST_INIT, "dist_end"),
    (EventKind.PHASE_BEGIN, Phase.WEIGHT_LOAD, "load_begin"),
    (EventKind.PHASE_END, Phase.WEIGHT_LOAD, "load_end"),
    (EventKind.PHASE_BEGIN, Phase.KV_CACHE_ALLOC, "kv_alloc"),
    (EventKind.PHASE_END, Phase.KV_CACHE_ALLOC, "pool_end"),
    (EventKind.PHASE_BEGIN, Phase.CUDA_GRAPH_CAPTURE, "capture_begin"),
    (EventKind.PHASE_END, Phase.CUDA_GRAPH_CAPTURE, "capture_end"),
)
V059_DRAFT = (
    (EventKind.PHASE_BEGIN, Phase.DIST_INIT, "dist_begin"),
    (EventKind.PHASE_END, Phase.DIST_INIT, "dist_end"),
    (EventKind.PHASE_BEGIN, Phase.WEIGHT_LOAD, "load_begin"),
    (EventKind.PHASE_END, Phase.WEIGHT_LOAD, "load_end"),
    (EventKind.PHASE_BEGIN, Phase.KV_CACHE_ALLOC, "kv_alloc"),
    (EventKind.PHASE_END, Phase.KV_CACHE_ALLOC, "pool_end"),
    (EventKind.PHASE_BEGIN, Phase.DRAFT_CUDA_GRAPH_CAPTURE, "draft_capture_begin"),
    (EventKind.PHASE_END, Phase.DRAFT_CUDA_GRAPH_CAPTURE, "draft_capture_end"),
)


def script(steps: Iterable[tuple[EventKind, Phase, str]], ranks: Iterable[str] = ("TP0",),
           t: float = 10.0) -> list[Event]:
    """Each step on every rank, one second apart (ranks in lock-step, like a collective)."""
    ranks = tuple(ranks)
    out = []
    for kind, phase, rule in steps:
        out.extend(event(kind, t, r, phase, rule) for r in ranks)
        t += 1
    return out


def tracker_with(*events: Event) -> Tracker:
    tracker = Tracker()
    feed(tracker, (started(0), *events))
    return tracker


# --- rank phases ---------------------------------------------------------------------------------


def test_launch_to_dist_init_on_init_torch_distributed_begin() -> None:
    tracker = tracker_with()
    assert tracker.apply(begin(Phase.DIST_INIT, 12, rule="dist_begin"), at(12)) == [
        move("TP0", "launch", "dist_init", 12, "dist_begin")]
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended, rank.last_activity) == (
        Phase.DIST_INIT, at(12), False, at(12))
    assert rank.spans == (PhaseSpan(Phase.LAUNCH, at(12), at(12)), PhaseSpan(Phase.DIST_INIT, at(12), None))


def test_dist_init_to_weight_load_on_load_weight_begin() -> None:
    tracker = tracker_with(begin(Phase.DIST_INIT, 12), end(Phase.DIST_INIT, 14, rule="dist_end"))
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_ended) == (Phase.DIST_INIT, True)
    assert tracker.apply(begin(Phase.WEIGHT_LOAD, 15, rule="load_begin"), at(15)) == [
        move("TP0", "dist_init", "weight_load", 15, "load_begin")]
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended) == (Phase.WEIGHT_LOAD, at(15), False)
    # The ended phase keeps its own end, not the time the next one began.
    assert rank.spans[-2:] == (PhaseSpan(Phase.DIST_INIT, at(12), at(14)),
                               PhaseSpan(Phase.WEIGHT_LOAD, at(15), None))


def test_weight_load_to_kv_cache_alloc_on_kv_cache_allocated() -> None:
    tracker = tracker_with(*script(V059_TARGET[:4]))
    assert tracker.apply(begin(Phase.KV_CACHE_ALLOC, 30, rule="kv_alloc"), at(30)) == [
        move("TP0", "weight_load", "kv_cache_alloc", 30, "kv_alloc")]
    assert rank_of(tracker).phase is Phase.KV_CACHE_ALLOC


def test_kv_cache_alloc_to_cuda_graph_capture_on_capture_begin() -> None:
    tracker = tracker_with(*script(V059_TARGET[:6]))
    assert tracker.apply(begin(Phase.CUDA_GRAPH_CAPTURE, 30, rule="capture_begin"), at(30)) == [
        move("TP0", "kv_cache_alloc", "cuda_graph_capture", 30, "capture_begin")]
    assert rank_of(tracker).phase is Phase.CUDA_GRAPH_CAPTURE


def test_cuda_graph_capture_to_draft_weight_load_on_second_init_torch_distributed_begin() -> None:
    tracker = tracker_with(*script(V059_TARGET))
    assert tracker.apply(begin(Phase.DIST_INIT, 30, rule="dist_begin"), at(30)) == [
        move("TP0", "cuda_graph_capture", "draft_weight_load", 30, "dist_begin")]
    # The draft's "Init ... ends", second "Load weight begin", and its KV pool lines stay in the phase.
    assert feed(tracker, [end(Phase.DIST_INIT, 30), begin(Phase.WEIGHT_LOAD, 31), end(Phase.WEIGHT_LOAD, 33),
                          begin(Phase.KV_CACHE_ALLOC, 33), end(Phase.KV_CACHE_ALLOC, 34)]) == []
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended) == (Phase.DRAFT_WEIGHT_LOAD, at(30), True)
    assert rank.spans[-1] == PhaseSpan(Phase.DRAFT_WEIGHT_LOAD, at(30), at(33))


def test_cuda_graph_capture_to_draft_weight_load_on_second_load_weight_begin() -> None:
    """Without the draft's dist-init lines (a window of the log), its "Load weight begin" moves the rank."""
    tracker = tracker_with(*script(V059_TARGET))
    assert tracker.apply(begin(Phase.WEIGHT_LOAD, 30, rule="load_begin"), at(30)) == [
        move("TP0", "cuda_graph_capture", "draft_weight_load", 30, "load_begin")]
    assert tracker.apply(end(Phase.WEIGHT_LOAD, 31), at(31)) == []
    assert (rank_of(tracker).phase, rank_of(tracker).phase_ended) == (Phase.DRAFT_WEIGHT_LOAD, True)


def test_draft_weight_load_to_draft_cuda_graph_capture_on_capture_draft_begin() -> None:
    tracker = tracker_with(*script(V059_TARGET + V059_DRAFT[:6]))
    assert rank_of(tracker).phase is Phase.DRAFT_WEIGHT_LOAD
    assert tracker.apply(begin(Phase.DRAFT_CUDA_GRAPH_CAPTURE, 40, rule="draft_capture_begin"), at(40)) == [
        move("TP0", "draft_weight_load", "draft_cuda_graph_capture", 40, "draft_capture_begin")]
    assert rank_of(tracker).phase is Phase.DRAFT_CUDA_GRAPH_CAPTURE


def test_weight_load_to_draft_weight_load_on_second_load_weight_begin_v0_5_23() -> None:
    """v0.5.23 loads target then draft weights before any memory pool (SGLANG-LOGS.md §2.1)."""
    tracker = tracker_with(begin(Phase.DIST_INIT, 10, rule="dist_begin"), end(Phase.DIST_INIT, 11),
                           begin(Phase.WEIGHT_LOAD, 12), end(Phase.WEIGHT_LOAD, 20))
    assert tracker.apply(begin(Phase.WEIGHT_LOAD, 21, rule="load_begin"), at(21)) == [
        move("TP0", "weight_load", "draft_weight_load", 21, "load_begin")]
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended) == (Phase.DRAFT_WEIGHT_LOAD, at(21), False)
    assert rank.spans[-2] == PhaseSpan(Phase.WEIGHT_LOAD, at(12), at(20))


def test_draft_weight_load_to_kv_cache_alloc_after_both_loads_v0_5_23() -> None:
    tracker = tracker_with(begin(Phase.DIST_INIT, 10), end(Phase.DIST_INIT, 11),
                           begin(Phase.WEIGHT_LOAD, 12), end(Phase.WEIGHT_LOAD, 20),
                           begin(Phase.WEIGHT_LOAD, 21), end(Phase.WEIGHT_LOAD, 22))
    assert tracker.apply(begin(Phase.KV_CACHE_ALLOC, 23, rule="kv_alloc"), at(23)) == [
        move("TP0", "draft_weight_load", "kv_cache_alloc", 23, "kv_alloc")]
    # The draft's pool ("EAGLE KV Cache is allocated") is the same phase; then the graphs.
    assert tracker.apply(begin(Phase.KV_CACHE_ALLOC, 24, rule="kv_alloc"), at(24)) == []
    assert feed(tracker, [begin(Phase.CUDA_GRAPH_CAPTURE, 25, rule="target_capture_begin"),
                          end(Phase.CUDA_GRAPH_CAPTURE, 30),
                          begin(Phase.DRAFT_CUDA_GRAPH_CAPTURE, 31, rule="draft_capture_begin")]) == [
        move("TP0", "kv_cache_alloc", "cuda_graph_capture", 25, "target_capture_begin"),
        move("TP0", "cuda_graph_capture", "draft_cuda_graph_capture", 31, "draft_capture_begin")]


def _eight_ranks_done(tracker: Tracker) -> None:
    feed(tracker, [server_args(1, tp_size="8", speculative_algorithm="EAGLE3"),
                   *script(V059_TARGET + V059_DRAFT, TP8)])


def test_draft_cuda_graph_capture_to_http_server_start_moves_every_rank_on_uvicorn_line() -> None:
    tracker = tracker_with()
    _eight_ranks_done(tracker)
    assert {r.phase for r in current(tracker).scheduler_ranks} == {Phase.DRAFT_CUDA_GRAPH_CAPTURE}
    out = tracker.apply(begin(Phase.HTTP_SERVER_START, 60, MAIN, "uvicorn_started"), at(60))
    assert out == [move(MAIN, "launch", "http_server_start", 60, "uvicorn_started"),
                   *(move(r, "draft_cuda_graph_capture", "http_server_start", 60, "uvicorn_started")
                     for r in TP8)]
    inv = current(tracker)
    assert [(r.rank, r.phase, r.phase_start) for r in inv.ranks] == [
        (label, Phase.HTTP_SERVER_START, at(60)) for label in (MAIN, *TP8)]
    assert inv.state is UnitState.STARTING
    # The draft capture keeps the end its own end line gave it.
    assert rank_of(tracker, "TP3").spans[-2] == PhaseSpan(Phase.DRAFT_CUDA_GRAPH_CAPTURE, at(24), at(25))


def _at_http(tracker: Tracker) -> None:
    _eight_ranks_done(tracker)
    tracker.apply(begin(Phase.HTTP_SERVER_START, 60, MAIN, "uvicorn_started"), at(60))


def test_http_server_start_to_warmup_on_model_info_request() -> None:
    tracker = tracker_with()
    _at_http(tracker)
    out = tracker.apply(begin(Phase.WARMUP, 61, MAIN, "warmup_request"), at(61))
    assert out == [move(label, "http_server_start", "warmup", 61, "warmup_request") for label in (MAIN, *TP8)]
    assert {r.phase for r in current(tracker).ranks} == {Phase.WARMUP}


def test_warmup_to_ready_on_fired_up_line() -> None:
    tracker = tracker_with()
    _at_http(tracker)
    tracker.apply(begin(Phase.WARMUP, 61, MAIN, "warmup_request"), at(61))
    out = tracker.apply(begin(Phase.READY, 63, MAIN, "ready"), at(63))
    assert out[:-1] == [move(label, "warmup", "ready", 63, "ready") for label in (MAIN, *TP8)]
    assert {r.phase for r in current(tracker).ranks} == {Phase.READY}


def test_ready_to_serving_on_decode_batch() -> None:
    tracker = tracker_with()
    _at_http(tracker)
    feed(tracker, [begin(Phase.WARMUP, 61, MAIN), begin(Phase.READY, 63, MAIN)])
    out = tracker.apply(begin(Phase.SERVING, 100, "TP0", "decode_batch"), at(100))
    assert out[:-1] == [move(label, "ready", "serving", 100, "decode_batch") for label in (MAIN, *TP8)]
    assert {r.phase for r in current(tracker).ranks} == {Phase.SERVING}


def test_warmup_to_serving_not_before_ready() -> None:
    """The warm-up's own POST /generate and its decode batches are not traffic."""
    tracker = tracker_with()
    _at_http(tracker)
    tracker.apply(begin(Phase.WARMUP, 61, MAIN), at(61))
    assert feed(tracker, [begin(Phase.SERVING, 62, "TP0", "decode_batch"),
                          begin(Phase.SERVING, 62, MAIN, "api_request")]) == []
    assert current(tracker).state is UnitState.STARTING
    assert {r.phase for r in current(tracker).ranks} == {Phase.WARMUP}


def test_cuda_graph_capture_to_serving_not_before_ready() -> None:
    tracker = tracker_with(*script(V059_TARGET[:7]))
    assert tracker.apply(begin(Phase.SERVING, 30, "TP0", "decode_batch"), at(30)) == []
    assert rank_of(tracker).phase is Phase.CUDA_GRAPH_CAPTURE


def test_kv_cache_alloc_to_cuda_graph_capture_on_end_line_without_begin() -> None:
    """2024 logs and windows of a log show an end line whose begin was never seen: begin + end."""
    tracker = tracker_with(*script(V059_TARGET[:6]))
    assert tracker.apply(end(Phase.CUDA_GRAPH_CAPTURE, 30, rule="capture_end"), at(30)) == [
        move("TP0", "kv_cache_alloc", "cuda_graph_capture", 30, "capture_end")]
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended) == (Phase.CUDA_GRAPH_CAPTURE, at(30), True)
    assert rank.spans[-1] == PhaseSpan(Phase.CUDA_GRAPH_CAPTURE, at(30), at(30))


def test_cuda_graph_capture_to_cuda_graph_capture_reopened_on_second_capture_begin() -> None:
    """Piecewise graphs after the decode graphs: the ended capture phase opens again."""
    tracker = tracker_with(*script(V059_TARGET))
    first = rank_of(tracker)
    assert first.phase_ended
    assert tracker.apply(begin(Phase.CUDA_GRAPH_CAPTURE, 30, rule="target_capture_begin"), at(30)) == []
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_start, rank.phase_ended) == (
        Phase.CUDA_GRAPH_CAPTURE, first.phase_start, False)
    assert rank.spans[-1] == PhaseSpan(Phase.CUDA_GRAPH_CAPTURE, first.phase_start, None)
    assert tracker.apply(end(Phase.CUDA_GRAPH_CAPTURE, 40), at(40)) == []
    assert rank_of(tracker).spans[-1] == PhaseSpan(Phase.CUDA_GRAPH_CAPTURE, first.phase_start, at(40))


@pytest.mark.parametrize("late", [
    begin(Phase.KV_CACHE_ALLOC, 30, rule="kv_alloc"),
    end(Phase.KV_CACHE_ALLOC, 30, rule="pool_end"),
    end(Phase.DIST_INIT, 30, rule="dist_end"),
    begin(Phase.LAUNCH, 30),
], ids=["kv_begin", "pool_end", "dist_end", "launch"])
def test_cuda_graph_capture_to_earlier_phase_never_on_late_line(late: Event) -> None:
    tracker = tracker_with(*script(V059_TARGET[:7]))
    before = rank_of(tracker)
    assert tracker.apply(late, at(30)) == []
    after = rank_of(tracker)
    assert (after.phase, after.phase_start, after.phase_ended, after.spans) == (
        before.phase, before.phase_start, before.phase_ended, before.spans)


def test_weight_load_to_cuda_graph_capture_on_phase_hint_from_traceback_frame() -> None:
    """A `cuda_graph_runner.py` frame shows the rank got further than its lines said."""
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10))
    assert tracker.apply(hint(Phase.CUDA_GRAPH_CAPTURE, 20, rule="frame_cuda_graph"), at(20)) == [
        move("TP0", "weight_load", "cuda_graph_capture", 20, "frame_cuda_graph")]


@pytest.mark.parametrize("frame", [Phase.LAUNCH, Phase.KV_CACHE_ALLOC, Phase.CUDA_GRAPH_CAPTURE])
def test_cuda_graph_capture_to_any_phase_never_on_phase_hint(frame: Phase) -> None:
    """Hints move only forward: frames of phases left, or of the ended current phase, change nothing."""
    tracker = tracker_with(*script(V059_TARGET[:6]), end(Phase.CUDA_GRAPH_CAPTURE, 30))
    assert rank_of(tracker).phase_ended
    assert tracker.apply(hint(frame, 31), at(31)) == []
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_ended) == (Phase.CUDA_GRAPH_CAPTURE, True)


def test_cuda_graph_capture_stays_on_dist_init_frame_hint() -> None:
    """A dist-init frame after the target's weights moves nothing: hints are never reinterpreted
    (a TCPStore timeout while the target loads is not the draft's phase)."""
    tracker = tracker_with(*script(V059_TARGET))
    assert tracker.apply(hint(Phase.DIST_INIT, 31, rule="frame_dist_init"), at(31)) == []
    assert rank_of(tracker).phase is Phase.CUDA_GRAPH_CAPTURE


def test_cuda_graph_capture_to_draft_weight_load_on_draft_worker_frame_hint() -> None:
    """The draft worker's own frame (`/speculative/eagle_worker.py ... in __init__`) is the draft's phase."""
    tracker = tracker_with(*script(V059_TARGET))
    assert tracker.apply(hint(Phase.DRAFT_WEIGHT_LOAD, 31, rule="frame_draft_worker"), at(31)) == [
        move("TP0", "cuda_graph_capture", "draft_weight_load", 31, "frame_draft_worker")]


def test_http_server_start_to_http_server_start_ignores_rank_lines() -> None:
    """Once the main process drives the unit, a rank's engine lines (e.g. a hint) move nothing."""
    tracker = tracker_with()
    _at_http(tracker)
    late = [hint(Phase.CUDA_GRAPH_CAPTURE, 61, "TP2"), begin(Phase.KV_CACHE_ALLOC, 61, "TP2")]
    assert feed(tracker, late) == []
    assert rank_of(tracker, "TP2").phase is Phase.HTTP_SERVER_START


def test_launch_to_cuda_graph_capture_when_unowned_bar_is_adopted_by_tp0() -> None:
    """A window of the log starting inside a capture: its bar comes before any rank's line."""
    bar = Progress("Capturing batches (bs=16 avail_mem=19.80 GB)", 8, 23, percent=35, bs=16,
                   avail_mem_gb=19.8)
    tracker = tracker_with()
    assert tracker.apply(bar_event(bar, 5), at(5)) == []
    assert [r.rank for r in current(tracker).ranks] == []
    out = tracker.apply(end(Phase.CUDA_GRAPH_CAPTURE, 9, "TP0", "capture_end"), at(9))
    assert out == [move("TP0", "launch", "cuda_graph_capture", 5, "progress")]
    rank = rank_of(tracker)
    assert (rank.phase, rank.phase_ended, rank.progress, rank.progress_phase) == (
        Phase.CUDA_GRAPH_CAPTURE, True, bar, Phase.CUDA_GRAPH_CAPTURE)
    assert rank.spans == (PhaseSpan(Phase.LAUNCH, at(5), at(5)),
                          PhaseSpan(Phase.CUDA_GRAPH_CAPTURE, at(5), at(9)))


def test_unowned_bar_is_not_adopted_by_other_ranks() -> None:
    bar = Progress("Capturing batches (bs=16 avail_mem=19.80 GB)", 8, 23)
    tracker = tracker_with(bar_event(bar, 5),
                           end(Phase.CUDA_GRAPH_CAPTURE, 9, "TP3"))
    assert rank_of(tracker, "TP3").progress is None
    tracker.apply(end(Phase.CUDA_GRAPH_CAPTURE, 9, "TP0"), at(9))
    assert rank_of(tracker, "TP0").progress == bar


def test_progress_bar_without_rank_goes_to_tp0_of_the_phase() -> None:
    tracker = tracker_with(*script(V059_TARGET[:7], ("TP0", "TP1")))
    bar = Progress("Capturing batches (bs=48 avail_mem=20.12 GB)", 1, 23)
    assert tracker.apply(bar_event(bar, 20), at(20)) == []
    assert (rank_of(tracker, "TP0").progress, rank_of(tracker, "TP0").last_activity) == (bar, at(20))
    assert rank_of(tracker, "TP1").progress is None


# --- unit lifecycle (main process and PID 1) -----------------------------------------------------


def test_starting_to_ready_on_fired_up_line() -> None:
    tracker = tracker_with()
    _at_http(tracker)
    tracker.apply(begin(Phase.WARMUP, 61, MAIN), at(61))
    assert current(tracker).state is UnitState.STARTING
    out = tracker.apply(begin(Phase.READY, 63, MAIN, "ready"), at(63))
    assert out[-1] == unit("starting", "ready", 63, "ready")
    assert current(tracker).state is UnitState.READY


def test_ready_to_serving_on_first_api_request() -> None:
    tracker = tracker_with()
    _at_http(tracker)
    feed(tracker, [begin(Phase.WARMUP, 61, MAIN), begin(Phase.READY, 63, MAIN)])
    out = tracker.apply(begin(Phase.SERVING, 100, MAIN, "api_request"), at(100))
    assert out[-1] == unit("ready", "serving", 100, "api_request")
    assert current(tracker).state is UnitState.SERVING
    # A second request changes nothing.
    assert tracker.apply(begin(Phase.SERVING, 101, MAIN, "api_request"), at(101)) == []


def test_starting_to_stopping_on_pid1_stopping_entry() -> None:
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10))
    assert tracker.apply(lifecycle(EventKind.UNIT_STOPPING, 20, JOB_TYPE="restart"), at(20)) == [
        unit("starting", "stopping", 20, "unit_stopping")]
    inv = current(tracker)
    assert (inv.state, inv.stop_job) == (UnitState.STOPPING, "restart")


def test_stopping_to_stopped_on_pid1_stopped_entry() -> None:
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10), lifecycle(EventKind.UNIT_STOPPING, 20))
    assert current(tracker).stop_job == "stop"
    assert tracker.apply(lifecycle(EventKind.UNIT_STOPPED, 25), at(25)) == [
        unit("stopping", "stopped", 25, "unit_stopped")]
    assert current(tracker).state is UnitState.STOPPED


def test_stopping_to_stopping_ignores_ready_line() -> None:
    tracker = tracker_with(lifecycle(EventKind.UNIT_STOPPING, 20))
    assert tracker.apply(begin(Phase.READY, 21, MAIN, "ready"), at(21)) == []
    assert current(tracker).state is UnitState.STOPPING


def test_starting_to_failed_on_pid1_failed_entry() -> None:
    tracker = tracker_with(begin(Phase.CUDA_GRAPH_CAPTURE, 10),
                           lifecycle(EventKind.UNIT_EXITED, 19, EXIT_CODE="killed", EXIT_STATUS="9"))
    assert tracker.apply(lifecycle(EventKind.UNIT_FAILED, 20, UNIT_RESULT="signal"), at(20)) == [
        unit("starting", "failed", 20, "unit_failed")]
    inv = current(tracker)
    assert (inv.state, inv.unit_result, inv.exit_status) == (UnitState.FAILED, "signal", "killed/9")


def test_failed_to_failed_on_later_stopped_entry() -> None:
    """PID 1 writes "Failed with result" before "Stopped": the unit stays failed."""
    tracker = tracker_with(lifecycle(EventKind.UNIT_FAILED, 20, UNIT_RESULT="exit-code"),
                           lifecycle(EventKind.RESTART_SCHEDULED, 21))
    assert feed(tracker, [lifecycle(EventKind.UNIT_STOPPING, 22),
                          lifecycle(EventKind.UNIT_STOPPED, 22)]) == []
    inv = current(tracker)
    assert (inv.state, inv.unit_result, inv.restart_scheduled) == (UnitState.FAILED, "exit-code", True)


# --- invocations ---------------------------------------------------------------------------------


def test_none_to_starting_on_first_line_of_an_invocation() -> None:
    tracker = Tracker()
    assert tracker.snapshot().current is None
    assert tracker.apply(server_args(1, tp_size="8"), at(1)) == [unit(None, "starting", 1, "invocation")]
    inv = current(tracker)
    assert (inv.invocation_id, inv.started_at, inv.state) == (INV, at(1), UnitState.STARTING)


def test_starting_to_starting_fresh_invocation_on_new_invocation_id() -> None:
    tracker = tracker_with(begin(Phase.CUDA_GRAPH_CAPTURE, 10),
                           event(EventKind.LINES_LOST, 11, None, count=3))
    out = tracker.apply(begin(Phase.DIST_INIT, 100, invocation_id=INV2, rule="dist_begin"), at(100))
    assert out == [unit(INV, "starting", 100, "invocation", INV2),
                   move("TP0", "launch", "dist_init", 100, "dist_begin", INV2)]
    snapshot = tracker.snapshot()
    assert [i.invocation_id for i in snapshot.invocations] == [INV, INV2]
    fresh = current(tracker)
    assert (fresh.invocation_id, fresh.started_at, fresh.lines_lost) == (INV2, at(100), 0)
    assert [(r.rank, r.phase) for r in fresh.ranks] == [("TP0", Phase.DIST_INIT)]


def test_starting_to_starting_fresh_invocation_on_systemd_started_entry() -> None:
    tracker = tracker_with(begin(Phase.CUDA_GRAPH_CAPTURE, 10))
    assert tracker.apply(started(100, INV2), at(100)) == [unit(INV, "starting", 100, "invocation", INV2)]
    fresh = current(tracker)
    assert (fresh.invocation_id, fresh.ranks, fresh.started_at) == (INV2, (), at(100))


def test_starting_to_starting_fresh_invocation_on_started_entry_of_a_log_without_ids() -> None:
    """A pasted log has no invocation ids: each `Started` entry opens the next anonymous one."""
    tracker = Tracker()
    assert tracker.apply(started(0, None), at(0)) == [unit(None, "starting", 0, "invocation", "log-1")]
    tracker.apply(begin(Phase.WEIGHT_LOAD, 5, invocation_id=None), at(5))
    assert tracker.apply(started(50, None), at(50)) == [unit("log-1", "starting", 50, "invocation", "log-2")]
    assert [(i.invocation_id, len(i.ranks)) for i in tracker.snapshot().invocations] == [
        ("log-1", 1), ("log-2", 0)]


def test_starting_to_starting_no_new_invocation_on_started_entry_of_known_id() -> None:
    """Type=notify: `Started` comes after the unit's first lines; it opens nothing new."""
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10))
    assert tracker.apply(started(30), at(30)) == []
    assert len(tracker.snapshot().invocations) == 1
    assert rank_of(tracker).phase is Phase.WEIGHT_LOAD


def test_late_line_for_older_invocation_goes_to_that_invocation() -> None:
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10))
    tracker.apply(started(100, INV2), at(100))
    assert tracker.apply(end(Phase.WEIGHT_LOAD, 101), at(101)) == []
    old, new = tracker.snapshot().invocations
    assert current(tracker).invocation_id == INV2
    assert old.rank("TP0") is not None and old.rank("TP0").phase_ended  # type: ignore[union-attr]
    assert (old.last_ts, new.ranks) == (at(101), ())


def test_lines_lost_counted_from_lines_lost_event() -> None:
    tracker = tracker_with(begin(Phase.WEIGHT_LOAD, 10))
    assert tracker.apply(event(EventKind.LINES_LOST, 11, None, invocation_id=None, count=1234), at(11)) == []
    # journalctl's elided entry counts as one line, whatever its count says.
    tracker.apply(event(EventKind.LINES_LOST, 12, None, count=0, cause="elided"), at(12))
    assert current(tracker).lines_lost == 1235


def test_none_to_starting_on_lines_lost_before_any_line() -> None:
    tracker = Tracker()
    assert tracker.apply(event(EventKind.LINES_LOST, 1, None, invocation_id=None, count=7), at(1)) == [
        unit(None, "starting", 1, "invocation", "log-1")]
    assert current(tracker).lines_lost == 7


# --- expected ranks ------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "first", "last", "count"), [
    ({}, "TP0", "TP0", 1),
    ({"tp_size": "8"}, "TP0", "TP7", 8),
    ({"tp_size": "8", "dp_size": "2", "enable_dp_attention": "True"}, "DP0 TP0", "DP1 TP7", 8),
    ({"tp_size": "2", "dp_size": "2"}, "DP0 TP0", "DP1 TP1", 4),
    ({"tp_size": "4", "pp_size": "2"}, "PP0 TP0", "PP1 TP3", 8),
    ({"tp_size": "8", "ep_size": "8"}, "TP0 EP0", "TP7 EP7", 8),
    ({"tp_size": "16", "nnodes": "2", "node_rank": "1"}, "TP8", "TP15", 8),
], ids=["tp1", "tp8", "dp_attention", "plain_dp", "pp2", "ep8", "node1_of_2"])
def test_expected_ranks_from_server_args(args: Mapping[str, str], first: str, last: str, count: int) -> None:
    ranks = ServerInfo.from_args(args).expected_ranks()
    assert (ranks[0], ranks[-1], len(ranks), len(set(ranks))) == (first, last, count, count)


def test_expected_ranks_dp_attention_groups() -> None:
    info = ServerInfo.from_args({"tp_size": "8", "dp_size": "2", "enable_dp_attention": "True"})
    assert info.expected_ranks() == ("DP0 TP0", "DP0 TP1", "DP0 TP2", "DP0 TP3",
                                     "DP1 TP4", "DP1 TP5", "DP1 TP6", "DP1 TP7")
    assert ServerInfo.from_args({"tp_size": "8", "ep_size": "8"}).expected_ranks()[3] == "TP3 EP3"


def test_server_info_from_args_reads_types_and_defaults() -> None:
    info = ServerInfo.from_args({"tp_size": "8", "dp_size": "x", "speculative_algorithm": "None",
                                 "model_path": "meta-llama/Llama-3.3-70B-Instruct"})
    assert info == ServerInfo(tp=8, model_path="meta-llama/Llama-3.3-70B-Instruct")
    assert ServerInfo.from_args({"speculative_algorithm": "EAGLE3"}).speculative == "EAGLE3"


def test_launch_expected_ranks_listed_before_they_print() -> None:
    tracker = tracker_with(server_args(1, tp_size="8"))
    inv = current(tracker)
    assert [(r.rank, r.phase, r.phase_start, r.seen) for r in inv.ranks] == [
        (MAIN, Phase.LAUNCH, at(1), True), *((label, Phase.LAUNCH, at(1), False) for label in TP8)]
    tracker.apply(begin(Phase.DIST_INIT, 5, "TP3"), at(5))
    inv = current(tracker)
    assert [r.rank for r in inv.ranks if r.seen] == [MAIN, "TP3"]
    assert len(inv.scheduler_ranks) == 8


def test_launch_expected_ranks_not_invented_when_printed_ranks_do_not_match() -> None:
    """A log whose server_args do not fit its tags (e.g. a DP router): trust the tags."""
    tracker = tracker_with(server_args(1, tp_size="2"), begin(Phase.DIST_INIT, 5, "DP3 TP0"))
    assert [r.rank for r in current(tracker).ranks] == [MAIN, "DP3 TP0"]
