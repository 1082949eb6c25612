"""A DDP trainer (gloo, CPU) that keeps replicated snapshots through slurm_ft.worker and
logs, per rank as JSON lines in OUT/rankR.jsonl, the hash of its parameters and Adam
state after every step (``step``) and of the state it resumed from (``resume``, with its
source): a resume is the truth only when its hash is the one logged at that step.

``--crash-rank R --crash-after K``: in cycle 0, rank R exits 1 after its optimizer step of
step K, before that step's snapshot, so its node holds step K-1 while the others hold K:
only the launchers' plan (one step for every rank) keeps the next cycle from mixing them."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from slurm_ft import worker


def _log(path: str, doc: dict[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
    finally:
        os.close(fd)


def _hash(model: nn.Module, opt: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    for index, state in sorted(opt.state_dict()["state"].items()):
        for key, value in sorted(state.items()):
            raw = (
                value.detach().contiguous().numpy().tobytes()
                if torch.is_tensor(value)
                else repr(value).encode()
            )
            h.update(f"{index}.{key}".encode() + raw)
    return h.hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--sharded", action="store_true", help="each rank keeps a state of its own as well")
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-after", type=int, default=-1, help="in cycle 0, after this step's optimizer step")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    cycle = int(os.environ.get("SLURM_FT_CYCLE", "0"))
    log = os.path.join(a.out, f"rank{rank}.jsonl")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Linear(16, 16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    own = torch.zeros(16)  # a shard: what only this rank holds (the sum of its own inputs)
    step, source = 0, "none"
    restored = worker.restore_snapshot()
    if restored is not None:
        model.load_state_dict(restored.state["model"])  # type: ignore[arg-type]
        opt.load_state_dict(restored.state["opt"])  # type: ignore[arg-type]
        if a.sharded:
            own = restored.state["own"]  # type: ignore[assignment]
        step, source = restored.step, restored.source

    def digest() -> str:
        return _hash(model, opt) + (
            hashlib.sha256(own.numpy().tobytes()).hexdigest()[:8] if a.sharded else ""
        )

    _log(log, {"event": "resume", "cycle": cycle, "source": source, "step": step, "hash": digest()})
    ddp = DistributedDataParallel(model)
    while step < a.steps:
        step += 1
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step * 1000 + rank))
        loss = ((ddp(x) - x.flip(1)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        own = own + x.sum(0)
        if cycle == 0 and rank == a.crash_rank and step == a.crash_after:
            _log(log, {"event": "crash", "cycle": cycle, "step": step})
            os._exit(1)
        state = {"model": model.state_dict(), "opt": opt.state_dict(), **({"own": own} if a.sharded else {})}
        worker.snapshot(step, state, replicated=not a.sharded)
        _log(log, {"event": "step", "cycle": cycle, "step": step, "hash": digest()})
        worker.heartbeat()
        time.sleep(a.step_time)
    _log(log, {"event": "done", "cycle": cycle, "step": step})
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
