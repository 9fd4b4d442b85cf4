"""Device run of issue 35: a real one-rank NCCL communicator (comm.py, torch.distributed, world size 1)
asked by phasewatch's RAS client and by raw socket commands; the transcripts go to $OUT.

    PYTHONPATH=<a copy of daemon/> python3 tools/ras_device/ask.py    (with OUT=<a directory>)

The child runs with NCCL_RAS_ADDR=localhost:28123: the client finds that address in the child's
/proc/PID/environ, as the daemon does. Run on an H200, 2026-12-03: tests/golden/ras/README.md.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasewatch.sources.host.ras_client import RasAnswer, address_of, query  # noqa: E402
from phasewatch.stages.s4_judge.ras_report import RasAddress, parse_report  # noqa: E402

OUT = Path(os.environ["OUT"])
READY, STOP = "/tmp/ras_ready", "/tmp/ras_stop"


def keep(name: str, answer: RasAnswer) -> dict[str, Any]:
    (OUT / name).write_text(answer.report)
    kept: dict[str, Any] = {"format": answer.format, "error": answer.error, "seconds": round(answer.seconds, 3),
                            "bytes": len(answer.report), "protocol": answer.server_protocol,
                            "transcript_heads": [(s, a[:60]) for s, a in answer.transcript]}
    try:
        report = parse_report(answer.report)
        kept["parsed"] = {"version": report.nccl_version, "notes": report.notes, "comms": [
            (c.hash, c.size, [(r.rank, r.pid, r.gpu, dict(r.counts), r.state) for r in c.ranks], len(c.missing))
            for c in report.comms]}
    except ValueError as exc:
        kept["parse_error"] = repr(exc)
    return kept


def raw(port: int) -> list[str]:
    """Every command by hand, each answer as it came."""
    lines = []
    with socket.create_connection(("localhost", port), timeout=5) as sock, sock.makefile("rwb") as talk:
        for command in ("CLIENT PROTOCOL 2", "TIMEOUT 5", "SET FORMAT yaml", "HELLO", "SET FORMAT text",
                        "SET FORMAT json"):
            talk.write(command.encode() + b"\n")
            talk.flush()
            lines += [f">>> {command}", "<<< " + talk.readline().decode().rstrip("\n")]
        talk.write(b"STATUS\n")
        talk.flush()
        lines += [">>> STATUS", "<<< " + talk.read().decode()]
    return lines


def main() -> None:
    for path in (READY, STOP):
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ, NCCL_RAS_ADDR="localhost:28123", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,RAS")
    with open(OUT / "child.log", "w") as log:
        child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "comm.py"), READY, STOP],
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
        began = time.time()
        while not os.path.exists(READY) and time.time() - began < 150 and child.poll() is None:
            time.sleep(0.2)
        summary: dict[str, Any] = {"child_pid": child.pid, "ready_after_s": round(time.time() - began, 2)}
        address, where = address_of([child.pid])
        summary.update(address=str(address), address_from=where)
        for name, json_wanted, verbose in (("ras-status.txt", False, False), ("ras-status.json", True, False),
                                           ("ras-verbose.txt", False, True)):
            summary[name] = keep(name, query(address, json=json_wanted, verbose=verbose))
        summary["default_port"] = {"error": query(RasAddress()).error}
        (OUT / "raw-transcript.txt").write_text("\n".join(raw(address.port)) + "\n")
        Path(STOP).write_text("x")
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
        summary["child_rc"] = child.returncode
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
