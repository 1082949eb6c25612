"""The layout of a node's workers: what each runs (:class:`Entry`) and where the node's
workers sit in the job (:class:`Topology`). Pure data.

Kept apart from the process code that spawns them because the cycle roles (spares move a
node rank, bookkeeping records it, the context carries it), the worker environment and
the command line all read these values, and none of them needs pidfds or process groups.
"""

from __future__ import annotations

from dataclasses import dataclass

TORCHRUN_ROLE_NAME = "default"


@dataclass(frozen=True)
class Entry:
    """What each worker runs: a script, a module (``-m``) or a plain command (``--no-python``)."""

    kind: str  # "script" | "module" | "command"
    target: str
    args: tuple[str, ...] = ()

    def interpreter(self, python: str) -> list[str]:
        """The interpreter and its flags, before the script or ``-m`` (none for a command):
        a standby worker is started with the same."""
        return [python, "-u"] if self.kind in ("script", "module") else []

    def argv(self, python: str) -> list[str]:
        if self.kind == "script":
            return [*self.interpreter(python), self.target, *self.args]
        if self.kind == "module":
            return [*self.interpreter(python), "-m", self.target, *self.args]
        return [self.target, *self.args]


@dataclass(frozen=True)
class Topology:
    """Where this node's workers sit in the job; ranks are stable across cycles."""

    node_rank: int
    num_nodes: int
    nproc_per_node: int
    master_addr: str
    role: str = TORCHRUN_ROLE_NAME  # ROLE_NAME (torchrun's --role)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    @property
    def ranks(self) -> range:
        first = self.global_rank(0)
        return range(first, first + self.nproc_per_node)
