"""Silent GPU workloads in the shapes of a server's start-up phases, for `phasewatch vitals record`.

    python3 workloads.py MODE --marks FILE [--dir DIR]

Each prints nothing and appends its labelled windows to FILE as JSON lines
({"name", "expect", "begin", "end"}; a hang's end is null: the harness kills it and closes it).
Modes: weight-load (safetensors, page cache dropped), capture-small (CUDA graphs of a small model),
decode-small (a batch-1 decode loop of a small model: a warm-up's shape), jit-nvrtc (cupy RawKernels
compiled in-process: no compiler children), torch-compile (inductor, default mode), wait-kernel
(a kernel spinning on a flag), python-hang (a CUDA context, the host thread blocked on a lock);
host-poll-wait (kernels polling a flag in mapped host memory, as NCCL's network transport waits),
python-spin (a Python busy loop after GPU work), launch-bound (graphs of tiny ops), slow-load (a
cold file at 30 MB/s through pinned memory), host-warmup (tokenizer-like Python between small steps).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time


def mark(path: str, name: str, expect: str, begin: float, end: float | None) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps({"name": name, "expect": expect, "begin": begin, "end": end}) + "\n")


def model(hidden: int, layers: int):
    import torch
    blocks = [torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                  torch.nn.Linear(4 * hidden, hidden)) for _ in range(layers)]
    return torch.nn.Sequential(*blocks).cuda().half().eval()


def weight_load(args: argparse.Namespace) -> None:
    import torch
    shards = []
    try:
        from safetensors.torch import safe_open, save_file  # type: ignore[attr-defined]
        fmt = "safetensors"
    except ImportError:
        fmt = "torch"
    for s in range(args.shards):
        path = os.path.join(args.dir, f"shard{s}.{fmt}")
        tensors = {f"w{s}_{i}": torch.full((4096, 8192), float(i), dtype=torch.float16) for i in range(args.tensors)}
        if fmt == "safetensors":
            save_file(tensors, path)
        else:
            torch.save(tensors, path)
        shards.append(path)
    for path in shards:  # drop them from the page cache: a cold load
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:  # root only; fadvise did what it could
            handle.write("3\n")
    except OSError:
        pass
    torch.cuda.init()
    time.sleep(3)
    begin = time.time()
    kept = []
    for path in shards:
        if fmt == "safetensors":
            from safetensors import safe_open as so
            with so(path, framework="pt", device="cpu") as f:
                for key in f.keys():
                    kept.append(f.get_tensor(key).to("cuda"))
        else:
            for t in torch.load(path, mmap=True).values():
                kept.append(t.to("cuda"))
    torch.cuda.synchronize()
    mark(args.marks, f"weight_load_{fmt}", "progress", begin, time.time())
    time.sleep(3)


def capture_small(args: argparse.Namespace) -> None:
    import torch
    net = model(1024, 8)
    pool = torch.cuda.graph_pool_handle()
    time.sleep(2)
    begin = time.time()
    graphs = []
    with torch.no_grad():
        while time.time() - begin < args.seconds:
            for bs in range(256, 0, -8):
                x = torch.randn(bs, 1024, device="cuda", dtype=torch.float16)
                for _ in range(2):
                    net(x)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    net(x)
                graphs.append(g)
                if time.time() - begin >= args.seconds:
                    break
            graphs = graphs[-40:]
    torch.cuda.synchronize()
    mark(args.marks, "cuda_graph_capture_small", "progress", begin, time.time())
    time.sleep(2)


def decode_small(args: argparse.Namespace) -> None:
    import torch
    net = model(2048, 16)
    time.sleep(2)
    begin = time.time()
    with torch.no_grad():
        x = torch.randn(1, 2048, device="cuda", dtype=torch.float16)
        while time.time() - begin < args.seconds:
            for _ in range(32):
                x = net(x).tanh()
            x.sum().item()  # the host waits for each step, as a decode loop does
    mark(args.marks, "warmup_decode_batch1", "progress", begin, time.time())
    time.sleep(2)


def jit_nvrtc(args: argparse.Namespace) -> None:
    import cupy as cp
    cp.zeros(1)
    time.sleep(2)
    begin = time.time()
    n = 0
    while time.time() - begin < args.seconds:
        body = "\n".join(f"  acc = acc * {n + 1}.{i}f + sinf(acc + {i}.0f);" for i in range(200))
        source = f'extern "C" __global__ void k{n}(float* o) {{ float acc = o[threadIdx.x];\n{body}\n  o[threadIdx.x] = acc; }}'
        kernel = cp.RawKernel(source, f"k{n}")
        kernel.compile()
        n += 1
    mark(args.marks, "jit_compile_nvrtc", "progress", begin, time.time())
    time.sleep(2)


def torch_compile(args: argparse.Namespace) -> None:
    import torch
    begin = time.time()
    sizes = iter(range(64, 100000, 64))
    with torch.no_grad():
        while time.time() - begin < args.seconds:
            hidden = next(sizes)
            net = model(hidden, 3)
            compiled = torch.compile(net, dynamic=False)
            compiled(torch.randn(8, hidden, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
    mark(args.marks, "jit_compile_inductor", "progress", begin, time.time())
    time.sleep(2)


def wait_kernel(args: argparse.Namespace) -> None:
    import cupy as cp
    spin = cp.RawKernel(r'''extern "C" __global__ void spin(volatile int* flag) { while (*flag == 0) { } }''', "spin")
    flag = cp.zeros(1, dtype=cp.int32)
    work = cp.random.rand(4096, 4096, dtype=cp.float32)
    for _ in range(20):
        work = work @ work / 4096  # some real work first: the hang comes after it
    cp.cuda.Device().synchronize()
    begin = time.time()
    mark(args.marks, "hang_wait_kernel", "no_progress", begin, None)
    spin((132,), (32,), (flag,))
    cp.cuda.Device().synchronize()  # never returns


def python_hang(args: argparse.Namespace) -> None:
    import torch
    net = model(4096, 8)
    with torch.no_grad():
        for _ in range(50):
            net(torch.randn(64, 4096, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
    begin = time.time()
    mark(args.marks, "hang_python_lock", "no_progress", begin, None)
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # blocks forever


POLL_KERNELS = {  # (blocks, threads, body): a warp per NCCL channel polling, every SM polling, a backing-off poller
    "few": (8, 32, "while (*flag == 0) { }"),
    "many": (132, 32, "while (*flag == 0) { }"),
    "nanosleep": (16, 32, "while (*flag == 0) { __nanosleep(1000); }"),
}


def host_poll_wait(args: argparse.Namespace) -> None:
    """A wait that polls host memory, as NCCL's network transport waits for a peer on another node:
    the flag lives in pinned, mapped host memory (cudaHostAllocMapped; with unified addressing the
    host pointer is valid on the device), so every poll crosses PCIe. The host thread polls the stream
    in a loop meanwhile (as NCCL's proxy thread polls the network). Each variant ends when the host
    writes the flag."""
    import ctypes

    import cupy as cp
    import numpy as np
    work = cp.random.rand(4096, 4096, dtype=cp.float32)
    begin = time.time()
    while time.time() - begin < 10:
        for _ in range(50):
            work = work @ work / 4096  # real work first: the wait comes after it
        cp.cuda.Device().synchronize()
    mark(args.marks, "work_before_wait", "progress", begin, time.time())
    pointer = cp.cuda.runtime.hostAlloc(4096, 2)  # cudaHostAllocMapped
    flag = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int32)), shape=(1,))
    get = getattr(cp.cuda.runtime, "hostGetDevicePointer", None)
    device = np.uint64(get(pointer, 0) if get is not None else pointer)  # unified addressing: the same
    stream = cp.cuda.Stream(non_blocking=True)
    for name in args.variants.split(","):
        blocks, threads, body = POLL_KERNELS[name]
        kernel = cp.RawKernel(f'extern "C" __global__ void poll(volatile int* flag) {{ {body} }}', "poll")
        kernel.compile()
        flag[0] = 0
        time.sleep(2)
        begin = time.time()
        with stream:
            kernel((blocks,), (threads,), (device,))
        while time.time() - begin < args.seconds and not stream.done:
            pass
        end = time.time()
        flag[0] = 1
        stream.synchronize()
        mark(args.marks, f"hang_poll_host_{name}", "no_progress", begin, end)
    time.sleep(2)


def python_spin(args: argparse.Namespace) -> None:
    """A rank spinning in host code after its GPU did work: a counting loop, then a loop polling an
    empty queue (a livelock's shape). No syscalls, no faults, no reads, the GPU idle, its memory held."""
    import queue

    import torch
    net = model(4096, 8)
    begin = time.time()
    with torch.no_grad():
        while time.time() - begin < 10:
            for _ in range(50):
                net(torch.randn(64, 4096, device="cuda", dtype=torch.float16))
            torch.cuda.synchronize()
    mark(args.marks, "work_before_spin", "progress", begin, time.time())
    time.sleep(1)
    begin = time.time()
    n = 0
    while time.time() - begin < args.seconds:
        n += 1
    mark(args.marks, "hang_python_spin_count", "no_progress", begin, time.time())
    inbox: queue.Queue[int] = queue.Queue()
    begin = time.time()
    while time.time() - begin < args.seconds:
        try:
            inbox.get_nowait()
        except queue.Empty:
            pass
    mark(args.marks, "hang_python_spin_queue", "no_progress", begin, time.time())
    time.sleep(2)


def launch_bound(args: argparse.Namespace) -> None:
    """A launch-bound capture: graphs of hundreds of tiny ops (as a small model's decode graphs at many
    batch sizes), each size warmed up eagerly twice (the GPU waits for the launches), then captured and
    replayed."""
    import torch
    weights = [torch.randn(64, 64, device="cuda", dtype=torch.float16) for _ in range(8)]

    def tiny(x):
        for i in range(300):
            x = torch.relu(x * 1.0001 + 0.001) if i % 8 else x @ weights[i // 8 % 8]
        return x

    pool = torch.cuda.graph_pool_handle()
    time.sleep(2)
    begin = time.time()
    graphs = []
    with torch.no_grad():
        while time.time() - begin < args.seconds:
            for bs in range(512, 0, -4):
                x = torch.randn(bs, 64, device="cuda", dtype=torch.float16)
                for _ in range(2):
                    tiny(x)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    tiny(x)
                g.replay()
                graphs.append(g)
                if time.time() - begin >= args.seconds:
                    break
            graphs = graphs[-64:]
    torch.cuda.synchronize()
    mark(args.marks, "launch_bound_capture", "progress", begin, time.time())
    time.sleep(2)


def slow_load(args: argparse.Namespace) -> None:
    """Weights from slow storage: a cold file read in 4 MiB chunks at about 30 MB/s into pinned memory,
    each chunk copied to the GPU (steady PCIe at the GPU's floor, no kernel)."""
    import torch
    path = os.path.join(args.dir, "slow-weights.bin")
    size = 2 * 1024 ** 3
    with open(path, "wb") as handle:
        block = os.urandom(16 * 1024 * 1024)
        for _ in range(size // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    chunk = 4 * 1024 * 1024
    pinned = torch.empty(chunk, dtype=torch.uint8).pin_memory()
    on_gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
    time.sleep(2)
    begin = time.time()
    offset = 0
    with open(path, "rb", buffering=0) as handle:
        while time.time() - begin < args.seconds and offset < size:
            handle.readinto(memoryview(pinned.numpy()))
            on_gpu[offset:offset + chunk].copy_(pinned, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            offset += chunk
            time.sleep(max(begin + offset / 30e6 - time.time(), 0))
    mark(args.marks, "weight_load_slow_storage", "progress", begin, time.time())
    os.unlink(path)
    time.sleep(2)


def host_warmup(args: argparse.Namespace) -> None:
    """A host-heavy warm-up: tokenizer-like pure-Python work (split, normalise, look up ids) between
    small GPU steps (embed the ids, a few small layers, .item())."""
    import random

    import torch
    words = [f"w{i}x{i * 7 % 13}" for i in range(50000)]
    vocab = {w: i for i, w in enumerate(words)}
    embed = torch.randn(len(words), 512, device="cuda", dtype=torch.float16)
    net = model(512, 2)
    rng = random.Random(1)
    time.sleep(2)
    begin = time.time()
    with torch.no_grad():
        while time.time() - begin < args.seconds:
            text = " ".join(rng.choice(words) for _ in range(40000))
            ids = [vocab.get(w.lower().strip(".,"), 0) for w in text.split()]
            x = embed[torch.tensor(ids[:4096], device="cuda")]
            net(x).sum().item()
    mark(args.marks, "warmup_host_heavy", "progress", begin, time.time())
    time.sleep(2)


MODES = {"weight-load": weight_load, "capture-small": capture_small, "decode-small": decode_small,
         "jit-nvrtc": jit_nvrtc, "torch-compile": torch_compile, "wait-kernel": wait_kernel,
         "python-hang": python_hang, "host-poll-wait": host_poll_wait, "python-spin": python_spin,
         "launch-bound": launch_bound, "slow-load": slow_load, "host-warmup": host_warmup}

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--marks", required=True)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--seconds", type=float, default=35)
    parser.add_argument("--shards", type=int, default=14)
    parser.add_argument("--variants", default="few,many,nanosleep")  # host-poll-wait
    parser.add_argument("--tensors", type=int, default=24)  # 24 x 64 MiB = 1.5 GiB a shard
    MODES[parser.parse_args().mode](parser.parse_args())
