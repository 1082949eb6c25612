"""Launcher-CPU worker: a small DDP (gloo) training loop for a fixed time.

Logs a line every 20 steps like a real training script, so the launcher has some output
to carry. Rank 0 records when steady training starts and ends so the harness can read
the launcher's CPU over exactly that window.
"""

import gc
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps


def main() -> int:
    seconds = float(os.environ.get("BENCH_TRAIN_SECONDS", "60"))
    directory = os.environ["BENCH_STAMPS"]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def step() -> float:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    step()
    dist.barrier()
    start = time.time()
    if rank == 0:
        stamps.write(directory, "train-start", start)
    n = 0
    while True:
        loss = step()
        n += 1
        if n % 20 == 0:
            print(f"step {n} loss {loss:.4f}", flush=True)
        # Every rank must take the same number of steps: rank 0 decides when to stop.
        flag = torch.tensor([1 if rank == 0 and time.time() - start >= seconds else 0])
        if n % 20 == 0:
            dist.all_reduce(flag)
            if flag.item():
                break
        time.sleep(0.005)
    dist.barrier()
    if rank == 0:
        stamps.write(directory, "train-end", time.time())
    # DDP's reducer must not be the one to destroy the gloo group, and ``flag`` must outlive
    # the group: else a finished rank can hang for ever (see scripts/examples/train_ddp.py)
    model = opt = None
    gc.collect()
    dist.destroy_process_group()
    del flag
    return 0


if __name__ == "__main__":
    code = main()
    gc.collect()  # free DDP's cycles (and the gloo group) before exit: see scripts/examples/train_ddp.py
    sys.exit(code)
