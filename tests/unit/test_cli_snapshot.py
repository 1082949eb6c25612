"""slurm-ft-snapshot export: a persisted snapshot (the slot file the launchers copied) as one
torch.save file, through the command's real process; bad input is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_ft.cli.snapshot", *args], capture_output=True, text=True, timeout=120
    )


def persisted_file(tmp: Path) -> Path:
    import torch

    from slurm_ft.snapshot import layout, persisted, reader, writer

    area = tmp / "area"
    area.mkdir()
    me = writer.Identity(4, 3, 1, 1, 2, 1, os.getpid(), None)
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "epoch": 2}
    assert (
        writer.SlotWriter(area, layout.rank_key(3), me, None).write(42, state).outcome is writer.Outcome.KEPT
    )
    info = reader.newest(area, layout.rank_key(3))
    assert info is not None
    return persisted.save(tmp / "persisted", info)


def test_export_writes_the_persisted_snapshot_as_one_torch_save_file(tmp_path):
    import torch

    source = persisted_file(tmp_path)
    done = run("export", str(source), str(tmp_path / "rank3.pt"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"slurm-ft-snapshot: {source} (step 42) -> {tmp_path / 'rank3.pt'}\n"
    doc = torch.load(tmp_path / "rank3.pt", weights_only=True)
    assert (doc["step"], doc["rank"], doc["world_size"], doc["replicated"]) == (42, 3, 4, False)
    assert doc["state"]["epoch"] == 2 and doc["state"]["model"]["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_export_of_what_is_not_a_whole_snapshot_is_one_line_and_exit_2(tmp_path):
    torn = tmp_path / "rank-00000.step000000000001.snap"
    torn.write_bytes(b"x" * 5000)
    done = run("export", str(torn), str(tmp_path / "out.pt"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"slurm-ft-snapshot: {torn}: not a complete snapshot\n"
    assert not (tmp_path / "out.pt").exists()
    source = persisted_file(tmp_path)
    done = run("export", str(source), str(tmp_path / "no" / "such" / "dir.pt"))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("slurm-ft-snapshot: "), done.stderr
    done = run("export", str(source))
    assert done.returncode == 2 and done.stderr.startswith("slurm-ft-snapshot: "), done.stderr
