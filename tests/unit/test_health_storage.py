"""Mount discovery from mountinfo and the Lustre health verdict (pure reads, no probes)."""

from __future__ import annotations

import os
import time

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


LOCAL_ROOT = storage.Mount("/", "ext4", "/dev/vda")


def test_mount_of_is_the_longest_and_last_mounted_mount_point():
    mounts = [*storage.parse_mountinfo(MOUNTINFO), storage.Mount("/home", "autofs", "auto.home")]
    assert storage.mount_of("/home/alice/x", mounts).fstype == "autofs"  # stacked: the last one
    assert storage.mount_of("/homework", mounts).fstype == "ext4"  # a prefix is not a parent
    assert storage.mount_of("/lustre/scratch", mounts).fstype == "lustre"
    assert storage.mount_of("/x", []) is None


def test_a_directory_or_file_on_a_local_file_system_is_probed_in_process(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to("d/../d")
    assert storage.local_target(f"{tmp_path}/d/./f", [LOCAL_ROOT]) == f"{tmp_path}/d/f"
    assert storage.local_target(f"{tmp_path}/link/f", [LOCAL_ROOT]) == f"{tmp_path}/d/f"
    assert storage.local_target(str(tmp_path / "link"), [LOCAL_ROOT]) == f"{tmp_path}/d"


def test_anything_that_might_block_or_is_not_surely_local_goes_to_a_child(tmp_path):
    net = tmp_path / "net"
    (net / "data").mkdir(parents=True)
    (tmp_path / "to-net").symlink_to(net / "data")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to("loop")
    mounts = [LOCAL_ROOT, storage.Mount(str(net), "nfs4", "server:/export")]
    assert storage.local_target(str(net / "data"), mounts) is None  # on the network mount
    assert storage.local_target(str(net), mounts) is None  # its root answers from the server
    assert storage.local_target(str(tmp_path / "to-net"), mounts) is None  # a symlink into it
    assert storage.local_target(str(tmp_path / "fifo"), mounts) is None  # open would block
    assert storage.local_target(str(tmp_path / "loop"), mounts) is None  # ELOOP: the child says why
    assert storage.local_target(str(tmp_path / "missing"), mounts) is None  # the child says why
    assert storage.local_target(str(tmp_path), []) is None  # mountinfo unreadable
    for fstype in ("fuse.sshfs", "overlay", "autofs"):  # overlay: lower layers may be remote
        assert storage.local_target(str(tmp_path), [storage.Mount("/", fstype, "x")]) is None


def test_in_process_and_child_probes_give_the_same_result(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    stop = time.monotonic() + 10
    for path in (tmp_path, tmp_path / "f"):
        here = storage.probe_here(f"storage:{path}", "read+write", str(path), {"path": str(path)})
        child = storage._collect(
            storage._spawn(f"storage:{path}", "read+write", str(path), {"path": str(path)}), stop, 10
        )
        assert (here.name, here.status, here.detail, here.data) == (
            child.name,
            child.status,
            child.detail,
            child.data,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # write probes cleaned up
