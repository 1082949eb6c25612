"""The launchers' store protocol: the key table and the messages, documented once.

Node 0 hosts the store; every launcher (node 0 included) reads and writes these keys
through its own connections (:mod:`slurm_ft.launch.rendezvous.client`). Keys are
``slurm_ft/<run id>/...`` where the run id names the job and the Slurm attempt, and
per-cycle keys carry the cycle's index within the attempt. A successor's store (node 0's
store lost, ``launch.succession.rule``) keys everything under ``slurm_ft/<run id>/e<epoch>/...``:
nothing of a store that went before can be taken for the successor's. With a job secret they are
``slurm_ft/<namespace>/<run id>/...`` (the namespace derived from the secret) and the
values marked *sealed* below carry an HMAC (:mod:`slurm_ft.launch.rendezvous.sealing`).
Nothing read back is trusted as it comes: anyone who can reach the port can overwrite or
delete any key. Every value has one parser here that says what the protocol allows
(:class:`Malformed` otherwise), and what decides the job's course is sealed; there are no
server-side counters (a TCPStore ``add`` on a value that is not a number closes the
adder's own connection), so each launcher writes sealed keys of its own and readers count
those. A key that is missing reads as "not yet" and never blocks (see ``reads``):

* ``base``                  node 0 -> all: first global cycle number, run uuid (sealed)
* ``hb/<node>``             peer heart-beat, a number it sets ever higher (sealed; node 0
                            watches it change)
* ``act/<node>``            "<cycle index>:<seconds>" once a node's workers have been quiet
                            for the silence timeout, "<cycle index>:0" when they speak again
                            (sealed)
* ``c<i>/join/<node>``      a launcher's join record (name, host, pid, unhealthy detail;
                            sealed; its writer sets it again while it waits for the
                            decision, should it vanish)
* ``c<i>/unhealthy``        an unhealthy launcher appends its node rank: only a wake-up
                            for node 0, which then reads the sealed join records
* ``c<i>/decision``         node 0's one decision: run (with MASTER_PORT) or stop (sealed)
* ``c<i>/failure``          the first failure (``compare_set`` from "": first writer wins;
                            sealed, and a forgery there is replaced by the real failure)
* ``c<i>/halt``             set when cycle i is over (failure or success); a blocking
                            ``wait`` on it wakes every launcher at once (only a wake-up:
                            what the woken launcher acts on is sealed)
* ``c<i>/done/<node>``      that launcher's workers all exited 0 (sealed "1"; set again at
                            every watch tick until the cycle ends)
* ``c<i>/result``           node 0's summary of the cycle (outcome, end time; sealed)
* ``ack/<node>``            that launcher read the final answer (sealed "1"; node 0 shuts
                            down once every live peer's is there, or at the linger timeout)

Messages travel as JSON of their dataclass fields; unknown fields are ignored on reading
so that a newer launcher's extra field never breaks an older reader of the same job.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
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
    epoch: int = 0  # the store's succession epoch: 0 is node 0's store, each successor's is one more

    def _k(self, *parts: object) -> str:
        root = [KEY_ROOT, self.namespace] if self.namespace else [KEY_ROOT]
        era = [f"e{self.epoch}"] if self.epoch else []
        return "/".join([*root, self.run_id, *era, *map(str, parts)])

    @property
    def base(self) -> str:
        return self._k("base")

    def ack(self, node: int) -> str:
        return self._k("ack", node)

    def heartbeat(self, node: int) -> str:
        return self._k("hb", node)

    def activity(self, node: int) -> str:
        return self._k("act", node)

    def join(self, i: int, node: int) -> str:
        return self._k(f"c{i}", "join", node)

    def unhealthy(self, i: int) -> str:
        return self._k(f"c{i}", "unhealthy")

    def decision(self, i: int) -> str:
        return self._k(f"c{i}", "decision")

    def placement(self, i: int) -> str:
        return self._k(f"c{i}", "placement")

    def failure(self, i: int) -> str:
        return self._k(f"c{i}", "failure")

    def halt(self, i: int) -> str:
        return self._k(f"c{i}", "halt")

    def done_by(self, i: int, node: int) -> str:
        return self._k(f"c{i}", "done", node)

    def result(self, i: int) -> str:
        return self._k(f"c{i}", "result")

    def snapshots(self, i: int, node: int) -> str:
        """A launcher's snapshot service address and the steps its memory holds, per key
        (``launch.snapshots.lostnode``), written before it joins cycle i."""
        return self._k(f"c{i}", "snap", node)

    def snapshot_part(self, i: int, node: int) -> str:
        """Node 0's plan for one launcher's snapshots in cycle i (``launch.snapshots.lostnode``),
        written before the decision that says it exists: each launcher reads its own, one key."""
        return self._k(f"c{i}", "snapplan", node)


def next_epoch(keys: Keys) -> Keys:
    """The key table of the store that succeeds ``keys``' (see ``launch.succession.rule``)."""
    return Keys(keys.run_id, keys.namespace, keys.epoch + 1)


# The key families of the table above, as a key's path after the run id reads (a number
# stands for <node> or <i>): for the tests that go over every family, and for people.
FAMILIES = (
    "base",
    "hb/<node>",
    "act/<node>",
    "c<i>/join/<node>",
    "c<i>/unhealthy",
    "c<i>/decision",
    "c<i>/placement",
    "c<i>/failure",
    "c<i>/halt",
    "c<i>/done/<node>",
    "c<i>/result",
    "ack/<node>",
    "c<i>/snap/<node>",
    "c<i>/snapplan/<node>",
)


def family(keys: Keys, key: str) -> str | None:
    """The family of one of this run's keys (None for any other key)."""
    prefix = keys._k("")
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    shape = [
        "<node>" if p.isdigit() and k > 0 else "c<i>" if p[:1] == "c" and p[1:].isdigit() else p
        for k, p in enumerate(parts)
    ]
    name = "/".join(shape)
    return name if name in FAMILIES else None


class Action(str, Enum):
    RUN = "run"
    STOP = "stop"


@dataclass(frozen=True)
class Base:
    """Fixed by node 0 once per run: where cycle numbers start and which run this is. A
    successor publishes the same run (``first_cycle``, ``run_uuid``: a follower joins only
    a store that holds its own run) with its ``epoch``, its launcher index (``host``) and
    the cycle index its first decision is for (``index``)."""

    first_cycle: int
    run_uuid: str
    epoch: int = 0
    host: int = 0
    index: int = 0


@dataclass(frozen=True)
class JoinInfo:
    """A launcher's join of one cycle: who it is and whether it can run workers."""

    node_rank: int
    node_name: str
    host: str
    pid: int
    unhealthy: str | None = None
    stuck: str | None = None  # a worker of the last cycle could not be killed (see Member.join)
    snapshots: bool = False  # its snapshot holdings are published (Keys.snapshots): node 0 reads them


@dataclass(frozen=True)
class Decision:
    """Node 0's answer for cycle i; ``exit_code`` matters only for ``stop``.

    ``active`` holds the launcher (hostlist index) of each node rank, ``master_addr`` the
    host of node rank 0's launcher, where the workers' own rendezvous runs (the store
    stays with its host launcher: node 0, or its successor). Both empty: every launcher runs its own node
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
    # With spares, what a successor needs of node 0's memory (``spares.SpareBook``): each
    # retired launcher as "<index>:<why>:<detail>", the restart budget replacements spent,
    # and the suspect streak as (launcher, cycles) or ().
    retired: tuple[str, ...] = ()
    charged: int = 0
    streak: tuple[int, ...] = ()
    snapshot_plan: bool = False  # node 0 wrote each active launcher's snapshot plan (Keys.snapshot_part)
    roster: str = ""  # past 64 nodes: the digest of nodes and active, under Keys.placement (see roster)
    # ... and, where that placement differs little from the one of digest ``roster_from``
    # (node 0's last): what it keeps of that one's nodes and active (head and tail of each)
    # and what it puts between (see roster.patched)
    roster_from: str = ""
    roster_cut: tuple[int, ...] = ()
    roster_nodes: tuple[str, ...] = ()
    roster_active: tuple[int, ...] = ()

    @property
    def run(self) -> bool:
        return self.action is Action.RUN

    def slot_of(self, launcher: int) -> int | None:
        """The node rank of ``launcher`` this cycle; None for a spare."""
        if not self.active:
            return launcher
        return self.active.index(launcher) if launcher in self.active else None


@dataclass(frozen=True)
class Placement:
    """A big job's node names and each node rank's launcher, under ``Keys.placement``
    beside the decision that names its digest (see ``roster``)."""

    nodes: tuple[str, ...]
    active: tuple[int, ...]


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
    finished: bool  # every active launcher's sealed done mark is there


Message = TypeVar("Message", Base, JoinInfo, Decision, Placement, CycleResult)

# Fields whose JSON form is an enum's value, per message type.
_ENUMS: dict[type, dict[str, type[Enum]]] = {
    Decision: {"action": Action},
    CycleResult: {"outcome": CycleOutcome},
}


class Malformed(ValueError):
    """A value read from the store that is not what the protocol says (its reason)."""


def encode(message: Base | JoinInfo | Decision | Placement | CycleResult) -> str:
    """The messages are flat (no dataclass inside), so their fields are taken as they are:
    ``dataclasses.asdict`` deep-copied each of a placement's 4,096 names, 2.66 ms a
    placement (0.24 ms now), which each of 4,094 survivors paid to check a successor's patched one."""
    doc = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    return json.dumps({k: (v.value if isinstance(v, Enum) else v) for k, v in doc.items()}, sort_keys=True)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# What a JSON value must be for each field annotation the messages use (annotations are
# strings here: ``from __future__ import annotations``); an unknown one is refused.
_CHECKS: dict[str, Callable[[object], bool]] = {
    "int": _is_int,
    "bool": lambda v: isinstance(v, bool),
    "float": lambda v: _is_int(v) or isinstance(v, float),
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int | None": lambda v: v is None or _is_int(v),
    # one pass in C over the element types: a decision names every node (4,096 at scale),
    # and every launcher decodes each one (a generator here was 40 % of its decode)
    "tuple[str, ...]": lambda v: isinstance(v, list) and set(map(type, v)) <= {str},
    "tuple[int, ...]": lambda v: isinstance(v, list) and set(map(type, v)) <= {int},
    "JsonDict | None": lambda v: v is None or isinstance(v, dict),
}


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Malformed(f"not JSON: {type(exc).__name__}") from None


def decode(cls: type[Message], raw: bytes) -> Message:
    """The message in ``raw``; :class:`Malformed` when it is not one (whoever wrote it)."""
    doc = _json(raw)
    if not isinstance(doc, dict):
        raise Malformed(f"a {cls.__name__} is a JSON object, not {type(doc).__name__}")
    enums = _ENUMS.get(cls, {})
    kw: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name not in doc:
            if f.default is dataclasses.MISSING:
                raise Malformed(f"{cls.__name__} without {f.name}")
            continue
        value = doc[f.name]
        if f.name in enums:
            try:
                value = enums[f.name](value)
            except ValueError:
                raise Malformed(f"{cls.__name__}.{f.name} is no {enums[f.name].__name__}") from None
        else:
            check = _CHECKS.get(str(f.type))
            if check is None or not check(value):
                raise Malformed(f"{cls.__name__}.{f.name} is not {f.type}")
            if isinstance(value, list):
                value = tuple(value)
        kw[f.name] = value
    return cls(**kw)  # type: ignore[arg-type]


def encode_failure(failure: Failure) -> str:
    return json.dumps(failure.to_json(), sort_keys=True)


def decode_failure(raw: bytes) -> Failure | None:
    """The failure key holds "" until the first failure is published; :class:`Malformed`
    for anything that is not a failure."""
    if not raw:
        return None
    doc = _json(raw)
    if not isinstance(doc, dict):
        raise Malformed(f"a failure is a JSON object, not {type(doc).__name__}")
    try:
        failure = Failure.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise Malformed(f"not a failure: {type(exc).__name__}") from None
    if not (isinstance(failure.node, str) and _is_int(failure.node_rank) and _CHECKS["float"](failure.time)):
        raise Malformed("a failure's node, node_rank or time has the wrong type")
    return failure


MAX_BEAT = 2**62  # a heart-beat number above this is no launcher's (it counts seconds)


def parse_beat(raw: bytes) -> int:
    """A heart-beat number: ASCII digits, not absurdly large."""
    if not (0 < len(raw) <= 19 and raw.isdigit()) or int(raw) > MAX_BEAT:
        raise Malformed("a heart-beat is a decimal number")
    return int(raw)


def parse_mark(raw: bytes) -> bool:
    """A done mark or an ack: the one value ``1``."""
    if raw != b"1":
        raise Malformed('a mark is "1"')
    return True


def parse_text(raw: bytes) -> str:
    """A short ASCII report (a silence report)."""
    if len(raw) > 64 or not raw.isascii():
        raise Malformed("a report is short ASCII text")
    return raw.decode()


def parse_holdings(raw: bytes) -> str:
    """A launcher's snapshot holdings: ASCII JSON, parsed and checked by its reader."""
    if len(raw) > 1 << 20 or not raw.isascii():
        raise Malformed("snapshot holdings are ASCII JSON of at most 1 MiB")
    return raw.decode()
