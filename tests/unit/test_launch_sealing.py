"""The job secret and the seals on the store's values: where the secret comes from, what
verifies and what does not, and that the secret never shows."""

from __future__ import annotations

import os
import stat
import threading

from slurm_ft.launch.rendezvous import jobsecret
from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV, SECRET_FILE, StoreAuth
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.statedir import StateDir

SECRET = b"0123456789abcdef0123456789abcdef"


def test_a_sealed_value_opens_only_under_its_own_key_and_secret():
    reports: list[str] = []
    s = Sealer(SECRET, reports.append)
    sealed = s.seal("k/c0/failure", '{"x": 1}').encode()
    assert s.open("k/c0/failure", sealed) == b'{"x": 1}'
    assert s.open("k/c0/decision", sealed) is None  # not replayable under another key
    assert Sealer(b"another job's secret, 32 bytes!!").open("k/c0/failure", sealed) is None
    assert s.open("k/c0/failure", sealed.replace(b'"x": 1', b'"x": 2')) is None
    assert s.open("k/c0/failure", b'{"x": 1}') is None
    assert s.open("k/c0/failure", b"") is None
    # reported once per key, however often the forgery is read
    assert reports == [
        "ignored a value of store key k/c0/decision that is not sealed with this job's secret "
        "(written by someone else)",
        "ignored a value of store key k/c0/failure that is not sealed with this job's secret "
        "(written by someone else)",
    ]


def test_without_a_secret_values_pass_unchanged_and_keys_have_no_namespace():
    s = Sealer(None)
    assert s.seal("k", "v") == "v" and s.open("k", b"anything") == b"anything"
    assert s.namespace == ""
    assert len(Sealer(SECRET).namespace) == 16
    assert Sealer(SECRET).namespace != Sealer(SECRET[::-1]).namespace
    assert SECRET.decode() not in Sealer(SECRET).namespace


def test_the_environment_wins_and_the_secret_is_never_shown(tmp_path):
    auth = jobsecret.resolve("s3cr3t-from-the-template-0123456789", StateDir(tmp_path / "s"))
    assert auth.key == b"s3cr3t-from-the-template-0123456789"
    assert auth.source == f"job secret from {SECRET_ENV}"
    assert "s3cr3t" not in repr(auth) and "s3cr3t" not in str(auth)
    assert not (tmp_path / "s").exists()
    assert jobsecret.without_secret({SECRET_ENV: "x", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_the_state_dir_file_is_private_and_the_same_for_every_launcher(tmp_path):
    state = StateDir(tmp_path / "s")
    got: list[StoreAuth] = []
    threads = [threading.Thread(target=lambda: got.append(jobsecret.resolve(None, state))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({a.key for a in got}) == 1 and got[0].key is not None
    path = tmp_path / "s" / SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [SECRET_FILE]  # no temp files left
    assert got[0].source == f"job secret from {path}"


def test_a_secret_file_others_can_read_is_not_used(tmp_path):
    state = StateDir(tmp_path / "s")
    jobsecret.resolve(None, state)
    os.chmod(tmp_path / "s" / SECRET_FILE, 0o644)
    auth = jobsecret.resolve(None, state)
    assert auth.key is None
    assert auth.source.startswith(f"no {SECRET_ENV} and no usable secret file in the state dir: ")
    assert "mode 0600" in auth.source
