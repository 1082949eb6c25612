"""The goodput benchmark's trainer: gloo DDP at a fixed pace, checkpoints, resume, a step log.

The same script runs under slurm-ft and under torchrun, so what differs is the launcher.
Every step is a real DDP step (forward, backward, gradient all-reduce) padded to
``--step-time`` so the undisturbed pace does not depend on the load of the machine. Rank 0
saves ``CKPT/step_<N>/state.pt`` every ``--ckpt-every`` steps (written under a temporary
name, then renamed: a ``checkpoint-dir:`` progress source sees whole checkpoints only), and
logs every step to ``--step-log`` (``{"t", "step", "pid"}``: a new pid is a restart). A new
run resumes from the newest checkpoint; the steps after it are done again. Every rank
writes where it runs to ``--pids DIR/<node>.rank<R>.json`` (its pid, its parent's —
torchrun's agent — and their start ticks), which is how the benchmark aims faults at a
torchrun job, that keeps no records of its own. ``slurm_ft.worker`` heart-beats are no-ops outside slurm-ft.

With ``--snapshot-every N`` every rank hands its state to ``worker.snapshot`` every N steps
(replicated: the node keeps one copy) and resumes from the newest snapshot when it is newer
than the newest checkpoint. The ranks agree on one step, the newest any of them holds (a
node may hold one step more than another, a spare that replaced a lost node none), and
the state is broadcast from a rank that holds it: it is replicated, so one copy is all.

With ``--sharded`` each rank also keeps a state of its own, as ZeRO's optimizer shards do:
the momentum of its slice of the flattened gradient (hand-sharded: rank R owns the R-th of
W equal slices). Its snapshots are per rank (``replicated=False``, for a launcher with
``--snapshot-replicas 1``) and its checkpoint holds every rank's shard
(``step_<N>/shard_<R>.pt`` beside ``state.pt``, written before rank 0 renames the
directory). A resume from snapshots needs every rank's snapshot of one step (the launcher
plans that step); ranks that disagree resume from the checkpoint, and say so.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import re
import socket
import sys
import time

import torch
import torch.distributed as dist

from slurm_ft import procident, worker

_STEP = re.compile(r"step_(\d+)")


def newest(ckpt: str) -> int:
    try:
        names = os.listdir(ckpt)
    except FileNotFoundError:
        return 0
    return max((int(m.group(1)) for n in names if (m := _STEP.fullmatch(n))), default=0)


def save(ckpt: str, step: int, state: dict[str, object] | None, shard: torch.Tensor | None = None) -> None:
    """Every rank's shard first (each rank calls this; a barrier between), then rank 0's
    state and the rename (``state`` None on the other ranks)."""
    tmp = os.path.join(ckpt, f".tmp-step_{step}")
    os.makedirs(tmp, exist_ok=True)
    if shard is not None:
        torch.save(shard, os.path.join(tmp, f"shard_{dist.get_rank()}.pt"))
        dist.barrier()
    if state is not None:
        torch.save(state, os.path.join(tmp, "state.pt"))
        os.replace(tmp, os.path.join(ckpt, f"step_{step}"))


def whole(module: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> dict[str, object]:
    return {"model": module.state_dict(), "opt": opt.state_dict(), "step": step}


class Shard:
    """This rank's own state: the momentum of its slice of the flattened gradient."""

    def __init__(self, model: torch.nn.Module, rank: int, world: int) -> None:
        numel = sum(p.numel() for p in model.parameters())
        size = -(-numel // world)
        self.begin, self.end = rank * size, min(numel, (rank + 1) * size)
        self.momentum = torch.zeros(self.end - self.begin)
        self.model = model

    def update(self) -> None:
        grads = torch.cat([p.grad.reshape(-1) for p in self.model.parameters() if p.grad is not None])
        self.momentum.mul_(0.9).add_(grads[self.begin : self.end])


def note_pids(directory: str, rank: int, local_rank: int) -> None:
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    pid, ppid = os.getpid(), os.getppid()
    doc = {
        "node": node,
        "rank": rank,
        "local_rank": local_rank,
        "pid": pid,
        "start_ticks": procident.start_ticks(pid),
        "agent_pid": ppid,
        "agent_start_ticks": procident.start_ticks(ppid),
        "group_rank": int(os.environ.get("GROUP_RANK", "0")),
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "attempt": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
        "time": time.time(),
    }
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{node}.rank{rank}.tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, os.path.join(directory, f"{node}.rank{rank}.json"))


def resume_from_snapshot(
    module: torch.nn.Module, opt: torch.optim.Optimizer, step: int, source: str
) -> tuple[int, str]:
    """The newest snapshot any rank holds when it is newer than the checkpoint, on every
    rank: the state is replicated (DDP), so one rank's copy is everyone's, broadcast from
    it (a node that replaced a lost one holds none of its own)."""
    restored = worker.restore_snapshot()
    use = restored is not None and restored.step > step
    mine = restored.step if restored is not None and use else step
    steps: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(steps, mine)
    agreed = max(steps)
    holder = steps.index(agreed)
    if restored is not None and use and mine == agreed:
        module.load_state_dict(restored.state["model"])  # type: ignore[arg-type]
        opt.load_state_dict(restored.state["opt"])  # type: ignore[arg-type]
        source = restored.source
    elif agreed > step:
        source = f"the snapshot of rank {holder}"
    if agreed > min(steps):
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=holder)
        opt_state = [opt.state_dict()]
        dist.broadcast_object_list(opt_state, src=holder)
        opt.load_state_dict(opt_state[0])
    return agreed, source


def resume_sharded(
    module: torch.nn.Module, opt: torch.optim.Optimizer, shard: Shard, step: int, source: str
) -> tuple[int, str]:
    """Every rank's own snapshot when all of them hold one of the same step, newer than
    the checkpoint; else the checkpoint, on every rank (a mix of steps is never trained)."""
    restored = worker.restore_snapshot()
    mine = restored.step if restored is not None and restored.step > step else -1
    steps: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(steps, mine)
    if restored is None or mine < 0 or set(steps) != {mine}:
        if any(s >= 0 for s in steps):
            print(f"rank {dist.get_rank()}: the ranks' snapshots are of steps {steps}: not used", flush=True)
        return step, source
    module.load_state_dict(restored.state["model"])  # type: ignore[arg-type]
    opt.load_state_dict(restored.state["opt"])  # type: ignore[arg-type]
    shard.momentum = restored.state["own"]  # type: ignore[assignment]
    return mine, restored.source


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--step-log", required=True)
    p.add_argument("--pids", required=True)
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--pg-timeout", type=float, default=60.0)
    p.add_argument("--snapshot-every", type=int, default=0, help="steps between snapshots (0: none)")
    p.add_argument("--sharded", action="store_true", help="each rank keeps a state of its own too")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
    rank = dist.get_rank()
    note_pids(a.pids, rank, int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    shard = Shard(model.module, rank, dist.get_world_size()) if a.sharded else None
    step = newest(a.ckpt)
    if step:
        state = torch.load(os.path.join(a.ckpt, f"step_{step}", "state.pt"), weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        if shard is not None:
            shard.momentum = torch.load(os.path.join(a.ckpt, f"step_{step}", f"shard_{rank}.pt"))
    source = "checkpoint" if step else "nothing"
    if a.snapshot_every and shard is not None:
        step, source = resume_sharded(model.module, opt, shard, step, source)
    elif a.snapshot_every:
        step, source = resume_from_snapshot(model.module, opt, step, source)
    print(f"rank {rank}: resumed from {source} at step {step}", flush=True)
    x, y = torch.randn(64, 256), torch.randn(64, 1)
    log = open(a.step_log, "a") if rank == 0 else None  # noqa: SIM115 (open for the whole run)
    pid = os.getpid()  # in every line: a new process is a restart, however quick
    next_tick = time.monotonic()
    while True:
        next_tick += a.step_time
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
        if shard is not None:
            shard.update()
        if a.snapshot_every and step % a.snapshot_every == 0:
            state = {"model": model.module.state_dict(), "opt": opt.state_dict()}
            if shard is not None:
                worker.snapshot(step, {**state, "own": shard.momentum})
            else:
                worker.snapshot(step, state, replicated=True)
        worker.heartbeat()
        if log is not None:
            log.write(json.dumps({"t": time.time(), "step": step, "pid": pid}) + "\n")
            log.flush()
        if step % a.ckpt_every == 0 and (log is not None or shard is not None):
            save(
                a.ckpt,
                step,
                whole(model.module, opt, step) if log is not None else None,
                shard.momentum if shard else None,
            )
        if worker.stop_requested():  # a forwarded SIGUSR1/SIGTERM (slurm-ft): save, then leave
            if log is not None and shard is None:  # sharded: the ranks may be stopped apart
                save(a.ckpt, step, whole(model.module, opt, step))
            print(f"rank {rank}: stop requested at step {step}", flush=True)
            return 143
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_tick = time.monotonic()  # late (a restart's first steps): no catching up


if __name__ == "__main__":
    code = main()
    gc.collect()
    sys.exit(code)
