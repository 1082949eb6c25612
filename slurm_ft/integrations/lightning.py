"""Snapshots for Lightning: a ``Callback`` that snapshots every N steps and restores on start.

::

    from slurm_ft.integrations.lightning import SnapshotCallback

    trainer = L.Trainer(callbacks=[SnapshotCallback(every_n_steps=1)])

What a snapshot holds is what Lightning's own checkpoint holds for a resume: the module's
state dict, every optimizer's and LR scheduler's, and the fit loop's progress
(``trainer.fit_loop.state_dict()``), taken at ``on_train_batch_end``, after the optimizer
step, as Lightning's ``ModelCheckpoint`` takes its own. The restore runs at
``on_fit_start``, once optimizers exist and before the fit loop starts, and loads the
loop's progress the way a checkpoint resume does, so the run goes on from the step after
the snapshot. ``replicated=True`` (the default) is for DDP, where every rank holds the same
state; pass False where each rank's state is its own (a sharded strategy's local state).

Lightning is imported by this module only (``lightning``, or the older
``pytorch_lightning``); outside a slurm-ft launcher with snapshots on, the callback does
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the package's older name
    from pytorch_lightning.callbacks import Callback

from slurm_ft import worker
from slurm_ft.integrations.steps import Every


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, object]: ...

    def load_state_dict(self, state_dict: Mapping[str, object], /) -> object: ...


class SchedulerConfig(Protocol):
    scheduler: Stateful


class Trainer(Protocol):
    """The parts of ``lightning.pytorch.Trainer`` the callback uses (all public)."""

    global_step: int
    optimizers: Sequence[Stateful]
    lr_scheduler_configs: Sequence[SchedulerConfig]
    fit_loop: Stateful


class SnapshotCallback(Callback):
    def __init__(self, every_n_steps: int = 1, *, replicated: bool = True) -> None:
        super().__init__()
        self.every = Every(every_n_steps)
        self.replicated = replicated
        self.restored_step: int | None = None

    def on_fit_start(self, trainer: Trainer, pl_module: Stateful) -> None:
        # copied: an optimizer on the CPU keeps the tensors it is given (load_state_dict does not copy them)
        restored = worker.restore_snapshot()
        if restored is None:
            return
        state = restored.state
        pl_module.load_state_dict(_part(state, "module"))
        for optimizer, saved in zip(trainer.optimizers, _parts(state, "optimizers"), strict=True):
            optimizer.load_state_dict(saved)
        for config, saved in zip(trainer.lr_scheduler_configs, _parts(state, "lr_schedulers"), strict=True):
            config.scheduler.load_state_dict(saved)
        trainer.fit_loop.load_state_dict(_part(state, "fit_loop"))
        self.every.resumed(restored.step)
        self.restored_step = restored.step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: Stateful, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if not self.every.due(trainer.global_step):
            return
        state = {
            "module": pl_module.state_dict(),
            "optimizers": [o.state_dict() for o in trainer.optimizers],
            "lr_schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
            "fit_loop": trainer.fit_loop.state_dict(),
        }
        worker.snapshot(trainer.global_step, state, replicated=self.replicated)


def _part(state: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = state.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(f"the snapshot has no {name} state: it was not taken by this callback")
    return value


def _parts(state: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    value = state.get(name)
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"the snapshot has no {name} states: it was not taken by this callback")
    return value
