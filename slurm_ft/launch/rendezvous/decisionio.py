"""Node 0's decision written and read over one store connection, a big job's placement
under a key of its own (:mod:`roster`).

Apart from the client because the decision is the one value every launcher reads every
cycle: how it travels (inline, or a digest and a placement read once per change) is a rule
of its own, and the client's verbs stay the protocol's.
"""

from __future__ import annotations

from functools import partial

from slurm_ft.launch.rendezvous import roster
from slurm_ft.launch.rendezvous.connection import Abort, Connection
from slurm_ft.launch.rendezvous.protocol import Decision, Keys, decode, encode
from slurm_ft.launch.rendezvous.reads import SHORT, Pace
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Store


class DecisionIO(Connection):
    def __init__(
        self, store: Store, keys: Keys, address: str = "127.0.0.1", sealer: Sealer | None = None
    ) -> None:
        super().__init__(store, keys, address, sealer)
        self._placements: dict[str, roster.Placement] = {}  # digest -> placement, the last one read

    def publish_decision(self, i: int, decision: Decision) -> None:
        """Also creates the next cycle's failure key: no peer can join i+1 before reading this."""
        self._op(lambda: self._store.set(self.keys.failure(i + 1), ""))
        wire, placement = roster.split(decision)
        if placement is not None:  # first: a decision names only a placement that is there
            self._keep(self.keys.placement(i), placement)
        self._keep(self.keys.decision(i), encode(wire))

    def wait_decision(self, i: int, *, deadline: float, abort: Abort, pace: Pace = SHORT) -> Decision | None:
        parse = partial(decode, Decision)
        wire = self._get_sealed_when_set(
            self.keys.decision(i), parse, deadline=deadline, abort=abort, pace=pace
        )
        if wire is None or not wire.roster:
            return wire
        known = getattr(self, "_placements", {})
        if wire.roster not in known:
            placement = partial(roster.placement, wire.roster)
            found = self._get_sealed_when_set(
                self.keys.placement(i), placement, deadline=deadline, abort=abort, pace=pace
            )
            if found is None:
                return None
            known = self._placements = {wire.roster: found}
        return roster.joined(wire, known[wire.roster])
