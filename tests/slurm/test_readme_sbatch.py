"""Every sbatch example of the README, as a user would copy it, on the local Slurm cluster.

The examples are taken from the README's text (every ``bash`` block with an ``#SBATCH``
line), so an example that changes is tested as it now reads. Only what the local cluster
cannot have is replaced (GPUs, a Lustre path, the node count), each replacement checked to
apply, and the training script is a torch-free stand-in. Each example is sent the signal
its ``--signal`` line asks for, while it trains, and must survive it: checkpoint, requeue,
resume and finish.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
STANDIN = Path(__file__).resolve().parent / "standin_train.py"

# What the local cluster cannot run as written: (pattern, replacement). Each must apply.
LOCAL = (
    (r"^#SBATCH --nodes=\d+$", "#SBATCH --nodes=2"),
    (r"^#SBATCH --gpus-per-node=\d+\n", ""),
    (r"--nproc-per-node gpu", "--nproc-per-node 1"),
    (r"--paths /lustre/project,/home/\$USER", '--paths "$SLURM_SUBMIT_DIR"'),
    (r"/lustre/project/ckpt/", "$SLURM_SUBMIT_DIR/ckpt/"),
)


def sbatch_examples(text: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```$", text, re.M | re.S)
    return [b for b in blocks if re.search(r"^#SBATCH ", b, re.M)]


def for_local_cluster(example: str) -> str:
    for pattern, replacement in LOCAL:
        example, n = re.subn(pattern, replacement, example, flags=re.M)
        assert n >= 1, f"the README example no longer has {pattern!r}: update this test's LOCAL table"
    return example


def signal_of(example: str) -> str:
    m = re.search(r"^#SBATCH --signal=(?:B:)?(\w+)@\d+$", example, re.M)
    assert m, "every README sbatch example asks for a warning signal before the time limit"
    return m.group(1)


def test_the_readme_has_a_copy_paste_sbatch_example() -> None:
    examples = sbatch_examples(README.read_text())
    assert examples
    for example in examples:
        for_local_cluster(example)
        # Bash's default action for USR1 is to die: a trapped shell is what keeps the job.
        sig = signal_of(example)
        assert re.search(rf"^trap .* {sig}$", example, re.M), example


TEMPLATES = sorted((REPO / "sbatch_templates").glob("*.sbatch"))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_template_that_asks_for_a_warning_signal_traps_it(template: Path) -> None:
    """A batch shell that is sent USR1 (--signal=B:...) without a trap dies of it."""
    text = template.read_text()
    m = re.search(r"^#SBATCH --signal=B:(\w+)@\d+$", text, re.M)
    if m is not None:
        assert re.search(rf"^trap .*\b{m.group(1)}$", text, re.M), template.name


def _iteration(work: Path) -> int:
    try:
        return int((work / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return 0


@pytest.mark.timeout(400)
@pytest.mark.parametrize("index", range(len(sbatch_examples(README.read_text()))))
def test_readme_sbatch_example_survives_its_signal(slurm_cluster, index: int) -> None:
    example = sbatch_examples(README.read_text())[index]
    sig = signal_of(example)
    work = slurm_cluster.workdir(f"readme-sbatch-{index}")
    slurm_cluster.write(work / "job.sbatch", for_local_cluster(example), mode=0o755)
    shutil.copy(STANDIN, work / "train.py")
    slurm_cluster.write(work / "train.py", (work / "train.py").read_text())
    for sub in ("ckpt", "logs"):
        (work / sub).mkdir()
        shutil.chown(work / sub, slurm_cluster.user)
    env = slurm_cluster.job_env(
        TRAIN_CKPT_DIR=str(work / "ckpt"),
        TRAIN_STEPS="40",
        TRAIN_STEP_TIME="0.25",
        # No RDMA NIC or GPU here: only the storage check of the example's --paths.
        SLURM_FT_HEALTH_CHECKS="storage",
    )
    job = slurm_cluster.sbatch(work / "job.sbatch", env=env)
    try:
        wait_until(lambda: _iteration(work) >= 5, 150, interval=0.3, message="the first checkpoint")
        subprocess.run(["scancel", f"--signal={sig}", "--batch", job.job_id], check=True)
        fields = slurm_cluster.wait_final(job, timeout=300)
    finally:
        subprocess.run(["scancel", job.job_id], capture_output=True, check=False)
    out = "\n".join(p.read_text(errors="replace") for p in sorted(work.glob("slurm-*.out")))
    logs = "\n".join(p.read_text(errors="replace") for p in sorted((work / "logs").glob("train_cycle*.log")))
    assert int(fields["Restarts"]) >= 1, out  # requeued, not lost
    assert fields["JobState"] == "COMPLETED", out
    assert re.search(rf"^\s*0: rank 0: stopping on SIG{sig} at step \d+$", logs, re.M), logs[-3000:]
    resumed = [int(m.group(1)) for m in re.finditer(r"rank 0: resumed from iteration (\d+)", logs)]
    assert len(resumed) >= 2 and resumed[-1] >= 5, logs[-3000:]
    assert re.search(r"^\s*0: rank 0: finished at step 40$", logs, re.M), logs[-3000:]
    assert _iteration(work) == 40
    slurm_cluster.assert_no_user_processes()
