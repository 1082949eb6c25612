"""Drain/resume policy: only our own drains are ever resumed or rewritten."""

from __future__ import annotations

import os

import pytest

from slurm_ft.health import Report, Result, Status
from slurm_ft.health import drain as d

pytestmark = pytest.mark.timeout(20)

SHOW_DRAINED = """NodeName=node2 Arch=x86_64 CoresPerSocket=2
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.50
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   Reason=slurm-ft: storage:/scratch/node2: does not exist [root@2026-12-02T15:30:00]
"""

SHOW_IDLE = """NodeName=node1 Arch=x86_64 CoresPerSocket=2
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
"""


def report(*results: Result, node: str = "node2") -> Report:
    return Report(tuple(results), node)


BAD = Result("storage:/scratch/node2", Status.FAIL, "does not exist", 0.01, {})
GOOD = Result("nic:ib0", Status.PASS, "up", 0.0, {})


def test_parse_show_node_strips_the_user_time_stamp():
    info = d.parse_show_node(SHOW_DRAINED, "node2")
    assert info == d.NodeInfo("node2", "IDLE+DRAIN", "slurm-ft: storage:/scratch/node2: does not exist")
    assert info.drained and info.ours
    idle = d.parse_show_node(SHOW_IDLE, "node1")
    assert idle == d.NodeInfo("node1", "IDLE", None)
    assert not idle.drained


def test_reason_names_the_first_failure_and_is_bounded():
    assert d.drain_reason(report(GOOD, BAD)) == "slurm-ft: storage:/scratch/node2: does not exist"
    long = Result("storage:/x", Status.FAIL, "y" * 500, 0.0, {})
    reason = d.drain_reason(report(long))
    assert len(reason) == d.MAX_REASON and reason.endswith("...")


IDLE = d.NodeInfo("node2", "IDLE", None)
OURS = d.NodeInfo("node2", "IDLE+DRAIN", "slurm-ft: nic:ib0: down")
ADMIN = d.NodeInfo("node2", "MIXED+DRAIN", "bad DIMM, ticket 123")


@pytest.mark.parametrize(
    ("healthy", "node", "drain", "resume", "kind"),
    [
        (False, IDLE, True, False, "drain"),
        (False, IDLE, False, False, "none"),
        (False, IDLE, False, True, "none"),
        (False, ADMIN, True, False, "none"),  # never overwrite someone else's reason
        (False, OURS, True, False, "drain"),  # our reason, new failure: update it
        (True, OURS, True, False, "resume"),  # the next healthy pass resumes our drain
        (True, OURS, False, True, "resume"),
        (True, OURS, False, False, "none"),
        (True, ADMIN, True, True, "none"),  # never resume someone else's drain
        (True, IDLE, True, True, "none"),
    ],
)
def test_plan(healthy, node, drain, resume, kind):
    action = d.plan(healthy, node, drain=drain, resume=resume, reason="slurm-ft: storage:/x: gone")
    assert action.kind == kind, action.why


def test_same_reason_is_not_rewritten():
    action = d.plan(False, OURS, drain=True, resume=False, reason="slurm-ft: nic:ib0: down")
    assert action.kind == "none"


def test_find_scontrol_by_absolute_path_only(tmp_path):
    exe = tmp_path / "bin" / "scontrol"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert d.find_scontrol(None, dirs=(str(tmp_path / "nope"), str(exe.parent))) == str(exe)
    assert d.find_scontrol(str(exe)) == str(exe)
    with pytest.raises(d.DrainError, match="not an executable absolute path"):
        d.find_scontrol("scontrol")
    with pytest.raises(d.DrainError, match="scontrol not found in"):
        d.find_scontrol(None, dirs=(str(tmp_path / "nope"),))


@pytest.mark.skipif(not os.access("/usr/bin/scontrol", os.X_OK), reason="no /usr/bin/scontrol here")
def test_default_search_finds_the_installed_scontrol():
    assert d.find_scontrol(None) == "/usr/bin/scontrol"
