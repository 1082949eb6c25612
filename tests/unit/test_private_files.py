"""Private files and directories, the PATH search, the survivor check's fast path and the
commands' process life (start-up time: what replaced tempfile, shutil, a scan of /proc,
the collector's passes over start-up objects and the interpreter's teardown)."""

from __future__ import annotations

import gc
import os
import signal
import stat
import subprocess
import sys

import pytest

from slurm_ft import lifelong, privatefiles
from slurm_ft.cli import launch as launch_cli
from slurm_ft.launch.workers import survivors


def test_create_file_is_new_private_and_exclusive(tmp_path):
    fds = []
    names = set()
    for _ in range(50):
        fd, path = privatefiles.create_file(tmp_path, ".rec.", ".tmp")
        fds.append(fd)
        names.add(path)
        assert os.path.basename(path).startswith(".rec.") and path.endswith(".tmp")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert os.get_inheritable(fd) is False  # no worker inherits it
    assert len(names) == 50
    os.write(fds[0], b"x")
    for fd in fds:
        os.close(fd)


def test_create_file_gives_up_with_file_exists_when_every_name_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "urandom", lambda n: b"\0" * n)
    fd, _ = privatefiles.create_file(tmp_path, "x.")
    os.close(fd)
    with pytest.raises(FileExistsError, match="no free name"):
        privatefiles.create_file(tmp_path, "x.")


def test_create_dir_is_private_and_remove_tree_removes_everything(tmp_path):
    made = privatefiles.create_dir(tmp_path, "run-")
    assert made.parent == tmp_path and made.name.startswith("run-")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    (made / "a" / "b").mkdir(parents=True)
    (made / "a" / "b" / "slot-0").write_bytes(b"1")
    (made / "top").write_text("t")
    outside = tmp_path / "kept"
    outside.mkdir()
    (outside / "file").write_text("k")
    (made / "link").symlink_to(outside, target_is_directory=True)
    privatefiles.remove_tree(made)
    assert not made.exists()
    assert (outside / "file").read_text() == "k"  # a link is removed, never followed
    privatefiles.remove_tree(made)  # gone already: no error


def test_find_program_searches_the_path_in_order_and_only_executables(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("not executable")
    (second / "tool").write_text("#!/bin/sh\n")
    (second / "tool").chmod(0o755)
    search = os.pathsep.join([str(first), str(second)])
    assert privatefiles.find_program("tool", search) == str(second / "tool")
    assert privatefiles.find_program("absent", search) is None
    assert privatefiles.find_program("sh", None) is not None  # os.defpath holds /bin
    assert privatefiles.find_program("sh", "") is None  # an empty PATH finds nothing


def test_survivors_answers_from_killpg_when_the_groups_are_empty_and_scans_otherwise():
    live = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        found = survivors.in_groups([live.pid])
        assert [s.pid for s in found] == [live.pid]
        assert found[0].command.startswith("sleep")
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
    assert survivors.in_groups([live.pid]) == []
    assert survivors.in_groups([]) == []


def test_the_collector_resumes_with_start_up_objects_frozen():
    gc.disable()
    try:
        lifelong.resume()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_main_with_arguments_leaves_the_collector_on(tmp_path, capsys):
    assert launch_cli.main([]) == 2
    assert gc.isenabled()
    assert "no training script given" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "args", "code", "last_line"),
    [
        ("launch", ["--dry-run", "--nproc-per-node", "2", "SCRIPT"], 0, "(MASTER_PORT, the cycle number"),
        ("launch", ["--no-such-option", "SCRIPT"], 2, "slurm-ft-launch: error:"),
        ("healthcheck", ["--checks", "storage", "--paths", "TMP"], 0, "node "),
        ("healthcheck", ["--checks", "storage", "--paths", "TMP/absent"], 94, "node "),
        ("progress", ["--help"], 0, "  -h, --help"),
    ],
)
def test_a_console_script_flushes_its_output_and_exits_with_its_own_code(
    tmp_path, command, args, code, last_line
):
    """The console scripts end with os._exit: what they printed must still arrive, whole."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_FT_STATE_DIR"] = str(tmp_path / "state")
    script = tmp_path / "w.py"
    script.write_text("print('worker says hi')\n")
    argv = [a.replace("SCRIPT", str(script)).replace("TMP", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, "-c", f"from slurm_ft.cli import entry; entry.{command}()", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    output = (done.stdout + done.stderr).rstrip().splitlines()
    assert output, "nothing arrived"
    assert any(line.startswith(last_line) for line in output[-3:] + output[:8]), output
