"""The job pointer's rules: where it lives, what is trusted, which ones are swept."""

from __future__ import annotations

import os
from pathlib import Path

from slurm_ft import jobpointer


def test_the_pointers_live_in_the_xdg_state_home_else_under_home() -> None:
    assert jobpointer.pointers_dir({"XDG_STATE_HOME": "/x", "HOME": "/h"}) == Path("/x/slurm-ft/jobs")
    assert jobpointer.pointers_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/state/slurm-ft/jobs"
    )
    assert jobpointer.pointers_dir({"HOME": ""}) is None and jobpointer.pointers_dir({}) is None


def test_only_a_pointer_to_the_asked_job_and_an_absolute_path_is_taken() -> None:
    good = jobpointer.Pointer("48", "/scratch/s", "c1")
    assert jobpointer.parse(good.encode(), "48") == good
    assert jobpointer.parse(good.encode(), "49") is None
    for raw in (b"\xff", b"[]", b'{"job": "48", "state_dir": "rel"}', b'{"job": "48", "state_dir": 3}'):
        assert jobpointer.parse(raw, "48") is None


def test_the_newest_pointers_are_kept_by_job_id_and_other_files_left_alone() -> None:
    names = ["10.json", "9.json", "100_2.json", "100_10.json", "notes.txt", "x.json"]
    assert jobpointer.stale(names, keep=2) == ["9.json", "10.json"]
    assert jobpointer.stale(names, keep=3) == ["9.json"]
    assert jobpointer.stale(names, keep=10) == []


def test_the_default_place_comes_first_then_a_trusted_pointer(tmp_path: Path) -> None:
    pointers, default, elsewhere = tmp_path / "p", tmp_path / "default", tmp_path / "elsewhere"
    pointers.mkdir()
    (pointers / "48.json").write_bytes(jobpointer.Pointer("48", str(elsewhere)).encode())
    uid = os.getuid()
    assert jobpointer.find(default, "48", pointers, uid) == elsewhere
    assert jobpointer.find(default, "48", pointers, uid + 1) == default  # not the caller's
    assert jobpointer.find(default, "48", None, uid) == default
    (pointers / "48.json").chmod(0o620)
    assert jobpointer.find(default, "48", pointers, uid) == default  # the group may write it
    (pointers / "48.json").chmod(0o600)
    os.symlink(pointers / "48.json", pointers / "49.json")
    assert jobpointer.read(pointers, "49", uid) is None  # a link is not followed
    default.mkdir()
    assert jobpointer.find(default, "48", pointers, uid) == default
