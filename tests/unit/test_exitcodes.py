"""The exit-code contract the sbatch templates rely on."""

from __future__ import annotations

import signal

import pytest

from slurm_ft import exitcodes
from slurm_ft.exitcodes import ExitCode


def test_contract_numbers():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 93, 94]


def test_signal_codes_round_trip():
    assert exitcodes.for_signal(signal.SIGTERM) == 143
    assert exitcodes.signal_of(143) is signal.SIGTERM
    assert exitcodes.signal_of(138) is signal.SIGUSR1
    assert exitcodes.signal_of(94) is None
    assert exitcodes.signal_of(128) is None


def test_describe():
    assert exitcodes.describe(0) == "finished"
    assert exitcodes.describe(93) == "no-progress"
    assert exitcodes.describe(94) == "unhealthy"
    assert exitcodes.describe(143) == "signal-SIGTERM"
    assert exitcodes.describe(7) == "exit-7"


def test_signal_names_in_messages():
    assert exitcodes.signal_name(signal.SIGTERM) == "SIGTERM"
    assert exitcodes.signal_name(int(signal.SIGUSR1)) == "SIGUSR1"
    assert exitcodes.signal_name(40) == "signal 40"  # a real-time signal Python has no name for


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("SIGTERM", 15),
        ("SIGUSR1", 10),
        ("SIGINT", 2),
        (None, None),
        ("", None),
        ("SIG_DFL", None),
        ("SIGNOPE", None),
        ("signal 40", None),
        ("TERM", None),
    ],
)
def test_signal_by_name_reads_back_what_signal_name_wrote(name, number):
    assert exitcodes.signal_by_name(name) == number
