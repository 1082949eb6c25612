#!/usr/bin/env python3
"""A torch trainer that snapshots its state every step, for the snapshot tests.

Each rank trains its own small model with Adam (its state is its own shard: no
collectives, so a fault of one rank is all a test needs to stage). After every optimizer
step it logs the step and a hash of its parameters and optimizer state, then hands that
state to ``worker.snapshot``; on start it restores the newest snapshot (else its own disk
checkpoint, taken every ``--ckpt-every`` steps) and logs where it resumed from with the
hash of what it restored (each event with its time, for the report's test). The tests
compare that hash with the one logged at the step it resumed at. In the first cycle, a
chosen rank can be SIGKILLed or hang (it stops calling ``worker.heartbeat``) after a
chosen step; and in the cycles after it, one a cycle.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import time

import torch

from slurm_ft import worker


def _log(path: str, doc: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
    finally:
        os.close(fd)


def state_hash(model: torch.nn.Module, opt: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    for index, state in sorted(opt.state_dict()["state"].items()):
        for key, value in sorted(state.items()):
            h.update(f"{index}.{key}".encode())
            h.update(
                value.detach().contiguous().numpy().tobytes()
                if torch.is_tensor(value)
                else repr(value).encode()
            )
    return h.hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--fault", choices=("none", "kill", "hang"), default="none")
    # the first cycle's fault, or one a cycle ("--fault-rank 0,0,0 --fault-step 6,20,34")
    p.add_argument("--fault-rank", default="0")
    p.add_argument("--fault-step", default="5")
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="no rank starts step s+1 before every rank finished step s (as a synchronous trainer)",
    )
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    cycle = int(os.environ.get("SLURM_FT_CYCLE", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log = os.path.join(a.out, f"rank{rank}.jsonl")
    ckpt = os.path.join(a.out, f"ckpt-rank{rank}.pt")
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    torch.manual_seed(1000 + rank)
    model = torch.nn.Linear(a.width, a.width)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    ranks, steps = a.fault_rank.split(","), a.fault_step.split(",")
    faults = {r: (int(ranks[r]), int(steps[min(r, len(steps) - 1)])) for r in range(len(ranks))}
    step, source = 0, "none"
    restored = worker.restore_snapshot()
    if restored is not None:
        model.load_state_dict(restored.state["model"])  # type: ignore[arg-type]
        opt.load_state_dict(restored.state["opt"])  # type: ignore[arg-type]
        step, source = restored.step, restored.source
    elif os.path.exists(ckpt):
        doc = torch.load(ckpt, weights_only=False)
        model.load_state_dict(doc["model"])
        opt.load_state_dict(doc["opt"])
        step, source = doc["step"], "checkpoint"
    _log(
        log,
        {
            "event": "resume",
            "cycle": cycle,
            "source": source,
            "step": step,
            "hash": state_hash(model, opt),
            "time": time.time(),
        },
    )

    world = int(os.environ.get("WORLD_SIZE", "1"))

    def finished_step(done: int) -> None:
        with open(os.path.join(a.out, f"at-c{cycle}-r{rank}.tmp"), "w") as fh:
            fh.write(str(done))
        os.replace(fh.name, fh.name[: -len(".tmp")])

    def others_at(least: int) -> bool:
        for other in range(world):
            try:
                with open(os.path.join(a.out, f"at-c{cycle}-r{other}")) as fh:
                    if int(fh.read() or -1) < least:
                        return False
            except (OSError, ValueError):
                return False
        return True

    if a.lockstep:
        finished_step(step)
    while step < a.steps:
        while a.lockstep and not others_at(step):  # a collective: blocked on the slowest rank
            time.sleep(0.01)
        step += 1
        gen = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(16, a.width, generator=gen)
        loss = ((model(x) - x.flip(1)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        _log(
            log,
            {
                "event": "step",
                "cycle": cycle,
                "step": step,
                "hash": state_hash(model, opt),
                "time": time.time(),
            },
        )
        kept = worker.snapshot(step, {"model": model.state_dict(), "opt": opt.state_dict()})
        if not kept:
            _log(log, {"event": "refused", "cycle": cycle, "step": step})
        if step % a.ckpt_every == 0:
            torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        worker.heartbeat()
        if a.lockstep:
            finished_step(step)
        if faults.get(restart) == (rank, step) and a.fault != "none":
            _log(log, {"event": a.fault, "cycle": cycle, "step": step})
            if a.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            while True:  # hang: no heartbeat, no output
                time.sleep(1)
        time.sleep(a.step_time)
    _log(log, {"event": "done", "cycle": cycle, "step": step})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
