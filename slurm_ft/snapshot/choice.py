"""Which step a cycle resumes from: the newest one that every rank's state is there for.

Each key keeps its two newest complete snapshots, and ranks do not reach the same step at
the same moment (a rank killed while writing step 120 still holds 119 and 118 while the
others hold 120 and 119). Resuming each rank from its own newest would mix steps; the
launcher resumes all of them from the newest step every required holder has, and gives
it to the workers (``SLURM_FT_SNAPSHOT_STEP``). Pure: the launcher gathers the steps.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping


def newest_common_step(
    held: Mapping[Hashable, Collection[int]], required: Collection[Hashable]
) -> int | None:
    """The newest step that every holder in ``required`` has a snapshot of (holders: ranks
    for sharded state, nodes for replicated state); None when there is none."""
    common: set[int] | None = None
    for holder in required:
        steps = set(held.get(holder, ()))
        common = steps if common is None else common & steps
        if not common:
            return None
    return max(common) if common else None
