#!/usr/bin/env python3
"""The demo: a throwaway systemd (PID 1 of its own namespaces), a simulated sglang-kimi.service
(8 ranks, EAGLE-3, at 1/100 of real time) whose TP3 hangs in the draft model's CUDA graph
capture, and phasewatch@sglang-kimi.service watching it, as installed from units/.

Run as root: python3 tools/demo.py   (scripts/demo.sh installs what it needs first)
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from sandbox import Sandbox, can_boot  # noqa: E402

UNIT = "sglang-kimi.service"
INSTANCE = "sglang-kimi"
WATCHER = f"phasewatch@{INSTANCE}.service"
VENV = REPO / ".venv"
# What the demo captures goes here, never over tracked files (docs/demo-*.txt and
# docs/images/demo-startups.svg are copies of one run, refreshed by hand: cp build/demo/... docs/).
OUT = REPO / "build" / "demo"
CONFIG = {
    "unit": UNIT,
    # The shipped limits are minutes; the simulation runs 100 times faster.
    "phases": {"draft_cuda_graph_capture": {"deadline": "6s"}, "weight_load": {"deadline": "30s", "stall": "5s"}},
    "restart_budget": {"max": 3, "window": "6h", "backoff": "1s"},
}


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main() -> int:
    reason = can_boot()
    if reason is not None:
        print(f"demo: cannot boot a throwaway systemd here: {reason}", file=sys.stderr)
        return 1
    box = Sandbox()
    say("booting a throwaway systemd (PID 1 of new PID, mount and network namespaces)")
    OUT.mkdir(parents=True, exist_ok=True)
    box.boot()
    try:
        box.write(f"/run/systemd/system/{UNIT}", f"""[Unit]
Description=simulated SGLang Kimi-K2.5 INT4 (TP=8, EAGLE-3)
[Service]
EnvironmentFile=/run/sglang-sim.env
ExecStart={VENV}/bin/python {REPO}/tools/sglang_sim.py run --port 30000 $SIM_ARGS
KillMode=control-group
TimeoutStopSec=5s
""")
        box.write("/run/systemd/system/phasewatch@.service", (REPO / "units" / "phasewatch@.service").read_text())
        box.write("/run/systemd/system/phasewatch@.service.d/demo.conf", f"""[Service]
ExecStart=
ExecStart={VENV}/bin/phasewatch run --config /run/phasewatch/%i.yaml --state-dir /run/phasewatch-state
StateDirectory=
RuntimeDirectory=phasewatch-state
RuntimeDirectoryPreserve=yes
# The checkout may live under /tmp (CI clones there), which PrivateTmp= hides.
BindReadOnlyPaths={REPO}
""")
        box.write(f"/run/phasewatch/{INSTANCE}.yaml", json.dumps(CONFIG, indent=1))
        box.write("/run/sglang-sim.env", "SIM_ARGS=--scale 0.01 --hang TP3:draft_cuda_graph_capture\n")
        box.systemctl("daemon-reload")
        say(f"systemctl start {WATCHER} {UNIT}  (this start-up will hang: TP3 in draft_cuda_graph_capture)")
        box.systemctl("start", WATCHER)
        box.systemctl("start", UNIT)
        box.write("/run/sglang-sim.env", "SIM_ARGS=--scale 0.01\n")  # the next start-up is healthy
        say(f"phasewatch status {UNIT} --watch  (a new block whenever a phase or a bar moves)")
        watcher = subprocess.Popen(
            ["nsenter", "-t", str(box.pid), "-a", f"{VENV}/bin/phasewatch", "status", UNIT, "--config",
             f"/run/phasewatch/{INSTANCE}.yaml", "--watch"], stdout=subprocess.PIPE, text=True, bufsize=1)
        assert watcher.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout], daemon=True).start()
        deadline = time.monotonic() + 120
        restarted = False
        captured: list[str] = []
        onelines: list[str] = []  # `status --oneline` along the way, for a prompt or a status bar

        def sample_oneline() -> None:
            line = box.run(f"{VENV}/bin/phasewatch", "status", "sglang-kimi", "--oneline", "--config",
                           f"/run/phasewatch/{INSTANCE}.yaml", check=False)
            text = f"{line.stdout.rstrip()}   (exit status {line.returncode})\n"
            if not onelines or onelines[-1].split("   (")[0].split()[:2] != text.split("   (")[0].split()[:2]:
                onelines.append(text)

        def drain() -> None:
            while not lines.empty():
                line = lines.get()
                print(line, end="", flush=True)
                captured.append(line)

        while time.monotonic() < deadline:
            drain()
            sample_oneline()
            if not restarted:
                restarted = "restart requested" in box.run("journalctl", "-u", WATCHER, "-o", "cat").stdout
            elif box.show(WATCHER, "StatusText")["StatusText"].endswith(": ready"):
                time.sleep(1.5)
                drain()
                break
            time.sleep(0.25)
        watcher.terminate()
        watcher.wait(timeout=10)
        (OUT / "demo-status-watch.txt").write_text("".join(captured))
        sample_oneline()
        (OUT / "demo-status-oneline.txt").write_text("".join(onelines))
        say("phasewatch status sglang-kimi --oneline, as it was along the way (a prompt, a tmux status bar)")
        print("".join(onelines), end="")
        say(f"systemctl status {WATCHER}: its STATUS= line")
        print("  " + box.show(WATCHER, "StatusText")["StatusText"])
        say(f"phasewatch's alerts: journalctl PHASEWATCH_UNIT={UNIT}")
        print(box.run("journalctl", f"PHASEWATCH_UNIT={UNIT}", "--no-pager", "-o", "verbose",
                      "--output-fields=PRIORITY,MESSAGE_ID,PHASEWATCH_VERDICT,PHASEWATCH_RANK,PHASEWATCH_PHASE,"
                      "PHASEWATCH_INVOCATION,MESSAGE").stdout)
        say(f"phasewatch's own log: journalctl -u {WATCHER} -o cat")
        print(box.run("journalctl", "-u", WATCHER, "-o", "cat", "--no-pager").stdout)
        say("phasewatch status sglang-kimi  (exit status 0: ready)")
        final = box.run(f"{VENV}/bin/phasewatch", "status", "sglang-kimi", "--config",
                        f"/run/phasewatch/{INSTANCE}.yaml", check=False)
        print(final.stdout + f"(exit status {final.returncode})")
        (OUT / "demo-status.txt").write_text(final.stdout)
        say("phasewatch report: both start-ups, from phasewatch's history")
        plot = OUT / "demo-startups.svg"
        plot.parent.mkdir(parents=True, exist_ok=True)
        report = box.run(f"{VENV}/bin/phasewatch", "report", "sglang-kimi", "--state-dir", "/run/phasewatch-state",
                         "--plot", str(plot)).stdout
        print(report)
        (OUT / "demo-report.txt").write_text(report)
        print(f"(timeline written to {plot.relative_to(REPO)})")
        say(f"both start-ups, from the real journal: phasewatch replay --unit {UNIT}")
        print(box.run(f"{VENV}/bin/phasewatch", "replay", "--unit", UNIT, "--config",
                      f"/run/phasewatch/{INSTANCE}.yaml").stdout)
    finally:
        say("systemctl poweroff (inside the throwaway systemd)")
        box.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
