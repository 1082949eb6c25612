"""Why cycles failed: each failure as the report shows it (kind, where, the exception's
last line), grouped by cause without the place, and the nodes that failed more than once."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from slurm_ft.records import CycleOutcome, Failure, FailureKind
from slurm_ft.report.views import AttemptView, Cause, CycleView, FailureView, NodeFailures

TOP_CAUSES = 5
# Failure kinds that say something about the node they happened on (a forwarded signal does not).
NODE_FAULT_KINDS = frozenset(
    {
        FailureKind.WORKER.value,
        FailureKind.LOST_NODE.value,
        FailureKind.LAUNCHER.value,
        FailureKind.NIC.value,
        FailureKind.UNHEALTHY.value,
    }
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b.*")


def exception_line(failure: Failure) -> str | None:
    """The exception's last line: ``@record``'s message (``Type: text``), else the last line
    of the traceback when it is an exception line."""
    for text in (failure.message, failure.traceback):
        if not text:
            continue
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if not lines:
            continue
        if text is failure.message or _EXCEPTION_LINE.match(lines[-1]):
            return lines[-1]
    return None


def failure_view(doc: dict[str, object] | None) -> FailureView | None:
    """The record's first failure; a kind this version does not know (a newer launcher's)
    is kept as written, described from its detail."""
    if not doc:
        return None
    try:
        f = Failure.from_json(dict(doc))
    except (TypeError, ValueError):
        return _unknown_kind(doc)
    return FailureView(
        kind=f.kind.value,
        node=f.node,
        node_rank=f.node_rank,
        time=float(f.time),
        rank=f.rank,
        exit_code=f.exit_code,
        signal=f.signal,
        exception=exception_line(f),
        description=f.describe(),
    )


def _unknown_kind(doc: dict[str, object]) -> FailureView:
    def get(key: str, types: type | tuple[type, ...]) -> Any:
        value = doc.get(key)
        return value if isinstance(value, types) and not isinstance(value, bool) else None

    kind, node, node_rank = str(doc.get("kind")), str(doc.get("node")), get("node_rank", int)
    return FailureView(
        kind=kind,
        node=node,
        node_rank=node_rank,
        time=float(get("time", (int, float)) or 0.0),
        rank=get("rank", int),
        exit_code=get("exit_code", int),
        signal=get("signal", str),
        exception=None,
        description=f"{node} (node {node_rank}): {get('detail', str) or kind}",
    )


def cause_of(f: FailureView) -> str:
    """What went wrong, without where: failures with the same cause group together."""
    if f.kind == FailureKind.WORKER.value:
        how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
        return f"worker {how}" + (f": {f.exception}" if f.exception else "")
    if f.kind == FailureKind.LOST_NODE.value:
        return "lost launcher (heartbeat)"
    if f.kind == FailureKind.SIGNAL.value:
        return _signal_cause(f.description)
    return f.kind + (f": {f.exception}" if f.exception else "")


def top_causes(cycles: list[CycleView], attempts: list[AttemptView]) -> list[Cause]:
    """Failures grouped by cause. A cycle ended by a signal the launcher itself received
    has no first failure in its record; its attempt's outcome names the signal."""
    reasons = {n: a.reason for a in attempts if a.outcome_source == "record" for n in a.cycles[-1:]}
    grouped: dict[str, list[CycleView]] = defaultdict(list)
    for c in cycles:
        if c.failure is not None:
            grouped[cause_of(c.failure)].append(c)
        elif c.ended_badly:
            grouped[
                _signal_cause(reasons.get(c.cycle)) if c.outcome == CycleOutcome.SIGNALLED else c.outcome
            ].append(c)
    causes = [
        Cause(
            cause=name,
            count=len(cs),
            cycles=tuple(c.cycle for c in cs),
            nodes=tuple(
                sorted({c.failure.node for c in cs if c.failure} or {n for c in cs for n in c.nodes})
            ),
        )
        for name, cs in grouped.items()
    ]
    causes.sort(key=lambda k: (-k.count, k.cycles[0]))
    return causes[:TOP_CAUSES]


def _signal_cause(reason: str | None) -> str:
    """``node1 received SIGTERM`` -> ``received SIGTERM``: the cause without the node."""
    if reason and " received " in reason:
        return "received " + reason.split(" received ", 1)[1]
    return "signalled (preemption, time limit or scancel)"


def repeat_nodes(cycles: list[CycleView], attempts: list[AttemptView]) -> list[NodeFailures]:
    failed: dict[str, list[int]] = defaultdict(list)
    for c in cycles:
        if c.failure is not None and c.failure.kind in NODE_FAULT_KINDS:
            failed[c.failure.node].append(c.cycle)
    unhealthy = Counter(node for a in attempts for node in a.unhealthy_nodes)
    out = [
        NodeFailures(node, len(failed[node]) + unhealthy[node], tuple(failed[node]), unhealthy[node])
        for node in set(failed) | set(unhealthy)
    ]
    return sorted((n for n in out if n.failures > 1), key=lambda n: (-n.failures, n.node))
