"""``slurm-ft-launch --dry-run``: what this launcher would do, in words; nothing is started,
no port is bound, no file is written.

Each worker's environment is the one the spawn builds
(:func:`slurm_ft.launch.workers.env.launcher_vars`), for the cycle the state dir's counter
names next. What only exists once the launcher runs is a marked placeholder passed to
that same builder: node 0 chooses ``MASTER_PORT`` each cycle, and the launcher makes its
private run dir (the workers' monitor slots and stack files) when it starts.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from slurm_ft.launch.books import cyclecount
from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV, SECRET_FILE
from slurm_ft.launch.workers.env import CycleEnv, launcher_vars

if TYPE_CHECKING:
    from slurm_ft.launch.context import AgentConfig

PROG = "slurm-ft-launch"
MASTER_PORT_PLACEHOLDER = "<chosen by node 0 each cycle>"
RUN_DIR_PLACEHOLDER = "<private run dir, made at start>"
SNAPSHOT_AREA_PLACEHOLDER = "<snapshot area in /dev/shm, made at start>"


def write(cfg: AgentConfig, out: TextIO, *, secret_in_env: bool) -> None:
    """The dry run of ``cfg`` on ``out``; ``secret_in_env``: the job secret comes from the
    environment (it is never shown)."""
    job, topo = cfg.job, cfg.topo
    cycle = cyclecount.read_next_cycle(cfg.state)  # what node 0 would publish now
    w = out.write
    w(f"{PROG} dry run: nothing is started\n")
    w(
        f"job: {job.job_key} attempt {job.attempt}; node {job.node_name} is node {job.node_rank} "
        f"of {job.num_nodes} ({', '.join(job.hosts)})\n"
    )
    if job.num_nodes == 1:
        w(f"rendezvous: in-process store (single node, no port); run id {cfg.run_id}\n")
    else:
        port, *others = cfg.rdzv_ports
        w(f"rendezvous: TCPStore on {topo.master_addr}:{port}, hosted by node 0; run id {cfg.run_id}\n")
        if others:
            w(f"rendezvous ports if {port} is in use: {', '.join(map(str, others))}\n")
        secret = (
            f"job secret from {SECRET_ENV} (not shown)"
            if secret_in_env
            else f"job secret from {cfg.state.path / SECRET_FILE} (made at start if missing)"
        )
        w(f"rendezvous authentication: {secret}\n")
    spare = job.node_rank >= topo.num_nodes
    first, last = topo.ranks.start, topo.ranks.stop - 1
    where = (
        "no ranks here until it replaces an active node" if spare else f"ranks {first}-{last} on this node"
    )
    w(f"workers: {topo.nproc_per_node} per node, world size {topo.world_size}, {where}\n")
    launch = cfg.settings.launch
    if launch.spare_nodes:
        role = "a spare" if spare else f"node rank {job.node_rank}"
        w(
            f"spares: {launch.spare_nodes} of {job.num_nodes} node(s) stand by (segment {launch.segment}, "
            f"suspect after {launch.suspect_after}); this node starts as {role}\n"
        )
    w(
        f"restarts: max {launch.max_restarts} for the whole job; "
        f"stop timeout {launch.workers_stop_timeout}s, term timeout {launch.term_timeout}s, "
        f"join timeout {launch.join_timeout}s\n"
    )
    w(f"state dir: {cfg.state.path}\n")
    a = cfg.settings.applog
    if a.log_dir:
        w(
            f"per-rank files: {a.log_dir}/{cfg.run_id}/attempt_<cycle>/<rank>/stdout.log, stderr.log "
            f"(redirects {a.redirects}, tee {a.tee_streams})\n"
        )
    checks = ", ".join(cfg.settings.health.checks) if cfg.health_checks else "none"
    w(f"health checks before each join: {checks}\n")
    health = cfg.settings.health
    if health.nic_monitor:
        what = ", ".join(health.nics) or "all RDMA ports"
        effect = "fails the node" if health.nic_monitor_fatal else "is reported"
        every = f"{health.nic_monitor_interval:g}s"
        w(f"NIC monitor: {what} every {every} while training; a port going down {effect}\n")
    placement = cfg.placement
    if placement is not None:
        nic_aff = "on" if placement.nic_affinity else "off"
        w(f"placement: numa binding {placement.mode.value}, NIC affinity {nic_aff}\n")
        for warning in placement.warnings:
            w(f"placement warning: {warning}\n")
    cfg = _with_snapshots(cfg, w)
    if spare:
        return
    w(
        f"worker environment: this launcher's own without {SECRET_ENV}, with the variables below "
        f"(cycle {cycle}, the first of this attempt)\n"
    )
    job_env = cfg.job_env(RUN_DIR_PLACEHOLDER)
    cyc = CycleEnv(topo=topo, master_port=MASTER_PORT_PLACEHOLDER, restart_count=0, cycle=cycle)
    argv = cfg.entry.argv(cfg.python)
    for local in range(topo.nproc_per_node):
        env = launcher_vars(job_env, cyc, local)
        w(f"worker local_rank {local} rank {topo.global_rank(local)}:\n")
        if placement is not None:
            w(f"  placement: {placement.ranks[local].describe()}\n")
        w(f"  cwd: {cfg.cwd}\n")
        for key in sorted(env):
            w(f"  {key}={env[key]}\n")
        w(f"  command: {shlex.join(argv)}\n")
    w(
        "(MASTER_PORT, the cycle number, the restart count and the cycle's paths change every cycle; "
        "<...>: made when the launcher runs)\n"
    )


def _with_snapshots(cfg: AgentConfig, w: Callable[[str], object]) -> AgentConfig:
    """The snapshot line the launcher would say, and ``cfg`` with a placeholder area (the
    launcher makes it at start) when snapshots are on."""
    import dataclasses

    from slurm_ft.launch.snapshots.budget import plan
    from slurm_ft.launch.snapshots.node import SHM, node_memory
    from slurm_ft.launch.workers.env import SnapshotEnv
    from slurm_ft.settingsyntax import parse_snapshot_memory

    launch = cfg.settings.launch
    budget = plan(parse_snapshot_memory(launch.snapshot_memory), node_memory(SHM), str(SHM))
    w(f"{budget.line}\n")
    if budget.limit <= 0:
        return cfg
    persist = launch.snapshot_persist_hook or launch.snapshot_persist_dir
    if persist:
        w(
            f"snapshots persisted on the way out to {persist} "
            f"(at most {launch.snapshot_persist_timeout:g} s)\n"
        )
    return dataclasses.replace(
        cfg, snapshots=SnapshotEnv(SNAPSHOT_AREA_PLACEHOLDER, budget.limit, launch.snapshot_persist_dir)
    )
