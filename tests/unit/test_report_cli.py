"""slurm-ft-report's input handling: one line and exit 2 on bad input, no torch, no rich for --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.cli import report as cli
from tests.unit.test_report_analysis import RUN_A, cycle

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    (path / "cycles").mkdir(parents=True)
    rec = cycle(0, RUN_A, 0, 0, 5, "succeeded")
    (path / "cycles" / "cycle0.json").write_text(json.dumps(rec.to_json()))
    return path


def run(args: list[str], capsys, monkeypatch, cwd: Path | None = None) -> tuple[int, str, str]:
    for name in ("SLURM_JOB_ID", "SLURM_SUBMIT_DIR", "SLURM_FT_STATE_DIR", "SLURM_FT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    if cwd is not None:
        monkeypatch.chdir(cwd)
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state-dir", "/nonexistent/state"], "state dir /nonexistent/state does not exist"),
        (["4242", "--state-dir", "/x"], "give either JOBID or --state-dir, not both"),
        (["../etc"], "not a job id: '../etc'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, monkeypatch, tmp_path):
    code, out, err = run(args, capsys, monkeypatch, cwd=tmp_path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("slurm-ft-report: ") and message in err


def test_a_dir_without_records_and_an_unwritable_picture_are_bad_input(capsys, monkeypatch, tmp_path, state):
    code, _, err = run(["--state-dir", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and f"state dir {tmp_path} holds no slurm-ft records" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(["--state-dir", str(state), "--svg", str(blocker / "r.svg")], capsys, monkeypatch)
    assert code == 2 and err.startswith(f"slurm-ft-report: cannot write {blocker / 'r.svg'}")


def test_standalone_default_is_the_launchers_standalone_dir(capsys, monkeypatch, tmp_path):
    code, _, err = run([], capsys, monkeypatch, cwd=tmp_path)
    assert code == 2 and f"{tmp_path}/.slurm_ft/standalone does not exist" in err


def test_json_needs_neither_torch_nor_rich(state):
    probe = (
        "import sys\n"
        "from slurm_ft.cli import report\n"
        f"code = report.main(['--state-dir', {str(state)!r}, '--json', '--svg', {str(state / 'r.svg')!r}])\n"
        "assert code == 0\n"
        "heavy = sorted(m for m in ('torch', 'rich', 'yaml') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    assert json.loads(proc.stdout)["totals"]["cycles"] == 1


def _processes(state: Path) -> None:
    from slurm_ft import jsonlines
    from slurm_ft.records import NodeProcesses, WorkerProcess
    from slurm_ft.statedir import StateDir

    for k, pids in enumerate(((501, 502), (601, 602))):
        rec = NodeProcesses(
            cycle=0,
            node=f"node{k}",
            node_rank=k,
            job_id=None,
            run_uuid=RUN_A,
            launcher_pid=500 + 100 * k,
            launcher_start_ticks=7,
            time=0.0,
            workers=[WorkerProcess(2 * k + i, i, pid, 9) for i, pid in enumerate(pids)],
        )
        jsonlines.add(StateDir(state).node_processes(f"node{k}"), rec.to_json())


def test_processes_lists_each_ranks_worker_pid(capsys, monkeypatch, state):
    code, _, err = run(["--state-dir", str(state), "--processes"], capsys, monkeypatch)
    assert (
        code == 2
        and err
        == f"slurm-ft-report: state dir {state} holds no process records (no cycle has started workers)\n"
    )
    _processes(state)
    code, out, _ = run(["--processes", "--state-dir", str(state)], capsys, monkeypatch)
    assert code == 0
    assert out.splitlines() == [
        "cycle 0: 4 of 4 ranks' worker processes",
        " rank local  node   pid",
        "    0     0  node0  501",
        "    1     1  node0  502",
        "    2     0  node1  601",
        "    3     1  node1  602",
        "launcher of node0: pid 500",
        "launcher of node1: pid 600",
    ]
    code, out, _ = run(["--state-dir", str(state), "--processes", "--json"], capsys, monkeypatch)
    doc = json.loads(out)
    assert code == 0 and doc["cycle"] == 0 and doc["world_size"] == 4
    assert [(w["rank"], w["pid"]) for n in doc["nodes"] for w in n["workers"]] == [
        (0, 501),
        (1, 502),
        (2, 601),
        (3, 602),
    ]
    code, _, err = run(["--state-dir", str(state), "--processes", "--summary"], capsys, monkeypatch)
    assert code == 2 and "--processes cannot be combined" in err
