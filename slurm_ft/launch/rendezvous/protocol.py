"""The launchers' store protocol: the key table and the messages, documented once.

Node 0 hosts the store; every launcher (node 0 included) reads and writes these keys
through its own connections (:mod:`slurm_ft.launch.rendezvous.client`). Keys are
``slurm_ft/<run id>/...`` where the run id names the job and the Slurm attempt, and
per-cycle keys carry the cycle's index within the attempt. With a job secret they are
``slurm_ft/<namespace>/<run id>/...`` (the namespace derived from the secret) and the
values marked *sealed* below carry an HMAC (:mod:`slurm_ft.launch.rendezvous.sealing`).
Counters a loop polls are
created by node 0 (value ``0``) before any peer can touch them, so one ``multi_get`` reads
a whole set of them without ever blocking on a missing key:

* ``base``                  node 0 -> all: first global cycle number, run uuid (sealed)
* ``hb/<node>``             peer heart-beat, a number it sets ever higher (sealed; node 0
                            watches it change)
* ``act/<node>``            "<cycle index>:<seconds>" once a node's workers have been quiet
                            for the silence timeout, "<cycle index>:0" when they speak again
                            (sealed)
* ``c<i>/join/<node>``      a launcher's join record (name, host, pid, unhealthy detail;
                            sealed)
* ``c<i>/joined``           how many launchers joined cycle i (a hint: node 0 then reads
                            the sealed join records)
* ``c<i>/unhealthy``        how many of them are unhealthy (a hint, as ``joined``)
* ``c<i>/decision``         node 0's one decision: run (with MASTER_PORT) or stop (sealed)
* ``c<i>/failure``          the first failure (``compare_set`` from "": first writer wins;
                            sealed, and a forgery there is replaced by the real failure)
* ``c<i>/halt``             set when cycle i is over (failure or success); a blocking
                            ``wait`` on it wakes every launcher at once (only a wake-up:
                            what the woken launcher acts on is sealed)
* ``c<i>/done``             launchers whose workers all exited 0 (a hint)
* ``c<i>/done/<node>``      that launcher's workers all exited 0 (sealed)
* ``c<i>/result``           node 0's summary of the cycle (outcome, end time; sealed)
* ``acks``                  launchers that read the final answer (node 0 then shuts down)

Messages travel as JSON of their dataclass fields; unknown fields are ignored on reading
so that a newer launcher's extra field never breaks an older reader of the same job.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from slurm_ft.records import CycleOutcome, Failure, JsonDict

KEY_ROOT = "slurm_ft"


@dataclass(frozen=True)
class Keys:
    """The store's key table: one place names every key a launcher reads or writes."""

    run_id: str
    namespace: str = ""  # secret-derived (sealing.Sealer.namespace); "" without a secret

    def _k(self, *parts: object) -> str:
        root = [KEY_ROOT, self.namespace] if self.namespace else [KEY_ROOT]
        return "/".join([*root, self.run_id, *map(str, parts)])

    @property
    def base(self) -> str:
        return self._k("base")

    @property
    def acks(self) -> str:
        return self._k("acks")

    def heartbeat(self, node: int) -> str:
        return self._k("hb", node)

    def activity(self, node: int) -> str:
        return self._k("act", node)

    def join(self, i: int, node: int) -> str:
        return self._k(f"c{i}", "join", node)

    def joined(self, i: int) -> str:
        return self._k(f"c{i}", "joined")

    def unhealthy(self, i: int) -> str:
        return self._k(f"c{i}", "unhealthy")

    def decision(self, i: int) -> str:
        return self._k(f"c{i}", "decision")

    def failure(self, i: int) -> str:
        return self._k(f"c{i}", "failure")

    def halt(self, i: int) -> str:
        return self._k(f"c{i}", "halt")

    def done(self, i: int) -> str:
        return self._k(f"c{i}", "done")

    def done_by(self, i: int, node: int) -> str:
        return self._k(f"c{i}", "done", node)

    def result(self, i: int) -> str:
        return self._k(f"c{i}", "result")

    def cycle_counters(self, i: int) -> list[str]:
        return [self.joined(i), self.unhealthy(i), self.done(i)]


class Action(str, Enum):
    RUN = "run"
    STOP = "stop"


@dataclass(frozen=True)
class Base:
    """Fixed by node 0 once per run: where cycle numbers start and which run this is."""

    first_cycle: int
    run_uuid: str


@dataclass(frozen=True)
class JoinInfo:
    """A launcher's join of one cycle: who it is and whether it can run workers."""

    node_rank: int
    node_name: str
    host: str
    pid: int
    unhealthy: str | None = None
    stuck: str | None = None  # a worker of the last cycle could not be killed (see Member.join)


@dataclass(frozen=True)
class Decision:
    """Node 0's answer for cycle i; ``exit_code`` matters only for ``stop``.

    ``active`` holds the launcher (hostlist index) of each node rank, ``master_addr`` the
    host of node rank 0's launcher, where the workers' own rendezvous runs (the store
    stays on the allocation's first node). Both empty: every launcher runs its own node
    rank (a decision from a launcher without spare support).
    """

    action: Action
    cycle: int
    reason: str = ""
    exit_code: int = 0
    master_port: int = 0
    start_time: float = 0.0
    nodes: tuple[str, ...] = ()
    unhealthy_nodes: tuple[str, ...] = ()
    lost_nodes: tuple[str, ...] = ()  # launchers that went silent (frozen, or their node died)
    first_failure: JsonDict | None = None
    active: tuple[int, ...] = ()
    spares: tuple[int, ...] = ()  # usable spares (bad launchers are in neither list)
    master_addr: str = ""
    replacements: tuple[str, ...] = ()  # "node rank 1: node1 -> node3 (lost)", for the records
    suspect_nodes: tuple[str, ...] = ()

    @property
    def run(self) -> bool:
        return self.action is Action.RUN

    def slot_of(self, launcher: int) -> int | None:
        """The node rank of ``launcher`` this cycle; None for a spare."""
        if not self.active:
            return launcher
        return self.active.index(launcher) if launcher in self.active else None


@dataclass(frozen=True)
class CycleResult:
    """Node 0's account of how a cycle ended, announced to every launcher."""

    outcome: CycleOutcome
    end_time: float
    first_failure: JsonDict | None = None


@dataclass(frozen=True)
class Poll:
    """What a launcher sees of the cycle at one watch tick."""

    failure: Failure | None
    done: int


Message = TypeVar("Message", Base, JoinInfo, Decision, CycleResult)

# Fields whose JSON form is an enum's value, per message type.
_ENUMS: dict[type, dict[str, type[Enum]]] = {
    Decision: {"action": Action},
    CycleResult: {"outcome": CycleOutcome},
}


def encode(message: Base | JoinInfo | Decision | CycleResult) -> str:
    doc = {k: (v.value if isinstance(v, Enum) else v) for k, v in dataclasses.asdict(message).items()}
    return json.dumps(doc, sort_keys=True)


def decode(cls: type[Message], raw: bytes) -> Message:
    doc = json.loads(raw.decode())
    enums = _ENUMS.get(cls, {})
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in doc:
            continue
        value = doc[f.name]
        if f.name in enums:
            value = enums[f.name](value)
        elif isinstance(value, list):
            value = tuple(value)
        kw[f.name] = value
    return cls(**kw)


def encode_failure(failure: Failure) -> str:
    return json.dumps(failure.to_json(), sort_keys=True)


def decode_failure(raw: bytes) -> Failure | None:
    """The failure key holds "" until the first failure is published."""
    return Failure.from_json(json.loads(raw.decode())) if raw else None
