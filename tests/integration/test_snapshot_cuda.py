"""CUDA tensors into a snapshot (pinned slot, side stream) and back: only where a GPU is.
No GPU was lent while this was written: on a machine without CUDA these are skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]


def test_cuda_state_is_copied_on_a_side_stream_and_restored_whole(snap_area: Path) -> None:
    from slurm_ft.snapshot import layout, reader, writer

    me = writer.Identity(1, 0, 0, 0, 1, 1, os.getpid(), None)
    slots = writer.SlotWriter(snap_area, layout.rank_key(0), me, None)
    for step in (1, 2, 3):
        # queued on the training stream just before the call: the snapshot must see its result
        weight = torch.full((1 << 20,), float(step), device="cuda") * 2
        strided = weight[: 1 << 10].view(32, 32).t()
        state = {"w": weight, "strided": strided, "cpu": torch.ones(4), "step": step}
        assert slots.write(step, state).outcome is writer.Outcome.KEPT
        info = reader.newest(snap_area, layout.rank_key(0))
        assert info is not None and info.step == step
        back = reader.load(info, copy=True)
        assert bool((back["w"] == 2.0 * step).all()) and back["w"].device.type == "cpu"
        assert torch.equal(back["strided"], state["strided"].cpu()) and back["step"] == step
