"""Launcher metrics: Prometheus text format and a writer that writes on change, at most once a second."""

from __future__ import annotations

import dataclasses
import errno
import re

from slurm_ft.launch.metrics import LauncherMetrics, PromFileWriter, render

SNAP = LauncherMetrics(
    job="4242",
    node="node0",
    node_rank=0,
    attempt=1,
    cycle=7,
    restarts_used=2,
    restart_budget=3,
    workers_running=4,
    last_failure_time=1700000000.5,
    last_failure_kind="worker",
    log_lines_lost=3,
    log_bytes_lost=120,
    peer_heartbeat_age_s=(("node1", 0.25), ("node2", 1.5)),
)
SAMPLE = re.compile(r'^(slurm_ft_launch_[a-z_]+)\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)+)\} (-?[0-9.e+]+)$')


def samples(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a valid sample line: {line!r}"
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def test_every_family_has_help_and_type_and_follows_the_naming_conventions():
    text = render(SNAP)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    assert set(types) == helps
    for name, kind in types.items():
        assert name.startswith("slurm_ft_launch_")
        assert name.endswith("_total") == (kind == "counter"), name
    got = samples(text)
    base = 'job="4242",node="node0"'
    assert got[("slurm_ft_launch_cycle", base)] == 7
    assert got[("slurm_ft_launch_restarts_total", base)] == 2
    assert got[("slurm_ft_launch_restart_budget", base)] == 3
    assert got[("slurm_ft_launch_workers_running", base)] == 4
    assert got[("slurm_ft_launch_last_failure_timestamp_seconds", base + ',kind="worker"')] == 1700000000.5
    assert got[("slurm_ft_launch_log_lost_lines_total", base)] == 3
    assert got[("slurm_ft_launch_log_lost_bytes_total", base)] == 120
    assert got[("slurm_ft_launch_peer_heartbeat_age_seconds", base + ',peer="node1"')] == 0.25
    assert got[("slurm_ft_launch_peer_heartbeat_age_seconds", base + ',peer="node2"')] == 1.5


def test_unknown_values_are_left_out_not_invented():
    quiet = dataclasses.replace(SNAP, cycle=None, last_failure_time=None, peer_heartbeat_age_s=())
    text = render(quiet)
    for name in ("cycle", "last_failure_timestamp_seconds", "peer_heartbeat_age_seconds"):
        assert f"slurm_ft_launch_{name}" not in text
    assert samples(text)  # the rest is still there


def test_label_values_are_escaped():
    text = render(dataclasses.replace(SNAP, node='we"ird\\node\n'))
    assert 'node="we\\"ird\\\\node\\n"' in text
    samples(text)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_writes_on_change_only_and_at_most_once_per_interval(tmp_path):
    path = tmp_path / "textfile" / "slurm_ft.prom"
    clock = Clock()
    w = PromFileWriter(str(path), clock=clock)
    assert w.update(SNAP) is True
    assert path.read_text() == render(SNAP)
    assert w.update(SNAP) is False  # unchanged: nothing written
    clock.now += 5
    assert w.update(SNAP) is False and w.writes == 1
    changed = dataclasses.replace(SNAP, workers_running=0)
    assert w.update(changed) is True  # changed, interval passed
    newer = dataclasses.replace(SNAP, workers_running=2)
    clock.now += 0.5
    assert w.update(newer) is False  # inside the interval: kept for later
    assert path.read_text() == render(changed)
    clock.now += 0.5
    assert w.update(newer) is True
    assert path.read_text() == render(newer)
    assert w.writes == 3
    assert [p.name for p in path.parent.iterdir()] == ["slurm_ft.prom"]  # no temp files left


def test_a_change_inside_the_interval_is_written_by_flush(tmp_path):
    path = tmp_path / "m.prom"
    clock = Clock()
    w = PromFileWriter(str(path), clock=clock)
    w.update(SNAP)
    last = dataclasses.replace(SNAP, workers_running=0, cycle=8)
    assert w.update(last) is False
    assert w.flush() is True
    assert path.read_text() == render(last)
    assert w.flush() is False  # nothing pending


def test_a_reverted_change_is_not_written():
    written: list[bytes] = []
    clock = Clock()
    w = PromFileWriter("/x", clock=clock, write=lambda p, data: written.append(data))
    w.update(SNAP)
    w.update(dataclasses.replace(SNAP, workers_running=0))  # pending, inside the interval
    w.update(SNAP)  # back to what is on disk
    clock.now += 2
    assert w.flush() is False and len(written) == 1


def test_write_errors_are_reported_once_and_retried():
    errors: list[str] = []
    fail = [True]
    written: list[bytes] = []

    def write(path: str, data: bytes) -> None:
        if fail[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(data)

    clock = Clock()
    w = PromFileWriter("/full/m.prom", clock=clock, write=write, on_error=errors.append)
    assert w.update(SNAP) is False
    clock.now += 1
    assert w.update(SNAP) is False
    assert errors == ["cannot write metrics file /full/m.prom: No space left on device"]
    fail[0] = False
    clock.now += 1
    assert w.update(SNAP) is True
    assert written == [render(SNAP).encode()]


def test_prom_file_option_and_setting(tmp_path):
    from slurm_ft import config
    from slurm_ft.cli.launchoptions import build_parser, settings_overrides

    ns = build_parser().parse_args(["--prom-file", str(tmp_path / "m.prom"), "train.py"])
    settings = config.load({}, None, settings_overrides(ns))
    assert settings.launch.prom_file == str(tmp_path / "m.prom")
    assert config.load({"SLURM_FT_LAUNCH_PROM_FILE": "/var/lib/ne/ft.prom"}).launch.prom_file == (
        "/var/lib/ne/ft.prom"
    )
    assert config.load({}).launch.prom_file is None
