"""A stand-in for one node's launcher: an AppLog in its own process (run as a script).

``applog_node.py PATH FIRST_RANK NWORKERS WRITER_ARGS_JSON [LINE_CAP]`` spawns NWORKERS
writers (global ranks FIRST_RANK...), captures them into PATH, and prints one JSON object
with the stats and the process's peak RSS, so tests can run several "nodes" against one
file and measure memory of the capturing process alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from slurm_ft.launch.output.applog import AppLog, open_worker_pipe
from slurm_ft.launch.output.eventlog import EventLog

WRITER = str(Path(__file__).with_name("applog_writer.py"))


def main(argv: list[str]) -> None:
    path, first_rank, nworkers, writer_args = argv[0], int(argv[1]), int(argv[2]), json.loads(argv[3])
    line_cap = int(argv[4]) if len(argv) > 4 else 1024 * 1024
    events = EventLog(None, f"node{first_rank}", quiet=False)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    log = AppLog(
        Path(path),
        rank_width=1,
        line_cap=line_cap,
        drain_timeout=10.0,
        tee=False,
        tee_local_ranks=None,
        events=events,
    )
    procs = []
    for local in range(nworkers):
        rank = first_rank + local
        read_fd, write_fd = open_worker_pipe()
        args = [a.replace("{rank}", str(rank)) for a in writer_args]
        procs.append(subprocess.Popen([sys.executable, WRITER, *args], stdout=write_fd, stderr=write_fd))
        os.close(write_fd)
        log.attach(rank, local, read_fd)
    codes = [p.wait() for p in procs]
    stats = log.close()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "codes": codes,
                "stats": dataclasses.asdict(stats),
                "maxrss_kib_before": rss_before,
                "maxrss_kib_after": rss_after,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
