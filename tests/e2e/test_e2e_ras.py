"""NCCL RAS names a collective hang's culprit, as advice, against a real systemd (issue 35).

The simulated server's TP5 hangs in CUDA graph capture; the unit's environment sets NCCL_RAS_ADDR,
which phasewatch reads from the rank processes' /proc/PID/environ. A fake RAS server
(tools/ras_fake.py, a unit of its own) answers with NCCL's JSON document built over the ranks' real
PIDs: TP5 has launched AllReduce up to op 1233, the others 1234. The stall verdict's alert names TP5,
its PID, its GPU and the collective; the evidence file holds the whole report; status shows it.
With RAS absent, never answering, or naming PIDs that are not the unit's, the same verdict comes
as soon.
"""

from __future__ import annotations

from typing import Any

from e2e_env import STATE_DIR, UNIT, VENV, Scenario, at
from sandbox import REPO

from phasewatch.stages.s4_judge.init_config import ras_dropin

STALL = 5.0
PERIOD = 1.0
PORT = 28555
RAS_DROPIN = f"/run/systemd/system/{UNIT}.d/50-nccl-ras.conf"
CONFIG: dict[str, Any] = {
    "phases": {"cuda_graph_capture": {"deadline": "5m", "stall": f"{STALL:g}s"}},
    "vitals": {"period": f"{PERIOD:g}s", "gpu": False},
    "actions": {"stalled": ["evidence", "alert"], "straggler": ["alert"]},
}
FAKE = f"""[Service]
EnvironmentFile=/run/ras-fake.env
ExecStart={VENV}/bin/python {REPO}/tools/ras_fake.py serve --port {PORT} --mode $MODE
"""


def _run(scenario: Scenario, mode: str | None) -> tuple[dict[str, Any], float]:
    """The start-up with TP5 hung, RAS in `mode` (None: nobody listens): the first stalled alert, and
    how long after the capture's last line it came."""
    scenario.box.write("/run/systemd/system/ras-fake.service", FAKE)
    scenario.box.write("/run/ras-fake.env", f"MODE={mode}\n")
    scenario.box.systemctl("daemon-reload")
    scenario.box.systemctl("stop", "ras-fake.service", check=False)
    if mode is not None:
        scenario.box.systemctl("start", "ras-fake.service")
    # The unit's RAS on a port of its own, as `phasewatch init --ras-dropin` writes it: phasewatch
    # (its own user, no CAP_SYS_PTRACE) cannot read root's /proc/PID/environ; it reads Environment=.
    scenario.box.write(RAS_DROPIN, ras_dropin(UNIT, PORT))
    scenario.configure("--scale 0.01 --hang TP5:cuda_graph_capture", **CONFIG)
    scenario.box.systemctl("daemon-reload")
    try:
        scenario.start()
        alerts = scenario.box.wait_for(
            lambda: [a for a in scenario.alerts() if a["PHASEWATCH_VERDICT"] == "stalled"], 90, "a stalled alert")
    finally:
        scenario.box.systemctl("stop", "ras-fake.service", check=False)
        scenario.box.run("rm", "-f", RAS_DROPIN)
        scenario.box.systemctl("daemon-reload")
    first = min(alerts, key=at)
    last = max(at(e) for e in scenario.lines("Capture cuda graph"))
    return first, at(first) - last


def test_the_stall_alert_names_the_culprit_from_ras_and_ras_never_moves_the_verdict(scenario: Scenario) -> None:
    alert, after = _run(scenario, "lag")
    tp5 = next(e["_PID"] for e in scenario.lines("TP5]"))
    message = alert["MESSAGE"]
    assert (alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"]) == ("TP5", "cuda_graph_capture")
    assert f"culprit (NCCL RAS): TP5, pid {tp5}, GPU 5, has launched AllReduce up to op 1233 while the others " \
           "are at 1234" in message, message
    assert STALL - 0.5 <= after <= STALL + PERIOD + 3.0, (after, message)
    status = scenario.status() or {}
    assert status["ras"]["culprits"][0]["rank"] == "TP5", status.get("ras")
    evidence = scenario.box.run("sh", "-c", f"cat {STATE_DIR}/evidence/*.txt").stdout
    assert f"=== NCCL RAS at 127.0.0.1:{PORT}" in evidence and '"collective_counts"' in evidence
    for mode, said in (("slow", None), ("lie", "names no process of the unit"), (None, None)):
        scenario.box.systemctl("stop", "phasewatch@sglang-kimi.service", UNIT, check=False)
        scenario.started_at = float(scenario.box.run("date", "+%s.%N").stdout)
        other, late = _run(scenario, mode)
        assert (other["PHASEWATCH_RANK"], other["PHASEWATCH_PHASE"]) == ("TP5", "cuda_graph_capture"), mode
        assert STALL - 0.5 <= late <= STALL + PERIOD + 3.0, (mode, late, other["MESSAGE"])
        assert "culprit (NCCL RAS)" not in other["MESSAGE"]
        if said is not None:
            assert "no culprit from RAS: " in other["MESSAGE"] and said in other["MESSAGE"], other["MESSAGE"]
        elif mode is None:  # nobody listening: the verdict's words as they were; status says why
            assert "RAS" not in other["MESSAGE"] and "connection refused" in (scenario.status() or {})["ras"]["words"]
