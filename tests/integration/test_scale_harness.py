"""The scale harness (issue 45) at a small size: 16 launchers with a real launcher's store
connections, every peer told of a halt and holding the next cycle's decision (the restart),
then node 0 lost and every survivor holding its successor's first decision (the
succession), none lost, node 0's figures measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scale import one_size


@pytest.mark.timeout(180)
def test_scale_harness_at_16_launchers(tmp_path: Path) -> None:
    row = one_size(16, 8, 2.0, tmp_path)
    assert row["errors"] == []
    assert row["woken"] == 15
    assert row["held"] == 15
    assert 0 <= row["halt_to_all_s"] <= row["restart_s"] < 60
    assert 0 <= row["rendezvous_s"] <= row["restart_s"]
    assert row["lost_peers"] == 0
    assert row["peer_processes"] == 2
    assert 0 <= row["first_connection_s"] < 120
    assert 0 <= row["halt_to_all_s"] < 60
    assert row["node0_steady_cpu_pct"] >= 0 and row["node0_rss_mib"] > 0
    # the succession: one successor (the lowest survivor) decides, the 14 others hold it
    assert row["successors"] == 1
    assert row["succeeded"] == 14
    # the last survivor to notice may notice after the successor decided (a slow poll), but
    # nobody holds a decision before it exists or before noticing the loss
    assert 0 <= row["successor_decided_s"] <= row["succession_s"] < 60
    assert 0 <= row["succession_noticed_s"] <= row["succession_s"]
    # every survivor says by which of its threads it learned of the loss, and its CPU is counted
    assert sum(row["succession_noticed_how"].values()) == 15, row["succession_noticed_how"]
    assert set(row["succession_noticed_how"]) <= {"halt-waiter", "heartbeat", "silence"}
    assert row["succession_cpu_ms_per_launcher"] > 0
    # where the launchers' own threads spend it: the restart, and each step of a follower's
    steps = row["step_cpu_ms_per_launcher"]
    follower = ("start->stopped", "stopped->ordered", "ordered->settled", "settled->found_run")
    assert set(steps) == {"start->restart_held", *follower, "found_run->joined", "joined->held"}, steps
    assert steps["start->restart_held"] > 0 and steps["joined->held"] > 0
    assert row["peer_switch_interval_s"] == 0.5
    assert row["peer_cores"] == "one each"  # as each peer process found its own affinity
    # node 0's steady CPU is measured over whole beat periods (16 launchers: 1 s)
    assert row["node0_steady_window_s"] == 2.0
    # when the survivors reached each step, from the loss (median, last), in the steps' order
    at = row["succession_step_at_s"]
    follower = {"stopped", "ordered", "settled", "found_run", "joined", "held"}
    lead = ("lead:noticed", "lead:claimed", "lead:store_open", "lead:port_noted", "lead:decided")
    assert set(at) == follower | set(lead), at
    assert [at[m][0] for m in lead] == sorted(at[m][0] for m in lead)  # the successor's, in order
    for step in follower:
        median, last = at[step]
        assert 0 <= median <= last <= row["succession_s"] + 0.001, (step, at)  # rounded to ms
    assert at["found_run"][1] <= at["held"][1]
    assert at["lead:decided"][0] <= at["held"][1]
