"""slurm-ft-logs on real launcher runs (torch-free workers): one node and two simulated
nodes, per-node files, a crash with a traceback, a hang with stacks, a restart while
following, and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob, clean_env
from tests.support.waiting import wait_until

WORKER = Path(__file__).with_name("logs_worker.py")
HANG_WORKER = Path(__file__).with_name("hang_worker.py")
LOGS = [sys.executable, "-m", "slurm_ft.cli.logs"]
BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


def logs(
    job_or_state: SimJob | Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    state = job_or_state.state if isinstance(job_or_state, SimJob) else job_or_state
    cmd = [*LOGS, "--state-dir", str(state), *args] if state is not None else [*LOGS, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env or clean_env(), timeout=60)


def finished(job: SimJob, codes: list[int], timeout: float = 90) -> SimJob:
    job.start()
    try:
        assert job.wait(timeout) == codes, job.dump()
    finally:
        job.kill()
    job.assert_no_orphans()
    return job


@pytest.fixture(scope="module")
def crash_once(tmp_path_factory) -> SimJob:
    """One node, two ranks: rank 1 fails with a traceback in cycle 0, cycle 1 succeeds."""
    tmp = tmp_path_factory.mktemp("crash")
    args = [*BASE, "--applog-prefix", str(tmp / "logs" / "job.log"), "--max-restarts", "1"]
    worker = [str(WORKER), "--crash-rank", "1", "--lines", "6", "--sync-dir", str(tmp / "printed")]
    return finished(SimJob(tmp, 1, args, worker), [0])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> SimJob:
    """Two simulated nodes, one file per node."""
    tmp = tmp_path_factory.mktemp("pernode")
    args = [*BASE, "--applog-prefix", str(tmp / "logs" / "job.log"), "--applog-per-node"]
    return finished(SimJob(tmp, 2, args, [str(WORKER), "--lines", "50"]), [0, 0])


def test_the_records_name_the_cycle_files(crash_once, two_nodes):
    files = crash_once.cycle_record(0)["log_files"]
    assert files == [
        {"path": str(crash_once.tmp / "logs" / "job_cycle0.log"), "node": None, "node_rank": None}
    ]
    per_node = two_nodes.cycle_record(0)["log_files"]
    logs = two_nodes.tmp / "logs"  # each node's files in a directory of its own (#45)
    assert [(f["path"], f["node_rank"]) for f in per_node] == [
        (str(logs / "job_node0" / "job_cycle0.node0.log"), 0),
        (str(logs / "job_node1" / "job_cycle0.node1.log"), 1),
    ]


def test_the_last_cycle_is_shown_by_default_and_any_cycle_on_request(crash_once):
    last = logs(crash_once)
    assert last.returncode == 0, last.stderr
    assert last.stdout == (crash_once.tmp / "logs" / "job_cycle1.log").read_text()
    first = logs(crash_once, "--cycle", "0")
    assert first.stdout == (crash_once.tmp / "logs" / "job_cycle0.log").read_text()
    assert logs(crash_once, "--attempt", "0", "--cycle", "0").stdout == first.stdout


def test_rank_grep_head_and_tail_select_lines(crash_once):
    out = logs(crash_once, "--cycle", "0", "--rank", "1", "--grep", r"loss 1\.[0-2]").stdout.splitlines()
    assert out == [
        "1: cycle 0 step 0 loss 1.00",
        "1: cycle 0 step 1 loss 1.10",
        "1: cycle 0 step 2 loss 1.20",
    ]
    assert logs(crash_once, "--cycle", "0", "--grep", "^UserWarning", "--head", "3").stdout.count("\n") == 3
    tail = logs(crash_once, "--cycle", "0", "--rank", "1", "--tail", "1").stdout
    assert tail == "1: ValueError: bad batch on rank 1\n"


def test_collapse_folds_what_every_rank_printed(crash_once):
    out = logs(crash_once, "--cycle", "0", "--collapse").stdout.splitlines()
    assert out[0] == "     12 0-1: UserWarning: every rank says this"
    numbers = logs(crash_once, "--cycle", "0", "--collapse=numbers").stdout.splitlines()
    assert "     12 0-1: cycle 0 step [0..5] loss [0.00..1.50]" in numbers
    doc = json.loads(logs(crash_once, "--cycle", "0", "--collapse", "--json").stdout.splitlines()[0])
    assert (doc["ranks"], doc["count"], doc["rank_count"]) == ("0-1", 12, 2)


def test_failure_names_the_rank_and_shows_its_last_lines_and_traceback(crash_once):
    res = logs(crash_once, "--cycle", "0", "--failure")
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "worker" in text and "exit code 1" in text
    assert "--- last 20 lines of rank 1:" in text and "1: rank 1: about to fail" in text
    assert "--- traceback of rank 1" in text and "in load_batch" in text
    assert "ValueError: bad batch on rank 1" in text
    assert str(crash_once.tmp / "logs" / "job_cycle0.log") in text
    doc = json.loads(logs(crash_once, "--cycle", "0", "--failure", "--json").stdout)
    assert (doc["failure"]["rank"], doc["failure"]["kind"]) == (1, "worker")
    assert "ValueError: bad batch on rank 1" in doc["traceback"]
    assert doc["last_lines"][-1].startswith("1: ")
    later = logs(crash_once, "--failure").stdout
    assert (
        "cycle 1 (attempt 0): succeeded, no failure recorded" in later and "cycles with a failure: 0" in later
    )


def test_two_nodes_per_node_files_merge_into_one_stream(two_nodes):
    res = logs(two_nodes, "--json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    files = (two_nodes.tmp / "logs").glob("job_node*/job_cycle0.node*.log")
    on_disk = sum(len(p.read_text().splitlines()) for p in files)
    assert len(lines) == on_disk == 4 * (2 * 50 + 1)
    nodes = {x["rank"]: x["node"] for x in lines}
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
    for rank in range(4):  # each rank's lines in the order it printed them
        steps = [x["text"] for x in lines if x["rank"] == rank and "step" in x["text"]]
        assert steps == [f"cycle 0 step {i} loss {rank + i / 10:.2f}" for i in range(50)]
    node1 = nodes[2]
    only = logs(two_nodes, "--node", node1).stdout.splitlines()
    assert only and all(x.split(":")[0] in ("2", "3") for x in only)
    prefixed = logs(two_nodes, "--node-prefix", "--rank", "3", "--head", "1").stdout
    assert prefixed.startswith(f"{node1} 3: ")


def test_bad_input_is_one_line_and_exit_2(crash_once, tmp_path):
    env = {**clean_env(), "SLURM_SUBMIT_DIR": str(tmp_path)}
    cases = [
        logs(None, "999", env=env),  # an unknown job
        logs(crash_once, "--cycle", "99"),
        logs(crash_once, "--attempt", "4"),
        logs(tmp_path),  # a dir that is not a state dir
        logs(tmp_path / "missing"),
        logs(crash_once, "--rank", "0,2-x"),
        logs(crash_once, "--rank", "7"),  # not in this cycle
        logs(crash_once, "--node", "nosuchnode"),
        logs(crash_once, "--grep", "("),
        logs(crash_once, "--head", "1", "--tail", "1"),
    ]
    for res in cases:
        assert res.returncode == 2, (res.args, res.stdout, res.stderr)
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("slurm-ft-logs: "), res.stderr
        assert "Traceback" not in res.stderr


@pytest.mark.timeout(150)
def test_a_hang_shows_the_stacks_of_the_hung_ranks_once_per_distinct_stack(tmp_path):
    args = [*BASE, "--applog-prefix", str(tmp_path / "logs" / "job.log"), "--workers-stop-timeout", "3"]
    job = finished(
        SimJob(
            tmp_path, 2, [*args, "--hang-timeout", "2"], [str(HANG_WORKER), "deadlock", "--hung-rank", "3"]
        ),
        [0, 0],
    )
    res = logs(job, "--cycle", "0", "--failure")
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "hang (silence)" in text and "every rank" in text
    assert "--- stacks at the hang" in text
    assert "deadlocked_function" in text  # rank 3's own stack
    assert "ranks 0-2 (3):" in text  # the three ranks asleep in the same place, shown once
    doc = json.loads(logs(job, "--cycle", "0", "--failure", "--json").stdout)
    assert sorted(g["ranks"] for g in doc["stacks"]) == ["0-2", "3"]


@pytest.mark.timeout(150)
def test_following_moves_on_to_the_next_cycle_at_a_restart_and_ends_with_the_job(tmp_path):
    go = tmp_path / "go"
    args = [*BASE, "--applog-prefix", str(tmp_path / "logs" / "job.log"), "--max-restarts", "1"]
    job = SimJob(tmp_path, 1, args, [str(WORKER), "--crash-rank", "1", "--go-file", str(go)]).start()
    out, err = tmp_path / "follow.out", tmp_path / "follow.err"
    try:
        # started as soon as the state dir is there: the follower waits for the first cycle
        wait_until(lambda: job.state.is_dir(), 30, message="the state dir")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            follower = subprocess.Popen(
                [*LOGS, "--state-dir", str(job.state), "-f", "--rank", "1"],
                stdout=fo,
                stderr=fe,
                env=clean_env(),
            )
        try:
            wait_until(lambda: "cycle 0 tick" in out.read_text(), 30, message="the follower shows cycle 0")
            go.touch()
            assert follower.wait(60) == 0, err.read_text()
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        assert job.wait(30) == [0], job.dump()
    finally:
        job.kill()
    shown = out.read_text().splitlines()
    assert all(line.startswith("1: ") for line in shown), shown[:5]
    assert "1: ValueError: bad batch on rank 1" in shown
    assert shown[-1] == "1: rank 1 cycle 1 done"
    assert shown.index("1: ValueError: bad batch on rank 1") < shown.index("1: cycle 1 step 0 loss 1.00")
    said = err.read_text()
    assert "cycle 0 ended; following cycle 1" in said and "outcome is written" in said
    late = logs(job, "-f", "--cycle", "0", "--rank", "1")  # the job is over: cycle 0, then 1, then the end
    assert late.returncode == 0 and late.stdout.splitlines() == shown, late.stderr


@pytest.mark.timeout(120)
def test_a_lost_node_shows_what_its_ranks_printed_last(tmp_path):
    args = [*BASE, "--applog-prefix", str(tmp_path / "logs" / "job.log")]
    job = SimJob(tmp_path, 2, args, [str(WORKER), "--go-file", str(tmp_path / "never")]).start()
    log = tmp_path / "logs" / "job_cycle0.log"
    try:
        wait_until(
            lambda: log.exists() and all(f"{r}: cycle 0 tick" in log.read_text() for r in range(4)),
            60,
            message="every rank ticking\n" + job.dump(),
        )
        job.node(1).proc.kill()
        wait_until(lambda: job.node(0).proc.poll() is not None, 30, message="node0 ends\n" + job.dump())
    finally:
        job.kill()
    res = logs(job, "--failure", "--tail", "5")
    assert res.returncode == 0, res.stderr
    assert "lost-node" in res.stdout
    section = res.stdout.split("--- last 5 lines of the ranks on node1:", 1)[1].split("\n---", 1)[0]
    shown = [line for line in section.splitlines() if line]
    assert len(shown) == 5 and all(line.split(":")[0] in ("2", "3") for line in shown), shown


def test_a_job_id_finds_the_state_dir_as_the_report_does(crash_once, tmp_path):
    (tmp_path / ".slurm_ft").mkdir()
    (tmp_path / ".slurm_ft" / "4242").symlink_to(crash_once.state)
    env = {**clean_env(), "SLURM_SUBMIT_DIR": str(tmp_path)}
    res = logs(None, "4242", "--cycle", "0", "--rank", "0", "--head", "1", env=env)
    assert (res.returncode, res.stdout) == (0, "0: UserWarning: every rank says this\n"), res.stderr
    listing = json.loads(logs(None, "4242", "--list", "--json", env=env).stdout)
    assert [(c["cycle"], c["outcome"]) for c in listing["cycles"]] == [(0, "failed"), (1, "succeeded")]


@pytest.mark.timeout(120)
def test_ctrl_c_ends_a_follow_cleanly(tmp_path):
    args = [*BASE, "--applog-prefix", str(tmp_path / "logs" / "job.log")]
    job = SimJob(tmp_path, 1, args, [str(WORKER), "--go-file", str(tmp_path / "go")]).start()
    out, err = tmp_path / "follow.out", tmp_path / "follow.err"
    try:
        wait_until(lambda: (job.state / "cycles" / "cycle0.json").exists(), 30, message="cycle 0 record")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            # ^C as a terminal delivers it: a run started in the background (`cmd &` without job
            # control) hands its children SIGINT ignored, and Python then leaves it ignored
            follower = subprocess.Popen(
                [*LOGS, "--state-dir", str(job.state), "-f"],
                stdout=fo,
                stderr=fe,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        try:
            wait_until(lambda: "cycle 0 tick" in out.read_text(), 30, message="the follower shows cycle 0")
            follower.send_signal(signal.SIGINT)
            assert follower.wait(10) == 130
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        (tmp_path / "go").touch()
        assert job.wait(30) == [0], job.dump()
    finally:
        job.kill()
    assert err.read_text() == "slurm-ft-logs: interrupted\n"
    assert out.read_text().endswith("\n")  # whole lines only, nothing cut
