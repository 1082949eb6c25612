"""How launchers connect to the store at scale (issue 45): jittered back-off, the listen
queue's warning."""

from __future__ import annotations

from pathlib import Path

from slurm_ft.launch.rendezvous.stores import BACKOFF_FIRST_S, BACKOFF_MAX_S, backlog_warning, backoff


def test_backoff_doubles_up_to_its_cap_and_is_drawn_between_half_and_all() -> None:
    assert backoff(0, lambda: 1.0) == BACKOFF_FIRST_S
    assert backoff(0, lambda: 0.0) == BACKOFF_FIRST_S / 2
    assert backoff(2, lambda: 1.0) == BACKOFF_FIRST_S * 4
    assert backoff(50, lambda: 1.0) == BACKOFF_MAX_S
    assert backoff(50, lambda: 0.0) == BACKOFF_MAX_S / 2


def test_backlog_warning_when_somaxconn_is_below_the_nodes(tmp_path: Path) -> None:
    cap = tmp_path / "somaxconn"
    cap.write_text("4096\n")
    assert backlog_warning(4096, str(cap)) is None
    line = backlog_warning(8192, str(cap))
    assert line is not None and "\n" not in line
    assert line.startswith("net.core.somaxconn is 4096, below the 8192 launchers")
    assert "sysctl -w net.core.somaxconn=8192" in line
    assert backlog_warning(8192, str(tmp_path / "missing")) is None


def test_a_peer_imports_torch_while_node_0_is_not_yet_listening() -> None:
    """Node 0 imports torch before it listens; a peer that imported it only at its first
    connection started its own 1-2 s import after that, on every start and requeue. Here
    nothing ever listens: the peer gives up at its deadline with torch already loaded."""
    import subprocess
    import sys

    probe = (
        "import socket, sys, time\n"
        "from slurm_ft.launch.rendezvous.client import find_run\n"
        "from slurm_ft.launch.rendezvous.protocol import Keys\n"
        "from slurm_ft.launch.rendezvous.sealing import Sealer\n"
        "from slurm_ft.launch.rendezvous.stores import StoreLost\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "try:\n"
        "    find_run('127.0.0.1', [port], Keys('j'), Sealer(None), deadline=time.monotonic() + 0.3,\n"
        "             op_timeout=1.0, abort=lambda: False, sleep=time.sleep)\n"
        "except StoreLost:\n"
        "    print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\n", "")
