"""The open-files limit against the store's connections.

Node 0's store takes one file descriptor per connection that a launcher holds to it, and
Slurm hands every task the soft ``RLIMIT_NOFILE`` of the submit shell (1,024 is common):
about 330 launchers of three connections each. Past the limit the store stops accepting
and the peers time out minutes later, with nothing naming the cause. So every launcher
raises its soft limit to the hard one at start (an unprivileged process may), and node 0,
which must hold every peer's connections, says in one line before the rendezvous when even
the hard limit cannot hold them: that is the job's configuration, exit 2, not a timeout.

Every launcher raises it, not only node 0: a store succession can make any of them the
host. The workers inherit the raised soft limit (as under most cluster setups that raise
it in ``limits.conf``).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Node 0's own descriptors besides the store's: its three client connections (two ends
# each), the workers' pipes and pidfds, the cycle and per-rank log files, the standbys,
# the scribe and health-check children, torch's own. Generous: a shortfall is exit 2.
OWN_FDS = 256


@dataclass(frozen=True)
class Limits:
    """The soft limit before and after the raise, and the hard limit."""

    before: int
    soft: int
    hard: int

    @property
    def raised(self) -> bool:
        return self.soft > self.before


def _finite(value: int) -> int:
    return value if value != resource.RLIM_INFINITY else 1 << 31


def raise_soft_limit() -> Limits:
    """Raise this process's soft open-files limit to its hard limit (never lowers it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or (hard != resource.RLIM_INFINITY and soft > hard):
        return Limits(_finite(soft), _finite(soft), _finite(hard))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # some kernels refuse RLIM_INFINITY above nr_open
        return Limits(_finite(soft), _finite(soft), _finite(hard))
    return Limits(_finite(soft), _finite(hard), _finite(hard))


def needed(num_nodes: int, connections_per_launcher: int) -> int:
    """Descriptors node 0 needs: every peer's connections, its own connections (both ends,
    they are in one process) and :data:`OWN_FDS`."""
    peers = max(0, num_nodes - 1) * connections_per_launcher
    return peers + 2 * connections_per_launcher + OWN_FDS


def shortfall(num_nodes: int, connections_per_launcher: int, limits: Limits) -> str | None:
    """The line node 0 says when its hard limit cannot hold the job's connections, or None."""
    need = needed(num_nodes, connections_per_launcher)
    if limits.soft >= need:
        return None
    return (
        f"node 0 needs {need} open files for the store connections of {num_nodes} launchers "
        f"({connections_per_launcher} each) but its open-files limit is {limits.soft} "
        f"(hard limit {limits.hard}): raise it to at least {need} (ulimit -n {need} in the "
        f"batch script, where the hard limit allows; else the nodes' limits.conf or slurmd's LimitNOFILE)"
    )
