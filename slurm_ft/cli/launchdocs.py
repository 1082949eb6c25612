"""The meaning column of the docs' slurm-ft-launch option table, one entry per option.

The rest of each row (spellings, settings key and variable, default) comes from the option
table (:mod:`slurm_ft.cli.launchoptions`) and the settings' defaults (:mod:`slurm_ft.config`),
as ``--help`` does: :func:`readme_table` renders the table and a unit test compares it with
docs/reference/slurm-ft-launch.md, so the two cannot disagree; the man page reads the same
meanings (:mod:`slurm_ft.cli.refdocs`). Loaded only to render or test the docs. Links are
relative to docs/reference/.
"""

from __future__ import annotations

from slurm_ft.cli.launchtable import GROUPS, Option, setting_defaults, shown_default

MEANING: dict[str, str] = {
    "--nproc-per-node": (
        "workers per node. `auto`: GPUs on the node (Slurm's `SLURM_GPUS_ON_NODE`, else NVML), "
        "else 1; `gpu`: the same but an error without GPUs; `cpu`: CPU count"
    ),
    "--max-restarts": (
        "in-job restarts **for the whole job** (node 0 counts, every node agrees); `N+1` cycles "
        "at most per Slurm attempt"
    ),
    "--monitor-interval": (
        "the fallback poll of the job-wide state while workers run: a local worker's exit, "
        "another node's failure or success, a lost peer, a store host gone silent, a signal wake "
        "the launcher at once, so between events it sleeps (hang and NIC checks keep their own "
        "periods)"
    ),
    "--workers-stop-timeout": (
        "after a failure: the longest a worker that is still writing, or inside a section "
        "(`slurm_ft.worker.section`), may take after the termination signal before SIGKILL"
    ),
    "--failure-stop-grace": (
        "after a failure anywhere the job's collectives are broken and the other ranks can do no "
        "useful work: once a worker has been idle this long after the termination signal, "
        "SIGKILL. A worker still **writing** (an unmodified trainer saving a checkpoint) or "
        "inside a section keeps going, up to `--workers-stop-timeout`; a forwarded preemption "
        "signal keeps `--term-timeout`"
    ),
    "--term-timeout": (
        "after a forwarded signal: SIGKILL after this (below Slurm's usual KillWait of 30 s). The"
        " launcher says how long it waits; after Ctrl-C (SIGINT) a second Ctrl-C kills the "
        "workers at once. A stop that needed SIGKILL says so (`stopped 2 worker(s) with SIGKILL "
        "(on a second SIGINT)`)"
    ),
    "--join-timeout": (
        "how long node 0 waits for every launcher to join a cycle (also how long peers retry "
        "reaching node 0 at start)"
    ),
    "--rdzv-port": (
        "first port of node 0's rendezvous store; default `low + job_id mod size` of "
        "`launch.rdzv_port_range` (`20000-29999`); unused on a single node. When it is in use "
        "(another job's store on the same host), node 0 takes the next free port of a sequence of"
        " four (each a quarter of the range further on), and the peers look for it on each in "
        "turn, joining only the store that holds their own run; all four in use ends the attempt "
        "with the retryable exit 1"
    ),
    "--forward-signals": "signals forwarded to every worker group; each ends the launcher with 128+N",
    "--state-dir": "job state ([state dir](state-dir.md))",
    "--config": "YAML settings file",
    "--prom-file": (
        "Prometheus textfile metrics of this launcher (for node_exporter's textfile collector), "
        "written atomically on change and at most once a second; see [launcher "
        "metrics](metrics.md#launcher-metrics---prom-file)"
    ),
    "--dry-run": (
        "print the topology and the exact worker commands and environments (every variable the "
        "launcher sets, see [worker environment](worker-environment.md)); start nothing, bind "
        "nothing, import no torch; exit 0"
    ),
    "--allow-outside-step": (
        "start outside a job step. Without it a launcher started where it cannot work is refused "
        "at once (exit 2, one line): outside `srun` on a login node (an `salloc` shell) or in the"
        " batch script of a multi-node job (the other nodes would never start one), and, whatever"
        " this says, a step of more than one task on a node (`#SBATCH --ntasks-per-node=8` with a"
        " plain `srun`: every task a launcher running the whole job); run it with `srun "
        "--ntasks-per-node=1`"
    ),
    "--preload": (
        "standby workers: while a cycle trains, one interpreter per local rank imports MODULES "
        "(comma-separated) and waits; the next cycle's workers are these, so a restart does not "
        "wait for `import torch`. `auto`: the installed packages the script imports at its top "
        "level (through its own modules too); `none`: no standbys, every worker starts cold "
        "(see [warm restarts](../guides/warm-restarts.md))"
    ),
    "--snapshot-memory": (
        "the shared memory (`/dev/shm`) this node's workers may fill with snapshots "
        "(`slurm_ft.worker.snapshot`): the launcher makes the node's snapshot area at start, "
        "private to the user, keeps it across cycles and removes it at the job's end; a snapshot "
        "that would pass the cap is refused in the worker and training goes on. `auto`: a quarter "
        "of the node's memory, at most half of `/dev/shm`; `0`: no snapshots (see "
        "[snapshots](../guides/snapshots.md))"
    ),
    "--snapshot-persist-dir": (
        "where the launchers write the newest complete snapshot on the way out of an attempt "
        "(each rank's snapshot file copied as bytes, `rank-RRRRR.step<N>.snap`: no torch, so it "
        "fits a signal's grace period; `slurm-ft-snapshot export` makes a `torch.save` "
        "file of one): a preemption or time-limit signal, a cycle that ends the "
        "attempt (no restart or spare left) and the job's end, even when the workers are gone; "
        "the next attempt's `restore_snapshot()` falls back to it (source `persisted`). What "
        "could not be persisted is said in the outcome record"
    ),
    "--snapshot-persist-hook": (
        "persist through the trainer's own function instead of the byte copy: the launcher imports "
        "MODULE (from the job's working directory) in a child and calls "
        "`FUNCTION(rank, step, state, directory)` for each rank's newest snapshot (`directory`: "
        "`--snapshot-persist-dir`, or None); the child imports torch to hand it the state, which "
        "takes seconds of CPU on a loaded node: leave `--term-timeout` room for it"
    ),
    "--snapshot-persist-timeout": (
        "the longest the launchers' persist may take, in a child the launcher abandons at the "
        "deadline (a dead mount never holds the allocation); after a preemption signal, at most "
        "what `--term-timeout` leaves"
    ),
    "--snapshot-replicas": (
        "for state that differs per rank (FSDP, ZeRO, DCP shards): 1 copies the newest snapshot of "
        "a node's shards into the memory of the next active node (a ring), in the background at "
        "nice 19 (a snapshot superseded before or while its copy leaves is skipped; the trainer "
        "never waits for a replica), over the launchers' own authenticated connection (needs the "
        "job secret), so a single lost node's shards survive and the spare that takes its rank "
        "resumes from them; when a replica is behind, every rank resumes from the newest step all "
        "of them have. Replicated (DDP) state needs no replicas: a spare takes any surviving node's "
        "copy. See the [snapshots guide](../guides/snapshots.md#a-lost-node)"
    ),
    "--applog-prefix": (
        "per-cycle application log `/ABS/job_cycle<N>.log`, every worker line prefixed with its "
        "global rank (see [per-cycle "
        "logs](../guides/cycle-logs.md)); must be absolute"
    ),
    "--applog-per-node": (
        "one file per node and cycle (`job_node<K>/job_cycle<N>.node<K>.log`, a directory per "
        "node), for file systems without atomic append"
    ),
    "--tee": (
        "one option, two uses: `--tee` alone echoes every worker line (rank-prefixed, as in the "
        "cycle log) to stdout; torchrun's `--tee SPEC` (`3` all, `1` stdout, `2` stderr, "
        "`0:1,1:2` per local rank) sends those streams to per-rank files and the console as well"
    ),
    "--local-ranks-filter": "local ranks echoed by `--tee`",
    "--redirects": (
        "torchrun's: these streams (`3` all, `1` stdout, `2` stderr, `0:1,1:2` per local rank) to"
        " per-rank files instead of the console"
    ),
    "--log-dir": (
        "root of the per-rank files: `DIR/<run id>/attempt_<cycle>/<rank>/stdout.log`, `stderr.log`"
    ),
    "--role": "`ROLE_NAME` of the workers",
    "--launcher-log": "append the launcher's event lines to this file too",
    "--quiet": (
        "event lines only to the launcher log, not stderr; how the launch ended still reaches "
        "stderr in one line (`slurm-ft-launch: restarts-exhausted (exit 1): ...`)"
    ),
    "--progress-source": (
        "where the no-progress guard reads progress: `file:`, `checkpoint-dir:` or "
        "`iteration-file:` "
        "([progress](../guides/progress.md)); none: the "
        "guard is off"
    ),
    "--progress-pattern": "`checkpoint-dir:` entry names with one group, the step",
    "--checkpoint-iteration-file": "same as `--progress-source iteration-file:FILE`",
    "--max-no-progress-cycles": "stop (93) after this many cycles in a row without progress",
    "--min-progress-iterations": "how far the iteration must move to count as progress",
    "--health-checks": ("checks run before each join ([health check](../guides/health-checks.md))"),
    "--health-check-interval": (
        "while workers train, the `gpu` and `storage` checks of `--health-checks` run again every S "
        "seconds, bounded by the health deadline and never blocking the launcher; a failure ends "
        "the cycle (kind `unhealthy`) and the node joins the next one unhealthy: a spare takes "
        "its place, or the attempt ends with 94 naming it ([health during "
        "training](../guides/health-checks.md#health-during-training)); `0`: off"
    ),
    "--nics": "NICs that must be up",
    "--paths": "paths that must answer (`%n` = node name)",
    "--nic-mode": (
        "how the launcher's NIC check judges a port: by change since the launcher's start-time "
        "snapshot (a port down from the start, such as an unused second IB port, only warns), or "
        "`absolute` (any selected port not up fails the node). `health.nic_mode` is the "
        "standalone check's"
    ),
    "--numa-binding": (
        "CPU (and memory) binding of each worker by its GPU's NUMA node, torchrun's modes "
        "([placement](../guides/placement.md))"
    ),
    "--nic-affinity": "`NCCL_IB_HCA` / `UCX_NET_DEVICES` per worker: the RDMA port(s) nearest its GPU",
    "--nic-monitor": "watch the `--nics` ports while workers run; a port that goes down is an event",
    "--nic-monitor-interval": "seconds between two NIC samples",
    "--nic-monitor-fatal": "a port that goes down, flaps or vanishes fails this node and ends the cycle",
    "--spare-nodes": (
        "of the job's nodes, K stand by and take the node rank of a lost, unhealthy or suspect "
        "node in the next cycle, without a requeue ([spare nodes](../guides/spare-nodes.md)); world size = "
        "(nodes − K) × nproc"
    ),
    "--segment": (
        "with spares, nodes are active or spare in whole groups of S consecutive hostlist entries"
        " (NVLink or rack domains)"
    ),
    "--suspect-after": (
        "with spares, a node that hosted the first failure of M cycles in a row is suspect and replaced"
    ),
    "--hang-timeout": (
        "a hang: no worker of the **whole job** wrote anything (or heart-beat) for S seconds; `0`"
        " off ([hangs](../guides/hangs.md))"
    ),
    "--hang-iteration-timeout": (
        "a hang: the checkpoint iteration (`--checkpoint-iteration-file`) did not advance for S seconds"
    ),
    "--hang-safety-factor": (
        "learned timeouts: a hang at F × the longest gap between the job's signs of life (per cycle, "
        "kept in the ledger), within `--hang-learned-floor` and `--hang-timeout`; `0`: the fixed "
        "`--hang-timeout` alone ([hangs](../guides/hangs.md))"
    ),
    "--hang-learned-floor": "a learned timeout is never below S seconds",
    "--hang-initial-timeout": (
        "each cycle's warm-up (start-up, checkpoint load, compilation), judged by `--hang-timeout` "
        "only and teaching the learned timeouts nothing: its first S seconds, or less: with a "
        "progress source until the cycle's first progress, and once the ledger knows how the job "
        "starts, until max(`--hang-learned-floor`, F × that start-up); a rank stopped or in "
        "uninterruptible sleep through the job's silence is judged whatever the warm-up says "
        "([hangs](../guides/hangs.md))"
    ),
    "--rank-heartbeat-timeout": (
        "opt-in: a rank that called `slurm_ft.worker.heartbeat()` did not call it again for S seconds"
    ),
    "--rank-initial-heartbeat-timeout": "opt-in: no first heartbeat S seconds after the worker started",
    "--rank-section-timeouts": "opt-in: a `slurm_ft.worker.section(NAME)` open longer than S",
    "--rank-out-of-section-timeout": "opt-in: outside every section for S seconds, once the rank used one",
    "--rank-termination-signal": (
        "the first signal of every failure stop (hang, crash elsewhere); SIGKILL follows after "
        "`--workers-stop-timeout`"
    ),
}

START = "<!-- LAUNCH-OPTIONS:START -->"
END = "<!-- LAUNCH-OPTIONS:END -->"
# The settings cell where an option is not one setting's (or names none).
KEY_CELL: dict[str, str] = {
    "--config": "",
    "--dry-run": "",
    "--tee": "`applog.tee`, `applog.tee_streams`",
    "--health-checks": "`health.checks` / `SLURM_FT_HEALTH_CHECKS`",
}


def _name(option: Option) -> str:
    return next(f for f in option.flags if f.startswith("--"))


def _takes(option: Option) -> str:
    """What the option takes, as its word (an enum member or the word itself)."""
    return str(getattr(option.takes, "value", option.takes))


def _option_cell(option: Option) -> str:
    name = _name(option)
    if option.choices:
        takes = " " + "\\|".join(option.choices)
    elif _takes(option) in ("flag", "switch"):
        takes = ""
    elif _takes(option) == "optional":
        takes = f" [{option.metavar}]"
    else:
        takes = f" {(option.metavar or 'VALUE').replace('|', chr(92) + '|')}"
    shorts = [f"`{f}`" for f in option.flags if not f.startswith("--")]
    return ", ".join([f"`{name}{takes}`", *shorts])


def _key_cell(option: Option) -> str:
    from slurm_ft.config import env_name

    name = _name(option)
    if name in KEY_CELL:
        return KEY_CELL[name]
    if option.setting is None:
        return ""
    return f"`{option.setting}` / `{env_name(option.setting)}`"


def readme_rows() -> list[str]:
    """The table's rows: every option that has a meaning here, in the option table's order."""
    defaults = setting_defaults()
    rows = ["| option | YAML key / environment | default | meaning |", "|---|---|---|---|"]
    for group in GROUPS:
        for option in group.options:
            name = _name(option)
            if name not in MEANING:
                continue
            cells = (
                _option_cell(option),
                _key_cell(option),
                shown_default(option, defaults) or "",
                MEANING[name],
            )
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def render_into(text: str) -> str:
    """``text`` (the reference page) with the table between the markers rendered afresh."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START} ... {END} are missing")
    return text[: start + len(START)] + "\n" + "\n".join(readme_rows()) + "\n" + text[end:]
