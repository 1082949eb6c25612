"""A lost node loses no snapshot: this launcher's part (issue #44).

Every launcher of a multi-node job with snapshots on and a job secret serves its node's
area to the others (:mod:`peer`), from the first cycle its memory holds a snapshot (at
start with replicas). Before it joins a cycle, a launcher whose memory holds a
snapshot (or that keeps replicas: its ring neighbour needs its address) publishes, sealed
in the store, its service's address and the steps its memory holds per key; one that
holds nothing writes nothing. After it decides, node 0 alone reads what was published
(O(N) reads at node 0, not O(N) per launcher), computes the plan (:mod:`sources`: the
newest step every needed key is held at somewhere) and writes each active launcher its
:class:`Part` before the decision says there is one. Each launcher reads its own part,
one key, fetches what its ranks lack from a holder of exactly that step, and removes its
own slots of any other step of those keys, so its workers restore that step and no cycle
mixes steps. A copy that cannot be fetched from any holder leaves the node's ranks with
nothing, and the launcher ends the cycle at once (the next plan, without the lost holder,
says the checkpoint).

With ``--snapshot-replicas 1`` a thread pushes each new snapshot of this node's shards to
the next active node in a ring (:func:`sources.replica_target`), in the background
(:mod:`replicas`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.launch.snapshots import peer, sources
from slurm_ft.launch.snapshots.replicas import ReplicaPusher
from slurm_ft.snapshot import claim, layout, reader

if TYPE_CHECKING:
    from slurm_ft.launch.context import AgentConfig

LOCK_WAIT_S = 10.0
FETCH_TIMEOUT_S = 30.0
HOLDERS_NAMED = 8  # holders of a key a part names (the planned one first): a part stays small at any N


@dataclass(frozen=True)
class Holdings:
    """What one launcher published: its service's address and its memory's steps per key."""

    address: peer.Address | None
    held: dict[str, list[int]]

    def encode(self) -> str:
        return json.dumps({"address": str(self.address) if self.address else None, "held": self.held})

    @classmethod
    def decode(cls, text: str) -> Holdings | None:
        """None for anything that is not what a launcher publishes (the store is untrusted)."""
        try:
            doc = json.loads(text)
            address = peer.Address.parse(doc["address"]) if doc.get("address") else None
            held = {
                str(key): [int(s) for s in steps]
                for key, steps in doc["held"].items()
                if isinstance(steps, list) and all(isinstance(s, int) for s in steps)
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return cls(address, held)


@dataclass(frozen=True)
class Part:
    """Node 0's plan for one launcher: the cycle's step, where each of its keys comes from,
    the holders (and their addresses) to fetch a key from, and its replica target's
    address. ``acts`` False: nothing to fetch or trim (only the target may be news)."""

    acts: bool
    step: int | None = None
    sources: tuple[sources.Source, ...] = ()
    holders: dict[str, list[tuple[int, peer.Address]]] = field(default_factory=dict)
    target: peer.Address | None = None

    def encode(self) -> str:
        return json.dumps(
            {
                "acts": self.acts,
                "step": self.step,
                "sources": [[s.key, s.via.name, s.node] for s in self.sources],
                "holders": {k: [[n, str(a)] for n, a in hs] for k, hs in self.holders.items()},
                "target": str(self.target) if self.target else None,
            }
        )

    @classmethod
    def decode(cls, text: str) -> Part | None:
        """None for anything that is not what node 0 writes (the store is untrusted)."""
        try:
            doc = json.loads(text)
            step = doc["step"]
            if not isinstance(doc["acts"], bool) or not (step is None or type(step) is int):
                return None
            return cls(
                acts=doc["acts"],
                step=step,
                sources=tuple(
                    sources.Source(str(key), sources.Via[via], None if node is None else int(node))
                    for key, via, node in doc["sources"]
                ),
                holders={
                    str(key): [(int(n), peer.Address.parse(a)) for n, a in hs]
                    for key, hs in doc["holders"].items()
                },
                target=peer.Address.parse(doc["target"]) if doc["target"] else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def parts(
    published: Mapping[int, str | None], active: Sequence[int], nproc_per_node: int
) -> dict[int, Part] | None:
    """Node 0's plan, one part per active launcher, from what the launchers published
    (None: nothing to say to anyone, nothing held and no replica target published).

    A launcher whose join says it published but whose holdings cannot be read (not sealed
    with the job secret: forged or deleted) counts as holding nothing: it takes its keys
    from other holders like a spare; when nobody's can be read, nobody knows the step,
    and every node is told to start from the checkpoint (its slots removed), never left
    to resume from its own newest, which may differ from another node's."""
    found = {n: h for n, raw in published.items() if raw is not None and (h := Holdings.decode(raw))}
    held = {n: h.held for n, h in found.items()}
    needs = sources.needs_of(held, active, nproc_per_node)
    chosen = sources.plan(held, needs) if needs is not None else None
    blind = chosen is None and len(found) < len(published)
    if blind:
        chosen = sources.Plan(None, {})
    acts = blind or (chosen is not None and _acts(chosen, found))
    out: dict[int, Part] = {}
    for node in active:
        target = sources.replica_target(node, active)
        theirs = found.get(target) if target is not None else None
        address = theirs.address if theirs is not None else None
        if chosen is None or not acts:
            out[node] = Part(False, target=address)
            continue
        mine = chosen.sources.get(node, ())
        holders = {
            s.key: _holders(found, s.key, chosen.step, node, s.node)
            for s in mine
            if s.via is sources.Via.PEER and chosen.step is not None
        }
        out[node] = Part(True, chosen.step, mine, holders, address)
    if not acts and all(p.target is None for p in out.values()):
        return None
    return out


def _holders(
    found: Mapping[int, Holdings], key: str, step: int, me: int, first: int | None
) -> list[tuple[int, peer.Address]]:
    """Who else holds ``key`` at ``step``, the planned source first, then in node order."""
    nodes = [n for n in sorted(found) if n != me and step in found[n].held.get(key, ())]
    nodes.sort(key=lambda n: n != first)
    return [(n, a) for n in nodes if (a := found[n].address) is not None][:HOLDERS_NAMED]


def for_launcher(
    cfg: AgentConfig, area: Path, limit: int | None, event: Callable[[str], None]
) -> LostNodes | None:
    """This launcher's service, or None (said once) where a lost node's state cannot move:
    no job secret (a snapshot is unpickled by the trainer: nothing unauthenticated is taken),
    or no address of this node in the job's host list."""
    job = cfg.job
    if cfg.auth.key is None:
        event(
            "snapshots: a lost node's state is not fetched from other nodes: no job secret "
            "(set SLURM_FT_JOB_SECRET); a spare starts from the checkpoint"
        )
        return None
    if job.node_rank >= len(job.hosts):
        return None
    return LostNodes(
        area,
        cfg.auth.key,
        job.node_rank,
        job.hosts[job.node_rank],
        limit=limit,
        replicas=cfg.settings.launch.snapshot_replicas,
        event=event,
    )


def _acts(chosen: sources.Plan, found: Mapping[int, Holdings]) -> bool:
    """Whether the plan changes anything: always for replicated state (any copy of the step
    will do, so a node one step behind takes the newer one); for shards when a node lacks
    one of its keys (a lost node's ranks) or its newest is not the cycle's step (a rank
    killed while the others wrote the next step: each rank's own newest would mix the two
    steps). Every launcher decides this from the same published values."""
    for node, needed in chosen.sources.items():
        for source in needed:
            if source.key == layout.REPLICATED:
                return True
            steps = found.get(node, Holdings(None, {})).held.get(source.key)
            if not steps or max(steps) != chosen.step:
                return True
    return False


def trim(area: Path, keys: Collection[str], step: int | None) -> list[str]:
    """Remove this area's slots of ``keys`` whose step is not ``step`` (all of them when
    None), each under its key's lock: a worker restores its key's most recent write, which
    must be the cycle's step. The slots removed, for the log."""
    removed = []
    for key in keys:
        lock = claim.KeyLock.acquire(layout.owner_path(area, key), wait_s=LOCK_WAIT_S)
        if lock is None:
            continue
        with lock:
            for path in layout.slot_paths(area, key):
                sealed = reader.read_header(path)
                if sealed is not None and step is not None and sealed.header.step == step:
                    continue
                if path.exists():
                    path.unlink(missing_ok=True)
                    removed.append(f"{key} step {sealed.header.step if sealed else '(incomplete)'}")
    return removed


class LostNodes:
    """One launcher's snapshot service, its holdings, its plan each cycle, its replicas."""

    def __init__(
        self,
        area: Path,
        secret: bytes,
        me: int,
        host: str,
        *,
        limit: int | None,
        replicas: int = 0,
        event: Callable[[str], None] = print,
    ) -> None:
        self.area = area
        self.secret = secret
        self.me = me
        self.limit = limit
        self.event = event
        self.max_size = limit if limit is not None else 1 << 44
        self.host = host
        self.server: peer.PeerServer | None = None  # started when first needed (serve)
        self.address: peer.Address | None = None
        self._unserved = False  # the service could not start: said once, not tried again
        self.replicas = replicas
        self.pusher: ReplicaPusher | None = None
        if replicas > 0:
            self.serve()  # the ring's previous node pushes here before this memory holds anything
            self.pusher = ReplicaPusher(area, secret, timeout=FETCH_TIMEOUT_S, event=event)

    def close(self) -> None:
        if self.pusher is not None:
            self.pusher.close()
        if self.server is not None:
            self.server.close()

    def serve(self) -> peer.Address | None:
        """This node's service, started the first time it is needed (a snapshot held, or
        replicas kept): a job whose workers never snapshot opens no port and runs no
        thread for it. None where it cannot start (said once: a spare starts from the
        checkpoint)."""
        if self.server is None and not self._unserved:
            try:
                self.server = peer.PeerServer(
                    self.area, self.secret, max_size=self.max_size, limit=self.limit, event=self.event
                )
            except OSError as exc:
                self._unserved = True
                self.event(
                    f"snapshots: no service for other nodes: {exc}; a spare starts from the checkpoint"
                )
                return None
            self.address = peer.Address(self.host, self.server.port)
            replicas = " and keeping its shards' replicas on the next node" if self.replicas else ""
            self.event(
                f"snapshots: serving this node's snapshots to the job's launchers at {self.address}{replicas}"
            )
        return self.address

    # ------------------------------------------------------------------ each cycle

    def holdings(self) -> Holdings | None:
        """What to publish before a join; None (no store write) when this memory holds
        nothing and no ring neighbour needs this service's address."""
        held = reader.held_steps(self.area)
        if not held and self.replicas == 0:
            return None
        return Holdings(self.serve(), held)

    def prepare(self, part: Part | None) -> str | None:
        """Before this node's workers start: its keys at the cycle's step in its memory,
        as node 0's part for it says. None when they are (or nothing is planned); else the
        failure to publish."""
        if self.pusher is not None:
            self.pusher.aim(part.target if part is not None else None)
        if part is None or not part.acts:
            return None
        self.event(sources.says(sources.Plan(part.step, {self.me: part.sources}), self.me))
        keys = [s.key for s in part.sources] if part.step is not None else list(reader.held_steps(self.area))
        for source in part.sources:
            if source.via is sources.Via.PEER and part.step is not None:
                why = self._fetch(source.key, part.step, part.holders.get(source.key, []))
                if why is not None:
                    trim(self.area, keys, None)
                    return why
        trim(self.area, keys, part.step)
        return None

    def unplanned(self) -> str:
        """The decision says node 0 wrote this launcher a part, but what the store holds
        there is not one (not sealed with the job secret: forged, replayed from another key,
        or deleted). The cycle's step is unknown here, so no rank of this node may resume
        from its own newest (the others resume from the planned step): every slot is
        removed, as for a copy no holder could give, and the cycle ends; the next plan
        fetches this node's keys from their other holders (for shards, a replica)."""
        if self.pusher is not None:
            self.pusher.aim(None)
        trim(self.area, reader.held_steps(self.area), None)
        return (
            "snapshots: node 0's plan for this node could not be read (not sealed with this "
            "job's secret); this node's ranks start from the checkpoint and the cycle ends so "
            "the next one plans again"
        )

    def _fetch(self, key: str, step: int, holders: Sequence[tuple[int, peer.Address]]) -> str | None:
        failures = []
        for n, address in holders:
            t0 = time.monotonic()
            try:
                got = peer.fetch(
                    address, self.secret, key, step, self.area, max_size=self.max_size, limit=self.limit
                )
            except peer.PeerError as exc:
                failures.append(str(exc))
                self.event(f"snapshots: {key} of step {step} not fetched from node {n}: {exc}")
                continue
            took = time.monotonic() - t0
            self.event(
                f"snapshots: {key} of step {step} fetched from node {n} ({got.header.origin.word}), "
                f"{got.header.file_size} bytes in {took:.2f} s"
            )
            return None
        return (
            f"snapshots: no surviving copy of {key} at step {step} could be fetched "
            f"({'; '.join(failures) or 'no holder reachable'}); this node's ranks start from the "
            "checkpoint and the cycle ends so the next one plans without the lost holder"
        )
