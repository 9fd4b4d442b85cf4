#!/usr/bin/env python3
"""Runs inside the bench sandbox (as root, with the checkout's venv): the catch-up readers, timed.

    inside.py raw --unit U                  (a) the reading limit: _Reader _next() + _get("MESSAGE")
    inside.py count --unit U                entries of the unit (the same match as every reader)
    inside.py catchup --unit U --reps R     (a)-(d) interleaved, R times each; JSON on stdout
    inside.py replay --unit U --reps R      (a) and (d) only, with (d)'s max RSS (the scale series)
    inside.py catchup --unit U --methods a_raw_reader,e_daemon_rebuild,f_daemon_rebuild_python
                                            the daemon's own catch-up at its start (bench/rebuild.py)
    inside.py watch-status --status F --out O   each new status file (inotify): "time entries invocation"
    inside.py latency --unit U --seen O --since T --until T2   entry -> status latencies of that window
    inside.py poll-status --url URL --out O    GET the daemon's /status every 5 ms; each change of
                                            a rank's progress step: "time step published_at"

Every reader is timed as a whole process (interpreter start included), from the same journal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV_BIN = os.path.join(REPO, ".venv", "bin")
FILTER = os.path.join(HERE, "fail2ban-sglang-phases.conf")
# The phase markers of docs/phases.md (begin/end lines of every phase, and ready), as an ERE.
MARKERS = (r"\] (Init torch distributed (begin|ends)|Load weight (begin|end)|KV Cache is allocated|Memory pool end"
           r"|Capture (draft (extend )?)?cuda graph (begin|end)|The server is fired up)")


def open_reader(unit: str):  # type: ignore[no-untyped-def]
    from systemd import _reader

    reader = _reader._Reader()
    reader.data_threshold = 0
    reader.add_match(f"_SYSTEMD_UNIT={unit}")
    reader.add_disjunction()
    reader.add_match(f"UNIT={unit}")
    reader.add_match("_PID=1")
    reader.add_disjunction()
    reader.add_match(f"OBJECT_SYSTEMD_UNIT={unit}")
    reader.seek_head()
    return reader


def raw(unit: str) -> int:
    reader = open_reader(unit)
    count = 0
    size = 0
    next_entry, get = reader._next, reader._get
    while next_entry():
        try:
            size += len(get("MESSAGE"))
        except KeyError:
            pass
        count += 1
    print(json.dumps({"entries": count, "message_bytes": size}))
    return count


def count(unit: str) -> int:
    reader = open_reader(unit)
    n = 0
    while reader._next():
        n += 1
    return n


def settle(unit: str, quiet: float = 1.0, timeout: float = 600) -> int:
    """Wait until journald has written all of the unit's entries (the count stops changing)."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = count(unit)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
        time.sleep(0.25)
    return last


def commands(unit: str, before: str | None = None) -> dict[str, list[str]]:
    journalmatch = f"_SYSTEMD_UNIT={unit} + UNIT={unit} _PID=1 + OBJECT_SYSTEMD_UNIT={unit}"
    return {
        "a_raw_reader": [os.path.join(VENV_BIN, "python"), __file__, "raw", "--unit", unit],
        "b_journalctl_grep": ["sh", "-c", f"journalctl -u {unit} -o cat --no-pager | grep -cE '{MARKERS}'"],
        "c_fail2ban_regex": ["fail2ban-regex", "--print-no-missed", "--print-no-ignored", "-m", journalmatch,
                             "systemd-journal", FILTER],
        "d_phasewatch_replay": [os.path.join(VENV_BIN, "phasewatch"), "replay", "--unit", unit, "--json"],
        # the daemon's own catch-up at its start (Daemon.start), with the C reader and without
        "e_daemon_rebuild": [os.path.join(VENV_BIN, "python"), os.path.join(HERE, "rebuild.py"), "--unit", unit],
        "f_daemon_rebuild_python": ["env", "PHASEWATCH_PURE_PYTHON=1", os.path.join(VENV_BIN, "python"),
                                    os.path.join(HERE, "rebuild.py"), "--unit", unit],
        # the same replay by another tree (run.py --before: the code before a change), in the same run
        **({"g_replay_before": [os.path.join(before, ".venv", "bin", "phasewatch"), "replay", "--unit", unit,
                                "--json"]} if before else {}),
    }


def timed_rss(command: list[str]) -> tuple[float, int, float, str]:
    """Like timed(), but with the child's own max RSS (KiB) and CPU seconds (user + system, its
    reaped children's too) from wait4."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({process.returncode})")
    return elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, out.decode(errors="replace")


def summary_of(name: str, output: str) -> dict[str, object]:
    """What each reader found, to show they did the same work."""
    if name == "a_raw_reader":
        return json.loads(output)
    if name == "b_journalctl_grep":
        return {"marker_lines": int(output.strip() or 0)}
    if name == "c_fail2ban_regex":
        for line in output.splitlines():
            if line.startswith("Lines:"):
                return {"lines": line.strip()}
        return {"output": output[-300:]}
    document = json.loads(output)
    if name.startswith(("e_", "f_")):
        return dict(document)
    return {"invocations": len(document["invocations"]),
            "outcomes": [i["outcome"] for i in document["invocations"]]}


def catchup(unit: str, reps: int, methods: list[str], before: str | None = None) -> dict[str, object]:
    entries = settle(unit)
    cmds = {k: v for k, v in commands(unit, before).items() if k in methods}
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, list[int]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    found: dict[str, object] = {}
    for _ in range(reps):
        for name, command in cmds.items():  # interleaved: a noisy moment hits every method alike
            elapsed, maxrss, seconds, out = timed_rss(command)
            times[name].append(elapsed)
            rss[name].append(maxrss)
            cpu[name].append(seconds)
            found[name] = summary_of(name, out)
    return {"unit": unit, "entries": entries, "times": times, "max_rss_kib": rss, "cpu_seconds": cpu,
            "found": found, "median": {k: statistics.median(v) for k, v in times.items()}}


IN_MOVED_TO, IN_CLOSE_WRITE = 0x80, 0x08


def watch_status(status: str, out: str) -> None:
    """Wait on the status file's directory (inotify: the daemon renames each new status into place)
    and append, per new status, the time it was seen, its `entries` and its invocation. Until killed."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    directory, name = os.path.split(status)
    if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0:
        raise SystemExit(f"inotify: {os.strerror(ctypes.get_errno())}")
    last = None
    with open(out, "a", encoding="utf-8") as sink:
        while True:
            data = os.read(fd, 65536)
            seen = time.time()
            offset, hit = 0, False
            while offset < len(data):
                _, _, _, length = struct.unpack_from("iIII", data, offset)
                hit = hit or data[offset + 16:offset + 16 + length].rstrip(b"\0").decode() == name
                offset += 16 + length
            if not hit:
                continue
            try:
                with open(status, encoding="utf-8") as handle:
                    document = json.load(handle)
            except (OSError, ValueError):
                continue
            key = (document.get("entries"), document.get("invocation_id"))
            if key != last:
                last = key
                sink.write(f"{seen:.6f} {key[0]} {key[1]}\n")
                sink.flush()


def poll_status(url: str, out: str, interval: float = 0.005) -> None:
    """GET `url` (the daemon's /status) every `interval`, one connection each, as a client would; append
    "time step published_at" each time the furthest progress step of a rank changes. Until killed."""
    import http.client
    import urllib.parse

    where = urllib.parse.urlsplit(url)
    last = None
    with open(out, "a", encoding="utf-8") as sink:
        while True:
            began = time.time()
            try:
                connection = http.client.HTTPConnection(where.hostname, where.port, timeout=1.0)
                connection.request("GET", where.path)
                body = connection.getresponse().read()
                connection.close()
                seen = time.time()
                document = json.loads(body)
                ranks = ((document.get("invocation") or {}).get("ranks") or {}).values()
                step = max(((rank.get("progress") or {}).get("n") or 0 for rank in ranks), default=0)
                published = document.get("published_at")
                if step != last:
                    last = step
                    sink.write(f"{seen:.6f} {step} {published}\n")
                    sink.flush()
            except (OSError, ValueError):
                pass
            time.sleep(max(interval - (time.time() - began), 0.0))


def latency(unit: str, seen_path: str, since: float, until: float) -> dict[str, object]:
    """For each entry of the unit's current start-up journald stamped within [since, until]: the time
    from its journal timestamp to the first status whose `entries` count includes it. The entries are
    counted as the daemon counts them (phasewatch's own follower, per invocation, in journal order)."""
    from phasewatch.sources.journal.follow import JournalFollower

    seen: list[tuple[float, int, str]] = []
    with open(seen_path, encoding="utf-8") as handle:
        for line in handle:
            at, entries, invocation = line.split()
            if entries != "None":
                seen.append((float(at), int(entries), invocation.replace("-", "")))
    invocation = seen[-1][2]
    seen = [s for s in seen if s[2] == invocation]
    follower = JournalFollower(unit)
    follower.seek_head()
    stamps: list[float] = []
    while records := follower.read(1000):
        stamps += [r.realtime for r in records if (r.invocation_id or "").replace("-", "") == invocation]
    delays, missed = [], 0
    cursor = 0
    for index, stamp in enumerate(stamps, start=1):
        while cursor < len(seen) and seen[cursor][1] < index:
            cursor += 1
        if not since <= stamp <= until:
            continue
        if cursor == len(seen):
            missed += 1
        else:
            delays.append(max(seen[cursor][0] - stamp, 0.0))
    return {"entries": len(delays) + missed, "missed": missed, "delays": delays}


def main() -> int:
    parser = argparse.ArgumentParser(prog="inside.py")
    parser.add_argument("command", choices=("raw", "count", "settle", "catchup", "watch-status", "latency",
                                            "poll-status"))
    parser.add_argument("--unit")
    parser.add_argument("--status")
    parser.add_argument("--out")
    parser.add_argument("--seen")
    parser.add_argument("--url")
    parser.add_argument("--since", type=float, default=0.0)
    parser.add_argument("--until", type=float, default=float("inf"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--methods", default="a_raw_reader,b_journalctl_grep,c_fail2ban_regex,d_phasewatch_replay")
    parser.add_argument("--before", help="a tree (with its .venv) whose replay is method g_replay_before")
    args = parser.parse_args()
    if args.command == "watch-status":
        watch_status(args.status, args.out)
        return 0
    if args.command == "poll-status":
        poll_status(args.url, args.out)
        return 0
    if args.command == "latency":
        print(json.dumps(latency(args.unit, args.seen, args.since, args.until)))
        return 0
    if args.command == "raw":
        raw(args.unit)
    elif args.command == "count":
        print(count(args.unit))
    elif args.command == "settle":
        print(settle(args.unit))
    else:
        print(json.dumps(catchup(args.unit, args.reps, args.methods.split(","), args.before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
