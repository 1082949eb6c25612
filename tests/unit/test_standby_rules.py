"""The rules of standby workers (issue 27) that need no process: which standby may become
which worker, when they start, what ``--preload auto`` finds, the option's syntax."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.workers import env as wenv
from slurm_ft.launch.workers import standby
from slurm_ft.launch.workers.layout import Entry, Topology
from slurm_ft.launch.workers.standby import Placement, mismatch, off_reason, past_start_up
from slurm_ft.launch.workers.standby_preload import auto_modules
from slurm_ft.settingsyntax import parse_preload
from slurm_ft.statedir import StateDir


def job(base: dict[str, str] | None = None) -> wenv.JobEnv:
    return wenv.JobEnv(
        base=base or {"PATH": "/bin", "HOME": "/h"},
        run_id="7-a0",
        max_restarts=3,
        forwarded=(15,),
        python=True,
        state=StateDir(Path("/state")),
        run_dir="/dev/shm/slurm-ft-x",
        node_name="n2",
    )


def cycle_env(node_rank: int, cycle: int, port: int) -> wenv.CycleEnv:
    return wenv.CycleEnv(Topology(node_rank, 4, 2, "10.0.0.1"), port, cycle, cycle)


def test_a_standby_built_for_a_local_rank_matches_that_rank_in_any_cycle_and_node_rank():
    built = wenv.standby_env(job(), 2, 1)
    for node_rank, cycle, port in ((0, 1, 2000), (3, 7, 2999)):
        worker = wenv.worker_env(job(), cycle_env(node_rank, cycle, port), 1)
        assert mismatch(built, Placement(None, None), worker, Placement(None, None)) is None
    assert not built.keys() & wenv.CYCLE_VARS
    assert built["PYTHONPATH"].startswith(str(wenv.INJECT_DIR))
    assert built["OMP_NUM_THREADS"] == "1"


def test_a_standby_is_not_used_when_anything_but_the_cycle_differs():
    built = wenv.standby_env(job(), 2, 0)
    worker = wenv.worker_env(
        job({"PATH": "/bin", "HOME": "/h", "PYTHONHASHSEED": "0"}), cycle_env(0, 1, 1), 0
    )
    assert mismatch(built, Placement(None, None), worker, Placement(None, None)) == (
        "the environment variable PYTHONHASHSEED differs"
    )
    same = wenv.worker_env(job(), cycle_env(0, 1, 1), 0)
    assert mismatch(built, Placement(frozenset({0}), None), same, Placement(frozenset({1}), None)) == (
        "its CPU/NUMA placement differs"
    )
    assert mismatch(built, Placement(None, 0), same, Placement(None, 1)) == "its CPU/NUMA placement differs"


def test_cycle_vars_are_exactly_what_a_worker_gets_per_cycle():
    """Every variable the launcher sets that changes between two cycles or node ranks is
    one of CYCLE_VARS (else a standby would be refused, or worse, keep an old value)."""
    a = wenv.launcher_vars(job(), cycle_env(0, 1, 2000), 0)
    b = wenv.launcher_vars(job(), cycle_env(2, 5, 3000), 0)
    changing = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert changing <= wenv.CYCLE_VARS


@pytest.mark.parametrize(
    ("wrote", "age", "start"),
    [
        ({0: 10, 1: 5}, 1.0, True),
        ({0: 10, 1: 0}, 1.0, False),
        ({0: 10, 1: None}, 1.0, False),
        ({0: 0, 1: 0}, standby.START_AFTER_S, True),
        ({}, 1.0, False),
    ],
)
def test_standbys_start_once_every_worker_wrote_or_after_the_cap(wrote, age, start):
    assert past_start_up(wrote, age) is start


def test_off_reasons(tmp_path):
    (tmp_path / "t.py").write_text("print(1)\n")
    assert off_reason(Entry("script", "t.py"), "auto", str(tmp_path)) is None
    assert off_reason(Entry("script", "t.py"), "none", str(tmp_path)) == "--preload none"
    assert off_reason(Entry("module", "pkg.main"), "auto", str(tmp_path)) == (
        "the workers run a module (-m), which always starts cold"
    )
    assert off_reason(Entry("command", "/bin/true"), "auto", str(tmp_path)) == (
        "the workers run a plain command (--no-python), which always starts cold"
    )
    assert off_reason(Entry("script", "missing.py"), "auto", str(tmp_path)) == (
        "missing.py is not a plain script file"
    )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("auto", "auto"), ("NONE", "none"), ("torch", "torch"), ("torch, numpy ,a.b_c", "torch,numpy,a.b_c")],
)
def test_preload_syntax(text, parsed):
    assert parse_preload(text) == parsed


@pytest.mark.parametrize("text", ["", "torch,", "1torch", "torch numpy", "a..b"])
def test_preload_syntax_refuses(text):
    with pytest.raises(ValueError, match="expected auto, none or module names"):
        parse_preload(text)


def test_auto_finds_installed_packages_through_the_scripts_own_modules(tmp_path):
    (tmp_path / "train.py").write_text(
        "import os\nimport yaml\nfrom model import net\nfrom data.loader import Loader\n"
        "def main():\n    import iniconfig\ndef never_called():\n    import no_such_pkg_abc\n"
        "if __name__ == '__main__':\n    import pytest\n    main()\n"
    )
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "__init__.py").write_text("from .net import Net\n")
    (tmp_path / "model" / "net.py").write_text("import json\nimport _pytest\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text("")
    (tmp_path / "data" / "loader.py").write_text(
        "from ..model import net\nimport no_such_pkg_xyz\nimport pluggy\n"
    )
    found = auto_modules(str(tmp_path / "train.py"))
    # the local packages are read, never listed; stdlib and missing ones are left out; what
    # runs at the top level counts (the `if __name__` block, the main() it calls), a
    # function nobody calls there does not
    assert found == ["yaml", "pytest", "iniconfig", "_pytest", "pluggy"]
    assert "model" not in sys.modules


def test_auto_of_a_script_that_does_not_parse_is_nothing(tmp_path):
    (tmp_path / "bad.py").write_text("import (\n")
    assert auto_modules(str(tmp_path / "bad.py")) == []


def test_auto_adds_what_ddp_imports_on_first_use(tmp_path):
    (tmp_path / "t.py").write_text(
        "def main():\n    import torch\n    m = torch.nn.parallel.DistributedDataParallel(None)\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    assert auto_modules(str(tmp_path / "t.py")) == ["torch", "torch._dynamo"]
    (tmp_path / "u.py").write_text("import torch\nx = torch.zeros(1)\n")
    assert auto_modules(str(tmp_path / "u.py")) == ["torch"]


@pytest.mark.parametrize("name", ["standby_child.py", "standby_preload.py"])
def test_the_standby_files_need_only_the_standard_library(name: str) -> None:
    """Both run in the workers' interpreter, which need not have slurm-ft installed (the
    child loads the preload rules by path): the standard library only, and never
    ``from __future__`` (the script is compiled there without inheriting anything)."""
    tree = ast.parse((Path(standby.__file__).parent / name).read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    tops = {n.split(".")[0] for n in imported}
    assert "__future__" not in tops
    assert tops - {"_slurm_ft_stacks"} <= sys.stdlib_module_names, tops
