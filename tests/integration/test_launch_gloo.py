"""The real thing on simulated nodes: gloo all-reduce DDP training under the launcher."""

from __future__ import annotations

import json

import pytest

from tests.integration.launch_cluster import TRAIN, SimJob

pytestmark = pytest.mark.torch

ARGS = ["--nproc-per-node", "2", "--health-checks", "none", "--workers-stop-timeout", "10"]
ENV = {"GLOO_SOCKET_IFNAME": "lo", "TRAIN_TERM_GRACE": "2"}


def train(tmp, *extra: str) -> list[str]:
    return [str(TRAIN), "--ckpt-dir", str(tmp / "ckpt"), "--steps", "10", "--ckpt-every", "5", *extra]


def starts(tmp) -> list[dict]:
    return [json.loads(line) for line in (tmp / "ckpt" / "starts.jsonl").read_text().splitlines()]


@pytest.mark.timeout(240)
def test_gloo_training_two_nodes_succeeds(tmp_path):
    job = SimJob(tmp_path, 2, ARGS, train(tmp_path), extra_env=ENV).start()
    try:
        assert job.wait(200) == [0, 0], job.dump()
        assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "10\n"
        assert sorted((s["rank"], s["restart"]) for s in starts(tmp_path)) == [(r, 0) for r in range(4)]
        for k in (0, 1):
            for rank in (2 * k, 2 * k + 1):
                assert f"rank {rank}: step 10 loss" in job.node(k).out()
                assert f"rank {rank}: finished at step 10" in job.node(k).out()
        assert job.outcome()["exit_code"] == 0
        for k in (0, 1):  # the flight recorder's variables under the names this torch reads
            assert "is deprecated" not in job.node(k).out() + job.node(k).err()
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(300)
def test_gloo_rank3_crashes_in_cycle0_three_nodes_all_succeed_in_cycle1(tmp_path):
    job = SimJob(
        tmp_path, 3, ARGS, train(tmp_path, "--crash-rank", "3", "--crash-restart", "0"), extra_env=ENV
    )
    job.start()
    try:
        assert job.wait(280) == [0, 0, 0], job.dump()
        got = starts(tmp_path)
        assert sorted(s["rank"] for s in got if s["restart"] == 1) == list(range(6))
        assert {s["cycle"] for s in got if s["restart"] == 1} == {"1"}
        f = job.cycle_record(0)["first_failure"]
        assert (f["rank"], f["node"], f["exit_code"]) == (3, "node1", 7)
        # the second cycle resumed from the checkpoint written before the crash
        assert "rank 3: resumed from iteration 5" in job.node(1).out()
        assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "10\n"
        assert job.outcome()["cycles"] == 2
        job.assert_no_orphans()
    finally:
        job.kill()
