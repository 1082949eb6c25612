#!/usr/bin/env python3
"""A tiny real DDP training (gloo all-reduce) that checkpoints, resumes and can be broken.

Runs unchanged under torchrun and under slurm-ft-launch: it reads only the torchrun
environment. What the examples, templates, tests and benchmarks rely on:

* a checkpoint every ``--ckpt-every`` steps in ``--ckpt-dir`` (or ``$TRAIN_CKPT_DIR``):
  ``iter_0000010/model.pt`` plus Megatron's ``latest_checkpointed_iteration.txt``, which
  is replaced atomically (temp file, fsync, rename) so a reader never sees a torn number;
* on start it resumes from that file, so a restarted cycle continues where the last
  checkpoint left off;
* SIGTERM / SIGUSR1 / SIGUSR2 / SIGINT: every rank agrees (one all-reduce per step) to stop
  after the current step, rank 0 saves a checkpoint, and every rank exits 128+N;
* one line per step per rank on stdout, and one JSON line per rank at start
  (rank, ``TORCHELASTIC_RESTART_COUNT``, time, pid) in ``--starts-file`` (default
  ``<ckpt dir>/starts.jsonl``);
* crash injection: ``--crash-rank R`` with ``--crash-restart C`` (only in that restart) or
  without it (every cycle), at ``--crash-step`` (default: just after the first
  checkpoint of the run) or ``--crash-before-checkpoint`` (at the first step, before any
  checkpoint is written); ``--segv`` dies by SIGSEGV instead of exiting ``--exit-code``.
  The same switches are read from ``TRAIN_CRASH_RANK`` etc. so batch scripts can set them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import threading
import time

STARTED = time.time()


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt-dir", default=os.environ.get("TRAIN_CKPT_DIR"))
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "30")))
    p.add_argument("--ckpt-every", type=int, default=int(os.environ.get("TRAIN_CKPT_EVERY", "5")))
    p.add_argument("--step-time", type=float, default=float(os.environ.get("TRAIN_STEP_TIME", "0")))
    p.add_argument("--starts-file", default=os.environ.get("TRAIN_STARTS_FILE"))
    p.add_argument("--crash-rank", type=int, default=_env_int("TRAIN_CRASH_RANK"))
    p.add_argument("--crash-restart", type=int, default=_env_int("TRAIN_CRASH_RESTART"))
    p.add_argument("--crash-step", type=int, default=_env_int("TRAIN_CRASH_STEP"))
    p.add_argument(
        "--crash-before-checkpoint",
        action="store_true",
        default=os.environ.get("TRAIN_CRASH_BEFORE_CHECKPOINT") == "1",
    )
    p.add_argument("--segv", action="store_true", default=os.environ.get("TRAIN_SEGV") == "1")
    p.add_argument("--crash-raise", action="store_true", default=os.environ.get("TRAIN_CRASH_RAISE") == "1")
    p.add_argument("--exit-code", type=int, default=int(os.environ.get("TRAIN_EXIT_CODE", "7")))
    p.add_argument(
        "--term-grace",
        type=float,
        default=float(os.environ.get("TRAIN_TERM_GRACE", "3")),
        help="seconds to save and exit after a signal before exiting without saving",
    )
    return p.parse_args()


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def latest_iteration(ckpt_dir: str | None) -> int:
    if not ckpt_dir:
        return 0
    try:
        with open(os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 0


def start_grace_watchdog(grace: float) -> None:
    """Exit 128+N ``grace`` seconds after a signal even if the main thread never gets to
    save: it may be blocked inside a collective whose peer is gone, where a Python signal
    handler cannot run. The C-level handler writes the signal number to the wake-up fd at
    once, whatever the main thread is doing, and this thread is waiting on it."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def watch() -> None:
        data = os.read(r, 1)
        time.sleep(grace)
        os._exit(128 + (data[0] if data else int(signal.SIGTERM)))

    threading.Thread(target=watch, name="term-grace", daemon=True).start()


def main() -> int:
    a = parse()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    starts = a.starts_file or (os.path.join(a.ckpt_dir, "starts.jsonl") if a.ckpt_dir else None)
    if starts:
        os.makedirs(os.path.dirname(os.path.abspath(starts)), exist_ok=True)
        line = json.dumps(
            {
                "rank": rank,
                "restart": restart,
                "time": STARTED,
                "pid": os.getpid(),
                "cycle": os.environ.get("SLURM_FT_CYCLE"),
            }
        )
        fd = os.open(starts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (line + "\n").encode())
        os.close(fd)
    print(f"rank {rank}: start restart={restart} world={world} t={STARTED:.3f}", flush=True)

    stop_signal: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if not stop_signal:
            stop_signal.append(signum)

    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT):
        signal.signal(s, on_signal)
    start_grace_watchdog(a.term_grace)

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    start_step = latest_iteration(a.ckpt_dir)
    if start_step:
        state = torch.load(os.path.join(a.ckpt_dir, f"iter_{start_step:07d}", "model.pt"), weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        print(f"rank {rank}: resumed from iteration {start_step}", flush=True)

    def save(step: int) -> None:
        if a.ckpt_dir and rank == 0:
            d = os.path.join(a.ckpt_dir, f"iter_{step:07d}")
            os.makedirs(d, exist_ok=True)
            torch.save(
                {"model": model.module.state_dict(), "optim": opt.state_dict(), "step": step},
                os.path.join(d, "model.pt"),
            )
            write_atomic(os.path.join(a.ckpt_dir, "latest_checkpointed_iteration.txt"), f"{step}\n")
        dist.barrier()

    crash_here = a.crash_rank == rank and (a.crash_restart is None or a.crash_restart == restart)
    if a.crash_before_checkpoint:
        crash_step = start_step + 1
    elif a.crash_step is not None:
        crash_step = a.crash_step
    else:
        crash_step = (start_step // a.ckpt_every + 1) * a.ckpt_every + 1

    g = torch.Generator().manual_seed(1000 + rank)
    step = start_step
    flag = None
    while step < a.steps:
        step += 1
        x = torch.randn(32, 16, generator=g)
        y = x.sum(dim=1, keepdim=True) * 0.1
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP's gloo all-reduce of the gradients
        opt.step()
        if a.step_time:
            time.sleep(a.step_time)
        print(f"rank {rank}: step {step} loss {loss.item():.5f}", flush=True)
        if crash_here and step >= crash_step:
            print(f"rank {rank}: injected crash at step {step}", flush=True)
            if a.segv:
                signal.signal(signal.SIGSEGV, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSEGV)
            if a.crash_raise:
                raise RuntimeError(f"injected crash at step {step}")
            os._exit(a.exit_code)
        if step % a.ckpt_every == 0 or step == a.steps:
            save(step)
        flag = torch.tensor([1.0 if stop_signal else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            save(step)
            signum = stop_signal[0] if stop_signal else int(signal.SIGTERM)
            print(f"rank {rank}: stopping on {signal.Signals(signum).name} at step {step}", flush=True)
            code = 128 + signum
            break
    else:
        print(f"rank {rank}: finished at step {step}", flush=True)
        code = 0
    # The gloo group must not be destroyed by DDP's reducer: freed when ``model`` goes, it
    # holds the GIL while the group's destructor joins its worker threads, and a thread that
    # still holds the last collective's work needs the GIL to release its tensor (``flag``,
    # once this frame is gone): a finished rank then hangs for ever (pytorch#56297). So the
    # reducer goes first, while the group is still registered, then the group, while
    # ``flag`` is still alive.
    model = opt = None  # the reducer goes with the last reference to DDP
    gc.collect()
    dist.destroy_process_group()
    del flag
    return code


if __name__ == "__main__":
    # As a real training script would: torch's @record writes an uncaught exception to
    # TORCHELASTIC_ERROR_FILE (then re-raises), and the launcher reports it as the root cause.
    from torch.distributed.elastic.multiprocessing.errors import record

    code = record(main)()
    # DDP's hooks form reference cycles that would keep the gloo group alive until the
    # final collection at interpreter exit, where its threads, releasing their last
    # tensors, abort the process ("terminate called without an active exception", torch
    # 2.x): a finished rank would die of SIGABRT. Collect them while Python is alive.
    gc.collect()
    sys.exit(code)
