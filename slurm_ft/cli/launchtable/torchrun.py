"""torchrun's flags as this launcher takes them, and what to run."""

from __future__ import annotations

from slurm_ft.cli.launchtable.records import OptionGroup, opt

TORCHRUN = OptionGroup(
    "torchrun's flags (checked against Slurm; without Slurm they define the job)",
    (
        opt("--nnodes", dest="nnodes", metavar="N|MIN:MAX", help="node count (checked against Slurm)"),
        opt("--node-rank", "--node_rank", dest="node_rank", metavar="K", help="this node's rank"),
        opt("--master-addr", "--master_addr", dest="master_addr", metavar="HOST", help="node 0's address"),
        opt("--master-port", "--master_port", dest="master_port", metavar="PORT", help="node 0's store port"),
        opt(
            "--rdzv-endpoint",
            "--rdzv_endpoint",
            dest="rdzv_endpoint",
            metavar="HOST[:PORT]",
            help="node 0's address and store port",
        ),
        opt(
            "--rdzv-id", "--rdzv_id", dest="rdzv_id", metavar="ID", help="accepted; the job id names the run"
        ),
        opt(
            "--rdzv-backend",
            "--rdzv_backend",
            dest="rdzv_backend",
            metavar="c10d|static",
            help="accepted; one rendezvous here",
        ),
        opt(
            "--rdzv-conf",
            "--rdzv_conf",
            dest="rdzv_conf",
            metavar="K=V,...",
            help="join_timeout=S is --join-timeout; the rest accepted",
        ),
        opt("--standalone", dest="standalone", takes="flag", help="one node, no Slurm needed"),
        opt("--local-addr", "--local_addr", dest="local_addr", metavar="HOST", help="this node's name"),
        opt(
            "--role",
            dest="role",
            metavar="NAME",
            help="ROLE_NAME of the workers",
            setting="launch.role",
        ),
        opt(
            "--start-method",
            "--start_method",
            dest="start_method",
            choices=("spawn", "fork", "forkserver"),
            help="accepted; every worker is a new process, as torchrun does for scripts",
        ),
        opt(
            "--signals-to-handle",
            "--signals_to_handle",
            dest="forward_signals",
            metavar="LIST",
            help="same as --forward-signals",
            setting="launch.forward_signals",
        ),
        opt(
            "--shutdown-timeout",
            "--shutdown_timeout",
            dest="shutdown_timeout",
            metavar="S",
            help="sets --workers-stop-timeout and --term-timeout",
        ),
    ),
    section=True,
)

WHAT_TO_RUN = OptionGroup(
    "what to run",
    (
        opt("-m", "--module", dest="module", takes="flag", help="run the target as 'python -m MODULE'"),
        opt(
            "--no-python",
            "--no_python",
            dest="no_python",
            takes="flag",
            help="run the target as a plain command, not a Python script",
        ),
        opt(
            "--run-path",
            "--run_path",
            dest="run_path",
            takes="flag",
            help="torchrun's: run the script (here, as without the flag: one interpreter per worker)",
        ),
    ),
    exclusive=True,
)
