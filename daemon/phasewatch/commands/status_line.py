"""`phasewatch status --oneline`: the current start-up in one line, for a shell prompt or a tmux
status bar: `sglang-kimi: draft_cuda_graph_capture 8/8 3m12s/20m ETA 4m`. Read from the same
document as the table (the daemon's /status, or one built from the journal)."""

from __future__ import annotations

from typing import Any

from ..config.instances import instance_of
from ..durations import format_duration
from ..output.render import terminal_safe
from ..records import MAIN, PHASE_NAMES

DONE = ("ready", "serving")


def _duration(seconds: object) -> str | None:
    return format_duration(max(float(seconds), 0.0)) if isinstance(seconds, (int, float)) else None


def _order(phase: object) -> int:
    return PHASE_NAMES.index(phase) if isinstance(phase, str) and phase in PHASE_NAMES else -1


def oneline(document: dict[str, Any]) -> str:
    name = instance_of(str(document.get("unit")))
    inv = document.get("invocation")
    if not inv:
        state = document.get("active_state")
        return terminal_safe(f"{name}: {state}, no line yet" if state in ("activating", "active", "reloading")
                             else f"{name}: no start-up")
    outcome, phase = inv.get("outcome"), inv.get("phase")
    ranks = {label: r for label, r in (inv.get("ranks") or {}).items() if label != MAIN}
    if outcome in DONE:
        took = _duration(inv.get("elapsed_seconds"))
        return terminal_safe(f"{name}: {outcome}" + (f" ({took} since start)" if took else ""))
    parts = [f"{name}:"]
    if outcome != "starting":
        parts.append(str(outcome))
    parts.append(str(phase))
    if ranks:
        reached = sum(1 for r in ranks.values() if _order(r.get("phase")) >= _order(phase))
        parts.append(f"{reached}/{len(ranks)}")
    in_phase = [r for r in (ranks or inv.get("ranks") or {}).values()
                if r.get("phase") == phase and not r.get("phase_ended")]
    slowest = max(in_phase, key=lambda r: r.get("elapsed_seconds") or 0.0, default=None)
    if slowest is not None and (spent := _duration(slowest.get("elapsed_seconds"))) is not None:
        limit = _duration(slowest.get("deadline_seconds"))
        parts.append(f"{spent}/{limit}" if limit else spent)
    eta = _duration(document.get("eta_seconds"))
    if eta is not None and outcome == "starting":
        parts.append(f"ETA {eta}")
    blamed = sorted({str(v.get("rank")) for v in inv.get("verdicts") or [] if v.get("rank")})
    kinds = sorted({str(v.get("kind")) for v in inv.get("verdicts") or []})
    if kinds:
        parts.append(f"[{', '.join(kinds)}" + (f": {', '.join(blamed)}" if blamed else "") + "]")
    return terminal_safe(" ".join(parts))
