"""The docs' shell examples that can run without Slurm are run, as written.

An example is a fenced ``bash`` block right after a ``<!-- run-example -->`` line, in the
README or any page under docs/; each of its commands must exit 0. They run in a directory
holding the state dir of job 4242, a real standalone launch made here first (two ranks;
rank 1 crashes in cycles 0 to 2, cycle 3 finishes), with ``SLURM_SUBMIT_DIR`` pointing
there, so ``slurm-ft-logs 4242 --failure`` reads what a user's would. The sbatch example
of the README runs on the local Slurm cluster instead (tests/slurm/test_readme_sbatch.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs

MARK = "<!-- run-example -->"
BIN = Path(sys.executable).parent


def marked_examples() -> list[tuple[str, str]]:
    """(where, command) for every command of every marked block."""
    sources = {"README.md": docs.README.read_text(), **{f"docs/{k}": v for k, v in docs.pages().items()}}
    found = []
    for where, text in sources.items():
        for block in re.findall(rf"^{re.escape(MARK)}\n```bash\n(.*?)^```$", text, re.M | re.S):
            joined = block.replace("\\\n", " ")
            for line in joined.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    found.append((where, line.strip()))
    return found


def test_marks_sit_on_bash_blocks() -> None:
    """A mark that is not right before a bash block would silently run nothing."""
    for name, text in {"README.md": docs.README.read_text(), **docs.pages()}.items():
        marks = re.findall(rf"^{re.escape(MARK)}$", text, re.M)
        assert len(marks) == len(re.findall(rf"^{re.escape(MARK)}\n```bash\n", text, re.M)), name
    assert len(marked_examples()) >= 15


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(docs.REPO),
        SLURM_SUBMIT_DIR=str(work),
        COLUMNS="120",
    )
    return env


@pytest.fixture(scope="module")
def job_4242(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("job4242")
    shutil.copy(Path(__file__).with_name("example_train.py"), work / "train.py")
    (work / "scripts").symlink_to(docs.REPO / "scripts")  # examples name repository paths
    launch = [
        str(BIN / "slurm-ft-launch"),
        "--state-dir",
        str(work / ".slurm_ft" / "4242"),
        "--applog-prefix",
        str(work / "logs" / "train.log"),
        "--max-restarts",
        "3",
        "--nproc-per-node",
        "2",
        "--health-checks",
        "none",
        "train.py",
    ]
    proc = subprocess.run(launch, cwd=work, env=_env(work), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list((work / ".slurm_ft" / "4242" / "cycles").glob("cycle*.json"))) == 4
    return work


@pytest.mark.parametrize(("where", "command"), marked_examples(), ids=lambda v: v)
def test_example_runs(job_4242: Path, where: str, command: str) -> None:
    proc = subprocess.run(
        ["bash", "-c", command], cwd=job_4242, env=_env(job_4242), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"{where}: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{where}: {command} printed nothing"
