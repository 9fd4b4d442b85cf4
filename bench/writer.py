#!/usr/bin/env python3
"""The watched unit of the benchmarks: writes SGLang-like lines to its journal stream, fast or paced.

It runs as a systemd service inside the bench sandbox (bench/run.py), so every line reaches the
journal the way a real SGLang server's does: one stream shared by every process, `_PID` of the
writer, `_LINE_BREAK=pid-change` where a tqdm frame was cut by another rank's line.

    catchup --entries N      one start-up of 8 ranks (the simulator's v0.5.9 lines, tqdm frames with
                             \\r, the long server_args line), then serving: mostly TP0 `Decode batch`
                             lines, some `Prefill batch`, uvicorn access lines and ASGI tracebacks
    catchup --mix access     one start-up of 8 ranks, then serving that is uvicorn access lines only,
                             each with its own hex request id (lines alike but for letters too: the
                             C reader joins them by their ids masked; SGLang's `--log-requests` style,
                             PROBE-S3 H-3)
    catchup --mix decode     one start-up of 8 ranks with the ~400-field server_args line and a
                             traceback, then TP0's `Decode batch` lines, each different (numbers of
                             a busy server's, of varying widths: few runs form), a uvicorn access
                             line every 50 (from the main process: another writer)
    catchup --mix crash      one turn of a crash-looping server: the start-up, a short serving spell
                             with long lines (KB-sized batch dumps and warnings) and many tracebacks,
                             then every rank's fatal traceback (the unit is started again and again)
    paced --lines L          a start-up line by line, timing when each one shows in the daemon's
                             status file and, for reference, in a bare journal reader
    rate --per-second R      a quick start-up to ready, then R Decode lines a second
    steps --steps S          a quick start-up into cuda graph capture, then TP0's capture bar: S
                             progress steps at --per-second, each its own entry; the time of
                             each write to --out (the follow row: journal -> /status)
    silent [--starting]      a quick start-up to ready (or into cuda graph capture), then nothing
    burst --lines L          a quick start-up to ready, then, once a trigger file appears, 8 ranks
                             writing L lines in --seconds
    deadline [--busy]        a quick start-up into cuda graph capture, then silence (or 100 lines/s);
                             once per --marker file, so the restarted unit stays quiet

Standard library only (plus python-systemd for `paced`'s reference reader).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))

import sglang_sim  # noqa: E402

RANKS = 8
_stamp_cache: tuple[int, str] = (0, "")


# Catch-up journals are written in seconds, but a server writes them over hours: the prefix time of
# their serving lines follows this clock (None: the wall clock), LINES_PER_SECOND lines a second
# over all writers, so consecutive lines share a prefix second about as often as a busy server's do.
LINES_PER_SECOND = 4
_serving_clock: float | None = None


def stamp() -> str:
    global _stamp_cache
    now = int(time.time() if _serving_clock is None else _serving_clock)
    if _stamp_cache[0] != now:
        _stamp_cache = (now, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)))
    return _stamp_cache[1]


def prefixed(rank: int, text: str) -> str:
    tag = "" if rank == sglang_sim.MAIN else f" TP{rank}"
    return f"[{stamp()}{tag}] {text}"


def write(text: str) -> None:
    data = text.encode()
    while data:
        done = os.write(2, data)
        data = data[done:]


def decode_line(rank: int, n: int) -> str:
    return prefixed(rank, f"Decode batch, #running-req: {12 + n % 37}, #token: {48213 + 97 * n}, token usage: "
                    f"0.{n % 90 + 10:02d}, accept len: 3.{n % 89 + 10}, accept rate: 0.{n % 50 + 40}, cuda graph: "
                    f"True, gen throughput (token/s): {900 + n % 400}.{n % 97:02d}, #queue-req: {n % 3}")


def prefill_line(n: int) -> str:
    return prefixed(0, f"Prefill batch, #new-seq: 1, #new-token: {n % 4000 + 7}, #cached-token: {n % 512}, "
                    f"token usage: 0.0{n % 9}, #running-req: {n % 40}, #queue-req: 0, input throughput (token/s): "
                    f"{n % 9000}.00, cuda graph: False")


def access_line(n: int) -> str:
    return f'[{stamp()}] INFO:     127.0.0.1:{40000 + n % 20000} - "POST /generate HTTP/1.1" 200 OK'


ASGI_TRACEBACK = [
    "ERROR:    Exception in ASGI application",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in '
    "run_asgi",
    "    result = await app(  # type: ignore[func-returns-value]",
    '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 611, in generate_request',
    "    ret = await _global_state.tokenizer_manager.generate_request(obj, request).__anext__()",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tokenizer_manager.py", line 472, in '
    "generate_request",
    "    raise ValueError(",
    "ValueError: The input (262401 tokens) is longer than the model's context length (262144 tokens).",
]


def long_line(rank: int, n: int) -> str:
    """A KB-sized record: a scheduler's batch dump, as a debugging server prints them."""
    reqs = ", ".join(f"{{'rid': '{n:08x}{k:04x}', 'len': {97 * k + n % 1000}, 'out': {k % 50}}}"
                     for k in range(40 + n % 80))
    return prefixed(rank, f"Batch dump: [{reqs}]")


def rank_crash(rank: int, n: int) -> list[str]:
    """A rank's fatal traceback, as SGLang's scheduler logs it."""
    frames = []
    for depth in range(12):
        frames.append(f'  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler_{depth}.py", line '
                      f"{100 + depth * 7}, in step_{depth}")
        frames.append(f"    result = self.model_runner.forward_{depth}(batch, skip_attn_backend_init={depth % 2 == 0})")
    return [prefixed(rank, "Scheduler hit an exception: Traceback (most recent call last):"), *frames,
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {2 + n % 5}.00 GiB. GPU {rank} has a "
            "total capacity of 79.19 GiB of which 1.06 GiB is free. " + "Including non-PyTorch memory, " * 20]


# --- the start-up -----------------------------------------------------------------------------

def startup_lines(until_phase: str | None = None) -> dict[int, list[str]]:
    """Each writer's start-up lines (the simulator's plan), up to the first line of `until_phase`."""
    plan = sglang_sim.build(scale=0.001)
    by_writer: dict[int, list[str]] = {}
    base = time.time()
    for emit in plan.emits:
        if until_phase is not None and emit.phase == until_phase:
            break
        text = sglang_sim.rendered(emit, base, os.getpid())
        by_writer.setdefault(emit.writer, []).append(text + ("\n" if emit.newline else ""))
    return by_writer


def play_startup(until_phase: str | None = None, ready: bool = True, server_args: str | None = None) -> int:
    """Every rank in its own process at full speed, then the main process's lines. Entries written.
    `server_args`: the main process's server_args line instead of the simulator's."""
    lines = startup_lines(until_phase)
    main = lines.pop(sglang_sim.MAIN, [])
    if server_args is not None:
        main = [server_args + "\n" if "server_args=" in t else t for t in main]
    head = [t for t in main if "server_args" in t or "Max running" in t]
    write("".join(head))
    children = []
    for _rank, texts in sorted(lines.items()):
        pid = os.fork()
        if pid == 0:
            for text in texts:  # one write per line: tqdm frames get cut by the other ranks
                write(text)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    tail = [t for t in main if t not in head]
    if ready:
        write("".join(tail))
    return sum(t.count("\n") for texts in lines.values() for t in texts) + len(head) + (len(tail) if ready else 0)


# --- modes --------------------------------------------------------------------------------------

def serve_at(seconds: float | None) -> None:
    """The prefix time of the next serving lines (None: the wall clock again)."""
    global _serving_clock
    _serving_clock = seconds


def request_line(n: int) -> str:
    rid = f"{(n * 0x9E3779B97F4A7C15) & ((1 << 128) - 1):032x}"
    return (f'[{stamp()}] INFO:     10.0.{n % 250}.{n % 7}:{40000 + n % 20000} - "POST /v1/chat/completions '
            f'HTTP/1.1" 200 OK request_id={rid}')


def access_only(entries: int) -> None:
    """The start-up, then access lines with request ids, LINES_PER_SECOND a second of prefix time."""
    bulk = max(entries - play_startup(), 0)
    start, chunk = time.time(), []
    for n in range(bulk):
        serve_at(start + n / LINES_PER_SECOND)
        chunk.append(request_line(n) + "\n")
        if len(chunk) == 64:
            write("".join(chunk))
            chunk.clear()
    write("".join(chunk))


def catchup(entries: int) -> None:
    written = play_startup()
    bulk = max(entries - written, 0)
    main_share = bulk // 20  # uvicorn's lines: access log and, now and then, a traceback
    rank_share = bulk - main_share
    start = time.time()
    spell = bulk / LINES_PER_SECOND
    pid = os.fork()
    if pid == 0:
        chunk: list[str] = []
        for n in range(rank_share):
            serve_at(start + spell * n / rank_share)
            chunk.append((prefill_line(n) if n % 50 == 0 else decode_line(0, n)) + "\n")
            if len(chunk) == 64:
                write("".join(chunk))
                chunk.clear()
        write("".join(chunk))
        os._exit(0)
    n = 0
    chunk = []
    while n < main_share:
        serve_at(start + spell * n / max(main_share, 1))
        if n % 2000 == 1999:
            chunk.extend(line + "\n" for line in ASGI_TRACEBACK)
            n += len(ASGI_TRACEBACK)
        else:
            chunk.append(access_line(n) + "\n")
            n += 1
        if len(chunk) >= 64:
            write("".join(chunk))
            chunk.clear()
    write("".join(chunk))
    os.waitpid(pid, 0)


def long_server_args() -> str:
    """A `server_args=ServerArgs(...)` line of about 400 fields, as v0.5.x prints every option."""
    extra = ", ".join(f"{name}_{k}={value}" for k in range(100) for name, value in (
        ("enable_option", "False"), ("max_size", str(4096 + k)), ("backend_name", f"'flashinfer{k}'"),
        ("timeout_s", "None")))
    return prefixed(sglang_sim.MAIN, "server_args=ServerArgs(model_path='Qwen/Qwen3-235B-A22B', "
                    "tokenizer_path='Qwen/Qwen3-235B-A22B', tp_size=8, dp_size=1, pp_size=1, ep_size=1, "
                    f"speculative_algorithm='EAGLE3', enable_metrics=True, {extra})")


def busy_decode_line(rng: random.Random) -> str:
    """TP0's `Decode batch` of a busy server (v0.5.9, speculative): each one different, of varying widths."""
    running = rng.choice((rng.randint(1, 9), rng.randint(10, 48), 48))
    tokens = running * rng.randint(300, 9000)
    return prefixed(0, f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: "
                    f"{tokens / 2_400_000:.2f}, accept len: {rng.uniform(2.9, 3.6):.2f}, accept rate: "
                    f"{rng.uniform(0.36, 0.46):.2f}, cuda graph: True, gen throughput (token/s): "
                    f"{running * rng.uniform(40, 90):.2f}, #queue-req: {rng.choice((0, 0, 0, rng.randint(1, 20)))}")


def decode_heavy(entries: int) -> None:
    """The start-up with the long server_args line and a traceback, then TP0's Decode lines, each
    different, with the main process's access line every 50 (the two writers take turns by a pipe)."""
    written = play_startup(server_args=long_server_args())
    write("".join(line + "\n" for line in ASGI_TRACEBACK))
    bulk = max(entries - written - len(ASGI_TRACEBACK), 0)
    start = time.time()
    to_rank, from_main = os.pipe()
    to_main, from_rank = os.pipe()
    pid = os.fork()
    if pid == 0:  # TP0: 49 Decode lines, then the main process's turn
        rng = random.Random(39)
        n = 0
        while n < bulk:
            chunk = []
            while n < bulk and len(chunk) < 49:
                serve_at(start + n / LINES_PER_SECOND)
                chunk.append(busy_decode_line(rng) + "\n")
                n += 1
            write("".join(chunk))
            if n < bulk:
                os.write(from_rank, b"x")
                os.read(to_rank, 1)
                n += 1
        os._exit(0)
    n = 49
    while n < bulk:
        os.read(to_main, 1)
        serve_at(start + n / LINES_PER_SECOND)
        write(access_line(n) + "\n")
        os.write(from_main, b"x")
        n += 50
    os.waitpid(pid, 0)


def crash_loop(entries: int) -> None:
    """One turn of a crash loop: start-up, a serving spell full of long lines and tracebacks, the crash."""
    written = play_startup()
    crash = [line for rank in range(RANKS) for line in rank_crash(rank, written)]
    crash.append(prefixed(sglang_sim.MAIN, "Received sigquit from a child process. It usually means the child failed."))
    bulk = max(entries - written - len(crash), 0)
    n = 0
    chunk: list[str] = []
    start = time.time()
    while n < bulk:
        serve_at(start + n / LINES_PER_SECOND)
        if n % 100 == 99:
            chunk.extend(line + "\n" for line in ASGI_TRACEBACK)
            n += len(ASGI_TRACEBACK)
        elif n % 25 == 7:
            chunk.append(long_line(n % RANKS, n) + "\n")
            n += 1
        else:
            chunk.append((prefill_line(n) if n % 50 == 0 else decode_line(0, n)) + "\n")
            n += 1
        if len(chunk) >= 64:
            write("".join(chunk))
            chunk.clear()
    serve_at(start + bulk / LINES_PER_SECOND)  # the crash comes at the end of the spell
    crash = [line for rank in range(RANKS) for line in rank_crash(rank, written)]
    crash.append(prefixed(sglang_sim.MAIN, "Received sigquit from a child process. It usually means the child failed."))
    write("".join(chunk) + "".join(line + "\n" for line in crash))


def paced(lines: int, interval: float, status: str, out: str) -> None:
    """Write `lines` lines one at a time; after each, wait until the daemon's status and a bare reader show it."""
    import threading

    from systemd import _reader

    invocation = os.environ["INVOCATION_ID"]

    def open_reader():  # type: ignore[no-untyped-def]
        reader = _reader._Reader()
        reader.add_match(f"_SYSTEMD_INVOCATION_ID={invocation}")
        reader.seek_tail()
        reader._previous()
        return reader

    reader = open_reader()
    # A second reference: a bare reader that sleeps until the journal's fd says something changed
    # (what `journalctl -f` and the daemon do), instead of polling the file.
    woken: list[float] = []

    def wait_like_a_follower() -> None:
        follower = open_reader()
        while True:
            follower.wait(-1)
            while follower._next():
                woken.append(time.time())

    threading.Thread(target=wait_like_a_follower, daemon=True).start()
    texts = [t for texts in startup_lines().values() for t in texts
             if t.endswith("\n") and t.count("\n") == 1 and t.strip() and "fired up" not in t]
    # (not the ready line: the start-up stays a start-up, whose lines are the ones that must be seen fast)
    rng = random.Random(5)
    texts = rng.sample(texts, min(len(texts), lines))
    texts += [decode_line(0, n) + "\n" for n in range(lines - len(texts))]
    results = []
    last_stat: tuple[int, int] | None = None
    for index, text in enumerate(texts):
        time.sleep(interval * (0.5 + rng.random()))
        expected = index + 1
        written = time.time()
        write(text)
        seen_reader = seen_status = None
        deadline = written + 5.0
        # The next line comes within 2 s whatever the references do: a longer pause would be a
        # silence (stages/s4_judge/wakeups.py TALKING), after which the daemon waits for journald again, and
        # the row would measure the references' misses (the polling reader misses an entry now and then).
        patience = written + 1.0
        while (seen_reader is None or seen_status is None) and time.time() < deadline \
                and not (seen_status is not None and time.time() > patience):
            if seen_reader is None:
                reader.process()
                while reader._next():
                    seen_reader = time.time()
            if seen_status is None:
                try:
                    st = os.stat(status)
                    key = (st.st_ino, st.st_mtime_ns)
                    if key != last_stat:
                        with open(status, encoding="utf-8") as handle:
                            document = json.load(handle)
                        last_stat = key
                        if document.get("invocation_id", "").replace("-", "") == invocation \
                                and int(document.get("entries", 0)) >= expected:
                            seen_status = time.time()
                except (OSError, ValueError):
                    last_stat = None
            time.sleep(0.0005)
        deadline = max(written + 1.5, time.time() + 0.05)
        while len(woken) <= index and time.time() < deadline:
            time.sleep(0.0005)
        woke = woken[index] - written if len(woken) > index else None
        results.append({"text": text[:60], "after_silence": index > 0 and written - results[-1]["written"] > 2.0,
                        "written": written, "reader": None if seen_reader is None else seen_reader - written,
                        "waiting_reader": woke, "status": None if seen_status is None else seen_status - written})
    with open(out + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    os.replace(out + ".tmp", out)


def rate(per_second: float, seconds: float) -> None:
    play_startup()
    start = time.time()
    n = 0
    while n < per_second * seconds:
        n += 1
        delay = start + n / per_second - time.time()
        if delay > 0:
            time.sleep(delay)
        write(decode_line(0, n) + "\n")


def steps(count: int, per_second: float, out: str) -> None:
    """The start-up into cuda graph capture, then `count` steps of TP0's capture bar, `per_second`,
    each frame a line of its own; when each was written goes to `out` (JSON), at the end."""
    play_startup("cuda_graph_capture", ready=False)
    begin = "Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB"
    write("".join(prefixed(rank, begin) + "\n" for rank in range(RANKS)))
    time.sleep(1.0)  # (as SGLang: the bar begins about a second after the begin lines)
    written = []
    start = time.time()
    for n in range(1, count + 1):
        delay = start + n / per_second - time.time()
        if delay > 0:
            time.sleep(delay)
        frame = (f"\rCapturing batches (bs={max(512 - 2 * n, 1)} avail_mem={24.6 - 0.01 * n:.2f} GB): "
                 f"{100 * n // count:3d}%|{'#' * (10 * n // count):<10}| {n}/{count} [00:{n // 10 % 60:02d}<00:"
                 f"{(count - n) // 10 % 60:02d}, {per_second:.2f}it/s]\n")
        written.append(time.time())
        write(frame)
    with open(out + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"written": written, "count": count}, handle)
    os.replace(out + ".tmp", out)


def burst(lines: int, seconds: float, trigger: str, out: str) -> None:
    play_startup()
    while not os.path.exists(trigger):
        time.sleep(0.05)
    began = time.time()
    per_rank = lines // RANKS
    children = []
    for rank in range(RANKS):
        pid = os.fork()
        if pid == 0:
            steps = max(int(seconds * 100), 1)
            done = 0
            for step in range(steps):
                target = per_rank * (step + 1) // steps
                write("".join(decode_line(rank, n) + "\n" for n in range(done, target)))
                done = target
                delay = began + seconds * (step + 1) / steps - time.time()
                if delay > 0:
                    time.sleep(delay)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"began": began, "ended": time.time(), "lines": per_rank * RANKS}, handle)


def deadline(busy: bool, marker: str) -> None:
    if os.path.exists(marker):
        return  # the restarted unit: quiet
    play_startup("cuda_graph_capture", ready=False)
    begin = "Capture cuda graph begin. This can take up to several minutes. avail mem=24.60 GB"
    write("".join(prefixed(rank, begin) + "\n" for rank in range(RANKS)))
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(str(time.time()))
    n = 0
    while busy:
        n += 1
        time.sleep(0.01)
        write(prefixed(n % RANKS, f"NCCL INFO comm 0x{n:08x} rank {n % RANKS} nranks 8 - Init COMPLETE") + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="writer.py")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("catchup")
    p.add_argument("--entries", type=int, required=True)
    p.add_argument("--mix", choices=("serving", "crash", "access", "decode"), default="serving")
    p = sub.add_parser("paced")
    p.add_argument("--lines", type=int, default=220)
    p.add_argument("--interval", type=float, default=0.03)
    p.add_argument("--status", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("rate")
    p.add_argument("--per-second", type=float, default=100)
    p.add_argument("--seconds", type=float, default=60)
    p = sub.add_parser("steps")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--per-second", type=float, default=10)
    p.add_argument("--out", required=True)
    p = sub.add_parser("silent")
    p.add_argument("--starting", action="store_true")
    p = sub.add_parser("burst")
    p.add_argument("--lines", type=int, default=50000)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--trigger", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("deadline")
    p.add_argument("--busy", action="store_true")
    p.add_argument("--marker", required=True)
    args = parser.parse_args()
    if args.mode == "catchup":
        {"crash": crash_loop, "access": access_only, "decode": decode_heavy}.get(args.mix, catchup)(args.entries)
        return 0
    if args.mode == "paced":
        paced(args.lines, args.interval, args.status, args.out)
    elif args.mode == "rate":
        rate(args.per_second, args.seconds)
    elif args.mode == "steps":
        steps(args.steps, args.per_second, args.out)
    elif args.mode == "silent":
        play_startup("cuda_graph_capture" if args.starting else None, ready=not args.starting)
    elif args.mode == "burst":
        burst(args.lines, args.seconds, args.trigger, args.out)
    elif args.mode == "deadline":
        deadline(args.busy, args.marker)
    while True:  # a server waits for requests until it is stopped
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
