"""Mount discovery from mountinfo and the Lustre health verdict (pure reads, no probes)."""

from __future__ import annotations

import pytest

from slurm_ft.health import Status, storage

pytestmark = pytest.mark.timeout(20)

MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
101 27 0:50 / /lustre/scratch rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw,flock
102 27 0:51 / /home rw,relatime shared:5 - nfs4 fs1:/export/home rw,vers=4.2
103 27 0:52 / /data\040set rw - nfs fs2:/data rw
104 27 0:53 / /gpfs/fs0 rw - gpfs fs0 rw
105 27 0:54 / /mnt/beegfs rw - beegfs beegfs_nodev rw
106 27 0:51 / /home rw,relatime - nfs4 fs1:/export/home rw
107 27 0:55 / /mnt/fuse rw - fuse.sshfs host:/x rw
"""


def test_network_mounts_are_found_decoded_and_deduplicated():
    found = storage.network_mounts(storage.parse_mountinfo(MOUNTINFO))
    assert [(m.mountpoint, m.fstype) for m in found] == [
        ("/lustre/scratch", "lustre"),
        ("/home", "nfs4"),
        ("/data set", "nfs"),
        ("/gpfs/fs0", "gpfs"),
        ("/mnt/beegfs", "beegfs"),
    ]
    assert found[0].source == "10.0.0.1@o2ib:/scratch"


def test_discover_reads_proc_root(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(MOUNTINFO)
    assert len(storage.discover(str(tmp_path))) == 5
    assert storage.discover(str(tmp_path / "missing")) == []


@pytest.mark.parametrize(
    ("text", "status", "detail"),
    [
        ("healthy\n", Status.PASS, "healthy"),
        ("NOT HEALTHY\n", Status.FAIL, "lustre health_check says 'NOT HEALTHY'"),
        ("LBUG\n", Status.FAIL, "lustre health_check says 'LBUG'"),
    ],
)
def test_lustre_health_check(tmp_path, text, status, detail):
    path = tmp_path / "sys" / "fs" / "lustre" / "health_check"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    result = storage.lustre_health(str(tmp_path / "sys"), str(tmp_path / "proc"))
    assert result is not None
    assert (result.name, result.status, result.detail) == ("storage:lustre-health", status, detail)


def test_no_lustre_client_means_no_lustre_result(tmp_path):
    assert storage.lustre_health(str(tmp_path), str(tmp_path)) is None
