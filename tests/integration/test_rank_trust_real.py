"""PROBE-S3 C-2, C-3 with real processes: a hostile local user (uid 65534, `setpriv`) titles a process
`sglang::scheduler_TP3`. It is no survivor of a stopped start-up (C-2), and with
`rank_processes: host` it is never watched as a rank of the unit (C-3); a second process with a
watched rank's title is not that rank. /proc is the real one; the unit's cgroup is a fixture
`cgroup.procs`. The only waits are for the children's titles, real events."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from phasewatch.sinks.leftovers import LeftoverScan
from phasewatch.sources.host.procs import ProcessTable, RankProcess, RankWatch

GROUP = "/system.slice/sglang-kimi.service"
STRANGER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to run a process as another user")


def titled(title: str, prefix: list[str] | None = None) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([*(prefix or []), "bash", "-c", f"exec -a {title} sleep 60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(title.encode()):
                return child
        except OSError:
            pass
        time.sleep(0.01)  # the exec has not happened yet
    child.kill()
    raise AssertionError("the child never took its title")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


def group(tmp_path: Path, *pids: int) -> ProcessTable:
    procs = tmp_path / "cg" / GROUP.lstrip("/") / "cgroup.procs"
    procs.parent.mkdir(parents=True, exist_ok=True)
    procs.write_text("".join(f"{pid}\n" for pid in pids))
    return ProcessTable(cgroup_roots=(str(tmp_path / "cg"),))


def test_c2_another_users_titled_process_survives_no_stop(tmp_path: Path,
                                                          children: list[subprocess.Popen[bytes]]) -> None:
    stranger = titled("sglang::scheduler_TP3", STRANGER)
    rank = titled("sglang::scheduler_TP3")
    children += [stranger, rank]
    scan = LeftoverScan(group(tmp_path, rank.pid))
    scan.before_stop(GROUP)
    assert scan.old == {rank.pid: "sglang::scheduler_TP3"}
    group(tmp_path)  # the stop emptied the cgroup ...
    assert [s.pid for s in scan(GROUP)] == [rank.pid]  # ... but the old rank escaped it: a survivor
    rank.kill()
    rank.wait()
    assert scan(GROUP) == []  # uid 65534's copy of the title is not the old start-up's


def test_c3_host_mode_watches_the_units_ranks_not_another_users_copy(tmp_path: Path,
                                                                     children: list[subprocess.Popen[bytes]]) -> None:
    client = subprocess.Popen(["sleep", "60"])  # the unit's container client: root, in its cgroup
    children.append(client)
    early = titled("sglang::scheduler_TP7")  # root's, but older than the start-up
    children.append(early)
    time.sleep(2.1)  # /proc/stat's btime is whole seconds: start times are compared with a margin of 2 s
    began = time.time()
    ours = titled("sglang::scheduler_TP0")
    stranger = titled("sglang::scheduler_TP3", STRANGER)
    children += [ours, stranger]
    table = group(tmp_path, client.pid)
    ranks = table.ranks(GROUP, host_wide=True, since=began)
    assert RankProcess("TP0", ours.pid) in ranks
    assert all(p.pid not in (stranger.pid, early.pid) for p in ranks)


def test_a_second_process_titled_as_a_watched_rank_is_not_that_rank(children: list[subprocess.Popen[bytes]]) -> None:
    first, copy = titled("sglang::scheduler_TP3"), titled("sglang::scheduler_TP3")
    children += [first, copy]
    watch = RankWatch()
    try:
        watch.update([RankProcess("TP3", first.pid)])
        watch.update([RankProcess("TP3", copy.pid)])
        assert watch.known_pids() == {first.pid: "TP3"} and len(watch.fds()) == 1
        first.kill()
        first.wait()
        watch.update([RankProcess("TP3", copy.pid)])  # nor after the rank's death
        assert watch.known_pids() == {first.pid: "TP3"}
    finally:
        watch.forget()
