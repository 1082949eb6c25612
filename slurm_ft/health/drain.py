"""Drain this node on failure and resume it when healthy again, through ``scontrol``.

Slurm runs ``HealthCheckProgram`` with an environment that holds only
``SLURMD_NODENAME`` (no ``PATH``), so ``scontrol`` is found by absolute path. Every drain
we set carries the ``slurm-ft:`` reason prefix, and only such drains are ever resumed or
rewritten: a drain an administrator set is left exactly as it is.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from slurm_ft import boundedrun
from slurm_ft.health.result import Report

REASON_PREFIX = "slurm-ft:"
SCONTROL_DIRS: tuple[str, ...] = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")
MAX_REASON = 200
SCONTROL_TIMEOUT_S = 15.0

_STAMP_RE = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")


class DrainError(Exception):
    """scontrol missing or refusing; the message is one line."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str
    reason: str | None

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def ours(self) -> bool:
        return self.reason is not None and self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class Action:
    kind: Literal["drain", "resume", "none"]
    why: str
    reason: str | None = None


def find_scontrol(configured: str | None, dirs: Sequence[str] = SCONTROL_DIRS) -> str:
    if configured:
        if os.path.isabs(configured) and os.access(configured, os.X_OK):
            return configured
        raise DrainError(f"scontrol {configured!r} is not an executable absolute path")
    for d in dirs:
        candidate = os.path.join(d, "scontrol")
        if os.access(candidate, os.X_OK):
            return candidate
    raise DrainError(f"scontrol not found in {', '.join(dirs)}")


def drain_reason(report: Report) -> str:
    first = report.first_failure
    text = "unhealthy" if first is None else f"{first.name}: {first.detail}"
    reason = f"{REASON_PREFIX} {text}".replace("\n", " ")
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


def parse_show_node(text: str, name: str) -> NodeInfo:
    """``scontrol show node NAME`` (multi-line form) -> state and reason without its stamp."""
    state = ""
    reason: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Reason="):
            reason = _STAMP_RE.sub("", line[len("Reason=") :]).strip() or None
            continue
        for token in line.split():
            if token.startswith("State="):
                state = token[len("State=") :]
    return NodeInfo(name, state, reason)


def plan(healthy: bool, node: NodeInfo, *, drain: bool, resume: bool, reason: str) -> Action:
    """Pure policy. Never touches a drain whose reason is not ours."""
    if not healthy:
        if not drain:
            return Action("none", "unhealthy; --drain not given")
        if node.drained and not node.ours:
            return Action("none", f"already drained by someone else ({node.reason or 'no reason'})")
        if node.drained and node.reason == reason:
            return Action("none", "already drained by slurm-ft for the same reason")
        return Action("drain", f"draining {node.name}", reason)
    if not (drain or resume):
        return Action("none", "healthy")
    if node.drained and node.ours:
        return Action("resume", f"resuming {node.name} (was: {node.reason})")
    if node.drained:
        return Action("none", f"healthy; drain not ours left alone ({node.reason or 'no reason'})")
    return Action("none", "healthy")


def _scontrol(scontrol: str, args: Sequence[str], env: Mapping[str, str]) -> str:
    try:
        proc = boundedrun.run([scontrol, *args], SCONTROL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise DrainError(f"scontrol {args[0]} timed out after {SCONTROL_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise DrainError(f"cannot run {scontrol}: {exc.strerror}") from None
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise DrainError(f"scontrol {' '.join(args[:2])} failed ({proc.returncode}): {err}")
    return proc.stdout


def node_info(scontrol: str, node: str, env: Mapping[str, str]) -> NodeInfo:
    return parse_show_node(_scontrol(scontrol, ["show", "node", node], env), node)


def apply(
    report: Report,
    *,
    drain: bool,
    resume: bool,
    scontrol: str,
    env: Mapping[str, str],
) -> Action:
    """Look at the node, decide, and carry the decision out; returns what was done."""
    node = node_info(scontrol, report.node_name, env)
    action = plan(report.healthy, node, drain=drain, resume=resume, reason=drain_reason(report))
    if action.kind == "drain":
        assert action.reason is not None
        _scontrol(
            scontrol,
            ["update", f"NodeName={node.name}", "State=DRAIN", f"Reason={action.reason}"],
            env,
        )
    elif action.kind == "resume":
        _scontrol(scontrol, ["update", f"NodeName={node.name}", "State=RESUME"], env)
    return action
