"""The Lightning and Hugging Face callbacks save and restore a real model, optimizer and
scheduler through the worker API, across two worker processes (the framework itself is
not installed here: see snapshot_callback_trainer.py for the two stand-ins)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.snaptrainer import ROOT

pytestmark = pytest.mark.torch


def _run(where: Path, cycle: int, *args: str) -> str:
    env = {**os.environ, "SLURM_FT_SNAPSHOT_DIR": str(where), "SLURM_FT_CYCLE": str(cycle), "RANK": "0"}
    env["WORLD_SIZE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.snapshot_callback_trainer", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(("framework", "loop"), [("lightning", "{'batches': 5}"), ("huggingface", "None")])
def test_the_callback_restores_the_state_it_snapshot(snap_area: Path, framework: str, loop: str) -> None:
    saved = _run(snap_area, 1, framework, "save", "5")
    assert saved.startswith("hash ")
    restored = _run(snap_area, 2, framework, "restore")
    assert restored == f"restored 5 {saved} loop {loop}"


def test_importing_the_integrations_imports_no_framework() -> None:
    code = (
        "import sys, slurm_ft.integrations, slurm_ft.integrations.steps; "
        "names = ('lightning', 'pytorch_lightning', 'transformers', 'torch'); "
        "print(sorted(m for m in names if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _example(where: Path | None, *args: str, cycle: int = 1, restart: int = 0) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_FT_SNAPSHOT")}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    with socket.socket() as probe:  # a free port for the one-rank gloo group's store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env.update(MASTER_PORT=str(port), SLURM_FT_CYCLE=str(cycle))
    env["TORCHELASTIC_RESTART_COUNT"] = str(restart)
    if where is not None:
        env["SLURM_FT_SNAPSHOT_DIR"] = str(where)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/examples/train_memory_snapshots.py"), "--steps", "10", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout.splitlines()


def test_the_plain_example_resumes_from_memory_with_the_state_it_had_at_that_step(snap_area: Path) -> None:
    code, reference = _example(None)
    assert code == 0 and len(reference) == 10
    code, first = _example(snap_area, "--crash-rank", "0", "--crash-step", "5")
    assert code == -9 and first == reference[:6]
    code, second = _example(snap_area, cycle=2, restart=1)
    assert code == 0
    assert second == ["rank 0 restored 5 from memory", *reference[6:]]
