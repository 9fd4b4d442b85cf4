"""Issue 12, leftovers on the GPUs against real processes and a fake nvidia-smi executable on PATH
(no GPU here): a rank-titled survivor says what it holds; a process of the old start-up that is gone
from /proc but still listed by the driver is a survivor; without nvidia-smi the check is skipped."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from phasewatch.sinks.gpu_memory import GpuMemory
from phasewatch.sinks.leftovers import LeftoverScan
from phasewatch.sources.host.procs import ProcessTable

GROUP = "/system.slice/sglang-kimi.service"


def fake_smi(bin_dir: Path, apps: str, delay: float = 0.0) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      f"sleep {delay}\n"
                      'case "$1" in\n'
                      "  --query-gpu=*) printf '0, GPU-aaaa\\n3, GPU-dddd\\n' ;;\n"
                      f"  --query-compute-apps=*) printf '{apps}' ;;\n"
                      "  *) exit 2 ;;\n"
                      "esac\n")
    script.chmod(0o755)


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [subprocess.Popen(["sglang::scheduler_TP3", "60"], executable="sleep"),
               subprocess.Popen(["sglang::scheduler_TP1", "60"], executable="sleep")]
    time.sleep(0.2)  # their titles are in /proc
    yield started
    for child in started:
        child.kill()
        child.wait()


def table_with_group(tmp_path: Path, pids: list[int]) -> ProcessTable:
    (tmp_path / "cg" / GROUP.lstrip("/")).mkdir(parents=True)
    (tmp_path / "cg" / GROUP.lstrip("/") / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    return ProcessTable(cgroup_roots=(str(tmp_path / "cg"),))


def test_survivors_hold_gpu_memory_by_nvidia_smi(tmp_path: Path, ranks: list[subprocess.Popen[bytes]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    alive, gone = ranks
    fake_smi(tmp_path / "bin", f"GPU-dddd, {alive.pid}, 81920\\nGPU-aaaa, {gone.pid}, 70000\\nGPU-aaaa, 1, 5\\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    scan = LeftoverScan(table_with_group(tmp_path, [alive.pid, gone.pid]), GpuMemory())
    scan.before_stop(GROUP)
    gone.kill()
    gone.wait()  # reaped: no longer in /proc, but the driver still lists it
    found = {s.pid: s for s in scan(GROUP)}
    # pid 1 holds memory too, but is not the old start-up's (other rank-titled processes of this host,
    # a parallel e2e sandbox's, may be found besides: they are not this test's)
    assert {alive.pid, gone.pid} <= set(found) and 1 not in found
    assert f"sglang::scheduler_TP3, {found[alive.pid].rss_kb // 1024} MiB resident, holds 81920 MiB on GPU 3" \
        in found[alive.pid].text()
    assert found[gone.pid].text() == (f"pid {gone.pid} (sglang::scheduler_TP1, holds 70000 MiB on GPU 0, "
                                      "cgroup unknown (not seen in /proc))")


def test_without_nvidia_smi_only_proc_is_checked(tmp_path: Path, ranks: list[subprocess.Popen[bytes]],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    scan = LeftoverScan(table_with_group(tmp_path, [ranks[0].pid]), GpuMemory())
    scan.before_stop(GROUP)
    assert ranks[0].pid in [s.pid for s in scan(GROUP)] and all(not s.gpu for s in scan(GROUP))
    assert caplog.text.count("nvidia-smi not found") == 1


def test_a_hung_nvidia_smi_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", "", delay=30)
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + "/usr/bin:/bin")
    began = time.monotonic()
    assert GpuMemory(timeout=0.5).holders() is None
    assert time.monotonic() - began < 5
