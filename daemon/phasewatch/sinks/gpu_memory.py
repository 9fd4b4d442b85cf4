"""Edge: who holds GPU memory, from nvidia-smi, for the leftovers check (sinks/leftovers.py).

Two queries, both bounded by one timeout: the GPUs (index, uuid) and the compute processes (gpu uuid,
pid, used MiB). Without nvidia-smi the check is skipped and said once; a query that fails or does
not finish in time is said (once per kind of failure) and counts as "not checked", never as "free".
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from typing import Callable

from .evidence import Runner, run_bounded

logger = logging.getLogger(__name__)
TIMEOUT = 5.0  # both queries together
GPUS = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]
APPS = ["--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class GpuHolder:
    pid: int
    gpu: str  # the GPU's index (its uuid when the index is unknown)
    mib: int


def parse_gpus(text: str) -> dict[str, str]:
    """`0, GPU-8f2c...` lines -> {uuid: index}."""
    out = {}
    for line in text.splitlines():
        index, sep, uuid = (part.strip() for part in line.partition(","))
        if sep and index.isdigit() and uuid:
            out[uuid] = index
    return out


def parse_compute_apps(text: str, index_of: dict[str, str]) -> list[GpuHolder]:
    """`GPU-8f2c..., 4711, 81920` lines -> holders; lines that are not three fields with a numeric pid
    and MiB ("[N/A]" where the driver hides a container's process) are skipped."""
    out = []
    for line in text.splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        uuid, pid, mib = fields
        out.append(GpuHolder(int(pid), index_of.get(uuid, uuid), int(mib)))
    return out


class GpuMemory:
    def __init__(self, nvidia_smi: Callable[[], str | None] = lambda: shutil.which("nvidia-smi"),
                 run: Runner = run_bounded, timeout: float = TIMEOUT,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.nvidia_smi = nvidia_smi
        self.run = run
        self.timeout = timeout
        self.monotonic = monotonic
        self.said: set[str] = set()  # what was logged about a check that could not be made

    def holders(self) -> list[GpuHolder] | None:
        """The processes holding GPU memory now; None when that cannot be known."""
        smi = self.nvidia_smi()
        if smi is None:
            self._say("missing", "nvidia-smi not found: the leftovers check does not look at GPU memory")
            return None
        deadline = self.monotonic() + self.timeout
        gpus = self.run([smi, *GPUS], self.timeout)
        apps = self.run([smi, *APPS], max(deadline - self.monotonic(), 0.1)) if gpus.returncode == 0 else gpus
        if apps.returncode != 0:
            why = "did not finish in time" if apps.returncode is None else f"exit status {apps.returncode}"
            self._say(f"failed {why}", f"nvidia-smi {why} ({apps.output.strip()[:200]}): GPU memory not checked")
            return None
        return parse_compute_apps(apps.output, parse_gpus(gpus.output))

    def _say(self, key: str, message: str) -> None:
        if key not in self.said:
            self.said.add(key)
            logger.warning("%s", message)
