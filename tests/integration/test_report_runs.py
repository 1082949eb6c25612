"""slurm-ft-report on state dirs made by real launcher runs (torch-free workers, one node).

Each scenario is run once per module: crash once then succeed; preempted (SIGTERM, 143)
then requeued as attempt 1; no progress (93); an unhealthy node (94). The report must
account for every second, validate against its shipped schema, draw one bar per cycle,
and still work, naming the file, when a record is damaged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_ft.report import jsonout
from tests.integration.launch_cluster import ECHO, SimJob, clean_env
from tests.support import minischema
from tests.support.waiting import wait_until

CKPT = Path(__file__).with_name("ckpt_worker.py")
BASE = ["--nproc-per-node", "2", "--monitor-interval", "0.05"]
REPORT = [sys.executable, "-m", "slurm_ft.cli.report"]


@dataclass
class Run:
    state: Path
    started: float  # test's clock just before the first launcher started
    ended: float  # just after the last launcher exited
    codes: list[int]
    gap: float = 0.0  # between the attempts, as the test saw it (preemption only)


def _iter_file(tmp: Path, value: int) -> Path:
    path = tmp / "latest_checkpointed_iteration.txt"
    path.write_text(f"{value}\n")
    return path


def _ckpt(tmp: Path, it: Path, *extra: str) -> list[str]:
    return [str(CKPT), "--iter-file", str(it), "--out", str(tmp / "out"), *extra]


def _run(job: SimJob, timeout: float = 60) -> list[int]:
    try:
        return job.wait(timeout)
    finally:
        job.kill()


def crash_once(tmp: Path) -> Run:
    it = _iter_file(tmp, 0)
    args = [*BASE, "--health-checks", "none", "--checkpoint-iteration-file", str(it)]
    worker = _ckpt(tmp, it, "--crash-rank", "1", "--crash-restart", "0", "--steps", "4")
    start = time.time()
    codes = _run(SimJob(tmp, 1, args, worker).start())
    return Run(tmp / "state", start, time.time(), codes)


def preempted_then_requeued(tmp: Path) -> Run:
    it = _iter_file(tmp, 0)
    args = [*BASE, "--health-checks", "none", "--checkpoint-iteration-file", str(it)]
    start = time.time()
    first = SimJob(tmp, 1, args, _ckpt(tmp, it, "--forever")).start()
    try:
        wait_until(lambda: int(it.read_text() or 0) >= 3, 30, message="three checkpoints\n" + first.dump())
        first.node(0).proc.send_signal(signal.SIGTERM)  # what Slurm does at preemption
        codes = first.wait(30)
    finally:
        first.kill()
    exited = time.monotonic()
    second = SimJob(tmp, 1, args, _ckpt(tmp, it, "--steps", "3"), attempt=1).start()
    gap = second.nodes[0].started - exited
    codes += _run(second)
    return Run(tmp / "state", start, time.time(), codes, gap=gap)


def no_progress(tmp: Path) -> Run:
    it = _iter_file(tmp, 100)  # never moves: the worker crashes before any checkpoint
    args = [
        *BASE,
        "--health-checks",
        "none",
        "--max-restarts",
        "5",
        "--checkpoint-iteration-file",
        str(it),
        "--max-no-progress-cycles",
        "2",
    ]
    worker = [str(ECHO), "--out", str(tmp / "out"), "--crash-rank", "0"]
    start = time.time()
    codes = _run(SimJob(tmp, 1, args, worker).start())
    return Run(tmp / "state", start, time.time(), codes)


def unhealthy(tmp: Path) -> Run:
    args = [*BASE, "--health-checks", "storage", "--paths", str(tmp / "missing")]
    start = time.time()
    codes = _run(SimJob(tmp, 1, args, [str(ECHO), "--out", str(tmp / "out")]).start())
    return Run(tmp / "state", start, time.time(), codes)


SCENARIOS = {
    "crash_once": (crash_once, [0]),
    "preempted": (preempted_then_requeued, [143, 0]),
    "no_progress": (no_progress, [93]),
    "unhealthy": (unhealthy, [94]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    out = {}
    for name, (scenario, codes) in SCENARIOS.items():
        run = scenario(tmp_path_factory.mktemp(name))
        assert run.codes == codes, (name, run.codes)
        out[name] = run
    return out


def report(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*REPORT, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env or clean_env()
    )


def report_json(state: Path) -> dict:
    proc = report("--state-dir", str(state), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _schema() -> dict:
    return json.loads(jsonout.schema_path().read_text())


def assert_accounts_for_every_second(doc: dict, run: Run) -> None:
    t = doc["totals"]
    parts = (
        t["startup_s"]
        + t["progress_s"]
        + t["lost_work_s"]
        + t["stopping_s"]
        + t["no_progress_s"]
        + t["unknown_progress_s"]
        + t["restart_overhead_s"]
        + t["between_attempts_s"]
    )
    assert abs(parts - t["wall_clock_s"]) < 1.0, t
    # The report's wall clock lies inside what the test itself measured around the runs.
    assert t["wall_clock_s"] <= run.ended - run.started
    for a in doc["attempts"]:
        assert run.started <= a["start"] <= a["end"] <= run.ended


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_totals_add_up_and_json_validates(runs, name):
    doc = report_json(runs[name].state)
    assert minischema.errors(doc, _schema()) == []
    assert doc["report_version"] == jsonout.REPORT_VERSION
    assert doc["unreadable"] == []
    assert_accounts_for_every_second(doc, runs[name])


@pytest.mark.timeout(240)
def test_crash_once_names_the_failure_and_counts_progress(runs):
    doc = report_json(runs["crash_once"].state)
    c0, c1 = doc["cycles"]
    assert (c0["outcome"], c1["outcome"]) == ("failed", "succeeded")
    f = c0["first_failure"]
    assert (f["kind"], f["rank"], f["node"], f["exit_code"]) == ("worker", 1, "node0", 3)
    assert re.fullmatch(r"RuntimeError: injected crash on rank 1 at iteration \d+", f["exception"])
    assert c0["progressed"] is True and c1["progressed"] is True
    assert c1["iteration_start"] == c0["iteration_end"]
    (attempt,) = doc["attempts"]
    assert (attempt["outcome"], attempt["exit_code"], attempt["cycles"]) == ("finished", 0, [0, 1])
    t = doc["totals"]
    assert (t["restarts"], t["requeues"], t["failures"], t["work_lost_iterations"]) == (1, 0, 1, 0)
    # Two fields of one document agree exactly: the ratio is of the durations it prints.
    assert t["goodput_ratio"] == t["progress_s"] / t["wall_clock_s"]
    assert t["restart_overhead_s"] > 0
    assert doc["top_causes"][0]["cause"].startswith("worker exit code 3: RuntimeError: injected crash")


@pytest.mark.timeout(240)
def test_preemption_then_requeue_shows_two_attempts_and_the_gap(runs):
    run = runs["preempted"]
    doc = report_json(run.state)
    first, second = doc["attempts"]
    assert (first["attempt"], second["attempt"]) == (0, 1)
    # The first attempt's outcome.json was replaced by the second's; without a kept copy
    # (outcomes/) the report infers it from the signalled cycle and says so.
    assert first["outcome"] in ("signal-SIGTERM", "signalled")
    assert (second["outcome"], second["exit_code"]) == ("finished", 0)
    assert [c["outcome"] for c in doc["cycles"]] == ["signalled", "succeeded"]
    assert doc["cycles"][0]["progressed"] is True
    t = doc["totals"]
    assert t["requeues"] == 1
    assert t["between_attempts_s"] >= run.gap - 0.1
    assert t["between_attempts_s"] == pytest.approx(second["start"] - first["end"], abs=0.002)  # JSON rounds
    assert any("SIGTERM" in k["cause"] or "signalled" in k["cause"] for k in doc["top_causes"])


@pytest.mark.timeout(240)
def test_no_progress_is_time_without_progress(runs):
    doc = report_json(runs["no_progress"].state)
    (attempt,) = doc["attempts"]
    assert (attempt["outcome"], attempt["exit_code"]) == ("no-progress", 93)
    assert [c["progressed"] for c in doc["cycles"]] == [False, False]
    t = doc["totals"]
    assert t["progress_s"] == 0 and t["no_progress_s"] > 0
    assert t["goodput_ratio"] == 0
    assert doc["repeat_nodes"] == [{"node": "node0", "failures": 2, "cycles": [0, 1], "unhealthy": 0}]


@pytest.mark.timeout(240)
def test_unhealthy_node_attempt_without_cycles(runs):
    doc = report_json(runs["unhealthy"].state)
    (attempt,) = doc["attempts"]
    assert (attempt["outcome"], attempt["exit_code"], attempt["cycles"]) == ("unhealthy", 94, [])
    assert attempt["unhealthy_nodes"] == ["node0"]
    assert [u["node"] for u in doc["unhealthy"]] == ["node0"]
    assert doc["unhealthy"][0]["reason"].startswith("storage")
    assert doc["totals"]["goodput_ratio"] is None  # nothing ran: nothing to judge
    terminal = report("--state-dir", str(runs["unhealthy"].state))
    assert terminal.returncode == 0 and "unhealthy: node0" in terminal.stdout


@pytest.mark.timeout(240)
def test_damaged_records_are_named_and_the_rest_is_reported(runs, tmp_path):
    state = tmp_path / "state"
    shutil.copytree(runs["crash_once"].state, state)
    (state / "cycles" / "cycle0.json").write_text('{"cycle": 0, "attempt": ')
    (state / "outcome.json").write_text(json.dumps({"exit_code": "zero"}))
    doc = report_json(state)
    assert minischema.errors(doc, _schema()) == []
    bad = {Path(u["path"]).name: u["problem"] for u in doc["unreadable"]}
    assert bad["cycle0.json"].startswith("not valid JSON")
    assert "exit_code" in bad["outcome.json"]
    # Cycle 0 is still there, as the ledger saw it; cycle 1 from its record.
    assert [(c["cycle"], c["source"]) for c in doc["cycles"]] == [(0, "ledger"), (1, "record")]
    text = report("--state-dir", str(state))
    assert text.returncode == 0
    assert f"could not read {state / 'cycles' / 'cycle0.json'}" in text.stdout.replace("\n", "")


@pytest.mark.timeout(240)
def test_svg_has_one_bar_per_cycle_and_html_embeds_it(runs, tmp_path):
    svg, html = tmp_path / "r.svg", tmp_path / "r.html"
    proc = report(
        "--state-dir", str(runs["preempted"].state), "--svg", str(svg), "--html", str(html), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    picture = svg.read_text()
    bars = re.findall(r'<rect class="cycle" data-cycle="(\d+)" data-outcome="([\w-]+)"', picture)
    assert bars == [(str(c["cycle"]), c["outcome"]) for c in doc["cycles"]]
    assert len(re.findall(r'<rect class="attempt"', picture)) == 2
    assert len(re.findall(r'<rect class="gap"', picture)) == 1
    assert picture in html.read_text()


@pytest.mark.timeout(240)
def test_job_id_is_found_under_the_submit_dir(runs, tmp_path):
    shutil.copytree(runs["crash_once"].state, tmp_path / ".slurm_ft" / "4242")
    env = {**clean_env(), "SLURM_SUBMIT_DIR": str(tmp_path)}
    by_id = report("4242", "--json", env=env)
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["state_dir"] == str(tmp_path / ".slurm_ft" / "4242")
    # Inside the job's own environment no argument is needed, as for the launcher.
    env.update({"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0"})
    env.update({"SLURM_JOB_NODELIST": "node0", "SLURMD_NODENAME": "node0"})
    implicit = report("--json", env=env, cwd=tmp_path)
    assert implicit.returncode == 0, implicit.stderr
    assert json.loads(implicit.stdout)["state_dir"] == str(tmp_path / ".slurm_ft" / "4242")


# --------------------------------------------------------------------------- Chromium


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw pixels) of an 8-bit, non-interlaced RGB(A) PNG."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and interlace == 0 and colour_type in (2, 6), (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prev[i]
            corner = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 0xFF
        out += line
        prev = line
    return width, height, channels, bytes(out)


@pytest.mark.timeout(240)
def test_svg_renders_in_headless_chromium(runs, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing under CI (scripts/lib/setup-env.sh installs it)")
        pytest.skip("chromium is not installed")
    svg = tmp_path / "r.svg"
    assert report("--state-dir", str(runs["preempted"].state), "--svg", str(svg)).returncode == 0
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=960,240",
            f"--screenshot={shot}",
            svg.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), proc.stderr[-2000:]
    width, height, channels, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (960, 240)
    colours = {tuple(pixels[i : i + 3]) for i in range(0, len(pixels), channels)}
    inked = sum(1 for i in range(0, len(pixels), channels) if sum(pixels[i : i + 3]) < 600)
    assert inked > 0.02 * width * height, f"only {inked} non-white pixels: the picture is blank"
    # The bars themselves were painted: the signalled and the succeeded cycle's colours.
    assert (0xEF, 0x8F, 0x00) in colours and (0x2E, 0x7D, 0x32) in colours
