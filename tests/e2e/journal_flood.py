#!/usr/bin/env python3
"""A flood of the watched unit's lines for the e2e load tests (test_e2e_journal_load.py). It runs in
the unit's own cgroup (started from an ExecStartPost= of the unit, in the background), so journald
stamps its lines `_SYSTEMD_UNIT=` the unit. Once GO exists, it writes LINES lines, RATE a second (0:
as fast as it can), then creates DONE. A writer started when GO already exists (the unit started
again) writes nothing: one flood per test.

    journal_flood.py --go F --done F --lines N [--rate R] [--kind access|noise]

access: uvicorn access lines with a request id each (no two alike but for digits: no runs form);
noise: a C++ library's warning lines, which are no rank's and move no phase.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

BATCH = 500


def line(kind: str, k: int) -> str:
    if kind == "access":
        rid = f"{(k * 0x9E3779B97F4A7C15) & ((1 << 128) - 1):032x}"
        return (f"[2026-12-01 08:10:00] INFO:     10.0.{k % 250}.{k % 7}:{40000 + k % 20000} - "
                f'"POST /v1/chat/completions HTTP/1.1" 200 OK request_id={rid}\n')
    return f"W1201 08:10:00.{k % 1000000:06d} 77 nccl_noise.cc:42] NCCL_ASYNC warning {k:x}\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--go", required=True)
    parser.add_argument("--done", required=True)
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--kind", choices=("access", "noise"), default="access")
    args = parser.parse_args()
    if os.path.exists(args.done) or os.path.exists(args.go):
        return 0  # (a later start of the unit: the flood was this test's once)
    while not os.path.exists(args.go):
        time.sleep(0.1)
    out = sys.stdout.buffer
    began = time.monotonic()
    for start in range(0, args.lines, BATCH):
        out.write("".join(line(args.kind, k) for k in range(start, min(start + BATCH, args.lines))).encode())
        out.flush()
        if args.rate > 0:
            ahead = (start + BATCH) / args.rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
    with open(args.done, "w") as marker:
        marker.write(f"{args.lines} lines in {time.monotonic() - began:.1f}s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
