"""Hang verdicts as data, and the worker API's slot as the launcher reads it."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

import pytest

from slurm_ft import config, worker
from slurm_ft.launch import hang
from slurm_ft.launch.hang import Detector, Limits

LIMITS = Limits(
    silence=60.0,
    iteration=0.0,
    heartbeat=10.0,
    initial_heartbeat=100.0,
    sections={"checkpointing": 600.0, "step": 5.0},
    out_of_section=30.0,
)


def slot(heartbeat=0.0, section=None, start=0.0, end=0.0) -> worker.Slot:
    return worker.Slot(heartbeat, section, start, end)


@pytest.mark.parametrize(
    ("reading", "now", "expected"),
    [
        (slot(heartbeat=95.0), 100.0, None),
        (slot(heartbeat=89.0), 100.0, Detector.HEARTBEAT),
        (slot(), 50.0, None),  # started at 0: within the initial timeout
        (slot(), 101.0, Detector.INITIAL_HEARTBEAT),
        # a long checkpoint inside its section is alive, heart-beats or not
        (slot(heartbeat=1.0, section="checkpointing", start=2.0), 500.0, None),
        (slot(heartbeat=1.0, section="checkpointing", start=2.0), 700.0, Detector.SECTION),
        (slot(heartbeat=99.0, section="step", start=90.0), 100.0, Detector.SECTION),
        # a section without a timeout: heart-beats judge
        (slot(heartbeat=99.0, section="eval", start=10.0), 100.0, None),
        (slot(heartbeat=99.0, end=60.0), 100.0, Detector.OUT_OF_SECTION),
        (slot(heartbeat=99.0, end=80.0), 100.0, None),
    ],
)
def test_rank_verdicts(reading, now, expected):
    verdict = hang.judge_rank(reading, now, started=0.0, limits=LIMITS)
    assert (verdict[0] if verdict else None) == expected


def test_silence_is_job_wide_one_chatty_node_keeps_everyone_alive():
    assert hang.judge_silence([61.0, 0.5], 60.0) is None
    found = hang.judge_silence([61.0, 75.0], 60.0)
    assert found is not None and found.detector is Detector.SILENCE and found.seconds == 61.0
    assert hang.judge_silence([500.0], 0.0) is None  # off


def test_several_hung_ranks_are_one_finding_named_by_the_first():
    found = hang.rank_hang(
        {5: (Detector.HEARTBEAT, 12.0, "no heartbeat for 12.0s"), 3: (Detector.SECTION, 7, "x")}
    )
    assert found is not None and found.ranks == (3, 5)
    assert found.detail == "rank 3: x (also rank(s) 5)"


def test_peer_reports_count_only_for_the_current_cycle():
    assert hang.parse_report("2:13.5", 2) == 13.5
    assert hang.parse_report("2:0", 2) == 0.0
    assert hang.parse_report("1:900.0", 2) is None
    assert hang.parse_report("-", 0) is None


def test_bad_section_timeouts_and_signals_are_one_clear_line():
    with pytest.raises(config.ConfigError, match=r"hang\.rank_section_timeouts: expected name=SECONDS"):
        config.load({}, None, {"hang.rank_section_timeouts": "step"})
    with pytest.raises(config.ConfigError, match=r"hang\.rank_termination_signal: unknown signal 'SIGFOO'"):
        config.load({}, None, {"hang.rank_termination_signal": "SIGFOO"})


def test_worker_api_writes_the_slot_the_launcher_reads(tmp_path):
    path = tmp_path / "rank0.slot"
    worker.new_slot(str(path))
    code = (
        "import time; from slurm_ft import worker\n"
        "worker.heartbeat()\n"
        "with worker.section('checkpointing'):\n"
        "    with worker.section('inner'):\n"
        "        pass\n"
        "    print(time.monotonic(), flush=True)\n"
        "    input()\n"
    )
    env = {**os.environ, worker.MONITOR_ENV: str(path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        inside = float(proc.stdout.readline())
        with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), worker.SLOT_SIZE) as view:
            now = worker.read_slot(view)
            assert now is not None and now.section == "checkpointing"  # the outer one again
            assert 0 < now.heartbeat <= now.section_start <= inside
            proc.communicate("\n", timeout=10)
            after = worker.read_slot(view)
            assert after is not None and after.section is None and after.section_end >= inside
    finally:
        proc.kill()


def test_worker_api_is_a_no_op_without_the_launcher():
    code = (
        "import sys; from slurm_ft import worker\n"
        "worker.heartbeat()\n"
        "with worker.section('x'): pass\n"
        "print(worker.stop_requested(), 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_FT_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "False False\n"


def test_stop_requested_turns_a_forwarded_signal_into_a_flag():
    code = (
        "import os, signal; from slurm_ft import worker\n"
        "assert not worker.stop_requested()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print(worker.stop_requested())\n"
    )
    env = {**os.environ, worker.SIGNALS_ENV: "15,10"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "True\n"
