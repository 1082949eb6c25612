"""Time-to-first-step worker: a gloo DDP trainer that imports torch, checkpoints and resumes.

The first statement takes the start stamp; then torch is imported, the process group is
initialised, the checkpoint loaded and one DDP step (forward, backward, gradient
all-reduce, optimiser) is run. Each rank leaves stamps per cycle: ``start``, ``pg`` (seconds
its process-group init took), ``load`` (seconds its checkpoint load took), ``step`` (when
its first step finished). In the first cycle rank 0 saves the checkpoint, and the victim
rank dies once the launchers' standbys are ready (``BENCH_READY_LOGS``: launcher logs that
must each say ``ready in`` ``BENCH_READY_COUNT`` times; unset: at once), leaving a
``death`` stamp. The other ranks keep stepping until they are stopped.
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

WIDTH = 512  # 1 M parameters: a 4 MB checkpoint


def ready(logs: list[str], count: int) -> bool:
    for path in logs:
        try:
            with open(path) as fh:
                if fh.read().count("ready in") < count:
                    return False
        except OSError:
            return False
    return True


def main() -> int:
    directory = os.environ["BENCH_STAMPS"]
    rank = int(os.environ["RANK"])
    victim = int(os.environ.get("BENCH_VICTIM_RANK", "3"))
    cycle = sum(1 for n in os.listdir(directory) if n.startswith("start-") and n.endswith(f"-r{rank}"))
    stamps.write(directory, f"start-c{cycle}-r{rank}", STARTED)
    t0 = time.time()
    dist.init_process_group("gloo")
    t1 = time.time()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
    ckpt = os.path.join(os.environ["BENCH_CKPT"], "ckpt.pt")
    if os.path.exists(ckpt):
        model.load_state_dict(torch.load(ckpt))
    t2 = time.time()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        ddp(torch.randn(32, WIDTH)).sum().backward()
        opt.step()

    step()
    stamps.write(directory, f"step-c{cycle}-r{rank}", time.time())
    stamps.write(directory, f"pg-c{cycle}-r{rank}", t1 - t0)
    stamps.write(directory, f"load-c{cycle}-r{rank}", t2 - t1)
    if cycle > 0:
        dist.barrier()
        dist.destroy_process_group()
        return 0
    if rank == 0:
        tmp = ckpt + ".tmp"
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, ckpt)
    if rank == victim:
        logs = [p for p in os.environ.get("BENCH_READY_LOGS", "").split(",") if p]
        count = int(os.environ.get("BENCH_READY_COUNT", "0"))
        deadline = time.monotonic() + 120
        while not (os.path.exists(ckpt) and ready(logs, count)):
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.05)
        time.sleep(0.5)  # every launcher back in its watch loop
        stamps.write(directory, f"death-c0-r{rank}", time.time())
        os._exit(1)
    while True:  # stopped by the launcher once the victim died
        try:
            step()
        except Exception:
            time.sleep(0.1)
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
