"""Snapshots for the Hugging Face ``Trainer``: a ``TrainerCallback`` that snapshots every N
steps and restores on start.

::

    from slurm_ft.integrations.huggingface import SnapshotCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[SnapshotCallback(every_n_steps=1)])

A snapshot holds the model's, the optimizer's and the LR scheduler's state dicts and the
step, taken at ``on_step_end`` (after the optimizer step and the step count). At
``on_train_begin`` the newest snapshot is loaded into the model, optimizer and scheduler,
and ``state.global_step`` is set to its step, so ``max_steps``, logging and saving go on
from there. What does not follow: the Trainer skips the batches an epoch already used only
when it resumes from a checkpoint directory (``resume_from_checkpoint``), so after a
restore from memory the epoch's data order starts over. ``replicated=True`` (the default)
is for DDP; pass False where each rank's state is its own.

transformers is imported by this module only; outside a slurm-ft launcher with snapshots
on, the callback does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from transformers import TrainerCallback

from slurm_ft import worker
from slurm_ft.integrations.steps import Every


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, object]: ...

    def load_state_dict(self, state_dict: Mapping[str, object], /) -> object: ...


class TrainerState(Protocol):
    """The part of ``transformers.TrainerState`` the callback uses."""

    global_step: int


class SnapshotCallback(TrainerCallback):
    def __init__(self, every_n_steps: int = 1, *, replicated: bool = True) -> None:
        self.every = Every(every_n_steps)
        self.replicated = replicated
        self.restored_step: int | None = None

    def on_train_begin(
        self,
        args: object,
        state: TrainerState,
        control: object,
        *,
        model: Stateful | None = None,
        optimizer: Stateful | None = None,
        lr_scheduler: Stateful | None = None,
        **kwargs: object,
    ) -> None:
        # copied: an optimizer on the CPU keeps the tensors it is given (load_state_dict does not copy them)
        restored = worker.restore_snapshot()
        if restored is None or model is None:
            return
        saved = restored.state
        model.load_state_dict(_part(saved, "model"))
        if optimizer is not None and "optimizer" in saved:
            optimizer.load_state_dict(_part(saved, "optimizer"))
        if lr_scheduler is not None and "lr_scheduler" in saved:
            lr_scheduler.load_state_dict(_part(saved, "lr_scheduler"))
        state.global_step = restored.step
        self.every.resumed(restored.step)
        self.restored_step = restored.step

    def on_step_end(
        self,
        args: object,
        state: TrainerState,
        control: object,
        *,
        model: Stateful | None = None,
        optimizer: Stateful | None = None,
        lr_scheduler: Stateful | None = None,
        **kwargs: object,
    ) -> None:
        if model is None or not self.every.due(state.global_step):
            return
        snapshot: dict[str, object] = {"model": model.state_dict()}
        if optimizer is not None:
            snapshot["optimizer"] = optimizer.state_dict()
        if lr_scheduler is not None:
            snapshot["lr_scheduler"] = lr_scheduler.state_dict()
        worker.snapshot(state.global_step, snapshot, replicated=self.replicated)


def _part(state: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = state.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(f"the snapshot has no {name} state: it was not taken by this callback")
    return value
