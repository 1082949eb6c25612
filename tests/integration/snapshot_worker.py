"""A trainer stand-in that takes snapshots through slurm_ft.worker, one command per line
on stdin, one answer per line on stdout (so a test drives real processes step by step):

    snap STEP [replicated]   -> "snap STEP True|False"
    run FIRST LAST           -> "ran LAST TAKEN": a snapshot of every step, back to back
    restore [mapped]         -> "restored STEP SOURCE WHOLE" or "restored None"
    kept                     -> "kept STEP WHOLE": the last restored state, read again now
    exit

The state of step S is a few tensors (``--mib`` MiB in all) filled with S, a non-contiguous
one, and small values naming the step; WHOLE says every tensor and value says the same step.
"""

from __future__ import annotations

import argparse
import sys

import torch

from slurm_ft import worker


def state_of(step: int, mib: float) -> dict[str, object]:
    n = max(1, int(mib * (1 << 20) / 14))  # 4 + 8 + 2 bytes an element: mib MiB in all
    return {
        "model": {
            "w": torch.full((n,), float(step)),
            "b": torch.full((n,), float(step), dtype=torch.float64),
        },
        "optim": {"state": {0: {"exp_avg": torch.full((n,), float(step)).to(torch.bfloat16)}}, "step": step},
        "strided": torch.full((8, 6), float(step)).t(),
        "note": f"step {step}",
    }


def whole(step: int, state: dict[str, object]) -> bool:
    model = state["model"]
    optim = state["optim"]
    assert isinstance(model, dict) and isinstance(optim, dict)
    tensors = [model["w"], model["b"], optim["state"][0]["exp_avg"], state["strided"]]
    return (
        all(bool((t == step).all()) for t in tensors)
        and optim["step"] == step
        and state["note"] == f"step {step}"
        and tuple(state["strided"].shape) == (6, 8)
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kept: worker.Restored | None = None
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "snap":
            step = int(words[1])
            taken = worker.snapshot(step, state_of(step, args.mib), replicated="replicated" in words[2:])
            print(f"snap {step} {taken}", flush=True)
        elif words[0] == "run":
            first, last = int(words[1]), int(words[2])
            taken = sum(worker.snapshot(s, state_of(s, args.mib)) for s in range(first, last + 1))
            print(f"ran {last} {taken}", flush=True)
        elif words[0] == "restore":
            got = kept = worker.restore_snapshot(mapped="mapped" in words[1:])
            if got is None:
                print("restored None", flush=True)
            else:
                print(
                    f"restored {got.step} {got.source.replace(' ', '-')} {whole(got.step, got.state)}",
                    flush=True,
                )
        elif words[0] == "kept" and kept is not None:
            print(f"kept {kept.step} {whole(kept.step, kept.state)}", flush=True)
        elif words[0] == "exit":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
