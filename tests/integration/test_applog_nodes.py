"""Several launchers (simulated nodes) appending to one cycle file; memory bounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.output.applog import cycle_log_path
from tests.integration.applog_support import REPO, by_rank, marker, worker_env
from tests.integration.applog_writer import varied_line

__all__ = ["marker"]

NODE = str(Path(__file__).with_name("applog_node.py"))


def start_node(path: Path, first_rank: int, nworkers: int, writer_args: list[str], marker: str, *extra: str):
    return subprocess.Popen(
        [sys.executable, NODE, str(path), str(first_rank), str(nworkers), json.dumps(writer_args), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=worker_env(marker),
        cwd=REPO,
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")
    return json.loads(out)


@pytest.mark.timeout(180)
def test_two_nodes_append_to_one_file_without_torn_lines(tmp_path: Path, marker: str) -> None:
    path = cycle_log_path(str(tmp_path / "job.log"), 5)
    count = 400
    nodes = [start_node(path, first, 2, ["varied", "{rank}", str(count)], marker) for first in (0, 2)]
    results = [finish(node) for node in nodes]
    for result in results:
        assert result["codes"] == [0, 0]
        assert result["stats"]["lost_lines"] == 0
    ranks = by_rank(path.read_bytes())
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank in range(4):
        assert ranks[rank] == [varied_line(rank, seq) for seq in range(count)], f"rank {rank} differs"
    assert sum(r["stats"]["bytes"] for r in results) == path.stat().st_size


@pytest.mark.timeout(120)
def test_memory_stays_bounded_with_a_never_ending_line(tmp_path: Path, marker: str) -> None:
    path = tmp_path / "job_cycle0.log"
    total = 96 * 1024 * 1024
    cap = 1024 * 1024
    result = finish(start_node(path, 0, 1, ["endless", str(total)], marker, str(cap)))
    assert result["codes"] == [0]
    stats = result["stats"]
    assert stats["peak_pending_bytes"] <= cap
    growth_mib = (result["maxrss_kib_after"] - result["maxrss_kib_before"]) / 1024
    assert growth_mib < 24, f"capturing process grew by {growth_mib:.1f} MiB for a {total >> 20} MiB line"
    # Every piece is whole and the pieces add up to the line.
    size = 0
    with path.open("rb") as f:
        for i, record in enumerate(f):
            assert record.startswith(b"0: " if i == 0 else b"0+ ")
            assert record.endswith(b"\n") and len(record) - 4 <= cap
            size += len(record) - 4
    assert size == total
    assert stats["split_lines"] == 1
    assert stats["lines"] == i + 1
