"""The compatibility table: every torchrun and ft_launcher option, what it does here.

The docs' table (docs/reference/compat.md) is rendered from this data
(``python scripts/lib/render_docs.py``) and a unit test parses every option in it, so
table, parser and docs cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ft.compat.fttable import FT_OPTIONS, Kind
from slurm_ft.compat.torchrun import REFUSED

START = "<!-- COMPAT:START -->"
END = "<!-- COMPAT:END -->"


@dataclass(frozen=True)
class Row:
    tool: str  # "torchrun", "ft_launcher", or both
    flags: tuple[str, ...]  # every spelling accepted
    status: str  # "same", "checked", "alias", "difference", "no effect", "not supported", ...
    here: str


TORCHRUN_ROWS: tuple[Row, ...] = (
    Row(
        "torchrun",
        ("--nnodes",),
        "checked",
        "Slurm: `N`, or `MIN:MAX` around the Slurm node count, else exit 2 naming both; every cycle "
        "runs on all nodes. Without Slurm: the node count (`N`).",
    ),
    Row(
        "torchrun",
        ("--nproc-per-node", "--nproc_per_node"),
        "same",
        "Workers per node: `auto`, `gpu`, `cpu`, N.",
    ),
    Row(
        "torchrun",
        ("--node-rank", "--node_rank"),
        "checked",
        "Slurm: must equal `SLURM_NODEID`. Without Slurm: this node's rank (needed when `--nnodes` > 1).",
    ),
    Row(
        "torchrun",
        ("--master-addr", "--master_addr"),
        "checked",
        "Slurm: must name node 0 of the job (same name, same address, or both loopback). "
        "Without Slurm: node 0's address.",
    ),
    Row(
        "torchrun",
        ("--master-port", "--master_port"),
        "alias",
        "Node 0's store port (`slurm_ft.launch.rdzv_port`); without Slurm 29500 by default.",
    ),
    Row(
        "torchrun",
        ("--rdzv-endpoint", "--rdzv_endpoint"),
        "checked",
        "`HOST[:PORT]`: the host as `--master-addr`, the port as `--master-port`.",
    ),
    Row(
        "torchrun",
        ("--rdzv-id", "--rdzv_id"),
        "no effect",
        "The run id is always `<job>-a<attempt>` (`TORCHELASTIC_RUN_ID`).",
    ),
    Row(
        "torchrun",
        ("--rdzv-backend", "--rdzv_backend"),
        "checked",
        "`c10d` and `static` (node 0's store); any other backend: exit 2.",
    ),
    Row(
        "torchrun",
        ("--rdzv-conf", "--rdzv_conf"),
        "alias",
        "`join_timeout`/`timeout`: `slurm_ft.launch.join_timeout`; `is_host`, `rank`: checked; "
        "`last_call_timeout`, `close_timeout`, `read_timeout`, `keep_alive_*`, `use_libuv`: no effect "
        "(one note line); other keys: exit 2.",
    ),
    Row(
        "torchrun",
        ("--standalone",),
        "checked",
        "One node; rendezvous flags unused (as torchrun). Under Slurm with more than one node: exit 2.",
    ),
    Row(
        "torchrun",
        ("--local-addr", "--local_addr"),
        "checked",
        "Slurm: must not name another node of the job. Without Slurm: this node's name.",
    ),
    Row(
        "torchrun",
        ("--max-restarts", "--max_restarts"),
        "difference",
        "**The one intended difference:** restarts for the whole job, agreed by every node "
        "(torchrun counts per launcher).",
    ),
    Row("torchrun", ("--monitor-interval", "--monitor_interval"), "same", "How often the launcher polls."),
    Row(
        "torchrun",
        ("--start-method", "--start_method"),
        "no effect",
        "`spawn`, `fork`, `forkserver`: every worker is a new process (as torchrun does for scripts).",
    ),
    Row("torchrun", ("--role",), "same", "`ROLE_NAME` of the workers (`slurm_ft.launch.role`)."),
    Row("torchrun", ("-m", "--module"), "same", "Run the target as `python -m MODULE`."),
    Row("torchrun", ("--no-python", "--no_python"), "same", "Run the target as a plain command."),
    Row(
        "torchrun",
        ("--run-path", "--run_path"),
        "same",
        "The script runs as `__main__` in its own interpreter per worker (as without the flag).",
    ),
    Row(
        "torchrun",
        ("--log-dir", "--log_dir"),
        "same",
        "Per-rank files `<log_dir>/<run_id>/attempt_<cycle>/<rank>/stdout.log`, `stderr.log` (global "
        "rank and cycle); default `<state dir>/logs`.",
    ),
    Row(
        "torchrun",
        ("-r", "--redirects"),
        "same",
        "Those streams go to the per-rank files and not to the console; the cycle log still has every line.",
    ),
    Row(
        "torchrun",
        ("-t", "--tee"),
        "same",
        "`--tee SPEC`: those streams also to the per-rank files. `--tee` alone: slurm-ft's console echo.",
    ),
    Row(
        "torchrun",
        ("--local-ranks-filter", "--local_ranks_filter"),
        "same",
        "Console echo of these local ranks only.",
    ),
    Row(
        "torchrun",
        ("--numa-binding", "--numa_binding"),
        "same",
        "`none`, `node`, `socket`, `exclusive` (`slurm_ft.launch.numa_binding`).",
    ),
    Row(
        "torchrun",
        ("--signals-to-handle", "--signals_to_handle"),
        "alias",
        "`--forward-signals`.",
    ),
    Row(
        "torchrun",
        ("--shutdown-timeout", "--shutdown_timeout"),
        "alias",
        "Sets `--workers-stop-timeout` and `--term-timeout`.",
    ),
    *(
        Row(
            "torchrun",
            r.flags,
            "not supported",
            f"Exit 2 ({r.reason})" + (f"; `{r.allowed}` accepted." if r.allowed else "."),
        )
        for r in REFUSED
    ),
    Row(
        "ft_launcher",
        ("--term-timeout", "--term_timeout"),
        "same",
        "Grace after forwarding a terminating signal before SIGKILL.",
    ),
    Row(
        "ft_launcher",
        ("--workers-stop-timeout", "--workers_stop_timeout"),
        "same",
        "SIGTERM to SIGKILL grace when stopping workers after a failure.",
    ),
)

_FT_STATUS = {
    Kind.ALIAS: "alias",
    Kind.HANG: "alias (hang)",
    Kind.CONFIG: "alias",
    Kind.NO_EFFECT: "no effect",
    Kind.LATER: "not supported yet",
    Kind.UNSUPPORTED: "not supported",
}


def ft_rows() -> tuple[Row, ...]:
    rows = []
    for opt in FT_OPTIONS:
        here = opt.meaning[0].upper() + opt.meaning[1:]
        if opt.kind is Kind.UNSUPPORTED:
            here = f"Exit 2 ({opt.meaning}); an off value (`none`, `false`, `0`) is accepted."
        elif opt.kind is Kind.LATER:
            here = f"Exit 2: {opt.meaning} not supported yet; an off value is accepted."
        yaml = f" YAML `{opt.yaml_key}`." if opt.yaml else ""
        rows.append(Row("ft_launcher", (opt.flag,), _FT_STATUS[opt.kind], here + yaml))
    return tuple(rows)


def rows() -> tuple[Row, ...]:
    return TORCHRUN_ROWS + ft_rows()


def render() -> str:
    out = ["| tool | option | here | what it does in slurm-ft-launch |", "|---|---|---|---|"]
    for row in rows():
        flags = ", ".join(f"`{f}`" for f in row.flags)
        out.append(f"| {row.tool} | {flags} | {row.status} | {row.here} |")
    return "\n".join(out) + "\n"


def render_into(text: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START} ... {END} are missing")
    return text[: start + len(START)] + "\n" + render() + text[end:]
