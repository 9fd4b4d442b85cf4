"""A one-rank NCCL communicator (two: the default group and a subgroup) that stays up until told to
stop: `comm.py READY_FILE STOP_FILE` (tools/ras_device/ask.py runs it)."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

ready, stop = sys.argv[1], sys.argv[2]
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1,
                        device_id=torch.device("cuda:0"))
x = torch.ones(1 << 20, device="cuda")
for _ in range(5):
    dist.all_reduce(x)
sub = dist.new_group([0])
for _ in range(3):
    dist.all_reduce(x, group=sub)
dist.broadcast(x, 0)
torch.cuda.synchronize()
print("nccl", torch.cuda.nccl.version(), "torch", torch.__version__, "sum", float(x[0]), flush=True)
with open(ready, "w") as handle:
    handle.write(str(os.getpid()))
began = time.time()
while not os.path.exists(stop) and time.time() - began < 120:
    time.sleep(0.1)
dist.destroy_process_group()
