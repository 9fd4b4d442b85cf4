"""The end-to-end tests' world: the simulated sglang-kimi.service, phasewatch's test drop-in, and a
`Scenario` helper that (re)starts them and reads what happened."""

from __future__ import annotations

import json
import time
from typing import Any

from sandbox import REPO, Sandbox

UNIT = "sglang-kimi.service"
INSTANCE = "sglang-kimi"  # the instance name: the unit without .service, like getty@tty1.service
WATCHER = f"phasewatch@{INSTANCE}.service"
CONFIG_PATH = f"/run/phasewatch/{INSTANCE}.yaml"
STATE_DIR = "/run/phasewatch-state"
TIMER_LINT_ID = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d7b"
VENV = REPO / ".venv"

SIM_UNIT = f"""[Unit]
Description=simulated SGLang Kimi-K2.5 INT4, TP=8, EAGLE-3 (phasewatch e2e)

[Service]
Type=simple
EnvironmentFile=/run/sglang-sim.env
ExecStart={VENV}/bin/python {REPO}/tools/sglang_sim.py run --port 30000 $SIM_ARGS
KillMode=control-group
TimeoutStopSec=5s
"""

# The shipped unit, with the paths of this checkout and its state on the sandbox's /run.
WATCHER_DROPIN = f"""[Service]
ExecStart=
ExecStart={VENV}/bin/phasewatch run --config /run/phasewatch/%i.yaml --instance %i --state-dir {STATE_DIR}
ExecReload=
ExecReload={VENV}/bin/phasewatch check-config --instance %i /run/phasewatch/%i.yaml
ExecReload=/bin/kill -HUP $MAINPID
StateDirectory=
RuntimeDirectory=phasewatch-state
RuntimeDirectoryPreserve=yes
# The checkout may live under /tmp (CI clones there), which PrivateTmp= hides.
BindReadOnlyPaths={REPO}
"""

BASE_CONFIG = {
    "unit": UNIT,
    "rank_skew": "5m",
    "restart_budget": {"max": 3, "window": "6h", "backoff": "1s"},
    "metrics": {"listen": "127.0.0.1:9877"},
}


class Scenario:
    def __init__(self, box: Sandbox) -> None:
        self.box = box
        self.started_at = time.time()

    def configure(self, sim_args: str = "--scale 0.01", restart: str = "no", **config: Any) -> None:
        document = {**BASE_CONFIG, **config}
        self.box.write(CONFIG_PATH, json.dumps(document, indent=1))
        self.sim(sim_args, restart)

    def sim(self, sim_args: str, restart: str | None = None) -> None:
        self.box.write("/run/sglang-sim.env", f"SIM_ARGS={sim_args}\n")
        if restart is not None:
            self.box.write("/run/systemd/system/sglang-kimi.service.d/restart.conf",
                           f"[Service]\nRestart={restart}\nRestartSec=1s\n")
            self.box.systemctl("daemon-reload")

    def start(self, watcher_first: bool = True) -> None:
        if watcher_first:
            self.box.systemctl("start", WATCHER)
        self.box.systemctl("start", UNIT)
        if not watcher_first:
            self.box.systemctl("start", WATCHER)

    def status(self) -> dict[str, Any] | None:
        text = self.box.read(f"{STATE_DIR}/{UNIT}.status.json")
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None  # being replaced

    def unit(self, *properties: str) -> dict[str, str]:
        return self.box.show(UNIT, *properties)

    def alerts(self) -> list[dict[str, Any]]:
        """phasewatch's alerts about the unit since the scenario began, but the once-per-start-up timer
        lint notice (the default limits are past some engine timers: test_e2e_timerlint.py reads it)."""
        return [e for e in self.box.journal(f"PHASEWATCH_UNIT={UNIT}")
                if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= self.started_at and e.get("MESSAGE_ID") != TIMER_LINT_ID]

    def invocations(self) -> list[dict[str, Any]]:
        """PID 1's 'Started' entries for the watched unit since the scenario began."""
        return [e for e in self.box.journal(f"UNIT={UNIT}", "_PID=1", "MESSAGE_ID=39f53479d3a045ac8e11786248231fbf")
                if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= self.started_at]

    def lines(self, text: str) -> list[dict[str, Any]]:
        return [e for e in self.box.journal(f"_SYSTEMD_UNIT={UNIT}")
                if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= self.started_at and text in message_of(e)]

    def watcher_log(self) -> str:
        entries = self.box.journal(f"_SYSTEMD_UNIT={WATCHER}")
        return "\n".join(message_of(e) for e in entries if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= self.started_at)

    def wait_state(self, state: str, timeout: float) -> dict[str, Any]:
        result: dict[str, Any] = self.box.wait_for(
            lambda: (s := self.status()) and s.get("state") == state and s, timeout, f"start-up state {state}")
        return result


def message_of(entry: dict[str, Any]) -> str:
    """MESSAGE as text: journalctl -o json gives it as a byte array when it holds a control character
    (a tqdm frame's \\r written into the same line)."""
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        return bytes(message).decode("utf-8", "replace")
    return message or ""


STOPPED = "9d1aaa27d60140bd96365438aad20286"
RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"


def at(entry: dict[str, Any]) -> float:
    return int(entry["__REALTIME_TIMESTAMP"]) / 1e6


def restarts_by_phasewatch(s: Scenario) -> list[dict[str, Any]]:
    """PID 1's 'Stopped' entries of restart jobs (systemd 252 puts JOB_TYPE=restart there, not on
    'Stopping') for the watched unit, less those of systemd's own Restart= (it logs 'Scheduled
    restart job' first)."""
    by_systemd = {e.get("INVOCATION_ID") for e in s.box.journal(f"UNIT={UNIT}", "_PID=1",
                                                                f"MESSAGE_ID={RESTART_SCHEDULED}")}
    return [e for e in s.box.journal(f"UNIT={UNIT}", "_PID=1", f"MESSAGE_ID={STOPPED}")
            if at(e) >= s.started_at and e.get("JOB_TYPE") == "restart" and e.get("INVOCATION_ID") not in by_systemd]


def move_to(scenario: Scenario, pid: str, group: str) -> None:
    """Moves `pid` into `group` (made if need be) in every cgroup hierarchy mounted (v1 hybrid or v2)."""
    steps = [f"if [ -e {root}/cgroup.procs ]; then mkdir -p {root}{group}; echo {pid} > {root}{group}/cgroup.procs; fi"
             for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")]
    scenario.box.run("sh", "-c", " ; ".join(steps) + " ; true", check=False)
