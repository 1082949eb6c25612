"""The launcher front end's part of the compatibility layer: host comparison, the
--ft-cfg-path file, precedence of slurm-ft's own options over ft_launcher's."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft.cli.launchoptions import interpret
from slurm_ft.cli.usage import UsageError
from slurm_ft.launch.hostprobe import same_host


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("node1", "node1", True),
        ("localhost", "127.0.0.1", True),
        ("127.0.1.1", "127.0.0.1", True),  # both loopback: node 0 is this machine
        ("192.0.2.7", "127.0.0.1", False),
        ("192.0.2.7", "192.0.2.8", False),
        ("no-such-host.invalid", "127.0.0.1", False),
    ],
)
def test_same_host(a: str, b: str, same: bool) -> None:
    assert same_host(a, b) is same


def test_cfg_path_without_the_section_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "x.yaml"
    cfg.write_text("other: {a: 1}\n")
    with pytest.raises(
        UsageError, match=r"--ft-cfg-path .*x.yaml: no 'fault_tolerance:' section in the file"
    ):
        interpret(["--ft-cfg-path", str(cfg), "t.py"])
    with pytest.raises(UsageError, match=r"--ft-cfg-path /nonexistent\.yaml: No such file"):
        interpret(["--ft-cfg-path", "/nonexistent.yaml", "t.py"])


def test_slurm_ft_options_win_over_ft_launcher_aliases(tmp_path: Path) -> None:
    cfg = tmp_path / "ft.yaml"
    cfg.write_text("fault_tolerance:\n  checkpoint_iteration_file: /yaml\n")
    it = interpret(["--ft-cfg-path", str(cfg), "t.py"])
    assert it.cli["progress.checkpoint_iteration_file"] == "/yaml"
    it = interpret(["--ft-cfg-path", str(cfg), "--ft-checkpoint-iteration-file", "/ft", "t.py"])
    assert it.cli["progress.checkpoint_iteration_file"] == "/ft"
    it = interpret(["--ft-checkpoint-iteration-file", "/ft", "--checkpoint-iteration-file", "/own", "t.py"])
    assert it.cli["progress.checkpoint_iteration_file"] == "/own"


def test_ft_options_after_the_script_belong_to_the_script() -> None:
    it = interpret(["t.py", "--ft-segment", "4"])
    assert it.ns.args == ["--ft-segment", "4"] and it.cli == {}
