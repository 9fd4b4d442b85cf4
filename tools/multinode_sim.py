#!/usr/bin/env python3
"""A simulated SGLang server spread over nodes (`--nnodes 2 --tp 16`): one process per node, one
thread per rank, printing SGLang v0.5.9's start-up lines with the ranks' global labels (node 1:
TP8..TP15). The ranks of all nodes really wait for each other: after each phase every rank meets
the others at a barrier kept by node 0's process over TCP (`--dist-init-addr`), as NCCL's
collectives make them, so a rank that hangs holds up every rank of every node.

    node 0:  multinode_sim.py --node-rank 0 --nnodes 2 --tp 16 --dist-init-addr 10.250.0.1:5000
    node 1:  multinode_sim.py --node-rank 1 --nnodes 2 --tp 16 --dist-init-addr 10.250.0.1:5000 \
                 --hang TP12:cuda_graph_capture

A node's process joins only a rendezvous that has not begun its first phase yet (a restarted node
waits for its peers' restart, as torch's TCPStore would); when the rendezvous breaks, the ranks
waiting in it stay stuck, silent, as they would in NCCL until its timeout.
Node 0 prints the HTTP server's lines and "The server is fired up and ready to roll!" once every
rank finished its capture; the others print nothing more (SGLANG-LOGS §5). Test tool, not shipped.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time

PHASES = ("dist_init", "weight_load", "kv_cache_alloc", "cuda_graph_capture")
BEGIN = {
    "dist_init": "Init torch distributed begin.",
    "weight_load": "Load weight begin. avail mem=137.95 GB",
    "kv_cache_alloc": "Using KV cache dtype: torch.bfloat16",
    "cuda_graph_capture": "Capture cuda graph begin. This can take up to several minutes. avail mem=20.40 GB",
}
END = {
    "dist_init": "Init torch distributed ends. elapsed=1.93 s, mem usage=1.35 GB",
    "weight_load": "Load weight end. elapsed=50.71 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
                   "avail mem=120.43 GB, mem usage=17.54 GB.",
    "kv_cache_alloc": "Memory pool end. avail mem=20.61 GB",
    "cuda_graph_capture": "Capture cuda graph end. Time elapsed: 10.12 s. mem usage=1.17 GB. avail mem=19.21 GB.",
}
print_lock = threading.Lock()


def say(label: str | None, text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with print_lock:
        sys.stdout.write(f"[{stamp}{' ' + label if label else ''}] {text}\n")
        sys.stdout.flush()


class Rendezvous:
    """Node 0's barrier keeper: every rank of every node arrives at each phase's end; all go on once
    `world` ranks arrived. New ranks join only until the first barrier opened."""

    def __init__(self, address: tuple[str, int], world: int) -> None:
        self.world = world
        self.arrived: dict[str, list[socket.socket]] = {}
        self.sealed = False
        self.lock = threading.Lock()
        self.server = socket.create_server(address, reuse_port=False, backlog=64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("r")
        for line in reader:
            phase = line.strip()
            with self.lock:
                if self.sealed and phase == "join":
                    conn.sendall(b"sealed\n")
                    conn.close()
                    return
                if phase == "join":
                    conn.sendall(b"welcome\n")
                    continue
                waiting = self.arrived.setdefault(phase, [])
                waiting.append(conn)
                if len(waiting) == self.world:
                    self.sealed = True
                    for member in waiting:
                        member.sendall(b"go\n")


def connect(address: tuple[str, int]) -> socket.socket:
    """A rank's link to the rendezvous: retried until a rendezvous that still takes ranks answers."""
    while True:
        try:
            conn = socket.create_connection(address, timeout=5)
            conn.sendall(b"join\n")
            answer = conn.makefile("r").readline().strip()
            if answer == "welcome":
                conn.settimeout(None)
                return conn
            conn.close()
        except OSError:
            pass
        time.sleep(0.5)


def rank(label: str, address: tuple[str, int], step: float, hang: str | None, done: threading.Barrier) -> None:
    conn = None
    reader = None
    for phase in PHASES:
        say(label, BEGIN[phase])
        if phase == "dist_init":
            conn = connect(address)
            reader = conn.makefile("r")
        if phase == "kv_cache_alloc":
            say(label, "KV Cache is allocated. #tokens: 2600000, K size: 49.59 GB, V size: 49.59 GB")
        time.sleep(step)
        if hang == phase:
            while True:  # the hang: never leaves the phase
                time.sleep(3600)
        say(label, END[phase])
        assert conn is not None and reader is not None
        conn.sendall(f"{phase}\n".encode())
        if reader.readline().strip() != "go":
            while True:  # the rendezvous is gone (node 0 stopped): stuck, as NCCL is until its timeout
                time.sleep(3600)
    done.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="multinode_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("--node-rank", type=int, required=True)
    parser.add_argument("--nnodes", type=int, default=2)
    parser.add_argument("--tp", type=int, default=16)
    parser.add_argument("--dist-init-addr", required=True, metavar="HOST:PORT")
    parser.add_argument("--step", type=float, default=0.3, help="seconds each phase takes")
    parser.add_argument("--hang", action="append", default=[], metavar="TPn:PHASE")
    args = parser.parse_args(argv)
    host, _, port = args.dist_init_addr.rpartition(":")
    address = (host, int(port))
    per_node = args.tp // args.nnodes
    labels = [f"TP{args.node_rank * per_node + i}" for i in range(per_node)]
    hangs = dict(h.split(":", 1) for h in args.hang)
    say(None, f"server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size={args.tp}, dp_size=1, pp_size=1, "
              f"ep_size=1, nnodes={args.nnodes}, node_rank={args.node_rank}, dist_init_addr='{args.dist_init_addr}', "
              "host='0.0.0.0', port=30000, watchdog_timeout=300)")
    if args.node_rank == 0:
        Rendezvous(address, args.tp)
    done = threading.Barrier(per_node + 1)
    for label in labels:
        threading.Thread(target=rank, args=(label, address, args.step, hangs.get(label), done), daemon=True).start()
    done.wait()
    if args.node_rank == 0:
        say(None, "INFO:     Started server process [1]")
        say(None, "INFO:     Waiting for application startup.")
        say(None, "INFO:     Application startup complete.")
        say(None, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
        time.sleep(0.2)
        say(None, 'INFO:     127.0.0.1:51532 - "GET /model_info HTTP/1.1" 200 OK')
        say(labels[0], "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                       "#running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False")
        say(None, 'INFO:     127.0.0.1:51544 - "POST /generate HTTP/1.1" 200 OK')
        say(None, "The server is fired up and ready to roll!")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
