"""Whether setpriv can set the parent-death signal, read from the program file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ft.launch.workers import process as workers

HELPER_TAIL = ("--pdeathsig", "SIGKILL", "--")


def _program(path: Path, body: bytes, mode: int = 0o755) -> Path:
    path.write_bytes(body)
    path.chmod(mode)
    return path


def test_the_systems_setpriv_is_taken_when_its_help_names_the_option():
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv here")
    helps = "--pdeathsig" in subprocess.run([setpriv, "--help"], capture_output=True, text=True).stdout
    assert workers.pdeathsig_helper(setpriv) == ((setpriv, *HELPER_TAIL) if helps else ())


def test_a_setpriv_without_the_option_is_not_taken(tmp_path):
    old = _program(tmp_path / "setpriv", b"\x7fELF...--reuid --regid --nnp --inh-caps...")
    assert workers.pdeathsig_helper(str(old)) == ()


def test_a_setpriv_with_the_option_is_taken(tmp_path):
    new = _program(tmp_path / "setpriv", b"\x7fELF...nnp\x00pdeathsig\x00reuid...")
    assert workers.pdeathsig_helper(str(new)) == (str(new), *HELPER_TAIL)


def test_a_multi_call_binary_named_setpriv_is_not_taken(tmp_path):
    busybox = _program(tmp_path / "busybox", b"\x7fELF...pdeathsig...")
    (tmp_path / "setpriv").symlink_to(busybox)
    assert workers.pdeathsig_helper(str(tmp_path / "setpriv")) == ()


def test_no_setpriv_or_an_unreadable_or_unrunnable_one_is_not_taken(tmp_path):
    assert workers.pdeathsig_helper(None) == ()
    assert workers.pdeathsig_helper(str(tmp_path / "setpriv")) == ()  # missing
    not_runnable = _program(tmp_path / "setpriv", b"\x7fELF...pdeathsig...", mode=0o644)
    assert workers.pdeathsig_helper(str(not_runnable)) == ()
