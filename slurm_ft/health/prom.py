"""Node-exporter textfile metrics for a health report.

Each check's status is a Prometheus state set (one series per status, exactly one of
them 1), which alerts and dashboards can select on without knowing a numeric code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from slurm_ft.health.result import Report, Status

PREFIX = "slurm_ft_health"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(report: Report, *, now: float | None = None) -> str:
    node = _label(report.node_name)
    lines = [
        f"# HELP {PREFIX}_healthy 1 when no check failed on the last run.",
        f"# TYPE {PREFIX}_healthy gauge",
        f'{PREFIX}_healthy{{node="{node}"}} {int(report.healthy)}',
        f"# HELP {PREFIX}_last_run_timestamp_seconds When the last run finished (Unix time).",
        f"# TYPE {PREFIX}_last_run_timestamp_seconds gauge",
        f'{PREFIX}_last_run_timestamp_seconds{{node="{node}"}} {now if now is not None else time.time():.3f}',
        f"# HELP {PREFIX}_run_duration_seconds Wall time of the last run.",
        f"# TYPE {PREFIX}_run_duration_seconds gauge",
        f'{PREFIX}_run_duration_seconds{{node="{node}"}} {report.duration_s:.6f}',
        f"# HELP {PREFIX}_failures Number of failed checks on the last run.",
        f"# TYPE {PREFIX}_failures gauge",
        f'{PREFIX}_failures{{node="{node}"}} {report.count(Status.FAIL)}',
        f"# HELP {PREFIX}_check_status Status of each check on the last run (state set).",
        f"# TYPE {PREFIX}_check_status gauge",
    ]
    for r in report.results:
        check = _label(r.name)
        for s in Status:
            value = int(r.status is s)
            lines.append(f'{PREFIX}_check_status{{node="{node}",check="{check}",status="{s.value}"}} {value}')
    lines += [
        f"# HELP {PREFIX}_check_duration_seconds Wall time of each check on the last run.",
        f"# TYPE {PREFIX}_check_duration_seconds gauge",
    ]
    for r in report.results:
        check = _label(r.name)
        lines.append(f'{PREFIX}_check_duration_seconds{{node="{node}",check="{check}"}} {r.duration_s:.6f}')
    return "\n".join(lines) + "\n"


def render_nic_monitor(node_name: str, down_total: Mapping[str, int], up: Mapping[str, bool]) -> str:
    """The launcher's NIC monitor: a down/flap counter and an up gauge per port."""
    node = _label(node_name)
    lines = [
        f"# HELP {PREFIX}_nic_down_events_total Times a port went down, flapped or vanished while training.",
        f"# TYPE {PREFIX}_nic_down_events_total counter",
    ]
    for port, count in sorted(down_total.items()):
        lines.append(f'{PREFIX}_nic_down_events_total{{node="{node}",port="{_label(port)}"}} {count}')
    lines += [
        f"# HELP {PREFIX}_nic_up 1 when the port was up at the last sample.",
        f"# TYPE {PREFIX}_nic_up gauge",
    ]
    for port, is_up in sorted(up.items()):
        lines.append(f'{PREFIX}_nic_up{{node="{node}",port="{_label(port)}"}} {int(is_up)}')
    return "\n".join(lines) + "\n"
