"""Drive the Lightning or Hugging Face snapshot callback with real torch objects, in a real
worker process with the launcher's snapshot variables set by the test.

Neither framework is installed here: the only stand-ins are the framework's callback base
class (an empty class, which is all the callbacks take from it) and the trainer object's
attributes the callbacks read (the step counter, and for Lightning its fit loop's
progress, here a small state dict). The model, optimizer and scheduler are torch's.

    snapshot_callback_trainer.py lightning|huggingface save STEPS   -> "hash H" after STEPS steps
    snapshot_callback_trainer.py lightning|huggingface restore      -> "restored STEP hash H loop L"
"""

from __future__ import annotations

import hashlib
import sys
import types
from types import SimpleNamespace

import torch


def stand_in_base(framework: str) -> None:
    class Base:
        pass

    names = ["lightning", "lightning.pytorch", "lightning.pytorch.callbacks"]
    if framework == "huggingface":
        names = ["transformers"]
    for name in names:
        module = types.ModuleType(name)
        module.Callback = Base
        module.TrainerCallback = Base
        sys.modules[name] = module


class FitLoop:
    def __init__(self) -> None:
        self.progress = {"batches": 0}

    def state_dict(self) -> dict[str, object]:
        return dict(self.progress)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.progress = dict(state)


def digest(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sched: object) -> str:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.numpy().tobytes())
    for per_param in optimizer.state_dict()["state"].values():
        for v in per_param.values():
            h.update(v.numpy().tobytes() if isinstance(v, torch.Tensor) else repr(v).encode())
    h.update(repr(sched.state_dict()).encode())
    return h.hexdigest()[:16]


def main() -> None:
    framework, phase = sys.argv[1], sys.argv[2]
    stand_in_base(framework)
    torch.manual_seed(0 if phase == "save" else 1)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    if framework == "lightning":
        from slurm_ft.integrations.lightning import SnapshotCallback

        cb = SnapshotCallback(every_n_steps=1)
        trainer = SimpleNamespace(
            global_step=0, optimizers=[optimizer], lr_scheduler_configs=[SimpleNamespace(scheduler=sched)],
            fit_loop=FitLoop(),
        )  # fmt: skip
    else:
        from slurm_ft.integrations.huggingface import SnapshotCallback as HFCallback

        hf = HFCallback(every_n_steps=1)
        trainer = SimpleNamespace(global_step=0)
    if phase == "save":
        for step in range(1, int(sys.argv[3]) + 1):
            model(torch.randn(2, 8)).sum().backward()
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
            trainer.global_step = step
            if framework == "lightning":
                trainer.fit_loop.progress["batches"] = step
                cb.on_train_batch_end(trainer, model, None, None, step - 1)
            else:
                hf.on_step_end(None, trainer, None, model=model, optimizer=optimizer, lr_scheduler=sched)
        print("hash", digest(model, optimizer, sched), flush=True)
        return
    if framework == "lightning":
        cb.on_fit_start(trainer, model)
        print(
            "restored",
            cb.restored_step,
            "hash",
            digest(model, optimizer, sched),
            "loop",
            trainer.fit_loop.progress,
        )
    else:
        hf.on_train_begin(None, trainer, None, model=model, optimizer=optimizer, lr_scheduler=sched)
        print("restored", trainer.global_step, "hash", digest(model, optimizer, sched), "loop", None)


if __name__ == "__main__":
    main()
