"""Figure 4: slurm-ft-healthcheck, process start to exit, healthy and with a hung path.

This machine has no InfiniBand, so the NIC check reads a fixture sysfs tree (one
ACTIVE/LinkUp mlx5 port) through the documented ``--sysfs-root``; the storage check
probes a real directory. The hung case adds a FIFO: opening it for reading blocks until
a writer appears, which none ever does, like a stat on a dead NFS server. torchrun has
no health check, so there is nothing to compare with; the healthy case is measured
interleaved with ``python -c pass``, its physical reference. Goal (issue 19): 0.06 s.
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks import instructions, proc
from benchmarks.harness import PYTHON_PASS, Context, interleave, python_pass, repeat
from benchmarks.stats import Row, Target, error_row, summarize

FIGURE = 4
GOAL_S = 0.06
DEADLINE_S = 1.0
SLACK_S = 0.5


def fixture(root: Path) -> tuple[Path, Path, Path]:
    """A sysfs tree with one healthy RDMA port, a readable directory, a FIFO that hangs."""
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "counters" / "link_downed").write_text("0\n")
    data = root / "data"
    data.mkdir()
    (data / "ckpt").write_text("x")
    fifo = root / "hung"
    os.mkfifo(fifo)
    return root / "sys", data, fifo


def _command(ctx: Context, sysfs: Path, paths: list[Path], deadline_s: float = DEADLINE_S) -> list[str]:
    return [
        ctx.tool("slurm-ft-healthcheck"),
        "--checks",
        "nic,storage",
        "--sysfs-root",
        str(sysfs),
        "--paths",
        ",".join(str(p) for p in paths),
        "--no-discover-mounts",
        "--deadline",
        f"{deadline_s:g}",
        "--json",
    ]


def _once(ctx: Context, sysfs: Path, paths: list[Path], expect_rc: int) -> float:
    finished = proc.run(_command(ctx, sysfs, paths), ctx.env(), timeout=30)
    if finished.returncode != expect_rc:
        raise proc.BenchError(f"slurm-ft-healthcheck exited {finished.returncode}, expected {expect_rc}")
    return finished.wall_s


def run(ctx: Context) -> list[Row]:
    sysfs, data, fifo = fixture(ctx.scratch("health"))
    rows = []
    healthy_metric = "health check, healthy node (nic + storage), start to exit"
    contest = interleave(
        {"ours": lambda: _once(ctx, sysfs, [data], 0), "reference": lambda: python_pass(ctx)},
        runs=ctx.runs(21, 5),  # cheap runs (~0.06 s): a median over a longer stretch of a drifting VM
        warmup=2,
    )
    rows.append(
        Row(
            FIGURE,
            healthy_metric,
            "s",
            contest.summary("ours"),
            None,
            [Target("max", GOAL_S)],
            error=contest.error("ours", "reference"),
            reference=contest.summary("reference"),
            reference_label=PYTHON_PASS,
        )
    )
    rows.append(
        instructions.row(
            FIGURE,
            "  instructions of the health check process, the same check (callgrind; --deadline 60,"
            " as valgrind runs it some 50x slower)",
            _command(ctx, sysfs, [data], deadline_s=60),
            [ctx.python, "-c", "pass"],
            ctx.env(),
            ctx.scratch("instructions"),
            note="does not drift with the machine",
        )
    )
    hung_metric = f"health check, one hung path, --deadline {DEADLINE_S:g}, start to exit"
    hung_target = [Target("max", DEADLINE_S + SLACK_S)]
    try:
        hung = repeat(lambda: _once(ctx, sysfs, [data, fifo], 94), runs=ctx.runs(5, 2), warmup=0)
        rows.append(
            Row(FIGURE, hung_metric, "s", summarize(hung), None, hung_target, note="exit 94 (unhealthy)")
        )
    except proc.BenchError as exc:
        rows.append(error_row(FIGURE, hung_metric, str(exc), hung_target))
    return rows
