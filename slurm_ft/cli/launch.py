"""Front end of slurm-ft-launch: the one place that reads os.environ and sys.argv.

Everything that can be wrong with the input is found here, before any process starts or
any file is written: argparse errors, settings, the SLURM_* topology, the script, the
state dir, the applog prefix. Each is one line on stderr and exit 2, said in one place
(:func:`main`, from the exception types in :data:`BAD_INPUT`). Only one input
error can surface later (a corrupt ledger) and it is reported the same way, still before
any worker starts. (Node 0's rendezvous ports all in use is not bad input: it is
retryable, exit 1.)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_ft import config, jobpointer, lifelong, privatefiles, statedir
from slurm_ft.cli.launchoptions import PROG, Interpreted, interpret, option_names
from slurm_ft.cli.usage import UsageError
from slurm_ft.compat.errors import CompatError
from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch.context import AgentConfig, BadInput, run_id_for
from slurm_ft.launch.rendezvous import resolver
from slurm_ft.launch.spares import SpareBook, SpareError
from slurm_ft.launch.workers.layout import Entry, Topology
from slurm_ft.launch.workers.process import NprocError
from slurm_ft.slurm import SlurmEnvError, SlurmJob, launcher_placement_problem

# What "this input cannot be used" is raised as, wherever it is found: main turns each
# into one line on stderr and exit 2.
BAD_INPUT: tuple[type[Exception], ...] = (
    UsageError,
    config.ConfigError,
    CompatError,
    SlurmEnvError,
    NprocError,
    SpareError,
    BadInput,
)


def main(argv: list[str] | None = None) -> int:
    """``argv`` None: the command line of this process (see :mod:`slurm_ft.cli.entry`
    for how the console script starts and ends it)."""
    env = dict(os.environ)
    resolver.bound_reverse_lookups(os.environ)  # after the capture: the workers' stays as it was
    args = sys.argv[1:] if argv is None else argv
    try:
        return _main(args, env)
    except BAD_INPUT as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except BrokenPipeError:  # --dry-run | head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.SUCCESS)


def _main(args: list[str], env: Mapping[str, str]) -> int:
    """Command line, topology, settings, the launcher's inputs; then the dry run or the launch."""
    if not args:
        raise UsageError("no training script given; usage: slurm-ft-launch [options] SCRIPT [args]")
    cwd = os.getcwd()
    it = interpret(args)
    job = _topology(it, env)
    settings = _settings_for(it, env, job)
    problem = launcher_placement_problem(job, outside_step_allowed=settings.launch.allow_outside_step)
    if problem is not None:
        raise UsageError(problem)
    if it.request.notes:
        print(f"{PROG}: note: {'; '.join(it.request.notes)}", file=sys.stderr)
    cfg = _agent_config(it.ns, env, job, settings, cwd)
    # Before anything looks at the state dir: on a dead mount that look would never return.
    from slurm_ft.launch.books.stateio import unanswered

    dead = unanswered(cfg.state.path, cfg.job.node_name, cfg.settings.launch.write_timeout)
    if dead is not None:  # a dead mount: the node is unhealthy, not the input bad
        print(f"{PROG}: unhealthy: {dead}; exiting {int(ExitCode.UNHEALTHY)}", file=sys.stderr)
        return int(ExitCode.UNHEALTHY)
    if cfg.state.path.exists() and not cfg.state.path.is_dir():
        raise UsageError(f"state dir {cfg.state.path} is a file, not a directory")
    if it.ns.dry_run:
        from slurm_ft.cli import dryrun
        from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV

        dryrun.write(cfg, sys.stdout, secret_in_env=bool(env.get(SECRET_ENV)))
        sys.stdout.flush()
        return 0
    _check_state_dir(cfg.state.path, cfg.state.node_dir(cfg.job.node_name))
    if cfg.job.standalone:
        note = _shared_standalone_note(cfg.state)
        if note:
            print(f"{PROG}: note: {note}", file=sys.stderr)
    return _launch(_for_launch(cfg, env))


def _shared_standalone_note(state: statedir.StateDir) -> str | None:
    """Standalone runs have no job id: a state dir used before holds their history, which
    this run continues (cycle numbers, the ledger's streak, the report's attempts). Said
    once, with how to keep runs apart, so that a mixed history is never a surprise."""
    try:
        earlier = len(list(state.outcomes_dir.glob("attempt*.json")))
    except OSError:
        return None
    cycles = state.recorded_cycles()
    if not earlier and not cycles:
        return None
    return (
        f"state dir {state.path} holds {earlier} earlier standalone run(s) ({len(cycles)} cycle(s)): "
        "this run continues their history (cycle numbers, no-progress streak, the report's "
        "attempts); give --state-dir DIR to keep this run apart"
    )


def _topology(it: Interpreted, env: Mapping[str, str]) -> SlurmJob:
    """The SlurmJob: Slurm's, checked against torchrun's flags; without Slurm, the flags'."""
    from slurm_ft.compat import torchrun

    if "SLURM_JOB_ID" not in env:
        return torchrun.job_without_slurm(it.request)
    from slurm_ft.launch.hostprobe import same_host

    job = SlurmJob.from_env(env)
    torchrun.check_slurm(it.request, job, same_host)
    return job


def _settings_for(it: Interpreted, env: Mapping[str, str], job: SlurmJob) -> config.Settings:
    from slurm_ft.compat import torchrun

    settings = config.load(env, it.ns.config, it.cli, option_names())
    extra: dict[str, object] = {}
    if it.ft is not None and (it.ft.checks_on or it.ft.checks_off) and it.ns.health_checks is None:
        from slurm_ft.compat import ftlauncher

        extra["health.checks"] = ftlauncher.merge_checks(settings.health.checks, it.ft)
    port = torchrun.store_port(it.request, job)
    if port is not None:
        if it.ns.rdzv_port is not None and int(it.ns.rdzv_port) != port:
            raise UsageError(
                f"--rdzv-port {it.ns.rdzv_port} contradicts {it.request.port_flag or '--master-port'} {port}"
            )
        extra["launch.rdzv_port"] = port
    return config.apply(settings, extra) if extra else settings


def _agent_config(
    ns: argparse.Namespace, env: Mapping[str, str], job: SlurmJob, settings: config.Settings, cwd: str
) -> AgentConfig:
    """Every remaining input checked, in the order a user would fix them, and frozen."""
    from slurm_ft import health
    from slurm_ft.launch.hostprobe import nvml_gpu_count
    from slurm_ft.launch.rendezvous.jobsecret import without_secret
    from slurm_ft.launch.workers.process import resolve_nproc
    from slurm_ft.launch.workers.torchversion import installed_torch
    from slurm_ft.settingsyntax import parse_port_range, parse_signals
    from slurm_ft.slurm import rdzv_ports
    from slurm_ft.topology import node_plan

    health_on = _health_enabled(settings.health.checks)
    if health_on:
        health.validate(settings.health)
    launch = settings.launch
    nproc = resolve_nproc(
        launch.nproc_per_node, slurm_gpus=job.gpus_on_node, gpu_count=nvml_gpu_count, cpu_count=os.cpu_count()
    )
    entry = _entry(ns, env, cwd)
    state = statedir.resolve(job, settings.state_dir, cwd)
    settings = _log_dir(settings, state.path, cwd)
    settings = _persist_dir(settings, cwd)
    port_range = parse_port_range(launch.rdzv_port_range)  # checked by config
    # a single node keeps its store in process (no port, no torch import)
    ports = () if job.num_nodes == 1 else rdzv_ports(job, port_range, launch.rdzv_port)
    book = SpareBook.for_job(job.num_nodes, launch.spare_nodes, launch.segment, launch.suspect_after)
    return AgentConfig(
        job=job,
        settings=settings,
        entry=entry,
        topo=Topology(job.node_rank, len(book.active), nproc, job.master_addr, launch.role),
        state=state,
        rdzv_ports=ports,
        base_env=without_secret(env),  # workers never see the job secret
        python=sys.executable,
        cwd=cwd,
        health_checks=health_on,
        run_id=run_id_for(job),
        signals=tuple(int(s) for s in parse_signals(launch.forward_signals)),  # checked by config
        placement=node_plan(settings, nproc, env.get("CUDA_VISIBLE_DEVICES")),
        torch_version=installed_torch(),
        pointers_dir=jobpointer.pointers_dir(env) if job.job_id is not None else None,
        pointer=jobpointer.Pointer(job.job_key, str(Path(cwd, state.path)), env.get("SLURM_CLUSTER_NAME")),
    )


def _health_enabled(checks: Sequence[str]) -> bool:
    return bool([c for c in checks if c.strip().lower() != "none"])


def _entry(ns: argparse.Namespace, env: Mapping[str, str], cwd: str) -> Entry:
    args = tuple(ns.args)
    if ns.module:
        if not _module_found(ns.target, cwd):
            raise UsageError(f"module not found: {ns.target} (python -m {ns.target} in {cwd} would fail)")
        return Entry("module", ns.target, args)
    if ns.no_python:
        target = ns.target
        if "/" in target:
            path = Path(cwd, target)
            if not path.is_file() or not os.access(path, os.X_OK):
                raise UsageError(f"command not found or not executable: {target}")
        elif privatefiles.find_program(target, env.get("PATH")) is None:
            raise UsageError(f"command not found on PATH: {target}")
        return Entry("command", target, args)
    if not Path(cwd, ns.target).is_file():
        raise UsageError(f"training script not found: {ns.target}")
    return Entry("script", ns.target, args)


def _module_found(name: str, cwd: str) -> bool:
    """Whether ``python -m name`` run in ``cwd`` would find the module's top-level package,
    looked up the way that interpreter will (``cwd`` first on the path), importing nothing:
    a misspelt module would otherwise fail in every cycle."""
    import importlib.util

    top = name.split(".", 1)[0]
    if not top.isidentifier():
        return False
    saved = sys.path[:]
    sys.path[:0] = [cwd]
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path[:] = saved


def _log_dir(settings: config.Settings, state_path: Path, cwd: str) -> config.Settings:
    """Per-rank files wanted: an absolute log dir (default <state dir>/logs)."""
    from slurm_ft.launch.output import streams

    a = settings.applog
    if not streams.rules_for(a).rank_files:
        return settings
    root = Path(cwd, a.log_dir) if a.log_dir else state_path / "logs"
    return config.apply(settings, {"applog.log_dir": str(root)})


def _persist_dir(settings: config.Settings, cwd: str) -> config.Settings:
    """The snapshot persist dir as an absolute path: the requeued attempt and the persist
    child must find the same place whatever their working directory."""
    where = settings.launch.snapshot_persist_dir
    if not where or os.path.isabs(where):
        return settings
    return config.apply(settings, {"launch.snapshot_persist_dir": str(Path(cwd, where))})


def _check_state_dir(path: Path, own: Path) -> None:
    """Writable, or exit 2 now: finding out after a training cycle would lose it. The
    probe goes into the node's own directory (made here, once), not the state dir's top,
    which would take a create and an unlink from every node at every start (#45)."""
    try:
        own.mkdir(parents=True, exist_ok=True)
        fd, probe = privatefiles.create_file(own, ".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"state dir {path} is not writable: {exc.strerror or exc}") from None


def _for_launch(cfg: AgentConfig, env: Mapping[str, str]) -> AgentConfig:
    """What only a real launch needs: the workers' parent-death helper, the step killer
    and, across nodes, the job secret (made in the state dir if missing)."""
    import dataclasses

    from slurm_ft.launch.rendezvous import jobsecret
    from slurm_ft.launch.workers.process import pdeathsig_helper

    return dataclasses.replace(
        cfg,
        spawn_helper=pdeathsig_helper(privatefiles.find_program("setpriv", env.get("PATH"))),
        step_killer=_step_killer(cfg.job, env),
        auth=jobsecret.resolve(env.get(jobsecret.SECRET_ENV), cfg.state) if cfg.num_nodes > 1 else cfg.auth,
    )


def _step_killer(job: SlurmJob, env: Mapping[str, str]) -> tuple[str, ...]:
    """``scancel --signal=KILL JOB.STEP``: SIGKILL to every process of this step on every
    node (a frozen launcher and its workers too); () outside a multi-node Slurm step."""
    if job.num_nodes < 2 or job.job_id is None or job.step_id is None:
        return ()
    scancel = privatefiles.find_program("scancel", env.get("PATH")) or "scancel"
    return (scancel, "--signal=KILL", f"{job.job_id}.{job.step_id}")


def _launch(cfg: AgentConfig) -> int:
    from slurm_ft.launch.cycle import lifetime
    from slurm_ft.launch.output.eventlog import EventLog

    # torch's C++ warnings (connection retries, a vanished peer) would bury our own lines;
    # set for this process only: the workers get the environment captured above.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    s = cfg.settings.applog
    events = EventLog(
        Path(s.launcher_log) if s.launcher_log else None,
        cfg.job.node_name,
        quiet=s.quiet,
        stall_after=cfg.settings.launch.write_timeout,
    )
    lifelong.resume()  # the cycles' garbage is the collector's again
    try:
        ending = lifetime.run(cfg, events)
    except BadInput:
        raise  # main says it
    except KeyboardInterrupt:
        return 128 + int(signal.SIGINT)
    except Exception as exc:  # outside the cycle (setting up or tearing down the agent)
        import traceback  # only on this path: keeps every start short

        _internal_error(cfg, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)))
        return int(ExitCode.WORKERS_FAILED)
    finally:
        events.close()
    if ending.internal_error is not None:
        _internal_error(cfg, ending.internal_error, ending.traceback or "")
    elif s.quiet:  # the events went to the launcher log only: how it ended still reaches stderr
        print(f"{PROG}: {ending.outcome} (exit {ending.exit_code}): {ending.reason}", file=sys.stderr)
    return ending.exit_code


def _internal_error(cfg: AgentConfig, error: str, details: str) -> None:
    """One line for people; the traceback only into the launcher-log file, if any."""
    from slurm_ft.launch.output.eventlog import EventLog

    log = cfg.settings.applog.launcher_log
    if log:
        file_only = EventLog(Path(log), cfg.job.node_name, quiet=True)
        file_only.event(f"launcher failed: {details}")
        file_only.close()
    print(f"{PROG}: internal error: {error}", file=sys.stderr)


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
