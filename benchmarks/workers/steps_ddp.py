"""Steps-after-a-restart worker: a gloo DDP trainer whose steps take real CPU, for the
standbys' share of the CPU (``benchmarks.standby_share``).

Each rank prints a line once its process group is up (what opens the launcher's gate for
the next cycle's standbys, as a trainer's first log line does), then steps. It stamps its
start and its ``BENCH_STEPS``-th step per cycle. In the first cycle the victim rank dies
once the launcher's standbys are ready (``BENCH_READY_LOGS``/``BENCH_READY_COUNT``, as in
``warm_ddp``), the others step until stopped; in the second cycle every rank stops after
that step.
"""

import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from warm_ddp import ready  # noqa: E402

WIDTH, BATCH = 1024, 256


def main() -> int:
    directory = os.environ["BENCH_STAMPS"]
    rank = int(os.environ["RANK"])
    victim = int(os.environ.get("BENCH_VICTIM_RANK", "1"))
    steps = int(os.environ.get("BENCH_STEPS", "20"))
    cycle = int(os.environ["SLURM_FT_CYCLE"])
    stamps.write(directory, f"start-c{cycle}-r{rank}", STARTED)
    dist.init_process_group("gloo")
    print(f"rank {rank}: process group up", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        ddp(torch.randn(BATCH, WIDTH)).sum().backward()
        opt.step()
    stamps.write(directory, f"steps-c{cycle}-r{rank}", time.time())
    if cycle > 0:
        dist.barrier()
        del ddp, opt, model
        dist.destroy_process_group()
        return 0
    if rank == victim:
        logs = [p for p in os.environ.get("BENCH_READY_LOGS", "").split(",") if p]
        count = int(os.environ.get("BENCH_READY_COUNT", "0"))
        deadline = time.monotonic() + 120
        while not ready(logs, count):
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.05)
        time.sleep(0.5)  # the launcher back in its watch loop
        stamps.write(directory, f"death-c0-r{rank}", time.time())
        os._exit(1)
    while True:  # stopped by the launcher once the victim died
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
