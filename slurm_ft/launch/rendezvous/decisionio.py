"""Node 0's decision written and read over one store connection, a big job's placement
under a key of its own (:mod:`roster`).

Apart from the client because the decision is the one value every launcher reads every
cycle: how it travels (inline, or a digest and a placement read once per change) is a rule
of its own, and the client's verbs stay the protocol's.
"""

from __future__ import annotations

from functools import partial

from slurm_ft.launch.rendezvous import reads, roster
from slurm_ft.launch.rendezvous.connection import Abort, Connection
from slurm_ft.launch.rendezvous.protocol import Decision, Keys, Placement, decode, encode
from slurm_ft.launch.rendezvous.reads import SHORT, Pace
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Store


class DecisionIO(Connection):
    def __init__(
        self, store: Store, keys: Keys, address: str = "127.0.0.1", sealer: Sealer | None = None
    ) -> None:
        super().__init__(store, keys, address, sealer)
        # digest -> placement: the last one read or written (see roster)
        self._placements: dict[str, Placement] = {}

    def publish_decision(self, i: int, decision: Decision) -> None:
        """Also creates the next cycle's failure key: no peer can join i+1 before reading this."""
        self._op(lambda: self._store.set(self.keys.failure(i + 1), ""))
        wire, written = roster.split(decision, next(iter(self._placements.items()), None))
        if written is not None:  # first: a decision names only a placement that is there
            self._keep(self.keys.placement(i), written.text)
            self._placements = {written.digest: written.placement}  # the next patch's base
        self._keep(self.keys.decision(i), encode(wire))

    def wait_decision(self, i: int, *, deadline: float, abort: Abort, pace: Pace = SHORT) -> Decision | None:
        key, parse = self.keys.decision(i), partial(decode, Decision)
        wire = self._get_sealed_when_set(key, parse, deadline=deadline, abort=abort, pace=pace)
        if wire is None or not wire.roster:
            return wire
        found = self._placements.get(wire.roster) or self._patched(wire)
        if found is None:
            found = self._placement(i, wire.roster, deadline=deadline, abort=abort, pace=pace)
            if found is None:
                return None
        self._placements = {wire.roster: found}
        return roster.joined(wire, found)

    def inherit_placements(self, other: DecisionIO) -> None:
        """A succession's new connection takes the placement its launcher held on the old
        one: the successor patches its first decision from it, and the survivors make it
        from that patch instead of each reading the whole placement."""
        self._placements = dict(other._placements)

    def _patched(self, wire: Decision) -> Placement | None:
        base = self._placements.get(wire.roster_from) if wire.roster_from else None
        return roster.patched(wire, base) if base is not None else None

    def _placement(
        self, i: int, digest: str, *, deadline: float, abort: Abort, pace: Pace
    ) -> Placement | None:
        """One round trip where node 0's placement is there, as it is once its decision is (a
        probe: no one waits on this key, so it wakes no one); else the wait until node 0
        writes it again."""
        key, parse = self.keys.placement(i), partial(roster.placement, digest)
        found = reads.opened(self.sealer, key, self._op(lambda: reads.probe(self._store, key)), parse)
        return found or self._get_sealed_when_set(key, parse, deadline=deadline, abort=abort, pace=pace)
