"""Checkpoints written by real torch, read by the guard: the two layouts torch itself makes.

* ``torch.save`` of one snapshot overwritten in place (the PyTorch DDP tutorial's
  ``snapshot.pt``): a ``file:`` source;
* ``torch.distributed.checkpoint.save`` into one directory per step: a ``checkpoint-dir:``
  source, complete once the writer has renamed ``.metadata`` into place.

Kept few: importing torch costs seconds on the shared machine. torch runs in one helper
process per test (never in the pytest process), as a trainer would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_ft.config import ProgressSettings
from slurm_ft.progress import ProgressTracker
from slurm_ft.statedir import StateDir

pytestmark = [pytest.mark.torch, pytest.mark.timeout(120)]

TRAINER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import torch
    from torch import nn
    import torch.distributed.checkpoint as dcp

    mode, target = sys.argv[1], Path(sys.argv[2])
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for line in sys.stdin:  # one command per cycle boundary, answered with "ok"
        cmd, arg = line.split()
        epoch = int(arg)
        model.weight.data.add_(0.01)
        if cmd == "save" and mode == "snapshot":
            torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch}, target)
        elif cmd == "save" and mode == "dcp":
            state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": epoch}
            dcp.save(state, checkpoint_id=str(target / f"step-{epoch}"))
        print("ok", flush=True)
    """
)


class Trainer:
    """A torch process that saves when told to, so cycles can be interleaved with the guard."""

    def __init__(self, mode: str, target: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER, mode, str(target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def do(self, command: str, epoch: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command} {epoch}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "ok\n"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def run_cycles(tracker: ProgressTracker, trainer: Trainer, plan: list[str]) -> list[str | None]:
    """One cycle per plan entry: 'save' checkpoints during the cycle, 'skip' does not."""
    reasons: list[str | None] = []
    for cycle, command in enumerate(plan):
        reasons.append(tracker.before_cycle(cycle))
        if reasons[-1]:
            break
        trainer.do(command, 10 * (cycle + 1))
        tracker.begin_reading()
        tracker.after_cycle(cycle, "worker-failed")
    else:
        reasons.append(tracker.before_cycle(len(plan)))
    return reasons


def test_a_torch_save_snapshot_overwritten_in_place(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.pt"
    settings = ProgressSettings(source=f"file:{snapshot}", max_no_progress_cycles=2)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    trainer = Trainer("snapshot", snapshot)
    try:
        reasons = run_cycles(tracker, trainer, ["save", "save", "skip", "skip"])
    finally:
        trainer.close()
    assert [c.progressed for c in tracker.ledger.cycles] == [True, True, False, False]
    assert reasons == [
        None,
        None,
        None,
        None,
        f"no progress in the last 2 cycles (file:{snapshot} not replaced)",
    ]


def test_torch_distributed_checkpoint_step_directories(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    settings = ProgressSettings(source=f"checkpoint-dir:{ckpt}", max_no_progress_cycles=1)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    trainer = Trainer("dcp", ckpt)
    try:
        reasons = run_cycles(tracker, trainer, ["save", "save"])
        assert reasons == [None, None, None]
        assert [(c.iteration_start, c.iteration_end) for c in tracker.ledger.cycles[:2]] == [
            (0, 10),
            (10, 20),
        ]
        # A save cut short before its metadata was renamed into place does not count.
        trainer.do("save", 30)
        (ckpt / "step-30" / ".metadata").rename(ckpt / "step-30" / ".metadata.tmp")
    finally:
        trainer.close()
    assert any(p.suffix == ".distcp" for p in (ckpt / "step-30").iterdir())
    tracker.after_cycle(2, "worker-failed")
    assert tracker.ledger.cycles[-1].iteration_end == 20
    assert tracker.before_cycle(3) == "no progress in the last 1 cycles (iteration stuck at 20)"
