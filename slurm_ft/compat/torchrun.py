"""torchrun's topology and rendezvous flags -> checks against Slurm, or the topology itself.

Under Slurm the job's shape is already decided by the allocation, so ``--nnodes``,
``--node-rank``, ``--master-addr``, ``--rdzv-endpoint``, ``--standalone``, ``--local-addr``
and the ``is_host``/``rank`` rendezvous options are checked against it: consistent values
pass, a contradiction is one line naming both values. Without Slurm they describe the job
the way torchrun reads them. A port given by ``--rdzv-endpoint``/``--master-port`` becomes
node 0's store port in both cases.

``--nnodes MIN:MAX`` here: accepted when the node count (Slurm's, or MIN == MAX without
Slurm) lies in the range; every cycle then runs on all of those nodes. torchrun would
also run with fewer (down to MIN) and ft_launcher would keep the nodes above MIN as hot
spares; neither is done here (spare nodes are ``--spare-nodes K``, in segments of
``--segment``/``--ft-segment`` nodes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_ft.compat.errors import CompatError
from slurm_ft.slurm import STANDALONE_ADDR, SlurmEnvError, SlurmJob

DEFAULT_MASTER_PORT = 29500  # torchrun's --master-port default
DEFAULT_C10D_PORT = 29400  # torchrun's port for an --rdzv-endpoint given without one
BACKENDS = ("c10d", "static")

# --rdzv-conf keys: those with a meaning here, those torchrun has that change nothing here.
RDZV_CONF_EFFECTIVE = {
    "join_timeout": "launch.join_timeout",
    "timeout": "launch.join_timeout",  # the static backend's name for it
}
RDZV_CONF_CHECKED = ("is_host", "rank")
RDZV_CONF_NO_EFFECT = {
    "last_call_timeout": "every node must join; there is no late-join window",
    "close_timeout": "every node must join; there is no late-join window",
    "read_timeout": "store operations have their own bounded timeouts",
    "keep_alive_interval": "launchers heartbeat at launch.heartbeat_interval",
    "keep_alive_max_attempt": "launchers are lost after launch.heartbeat_timeout",
    "use_libuv": "the store always uses libuv",
}


@dataclass(frozen=True)
class TorchrunFlags:
    """The flags as given (strings, None when absent); ``_name`` fields keep the spelling
    the user wrote, for messages."""

    nnodes: str | None = None
    node_rank: str | None = None
    master_addr: str | None = None
    master_port: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_backend: str | None = None
    rdzv_conf: str | None = None
    standalone: bool = False
    local_addr: str | None = None


@dataclass(frozen=True)
class Request:
    """What the flags ask for, parsed and checked for internal consistency."""

    min_nodes: int | None = None
    max_nodes: int | None = None
    nnodes_text: str | None = None
    node_rank: int | None = None
    host: str | None = None
    host_flag: str = ""
    port: int | None = None
    port_flag: str = ""
    standalone: bool = False
    local_addr: str | None = None
    is_host: bool | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _int(flag: str, text: str, low: int = 0) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", text) or int(text) < low:
        raise CompatError(f"{flag} {text!r}: expected an integer >= {low}")
    return int(text)


def parse_nnodes(text: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` -> (min, max)."""
    parts = text.split(":")
    if len(parts) > 2:
        raise CompatError(f"--nnodes {text!r}: expected N or MIN:MAX")
    lo = _int("--nnodes", parts[0], 1)
    hi = _int("--nnodes", parts[-1], 1)
    if lo > hi:
        raise CompatError(f"--nnodes {text!r}: MIN is larger than MAX")
    return lo, hi


def parse_endpoint(text: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port)."""
    text = text.strip()
    m = re.fullmatch(r"\[([^\]]+)\](?::([0-9]+))?", text)
    if m:
        host, port_s = m.group(1), m.group(2)
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    else:
        host, port_s = text, None
    if not host:
        raise CompatError(f"--rdzv-endpoint {text!r}: no host")
    port = default_port if port_s is None else _int("--rdzv-endpoint", port_s, 1)
    if not 1 <= port <= 65535:
        raise CompatError(f"--rdzv-endpoint {text!r}: port must be 1-65535")
    return host, port


def parse_rdzv_conf(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CompatError(f"--rdzv-conf {text!r}: expected KEY=VALUE pairs separated by commas")
        out[key.strip()] = value.strip()
    return out


def _bool(flag: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "y"):
        return True
    if low in ("0", "false", "no", "n"):
        return False
    raise CompatError(f"{flag} {text!r}: expected true or false")


def parse(flags: TorchrunFlags) -> Request:
    notes: list[str] = []
    overrides: dict[str, str] = {}
    backend = (flags.rdzv_backend or "c10d").strip().lower()
    if backend not in BACKENDS:
        raise CompatError(
            f"--rdzv-backend {flags.rdzv_backend}: not supported; slurm-ft-launch runs its own "
            "store on node 0 (c10d and static mean that here)"
        )
    min_nodes = max_nodes = None
    if flags.nnodes is not None:
        min_nodes, max_nodes = parse_nnodes(flags.nnodes)
    node_rank = _int("--node-rank", flags.node_rank) if flags.node_rank is not None else None

    host = port = None
    host_flag = port_flag = ""
    if flags.rdzv_endpoint:
        default = DEFAULT_C10D_PORT if backend == "c10d" else DEFAULT_MASTER_PORT
        host, port = parse_endpoint(flags.rdzv_endpoint, default)
        host_flag = port_flag = "--rdzv-endpoint"
    master_port = _int("--master-port", flags.master_port, 1) if flags.master_port is not None else None
    if master_port is not None and master_port > 65535:
        raise CompatError(f"--master-port {master_port}: must be 1-65535")
    if host is not None:
        if flags.master_addr is not None and flags.master_addr != host:
            raise CompatError(
                f"--master-addr {flags.master_addr} contradicts --rdzv-endpoint {flags.rdzv_endpoint}"
            )
        if master_port is not None and master_port != port:
            raise CompatError(
                f"--master-port {master_port} contradicts --rdzv-endpoint {flags.rdzv_endpoint}"
            )
    else:
        if flags.master_addr is not None:
            host, host_flag = flags.master_addr.strip(), "--master-addr"
        if master_port is not None:
            port, port_flag = master_port, "--master-port"

    is_host = None
    for key, value in parse_rdzv_conf(flags.rdzv_conf or "").items():
        if key in RDZV_CONF_EFFECTIVE:
            overrides[RDZV_CONF_EFFECTIVE[key]] = value
        elif key == "is_host":
            is_host = _bool("--rdzv-conf is_host", value)
        elif key == "rank":
            rank = _int("--rdzv-conf rank", value)
            if node_rank is not None and rank != node_rank:
                raise CompatError(f"--rdzv-conf rank={rank} contradicts --node-rank {node_rank}")
            node_rank = rank
        elif key in RDZV_CONF_NO_EFFECT:
            notes.append(f"--rdzv-conf {key}: no effect ({RDZV_CONF_NO_EFFECT[key]})")
        else:
            raise CompatError(f"--rdzv-conf {key}: not a rendezvous option slurm-ft-launch knows")

    if flags.standalone:
        if max_nodes is not None and max_nodes != 1:
            raise CompatError(f"--standalone means one node, but --nnodes is {flags.nnodes}")
        if node_rank not in (None, 0):
            raise CompatError(f"--standalone means one node, but --node-rank is {node_rank}")
        if host is not None or flags.rdzv_id is not None:
            notes.append("--standalone: the rendezvous flags are not used (as in torchrun)")
        host = port = None
        host_flag = port_flag = ""
        min_nodes = max_nodes = 1
    if min_nodes is not None and min_nodes != max_nodes:
        notes.append(
            f"--nnodes {flags.nnodes}: every cycle runs on all nodes of the job (no shrink, no spares)"
        )
    return Request(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nnodes_text=flags.nnodes if not flags.standalone else "1",
        node_rank=node_rank,
        host=host,
        host_flag=host_flag,
        port=port,
        port_flag=port_flag,
        standalone=flags.standalone,
        local_addr=flags.local_addr.strip() if flags.local_addr else None,
        is_host=is_host,
        overrides=overrides,
        notes=tuple(notes),
    )


def check_slurm(req: Request, job: SlurmJob, same_host: Callable[[str, str], bool]) -> None:
    """Raise CompatError when a flag contradicts the Slurm topology of ``job``.

    ``same_host(a, b)``: whether two names/addresses mean the same machine (the caller
    resolves them; this module does no I/O).
    """
    where = (
        f"Slurm gives this job step {job.num_nodes} node{'s' if job.num_nodes != 1 else ''} ({job.hostlist})"
    )
    if req.standalone and job.num_nodes != 1:
        raise CompatError(f"--standalone means one node, but {where}")
    if (
        req.min_nodes is not None
        and req.max_nodes is not None
        and not req.min_nodes <= job.num_nodes <= req.max_nodes
    ):
        raise CompatError(f"--nnodes {req.nnodes_text} contradicts the job: {where}")
    node = f"{job.node_name} is node {job.node_rank} of the Slurm job (SLURM_NODEID={job.node_rank})"
    if req.node_rank is not None and req.node_rank != job.node_rank:
        raise CompatError(f"--node-rank {req.node_rank} contradicts the job: {node}")
    if req.is_host is not None and req.is_host != (job.node_rank == 0):
        raise CompatError(
            f"--rdzv-conf is_host={str(req.is_host).lower()} contradicts the job: {node}, "
            "and node 0 hosts the store"
        )
    if req.host is not None and not same_host(req.host, job.master_addr):
        raise CompatError(
            f"{req.host_flag} host {req.host} contradicts the job: "
            f"node 0 of the Slurm job is {job.master_addr}"
        )
    if req.local_addr is not None and req.local_addr in job.hosts and req.local_addr != job.node_name:
        raise CompatError(f"--local-addr {req.local_addr} contradicts the job: this is {job.node_name}")


def job_without_slurm(req: Request, hostname: str | None = None) -> SlurmJob:
    """The topology torchrun would use for these flags, as a (standalone) SlurmJob."""
    nodes = req.max_nodes if req.max_nodes is not None else 1
    if req.min_nodes is not None and req.min_nodes != req.max_nodes:
        raise CompatError(
            f"--nnodes {req.nnodes_text}: without Slurm the node count must be fixed (--nnodes N); "
            "a range needs the Slurm allocation to say how many nodes there are"
        )
    if nodes > 1 and req.node_rank is None:
        raise CompatError(
            f"--nnodes {nodes} without Slurm needs --node-rank (slurm-ft numbers the nodes up front; "
            "torchrun's c10d backend numbers them as they join)"
        )
    if req.is_host is not None and req.is_host != ((req.node_rank or 0) == 0):
        raise CompatError(
            f"--rdzv-conf is_host={str(req.is_host).lower()} contradicts --node-rank {req.node_rank}"
        )
    try:
        return SlurmJob.by_hand(
            num_nodes=nodes,
            node_rank=req.node_rank or 0,
            master_addr=req.host or STANDALONE_ADDR,
            hostname=req.local_addr or hostname,
        )
    except SlurmEnvError as exc:
        raise CompatError(str(exc)) from None


def store_port(req: Request, job: SlurmJob) -> int | None:
    """Node 0's store port the flags ask for: theirs, or torchrun's default for a
    multi-node job by hand; None leaves the derived one."""
    if req.port is not None:
        return req.port
    if job.standalone and job.num_nodes > 1:
        return DEFAULT_MASTER_PORT
    return None


@dataclass(frozen=True)
class Refused:
    """A torchrun option with no counterpart here; ``allowed`` is the one value (its
    default) that asks for nothing and is accepted."""

    flags: tuple[str, ...]
    reason: str
    allowed: str | None = None
    switch: bool = False

    @property
    def dest(self) -> str:
        return "refused_" + self.flags[0].lstrip("-").replace("-", "_")

    def check(self, value: str | bool | None) -> None:
        if value is None or value is False:
            return
        if self.allowed is not None and value == self.allowed:
            return
        shown = self.flags[0] if self.switch else f"{self.flags[0]} {value}"
        raise CompatError(f"{shown}: not supported by slurm-ft-launch ({self.reason})")


REFUSED: tuple[Refused, ...] = (
    Refused(
        ("--event-log-handler", "--event_log_handler"),
        "launcher events go to --launcher-log",
        allowed="null",
    ),
    Refused(
        ("--duplicate-stdout-filters", "--duplicate_stdout_filters"),
        "every line is in the per-cycle log; filter it there",
    ),
    Refused(
        ("--duplicate-stderr-filters", "--duplicate_stderr_filters"),
        "every line is in the per-cycle log; filter it there",
    ),
    Refused(("--logs-specs", "--logs_specs"), "use --applog-prefix, --log-dir, --redirects, --tee"),
    Refused(
        ("--virtual-local-rank", "--virtual_local_rank"),
        "workers see every GPU of the node; set CUDA_VISIBLE_DEVICES in the script",
        switch=True,
    ),
)
