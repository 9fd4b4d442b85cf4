#!/usr/bin/env python3
"""A fake NCCL RAS server, and NCCL RAS reports built on NCCL's own format, for tests and demos.

The reports are written with the layouts of NCCL's src/ras/client_support.cc (2.28/2.29): the text
report's summary, "Errors" and "Warnings" sections, the JSON document (`jsonWriteRankData`...), and,
with `defect=True`, NCCL 2.28's missing comma after a missing rank's `nvml_dev`. They are BUILT, not
recorded: a one-GPU machine shows a one-rank communicator only (tests/golden/ras/README.md says which
fixtures are which).

    python3 tools/ras_fake.py build OUTDIR                  the built fixtures (fixed PIDs 4240+rank)
    python3 tools/ras_fake.py serve --port 28555 --mode lag
        lag      TP5 has launched AllReduce up to op 1233, the other seven ranks 1234
        missing  TP5's process does not answer RAS (considered dead)
        lie      the same lag, with PIDs that are no process of the unit
        slow     accepts, reads, never answers
        replay:FILE   answers STATUS with FILE (a recorded report), in the format FILE has
    The ranks' PIDs are those of the processes titled `sglang::scheduler_TPn` when asked (the
    simulated server of tools/sglang_sim.py), else 4240+n.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

VERSION = "2.28.9+cuda13.0"
COMM = 0x1D5A3E6F7A8B9C0D
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


@dataclass(frozen=True)
class Rank:
    rank: int
    pid: int
    gpu: int
    counts: tuple[int, int, int, int, int]  # in COLLECTIVES' order
    host: str = "10.0.0.5"


def lagging(pids: dict[int, int], slow: int = 5, op: int = 1234) -> list[Rank]:
    """Eight ranks in AllReduce: all at `op` but `slow`, one behind."""
    return [Rank(r, pids[r], r, (2, 0, 40, 0, op - 1 if r == slow else op)) for r in sorted(pids)]


def json_report(ranks: list[Rank], missing: Sequence[Rank] = (), dead: bool = True, defect: bool = False,
                size: int | None = None) -> str:
    out = ["{\n", f'  "nccl_version": "{VERSION}",\n', '  "cuda_runtime_version": 13000,\n',
           '  "cuda_driver_version": 13000,\n', '  "timestamp": "2026-12-03 10:00:00",\n',
           '  "communicators_count": 1,\n', '  "communicators": [\n', "    {\n",
           f'      "hash": "0x{COMM:x}",\n', '      "secondary_hash": "0x3c1a:0x99f2",\n',
           f'      "size": {size or len(ranks) + len(missing)},\n', f'      "ranks_count": {len(ranks)},\n',
           f'      "missing_ranks_count": {len(missing)},\n', '      "ranks": [\n']
    for index, r in enumerate(ranks):
        out.append(("" if index == 0 else ",\n") + "        {\n")
        out += [f'          "rank": {r.rank},\n', f'          "host": "{r.host}",\n', f'          "pid": {r.pid},\n',
                f'          "cuda_dev": {r.gpu},\n', f'          "nvml_dev": {r.gpu},\n', '          "status": {\n',
                '            "init_state": 0,\n', '            "async_error": 0,\n',
                '            "finalize_called": false,\n', '            "destroy_flag": false,\n',
                '            "abort_flag": false\n', "          },\n", '          "collective_counts": {\n']
        out += [f'            "{name}": {count}' + ("," if i < len(COLLECTIVES) - 1 else "") + "\n"
                for i, (name, count) in enumerate(zip(COLLECTIVES, r.counts, strict=True))]
        out += ["          }\n", "        }"]
    out += ["\n      ],\n", '      "missing_ranks": [\n']
    for index, r in enumerate(missing):
        out.append(("" if index == 0 else ",\n") + "        {\n")
        out += [f'          "rank": {r.rank},\n', f'          "host": "{r.host}",\n', f'          "pid": {r.pid},\n',
                f'          "cuda_dev": {r.gpu},\n', f'          "nvml_dev": {r.gpu}' + ("\n" if defect else ",\n"),
                '          "status": {\n', '            "unresponsive": true,\n',
                f'            "considered_dead": {"true" if dead else "false"}\n', "          }\n", "        }"]
    out += ["\n      ]\n", "    }", "\n  ],\n", '  "ras": {\n', '    "collection_time_sec": 0.004,\n',
            f'    "timeouts_count": {1 if missing else 0}\n', "  }\n", "}\n"]
    return "".join(out)


def text_report(ranks: list[Rank], missing: Sequence[Rank] = (), dead: bool = True) -> str:
    n = len(ranks) + len(missing)
    out = [f"NCCL version {VERSION} compiled with CUDA 13.0\n", "CUDA runtime version 13000, driver version 13000\n\n",
           "Job summary\n===========\n\n",
           "  Nodes  Processes         GPUs  Processes     GPUs\n(total)   per node  per process    (total)  (total)\n",
           f"{1:7d}  {n:9d}  {1:11d}  {n:9d}  {n:7d}\n", "\nCommunicators... (0.004s)\n=============\n\n",
           "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
           "    #  in group  per comm  per node  per comm  in group\n"]
    counts = {c: sorted({r.counts[i] for r in ranks}) for i, c in enumerate(COLLECTIVES)}
    mismatch = any(len(v) > 1 for v in counts.values())
    errors = ("INCOMPLETE," if missing else "") + ("MISMATCH" if mismatch else "")
    out.append(f"{0:5d}  {1:8d}  {1:8d}  {n:8d}  {n:8d}  {len(ranks):8d}  {'RUNNING':>8s}  "
               f"{errors.rstrip(',') or 'OK':>6s}\n")
    out.append("\nErrors\n======\n\n")
    if missing and dead:
        many = len(missing) > 1
        out.append(f"DEAD\n  {len(missing)} job process{'es are' if many else ' is'} considered dead "
                   "(unreachable via the RAS network)\n")
        out += [f"  Process {r.pid} on node {r.host} managing GPU {r.gpu}\n" for r in missing]
        out.append("\n")
    if missing:
        out.append(f"#0-0 ({COMM:016x}) INCOMPLETE\n  Missing communicator data from {len(missing)} "
                   f"rank{'s' if len(missing) > 1 else ''}\n")
        out += [f"  Rank {r.rank} -- GPU {r.gpu} managed by process {r.pid} on node {r.host}\n" for r in missing]
        out.append("\n")
    out.append("Warnings\n========\n\n")
    if missing:
        out.append("TIMEOUT\n  Encountered 1 communication timeout while gathering communicator data\n\n")
    if mismatch:
        out.append(f"#0-0 ({COMM:016x}) MISMATCH\n")
        for i, name in enumerate(COLLECTIVES):
            values = [r.counts[i] for r in ranks]
            if len(set(values)) < 2:
                continue
            out.append(f"  Communicator ranks have different {name} operation counts\n")
            groups = sorted({v: values.count(v) for v in values}.items(), key=lambda kv: (-kv[1], -kv[0]))
            for value, count in groups:
                if count > 1:
                    out.append(f"  {count} ranks have launched up to operation {value}\n" if value
                               else f"  {count} ranks have not launched any operations\n")
                if count == 1 or count <= 10 and count <= n * 0.25:
                    for r in (r for r in ranks if r.counts[i] == value):
                        if count > 1:
                            out.append(f"  Rank {r.rank} -- GPU {r.gpu} managed by process {r.pid} on node {r.host}\n")
                        else:
                            out.append(f"  Rank {r.rank} has launched up to operation {value} -- GPU {r.gpu} "
                                       f"managed by process {r.pid} on node {r.host}\n")
            out.append("\n")
    return "".join(out)


def titled_pids(proc: Path = Path("/proc")) -> dict[int, int]:
    """TP rank -> PID of the processes titled `sglang::scheduler_TPn`."""
    found: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith("sglang::scheduler_TP") and title[20:].isdigit():
            found[int(title[20:])] = int(entry.name)
    return found


def report_for(mode: str, fmt: str) -> str:
    if mode.startswith("replay:"):
        return Path(mode[7:]).read_text()
    pids = titled_pids() or {r: 4240 + r for r in range(8)}
    if mode == "lie":
        pids = {r: 400000 + r for r in pids}
    ranks = lagging(pids)
    if mode == "missing":
        gone = [r for r in ranks if r.rank == 5]
        rest = [Rank(r.rank, r.pid, r.gpu, (2, 0, 40, 0, 1234)) for r in ranks if r.rank != 5]
        return json_report(rest, gone, defect=True) if fmt == "json" else text_report(rest, gone)
    return json_report(ranks) if fmt == "json" else text_report(ranks)


def _client(conn: socket.socket, mode: str) -> None:
    fmt, buffer = "text", b""
    with conn:
        conn.settimeout(60)
        while True:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                raw, _, buffer = buffer.partition(b"\n")
                command = raw.decode(errors="replace").strip()
                if mode == "slow":
                    continue  # read, never answered
                upper = command.upper()
                if upper.startswith("CLIENT PROTOCOL "):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif upper.startswith("TIMEOUT "):
                    conn.sendall(b"OK\n")
                elif upper.startswith("SET FORMAT "):
                    wanted = command[11:].strip().lower()
                    replay_text = mode.startswith("replay:") and not Path(mode[7:]).read_text().lstrip().startswith("{")
                    if wanted in ("text", "json") and not (wanted == "json" and replay_text):
                        fmt = wanted
                        conn.sendall(b"OK\n")
                    else:
                        conn.sendall(f"ERROR: Unknown command {command}\n".encode())
                elif upper in ("STATUS", "VERBOSE STATUS"):
                    conn.sendall(report_for(mode, fmt).encode())
                    return
                else:
                    conn.sendall(f"ERROR: Unknown command {command}\n".encode())


def serve(port: int, mode: str, host: str = "127.0.0.1", ready: threading.Event | None = None,
          sock: socket.socket | None = None) -> None:
    listener = sock or socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if sock is None:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(16)
    if ready is not None:
        ready.set()
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed: the end
            return
        threading.Thread(target=_client, args=(conn, mode), daemon=True).start()


def build(outdir: Path) -> None:
    pids = {r: 4240 + r for r in range(8)}
    ranks = lagging(pids)
    rest = [Rank(r.rank, r.pid, r.gpu, (2, 0, 40, 0, 1234)) for r in ranks if r.rank != 5]
    gone = [r for r in ranks if r.rank == 5]
    files = {"built-8rank-allreduce-lag.json": json_report(ranks), "built-8rank-allreduce-lag.txt": text_report(ranks),
             "built-8rank-dead-rank.json": json_report(rest, gone, defect=True),
             "built-8rank-dead-rank.txt": text_report(rest, gone),
             "built-8rank-in-step.json": json_report(rest + [Rank(5, 4245, 5, (2, 0, 40, 0, 1234))])}
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (outdir / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("outdir", type=Path)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=28028)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--mode", default="lag")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.outdir)
        return 0
    print(f"fake RAS on {args.host}:{args.port}, mode {args.mode}, pid {os.getpid()}", file=sys.stderr, flush=True)
    try:
        serve(args.port, args.mode, args.host)
    except KeyboardInterrupt:
        pass
    time.sleep(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
