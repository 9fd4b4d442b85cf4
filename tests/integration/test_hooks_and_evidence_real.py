"""Real processes: a hook bounded by its timeout, its output and environment; the evidence writer's
own tools (py-spy if installed) against a real sleeping Python process, bounded by evidence.timeout."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from phasewatch.config.load import EvidenceCapture, Hook
from phasewatch.sinks.evidence import EvidenceWriter, Target, find_py_spy
from phasewatch.sinks.hooks import HookRunner
from phasewatch.stages.s5_act.respond import Action

ACTION = Action(kind="hook", message="TP3 stalled", verdict_kind="stalled", priority=4, invocation_id="inv-1",
                phase="draft_cuda_graph_capture", rank="TP3", cause="deadline", hook="h")


def test_a_hook_is_killed_at_its_timeout() -> None:
    began = time.monotonic()
    result = HookRunner("u.service", {"h": Hook(("sh", "-c", "echo started; sleep 30"), 0.5)})(ACTION)
    assert result is not None and result.returncode is None
    assert time.monotonic() - began < 5


def test_a_hook_sees_the_verdict() -> None:
    result = HookRunner("u.service", {"h": Hook(("sh", "-c", 'echo "$PHASEWATCH_VERDICT $PHASEWATCH_RANK"'), 5)})(
        ACTION)
    assert result is not None and (result.returncode, result.output) == (0, "stalled TP3\n")


def test_evidence_of_a_real_process_is_bounded(tmp_path: Path) -> None:
    code = "import time\ndef waiting_here():\n    time.sleep(60)\nwaiting_here()\n"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)  # let it reach the named function
        writer = EvidenceWriter(tmp_path, "u.service", EvidenceCapture(timeout=10.0))
        began = time.monotonic()
        path = writer.capture("inv-1", "stalled", "m", [Target("TP3", child.pid, True)])
        assert time.monotonic() - began < 12
        assert path is not None
        text = path.read_text()
        assert "State:" in text and "wchan:" in text
        if find_py_spy() is not None:  # the stack, or the reason it could not be read
            assert "waiting_here" in text or "failed" in text
    finally:
        child.kill()
        child.wait()
