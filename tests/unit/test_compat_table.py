"""Every option of the docs' compatibility table, in every spelling, through the parser.

Table-driven from slurm_ft.compat.table, the data docs/reference/compat.md is rendered
from: a row added without an example here fails, and so does a page that drifted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_ft.cli.launchoptions import interpret
from slurm_ft.cli.usage import UsageError
from slurm_ft.compat import table
from slurm_ft.compat.errors import CompatError
from slurm_ft.compat.fttable import Kind

REPO = Path(__file__).resolve().parents[2]

Check = Callable[..., None]
REFUSED = "refused"


def setting(key: str, value: object) -> Check:
    def check(it) -> None:
        assert it.cli[key] == value, it.cli

    return check


def request(**fields: object) -> Check:
    def check(it) -> None:
        for name, value in fields.items():
            assert getattr(it.request, name) == value, it.request

    return check


def ns(**fields: object) -> Check:
    def check(it) -> None:
        for name, value in fields.items():
            assert getattr(it.ns, name) == value, it.ns

    return check


def noted(text: str) -> Check:
    def check(it) -> None:
        assert any(text in n for n in it.request.notes), it.request.notes

    return check


def checks(on: set[str], off: set[str] = frozenset()) -> Check:
    def check(it) -> None:
        assert (it.ft.checks_on, it.ft.checks_off) == (on, set(off))

    return check


def hang(text: str, key: str, value: object) -> tuple[str, Check | str]:
    """A rank-monitor option: sets its hang setting."""
    return (text, setting(key, value))


def accepted(it) -> None:
    assert it.ns.target == "train.py"


# first spelling of a row -> (value or None for a switch, expected)
TORCHRUN: dict[str, tuple[str | None, Check | str]] = {
    "--nnodes": ("1:4", request(min_nodes=1, max_nodes=4)),
    "--nproc-per-node": ("2", setting("launch.nproc_per_node", "2")),
    "--node-rank": ("1", request(node_rank=1)),
    "--master-addr": ("node7", request(host="node7", host_flag="--master-addr")),
    "--master-port": ("29511", request(port=29511)),
    "--rdzv-endpoint": ("node7:29512", request(host="node7", port=29512)),
    "--rdzv-id": ("12345", request(node_rank=None)),
    "--rdzv-backend": ("static", request(host=None)),
    "--rdzv-conf": ("join_timeout=77,last_call_timeout=5", setting("launch.join_timeout", "77")),
    "--standalone": (None, request(standalone=True, max_nodes=1)),
    "--local-addr": ("node9", request(local_addr="node9")),
    "--max-restarts": ("5", setting("launch.max_restarts", "5")),
    "--monitor-interval": ("0.5", setting("launch.monitor_interval", "0.5")),
    "--start-method": ("fork", ns(start_method="fork")),
    "--role": ("trainer", setting("launch.role", "trainer")),
    "-m": (None, ns(module=True)),
    "--no-python": (None, ns(no_python=True)),
    "--run-path": (None, ns(run_path=True)),
    "--log-dir": ("/tmp/logs", setting("applog.log_dir", "/tmp/logs")),
    "-r": ("0:1,1:2", setting("applog.redirects", "0:1,1:2")),
    "-t": ("3", setting("applog.tee_streams", "3")),
    "--local-ranks-filter": ("0,1", setting("applog.local_ranks_filter", "0,1")),
    "--signals-to-handle": ("SIGTERM,SIGHUP", setting("launch.forward_signals", "SIGTERM,SIGHUP")),
    "--shutdown-timeout": ("12", setting("launch.term_timeout", "12")),
    "--event-log-handler": ("console", REFUSED),
    "--duplicate-stdout-filters": ("apple", REFUSED),
    "--duplicate-stderr-filters": ("apple", REFUSED),
    "--logs-specs": ("per_cycle", REFUSED),
    "--numa-binding": ("node", setting("launch.numa_binding", "node")),
    "--virtual-local-rank": (None, REFUSED),
    "--term-timeout": ("20", setting("launch.term_timeout", "20")),
    "--workers-stop-timeout": ("9", setting("launch.workers_stop_timeout", "9")),
}

FT: dict[str, tuple[str | None, Check | str]] = {
    "--ft-cfg-path": (
        str(REPO / "tests/data/compat/ft_config.yaml"),
        setting("progress.checkpoint_iteration_file", "/ck/latest_checkpointed_iteration.txt"),
    ),
    "--ft-per-cycle-applog-prefix": ("/logs/job.log", setting("applog.prefix", "/logs/job.log")),
    "--ft-nvrx-logfile": ("/logs/l.log", setting("applog.launcher_log", "/logs/l.log")),
    "--ft-base-logfile": ("/logs/b.log", setting("applog.prefix", "/logs/b.log")),
    "--ft-checkpoint-iteration-file": (
        "/ck/it.txt",
        setting("progress.checkpoint_iteration_file", "/ck/it.txt"),
    ),
    "--ft-max-no-progress-cycles": ("-1", setting("progress.max_no_progress_cycles", 0)),
    "--ft-max-no-progress-restarts": ("4", setting("progress.max_no_progress_cycles", 4)),
    "--ft-min-progress-iterations": ("200", setting("progress.min_progress_iterations", 200)),
    "--ft-gpu-memory-reclaim-timeout": ("50", setting("launch.gpu_release_timeout", 50.0)),
    "--ft-gpu-memory-tolerance-mb": ("512.4", setting("launch.gpu_release_tolerance_mib", 512)),
    "--ft-enable-nic-healthcheck": ("true", checks({"nic"})),
    "--ft-enable-nic-monitor": ("true", setting("health.nic_monitor", True)),
    "--ft-node-health-check-interval": ("5", setting("health.check_interval", 5.0)),
    "--ft-storage-health-check-path": ("/data,/ckpt", setting("health.paths", ["/data", "/ckpt"])),
    "--ft-storage-healthcheck-path": ("/data", checks({"storage"})),
    "--ft-enable-dist-storage-healthcheck": ("false", setting("health.discover_mounts", False)),
    "--ft-rank-heartbeat-timeout": hang("450", "hang.rank_heartbeat_timeout", 450.0),
    "--ft-initial-rank-heartbeat-timeout": hang("1200", "hang.rank_initial_heartbeat_timeout", 1200.0),
    "--ft-rank-section-timeouts": hang(
        "setup:600,step:180", "hang.rank_section_timeouts", "setup=600,step=180"
    ),
    "--ft-rank-out-of-section-timeout": hang("300", "hang.rank_out_of_section_timeout", 300.0),
    "--ft-safety-factor": hang("5", "hang.safety_factor", 5.0),
    "--ft-rank-termination-signal": hang("SIGKILL", "hang.rank_termination_signal", "SIGKILL"),
    "--ft-restart-policy": ("any-failed", accepted),
    "--ft-enable-log-server": ("false", accepted),
    "--ft-ignore-missing-cfg": (None, accepted),
    "--ft-segment": ("4", setting("launch.segment", 4)),
}


def example(flag: str) -> tuple[str | None, Check | str]:
    if flag in TORCHRUN:
        return TORCHRUN[flag]
    if flag in FT:
        return FT[flag]
    kind = next(o.kind for o in table.FT_OPTIONS if o.flag == flag)
    assert kind is Kind.UNSUPPORTED, f"no parser example for {flag}: add one to this test"
    return "1", REFUSED


def spellings(row: table.Row) -> list[str]:
    if row.tool != "ft_launcher" or not row.flags[0].startswith("--ft-"):
        return list(row.flags)
    name = row.flags[0][5:]
    under = name.replace("-", "_")
    return [f"--ft-{name}", f"--ft-{under}", f"--ft_{under}", f"--ft-param-{under}"]


CASES = [pytest.param(flag, row.flags[0], id=flag) for row in table.rows() for flag in spellings(row)]


@pytest.mark.parametrize(("flag", "first"), CASES)
def test_every_option_of_the_table_parses(flag: str, first: str) -> None:
    value, expected = example(first)
    args = [flag] if value is None else [flag, value]
    if expected == REFUSED:
        with pytest.raises((UsageError, CompatError)) as err:
            interpret([*args, "train.py"])
        assert flag.split("=")[0] in str(err.value) or first in str(err.value)
        return
    it = interpret([*args, "train.py", "--tee", "3"])
    assert it.ns.target == "train.py" and it.ns.args == ["--tee", "3"]
    assert callable(expected)
    expected(it)


def test_every_ft_option_has_an_example_or_is_unsupported() -> None:
    for opt in table.FT_OPTIONS:
        assert opt.flag in FT or opt.kind is Kind.UNSUPPORTED, opt.flag


def test_readme_table_is_rendered_from_the_data() -> None:
    page = (REPO / "docs" / "reference" / "compat.md").read_text()
    assert table.render_into(page) == page, "run: python scripts/lib/render_docs.py"
