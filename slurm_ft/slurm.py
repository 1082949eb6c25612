"""The SLURM_* contract: the variables sbatch and srun set -> one validated :class:`SlurmJob`.

Everything slurm-ft knows about topology comes from here, so a wrong or half-set
environment is caught once, with the variable and its value in the message, instead of
surfacing later as a rendezvous that never completes.

Only the mapping passed in is read (tests and simulated multi-node runs hand each launcher
its own). Rules worth knowing:

- Inside a job step (``srun``) the step's node list and count win over the job's: a step
  may span fewer nodes than the allocation, and ``SLURM_NODEID`` counts within the step.
- A node is named by ``SLURMD_NODENAME`` (the Slurm node name), never by the host name:
  several slurmd on one machine share a host name.
- No ``SLURM_JOB_ID`` means standalone: one node, rank 0, master 127.0.0.1, unless
  torchrun's flags describe a multi-node job by hand (:meth:`SlurmJob.by_hand`).

``python -m slurm_ft.slurm [--json]`` prints what this module derives from the current
environment, for batch scripts and for people debugging a launch.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

STANDALONE_ADDR = "127.0.0.1"

_UINT_RE = re.compile(r"[0-9]+")
_TASKS_ITEM_RE = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


class SlurmEnvError(ValueError):
    """SLURM_* variables that do not describe a usable job; the message names the variable."""


@dataclass(frozen=True)
class SlurmJob:
    """One node's view of the job. ``hosts`` lists the nodes in node-rank order; a job
    described by hand (torchrun flags, no Slurm) knows only node 0's address, so there
    ``hosts`` holds that one entry while ``num_nodes`` counts every node."""

    standalone: bool
    job_id: str | None
    array_job_id: str | None
    array_task_id: int | None
    attempt: int
    num_nodes: int
    node_rank: int
    node_name: str
    hosts: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    cpus_on_node: int | None
    gpus_on_node: int | None
    procid: int
    localid: int
    ntasks: int
    submit_dir: str | None
    step_id: str | None = None
    # Inside a job step (srun): the step's variables are set. A batch script or an
    # salloc shell has only the job's, and a launcher started there is not one per node.
    in_step: bool = False

    @property
    def master_addr(self) -> str:
        return self.hosts[0]

    @property
    def job_key(self) -> str:
        """Names this job's state across requeues: array tasks share their array's id."""
        if self.standalone:
            return "standalone"
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        assert self.job_id is not None
        return self.job_id

    @property
    def hostlist(self) -> str:
        """The hosts as one compact Slurm hostlist expression."""
        from slurm_ft.hostlist import compress

        return compress(self.hosts)

    @property
    def local_tasks(self) -> int:
        """Tasks Slurm placed on this node (1 when Slurm did not say)."""
        if len(self.tasks_per_node) == self.num_nodes:
            return self.tasks_per_node[self.node_rank]
        return 1

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        hostname: str | None = None,
        *,
        max_hosts: int | None = None,
    ) -> SlurmJob:
        """Read and cross-check the SLURM_* variables of ``env``.

        ``hostname`` names the node only where Slurm does not (standalone, or an
        allocation shell without ``SLURMD_NODENAME``/``SLURM_NODEID``); it defaults to the
        short host name of this machine.
        """
        if "SLURM_JOB_ID" not in env:
            return _standalone(hostname)
        return _from_slurm_env(env, hostname, max_hosts)

    @classmethod
    def by_hand(
        cls,
        *,
        num_nodes: int,
        node_rank: int,
        master_addr: str,
        hostname: str | None = None,
    ) -> SlurmJob:
        """A job without Slurm whose topology comes from torchrun's flags (``--nnodes``,
        ``--node-rank``, ``--master-addr``), checked the way the SLURM_* variables are;
        the message names the flag. It is still ``standalone`` (no job id, no requeue)."""
        if num_nodes < 1:
            raise SlurmEnvError(f"--nnodes {num_nodes}: must be at least 1")
        if not 0 <= node_rank < num_nodes:
            raise SlurmEnvError(f"--node-rank {node_rank} is outside [0, {num_nodes}) (--nnodes {num_nodes})")
        if not master_addr or any(c.isspace() for c in master_addr):
            raise SlurmEnvError(f"--master-addr {master_addr!r} is not a host name or address")
        job = _standalone(hostname)
        if num_nodes == 1 and node_rank == 0 and master_addr == STANDALONE_ADDR:
            return job
        return dataclasses.replace(
            job,
            num_nodes=num_nodes,
            node_rank=node_rank,
            hosts=(master_addr,),
            tasks_per_node=(),
            procid=node_rank,
            ntasks=num_nodes,
        )


def _standalone(hostname: str | None) -> SlurmJob:
    return SlurmJob(
        standalone=True,
        job_id=None,
        array_job_id=None,
        array_task_id=None,
        attempt=0,
        num_nodes=1,
        node_rank=0,
        node_name=hostname if hostname is not None else _short_hostname(),
        hosts=(STANDALONE_ADDR,),
        tasks_per_node=(1,),
        cpus_on_node=None,
        gpus_on_node=None,
        procid=0,
        localid=0,
        ntasks=1,
        submit_dir=None,
    )


def _short_hostname() -> str:
    return os.uname().nodename.split(".", 1)[0]  # gethostname(), without importing socket


def _first_present(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in env), None)


def _uint(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    if not _UINT_RE.fullmatch(value):
        raise SlurmEnvError(f"{name}={_clip(value)!r} is not a non-negative integer")
    return int(value)


def _opt_uint(env: Mapping[str, str], name: str) -> int | None:
    return _uint(env, name) if name in env else None


def parse_tasks_per_node(name: str, value: str, max_nodes: int) -> tuple[int, ...]:
    """``2(x3),1`` -> (2, 2, 2, 1); more than ``max_nodes`` entries is an error, found early."""
    counts: list[int] = []
    shown = _clip(value)
    for item in value.split(","):
        m = _TASKS_ITEM_RE.fullmatch(item)
        if m is None:
            raise SlurmEnvError(f"{name}={shown!r}: {_clip(item)!r} is not N or N(xM)")
        tasks = int(m.group(1))
        repeat = 1 if m.group(2) is None else int(m.group(2))
        if tasks < 1 or repeat < 1:
            raise SlurmEnvError(f"{name}={shown!r}: {item!r} must count at least one task and node")
        if len(counts) + repeat > max_nodes:
            raise SlurmEnvError(f"{name}={shown!r} lists more than {max_nodes} nodes")
        counts.extend([tasks] * repeat)
    return tuple(counts)


def _from_slurm_env(env: Mapping[str, str], hostname: str | None, max_hosts: int | None) -> SlurmJob:
    """Each reader checks one part of the contract, in this order (the first wrong one is named)."""
    _uint(env, "SLURM_JOB_ID")
    array_job_id, array_task_id = _array_ids(env)
    attempt = _opt_uint(env, "SLURM_RESTART_COUNT") or 0
    names = _names(env)
    hosts = _hosts(env, names.nodelist, max_hosts)
    num_nodes = _num_nodes(env, names, hosts)
    node_rank, node_name = _this_node(env, names.nodelist, hosts, num_nodes, hostname)
    tasks_per_node = _tasks_per_node(env, names, num_nodes)
    ntasks = _ntasks(env, names, tasks_per_node, num_nodes)
    procid, localid = _task_ids(env, names, ntasks, tasks_per_node, node_rank)
    step_var = _first_present(env, ("SLURM_STEP_ID", "SLURM_STEPID"))
    return SlurmJob(
        standalone=False,
        job_id=env["SLURM_JOB_ID"],
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        attempt=attempt,
        num_nodes=num_nodes,
        node_rank=node_rank,
        node_name=node_name,
        hosts=hosts,
        tasks_per_node=tasks_per_node,
        cpus_on_node=_opt_uint(env, "SLURM_CPUS_ON_NODE"),
        gpus_on_node=_opt_uint(env, "SLURM_GPUS_ON_NODE"),
        procid=procid,
        localid=localid,
        ntasks=ntasks,
        submit_dir=env.get("SLURM_SUBMIT_DIR") or None,
        step_id=env[step_var] if step_var is not None else None,
        in_step=names.in_step or step_var is not None,
    )


def _array_ids(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    """The array job id and task id: both or neither."""
    array_job_id = env["SLURM_ARRAY_JOB_ID"] if _opt_uint(env, "SLURM_ARRAY_JOB_ID") is not None else None
    array_task_id = _opt_uint(env, "SLURM_ARRAY_TASK_ID")
    if (array_job_id is None) != (array_task_id is None):
        present, missing = (
            ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
            if array_job_id is not None
            else ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID")
        )
        raise SlurmEnvError(f"{present}={_clip(env[present])!r} is set but {missing} is not")
    return array_job_id, array_task_id


@dataclass(frozen=True)
class _Names:
    """Which variable says what, present in this environment (None: none of them is)."""

    in_step: bool
    nodelist: str
    node_count: str | None
    tasks_per_node: str | None
    ntasks: str | None


def _names(env: Mapping[str, str]) -> _Names:
    # A step's own variables describe the step. srun also sets SLURM_NNODES, SLURM_NTASKS
    # and SLURM_TASKS_PER_NODE to the step's values, so inside a step those are the
    # fallbacks; SLURM_NODELIST keeps the job's list there (tests/data/slurm_env shows it),
    # so it is only ever a fallback for the job's own list.
    in_step = "SLURM_STEP_NODELIST" in env
    list_var: str | None
    if in_step:
        list_var = "SLURM_STEP_NODELIST"
        count_var = _first_present(env, ("SLURM_STEP_NUM_NODES", "SLURM_NNODES"))
        tasks_var = _first_present(env, ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
        ntasks_var = _first_present(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
    else:
        list_var = _first_present(env, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        count_var = _first_present(env, ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"))
        tasks_var = _first_present(env, ("SLURM_TASKS_PER_NODE",))
        ntasks_var = _first_present(env, ("SLURM_NTASKS", "SLURM_NPROCS"))
    if list_var is None:
        raise SlurmEnvError(
            f"SLURM_JOB_ID={_clip(env['SLURM_JOB_ID'])!r} is set but SLURM_JOB_NODELIST is not"
        )
    return _Names(in_step, list_var, count_var, tasks_var, ntasks_var)


def _hosts(env: Mapping[str, str], list_var: str, max_hosts: int | None) -> tuple[str, ...]:
    # hostlist loads here, in a Slurm job only: a standalone start never expands a list.
    from slurm_ft.hostlist import DEFAULT_MAX_HOSTS, HostlistError, expand

    try:
        hosts = tuple(expand(env[list_var], max_hosts=DEFAULT_MAX_HOSTS if max_hosts is None else max_hosts))
    except HostlistError as exc:
        raise SlurmEnvError(f"{list_var}={_clip(env[list_var])!r}: {exc}") from None
    if not hosts:
        raise SlurmEnvError(f"{list_var}={_clip(env[list_var])!r} names no hosts")
    return hosts


def _num_nodes(env: Mapping[str, str], names: _Names, hosts: tuple[str, ...]) -> int:
    if (count_var := names.node_count) is None:
        return len(hosts)
    num_nodes = _uint(env, count_var)
    if num_nodes < 1:
        raise SlurmEnvError(f"{count_var}={_clip(env[count_var])!r} must be at least 1")
    if num_nodes != len(hosts):
        raise SlurmEnvError(
            f"{count_var}={_clip(env[count_var])!r} but {names.nodelist}={_clip(env[names.nodelist])!r} "
            f"names {len(hosts)} hosts"
        )
    return num_nodes


def _this_node(
    env: Mapping[str, str], list_var: str, hosts: tuple[str, ...], num_nodes: int, hostname: str | None
) -> tuple[int, str]:
    """This node's rank and name: by ``SLURM_NODEID``, else by ``SLURMD_NODENAME``."""
    node_name_env = env.get("SLURMD_NODENAME")
    if "SLURM_NODEID" in env:
        node_rank = _uint(env, "SLURM_NODEID")
        if node_rank >= num_nodes:
            raise SlurmEnvError(
                f"SLURM_NODEID={_clip(env['SLURM_NODEID'])!r} is outside [0, {num_nodes}) "
                f"({list_var}={_clip(env[list_var])!r})"
            )
        return node_rank, node_name_env if node_name_env is not None else hosts[node_rank]
    if node_name_env is not None:
        # No node id (an allocation shell, or a hand-made environment): find the node by name.
        if node_name_env not in hosts:
            raise SlurmEnvError(
                f"SLURMD_NODENAME={node_name_env!r} is not in {list_var}="
                f"{_clip(env[list_var])!r} and SLURM_NODEID is not set"
            )
        return hosts.index(node_name_env), node_name_env
    # An salloc shell on a login node: not one of the job's nodes at all.
    return 0, hostname if hostname is not None else _short_hostname()


def _tasks_per_node(env: Mapping[str, str], names: _Names, num_nodes: int) -> tuple[int, ...]:
    if (tasks_var := names.tasks_per_node) is None:
        return ()
    tasks_per_node = parse_tasks_per_node(tasks_var, env[tasks_var], num_nodes)
    if len(tasks_per_node) != num_nodes:
        raise SlurmEnvError(
            f"{tasks_var}={_clip(env[tasks_var])!r} lists {len(tasks_per_node)} nodes, "
            f"not {num_nodes} ({names.node_count or names.nodelist})"
        )
    return tasks_per_node


def _ntasks(env: Mapping[str, str], names: _Names, tasks_per_node: tuple[int, ...], num_nodes: int) -> int:
    if (ntasks_var := names.ntasks) is None:
        return sum(tasks_per_node) if tasks_per_node else num_nodes
    ntasks = _uint(env, ntasks_var)
    if ntasks < 1:
        raise SlurmEnvError(f"{ntasks_var}={_clip(env[ntasks_var])!r} must be at least 1")
    return ntasks


def _task_ids(
    env: Mapping[str, str], names: _Names, ntasks: int, tasks_per_node: tuple[int, ...], node_rank: int
) -> tuple[int, int]:
    """This task's ``SLURM_PROCID`` and ``SLURM_LOCALID``, each inside its range."""
    procid = _opt_uint(env, "SLURM_PROCID") or 0
    if procid >= ntasks:
        ntasks_var = names.ntasks or "tasks"
        raise SlurmEnvError(
            f"SLURM_PROCID={_clip(env['SLURM_PROCID'])!r} is outside [0, {ntasks}) ({ntasks_var})"
        )
    localid = _opt_uint(env, "SLURM_LOCALID") or 0
    tasks_var = names.tasks_per_node
    if tasks_var is not None and tasks_per_node and localid >= tasks_per_node[node_rank]:
        raise SlurmEnvError(
            f"SLURM_LOCALID={_clip(env['SLURM_LOCALID'])!r} is outside [0, {tasks_per_node[node_rank]}) "
            f"(node {node_rank} of {tasks_var}={_clip(env[tasks_var])!r})"
        )
    return procid, localid


ONE_PER_NODE = "srun --ntasks-per-node=1"


def launcher_placement_problem(job: SlurmJob, *, outside_step_allowed: bool = False) -> str | None:
    """Why a launcher must not start with this view of the job, or None.

    One launcher per node starts all of the node's workers. Two launchers on one node (a
    step of ``--ntasks-per-node=8`` launched as is) would each run the whole job with the
    same ranks and the same state dir; a launcher outside any step (an salloc shell, a
    batch script without srun) is either not on one of the job's nodes or alone where
    the other nodes never start one, and node 0 would wait out its join timeout. Both are
    found here, before anything starts. ``outside_step_allowed``: the user said they know
    better (a one-off on a node of their own) and only the first check applies.
    """
    if job.standalone:
        return None
    if job.in_step and (job.local_tasks > 1 or job.localid > 0):
        tasks = max(job.local_tasks, job.localid + 1)
        return (
            f"this job step runs {tasks} tasks on {job.node_name} ({job.ntasks} tasks on "
            f"{job.num_nodes} node(s)): every task would be a launcher running the whole job "
            f"with the same ranks; start one launcher per node: {ONE_PER_NODE} slurm-ft-launch ..."
        )
    if job.in_step or outside_step_allowed:
        return None
    if job.node_name not in job.hosts:
        where = f"{job.node_name} is not one of the job's nodes ({job.hostlist})"
    elif job.num_nodes > 1:
        where = f"only {job.node_name} of the job's {job.num_nodes} nodes would start a launcher"
    else:
        return None  # a one-node batch script on its node: the same as a one-task step
    return (
        f"not inside a job step on one of the job's nodes ({where}): run it with "
        f"{ONE_PER_NODE} slurm-ft-launch ... (or, knowing better, --allow-outside-step)"
    )


def _clip(value: str) -> str:
    """A variable's value short enough for a one-line error message."""
    return value if len(value) <= 80 else value[:77] + "..."


def rdzv_port(job: SlurmJob, port_range: tuple[int, int], override: int | None = None) -> int:
    """The launchers' store port: the same on every node of a job, different between jobs.

    Every node computes it alone from the job id, so no exchange is needed before the
    store exists. Job ids are handed out in sequence (each array task has its own), so
    ``lo + job_id mod size`` gives jobs that run at the same time, and may share a node,
    different ports unless their ids are a multiple of the range size apart; a hash
    would collide between neighbours as often as between strangers.
    """
    lo, hi = port_range
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"port range {lo}-{hi} is not within 1-65535")
    if override is not None:
        if not 1 <= override <= 65535:
            raise ValueError(f"rendezvous port {override} is not within 1-65535")
        return override
    if job.standalone or job.job_id is None:
        return lo
    return lo + int(job.job_id) % (hi - lo + 1)


RDZV_PORT_TRIES = 4


def rdzv_ports(job: SlurmJob, port_range: tuple[int, int], override: int | None = None) -> tuple[int, ...]:
    """The ports node 0 tries, in order, when one is in use; peers look for it on each.

    The first is :func:`rdzv_port`. The others step through the range by a quarter of its
    size, so two jobs whose first ports clash (ids a multiple of the range size apart)
    move on to ports of their own sequence that no neighbouring job id starts with.
    """
    first = rdzv_port(job, port_range, override)
    lo, hi = port_range
    size = hi - lo + 1
    stride = max(1, size // RDZV_PORT_TRIES)
    ports = [first]
    for k in range(1, RDZV_PORT_TRIES):
        port = lo + (first - lo + k * stride) % size
        if port not in ports:
            ports.append(port)
    return tuple(ports)


def describe(job: SlurmJob, port: int) -> dict[str, object]:
    """The derived topology in the order ``python -m slurm_ft.slurm`` prints it."""
    return {
        "node_rank": job.node_rank,
        "num_nodes": job.num_nodes,
        "node_name": job.node_name,
        "master_addr": job.master_addr,
        "rdzv_port": port,
        "hosts": job.hostlist,
        "job_key": job.job_key,
        "attempt": job.attempt,
    }


def describe_full(job: SlurmJob, port: int) -> dict[str, object]:
    """:func:`describe` plus every other field, for ``--json``."""
    out = describe(job, port)
    out.update(
        standalone=job.standalone,
        job_id=job.job_id,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        step_id=job.step_id,
        in_step=job.in_step,
        tasks_per_node=list(job.tasks_per_node),
        cpus_on_node=job.cpus_on_node,
        gpus_on_node=job.gpus_on_node,
        procid=job.procid,
        localid=job.localid,
        ntasks=job.ntasks,
        submit_dir=job.submit_dir,
    )
    return out


def format_line(fields: Mapping[str, object]) -> str:
    return " ".join(f"{key}={value}" for key, value in fields.items())
