"""On the GPU machine: each workload of workloads.py under `phasewatch vitals record`, labelled,
replayed, summarised. `python3 tools/gpu_workloads/device_run.py OUTDIR [MODE...]` (PYTHONPATH=daemon)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HANG_SECONDS = 35
NAMES = {"weight-load": "weight-load-safetensors", "capture-small": "cuda-graph-capture-small",
         "decode-small": "warmup-decode-batch1", "jit-nvrtc": "jit-cupy-nvrtc", "torch-compile": "torch-compile-inductor",
         "wait-kernel": "hang-wait-kernel-after-work", "python-hang": "hang-python-lock",
         "host-poll-wait": "hang-poll-host-memory", "python-spin": "hang-python-spin",
         "launch-bound": "launch-bound-capture", "slow-load": "weight-load-slow-storage",
         "host-warmup": "warmup-host-heavy"}
SECONDS = {m: float(os.environ.get("WORKLOAD_SECONDS_" + m.replace("-", "_").upper(), 35)) for m in NAMES}


def run(mode: str, out: str) -> None:
    marks = f"/tmp/marks-{mode}.jsonl"
    if os.path.exists(marks):
        os.unlink(marks)
    trace = os.path.join(out, NAMES[mode] + ".jsonl")
    work = subprocess.Popen([sys.executable, os.path.join(HERE, "workloads.py"), mode, "--marks", marks,
                             "--dir", "/tmp", "--seconds", str(SECONDS[mode])],
                            stdout=subprocess.DEVNULL, stderr=open(f"/tmp/{mode}.err", "w"))
    rec = subprocess.Popen([sys.executable, "-m", "phasewatch", "vitals", "record", "--pid", str(work.pid),
                            "--rank", f"TP0={work.pid}", "--out", trace, "--note", f"workloads.py {mode}"],
                           stderr=open(f"/tmp/rec-{mode}.err", "w"))
    began = time.time()
    hang_begin = None
    while work.poll() is None and time.time() - began < 400:
        time.sleep(0.5)
        if hang_begin is None and os.path.exists(marks):
            rows = [json.loads(line) for line in open(marks)]
            hang = [r for r in rows if r["end"] is None]
            if hang:
                hang_begin = hang[0]["begin"]
        if hang_begin is not None and time.time() - hang_begin > HANG_SECONDS:
            break
    end = time.time()
    if work.poll() is None:
        work.kill()
    work.wait()
    time.sleep(1.5)
    rec.send_signal(signal.SIGTERM)
    rec.wait(timeout=30)
    rows = [json.loads(line) for line in open(marks)] if os.path.exists(marks) else []
    for r in rows:
        if r["end"] is None:
            r["end"] = end
    lines = open(trace).read().splitlines()
    header = json.loads(lines[0])
    header["windows"] = rows
    header["note"] = f"tools/gpu_workloads/workloads.py {mode} (recorded live with phasewatch vitals record)"
    open(trace, "w").write("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    with open(os.path.join(out, "device-log.txt"), "a") as log:
        log.write(f"== {mode} recorder: {open(f'/tmp/rec-{mode}.err').read()}\n{open(f'/tmp/{mode}.err').read()[-3000:]}\n")
    print(f"== {mode}: exit {work.returncode}, recorder: {open(f'/tmp/rec-{mode}.err').read().strip()[-300:]}")
    err = open(f"/tmp/{mode}.err").read().strip()
    if err:
        print("   stderr:", err[-600:].replace("\n", " | "))
    summarise(lines[1:], rows, header)
    replay = subprocess.run([sys.executable, "-m", "phasewatch", "vitals", "replay", trace], capture_output=True,
                            text=True)
    with open(os.path.join(out, "device-log.txt"), "a") as log:
        log.write(f"== {mode}\n{replay.stdout}{replay.stderr}\n")
    document = json.loads(subprocess.run([sys.executable, "-m", "phasewatch", "vitals", "replay", trace, "--json"],
                                         capture_output=True, text=True).stdout or "{}")
    for w in rows:
        inside = [p for p in document.get("periods", []) if p["from"] >= w["begin"] and p["to"] <= w["end"]]
        alive = [p["ranks"].get("TP0", {}).get("alive", False) for p in inside]
        texts = sorted({p["ranks"].get("TP0", {}).get("text", "")[:90] for p in inside})[:3]
        print(f"   replay {w['name']}: {sum(alive)}/{len(alive)} periods alive {''.join('A' if a else '.' for a in alive)}"
              f"; e.g. {texts}")


def summarise(lines: list[str], windows: list[dict], header: dict) -> None:
    samples = [json.loads(line) for line in lines]
    for w in windows:
        inside = [s for s in samples if w["begin"] <= s["t"] <= w["end"]]
        g = [x["gpus"][0] for x in inside if x["gpus"]]
        if not g:
            print(f"   {w['name']}: no GPU readings")
            continue
        def med(key):
            vals = [x[key] for x in g if x.get(key) is not None]
            return (statistics.median(vals), min(vals), max(vals)) if vals else None
        power = [x["power_mw"] / 1000 for x in g if x.get("power_mw") is not None]
        pid = header["ranks"].get("TP0")
        rows = [[p for p in x["procs"] if p["pid"] == pid] for x in inside]
        pairs = [(a[0], b[0], y["t"] - x["t"]) for a, b, x, y in zip(rows, rows[1:], inside, inside[1:], strict=False)
                 if a and b]

        def rate(key):
            vals = [((b.get(key) or 0) - (a.get(key) or 0)) / dt for a, b, dt in pairs if dt > 0]
            return (round(statistics.median(vals), 1), round(max(vals), 1)) if vals else None
        print(f"   {w['name']} proc (median, max)/s: cpu_ticks {rate('cpu_ticks')} minflt {rate('minflt')} "
              f"rchar {rate('rchar')} syscalls {rate('syscalls')}; mem_util {med('mem_util')}")
        print(f"   {w['name']} ({w['expect']}, {w['end'] - w['begin']:.0f} s, {len(g)} readings): "
              f"power median {statistics.median(power):.0f} W p10 {sorted(power)[len(power)//10]:.0f} "
              f"sd {statistics.pstdev(power):.1f}; sm {med('sm_util')}; rx KB/s {med('pcie_rx_kbps')}; "
              f"tx KB/s {med('pcie_tx_kbps')}; procs {g[-1].get('processes')}")
    print("   gpus:", header.get("gpus"))


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for mode in sys.argv[2:] or list(NAMES):
        try:
            run(mode, out)
        except Exception as exc:  # one broken workload must not lose the others
            print(f"== {mode}: harness error {exc!r}")
        sys.stdout.flush()
