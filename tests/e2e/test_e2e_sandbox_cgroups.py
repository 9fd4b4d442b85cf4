"""The harness itself: two sandboxes on one machine, each with a unit of the same name, never reach
each other's processes (each systemd manages a cgroup subtree of its own, in its own namespace)."""

from __future__ import annotations

from pathlib import Path

from sandbox import Sandbox

UNIT = "twin.service"


def host_cgroup_of(box: Sandbox, unit: str) -> str:
    pid = box.show(unit, "MainPID")["MainPID"]
    inside = box.run("cat", f"/proc/{pid}/cgroup").stdout
    return next(line.split(":", 2)[2] for line in inside.splitlines() if line.startswith("0::"))


def test_two_sandboxes_keep_their_units_apart() -> None:
    first, second = Sandbox(), Sandbox()
    first.boot()
    try:
        second.boot()
        try:
            for box in (first, second):
                box.write(f"/run/systemd/system/{UNIT}", "[Service]\nExecStart=/bin/sleep infinity\n")
                box.systemctl("daemon-reload")
                box.systemctl("start", UNIT)
            # Inside, each sees its own root; outside, each unit lives below that sandbox's subtree.
            assert first.run("cat", "/proc/1/cgroup").stdout.strip().endswith("0::/init.scope")
            assert host_cgroup_of(first, UNIT) == f"/system.slice/{UNIT}"
            unified = [path for path in first.cgroups if "unified" in str(path) or path.parts[-2] == "cgroup"]
            if unified:
                assert (unified[0] / "system.slice" / UNIT).is_dir()
            second_pid = int(second.show(UNIT, "MainPID")["MainPID"])
            first.systemctl("stop", UNIT)
            assert second.show(UNIT, "ActiveState")["ActiveState"] == "active"
            assert int(second.show(UNIT, "MainPID")["MainPID"]) == second_pid
        finally:
            second.shutdown()
    finally:
        first.shutdown()
    for path in first.cgroups + second.cgroups:
        assert not Path(path).exists(), f"{path} left behind"
