"""How each launcher is started, in one place: torchrun from the installed torch, and ours.

Our launcher is configured through its ``SLURM_FT_*`` environment (the documented
settings layer), and a simulated multi-node job through the ``SLURM_*`` variables srun
would set, with real loopback addresses (127.0.1.N) as host names.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchmarks import proc
from benchmarks.harness import Context


def torchrun_standalone(ctx: Context, nproc: int, script: Path, extra: Sequence[str] = ()) -> list[str]:
    return [ctx.tool("torchrun"), "--standalone", f"--nproc-per-node={nproc}", *extra, str(script)]


def torchrun_c10d(
    ctx: Context,
    *,
    nnodes: int,
    nproc: int,
    port: int,
    is_host: bool,
    run_id: str,
    max_restarts: int,
    script: Path,
) -> list[str]:
    return [
        ctx.tool("torchrun"),
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host={str(is_host).lower()}",
        f"--max-restarts={max_restarts}",
        str(script),
    ]


def ours(ctx: Context, script: Path, extra: Sequence[str] = ()) -> list[str]:
    return [ctx.tool("slurm-ft-launch"), *extra, str(script)]


def ours_env(
    ctx: Context,
    *,
    nproc: int,
    state_dir: Path,
    max_restarts: int = 0,
    applog_prefix: Path | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    env = ctx.env(
        SLURM_FT_LAUNCH_NPROC_PER_NODE=str(nproc),
        SLURM_FT_LAUNCH_MAX_RESTARTS=str(max_restarts),
        SLURM_FT_STATE_DIR=str(state_dir),
    )
    if applog_prefix is not None:
        env["SLURM_FT_APPLOG_PREFIX"] = str(applog_prefix)
    env.update(extra or {})
    return env


def simulated_node(job_id: str, nnodes: int, node_rank: int, submit_dir: Path) -> dict[str, str]:
    """The SLURM_* variables ``srun --ntasks-per-node=1`` sets on node ``node_rank``."""
    nodelist = f"127.0.1.[1-{nnodes}]" if nnodes > 1 else "127.0.1.1"
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nnodes),
        "SLURM_NNODES": str(nnodes),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": str(nnodes),
        "SLURM_STEP_NUM_TASKS": str(nnodes),
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{nnodes})",
        "SLURM_TASKS_PER_NODE": f"1(x{nnodes})",
        "SLURM_NTASKS": str(nnodes),
        "SLURM_NODEID": str(node_rank),
        "SLURM_PROCID": str(node_rank),
        "SLURM_LOCALID": "0",
        "SLURMD_NODENAME": f"127.0.1.{node_rank + 1}",
        "SLURM_SUBMIT_DIR": str(submit_dir),
    }


def ours_nodes(
    ctx: Context,
    script: Path,
    *,
    nnodes: int,
    nproc: int,
    submit: Path,
    port: int,
    job_id: str,
    extra: dict[str, str],
    max_restarts: int = 1,
) -> list[tuple[list[str], dict[str, str]]]:
    """One launcher per simulated node of one job: (command, environment) each."""
    out = []
    for node in range(nnodes):
        env = ours_env(
            ctx,
            nproc=nproc,
            state_dir=submit / "state",
            max_restarts=max_restarts,
            extra={
                **simulated_node(job_id, nnodes, node, submit),
                "SLURM_FT_LAUNCH_RDZV_PORT": str(port),
                **extra,
            },
        )
        out.append((ours(ctx, script), env))
    return out


def run_agents(
    ctx: Context, cmds_envs: list[tuple[list[str], dict[str, str]]], log: Path, timeout: float = 180.0
) -> None:
    """Start every launcher of one job, wait for all to exit 0 (a BenchError names the
    codes), and leave nothing of ours behind."""
    started = []
    with open(log, "ab") as out:
        for cmd, env in cmds_envs:
            started.append(proc.start(cmd, env, stdout=out, stderr=subprocess.STDOUT))
        try:
            results = [proc.finish(p, w, t, timeout) for p, w, t in started]
        finally:
            for p, _, _ in started:
                if p.poll() is None:
                    proc.kill_group(p)
            # Runs are sequential: anything of ours still alive is a leftover worker.
            proc.reap_marked(ctx.marker)
    codes = [r.returncode for r in results]
    if any(codes):
        tail = log.read_text(errors="replace")[-600:]
        raise proc.BenchError(f"exit codes {codes}; log tail: {tail!r}")
