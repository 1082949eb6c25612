"""The two sides of a store succession once the claim is settled (``launch.succession.rule``):
the successor opens the next epoch's store and takes over the coordinator's role; a
follower finds that store and joins it only when it holds its own run.

The store-loss flow (``storeloss``) calls these; the rule of who leads lives in ``rule``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_ft.launch.books import cyclecount
from slurm_ft.launch.books.bookkeeper import Bookkeeper
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.client import Client, find_run
from slurm_ft.launch.rendezvous.protocol import Base, Decision, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreLost
from slurm_ft.launch.roles.coordinator import Coordinator, open_store
from slurm_ft.launch.succession import rule

if TYPE_CHECKING:  # the fence (and the drill's senders under it) loads when one runs
    from slurm_ft.launch.succession.fence import Fenced

FENCE_WAIT_S = 30.0  # the longest a successor's first decision waits for the fence

# A seam for the in-process tests: the store of an epoch, hosted (True) or joined (False).
EpochStore = Callable[[Keys, bool], Client]


def next_index(cfg: AgentConfig, books: Bookkeeper, first_cycle: int, seen: int) -> int:
    """The cycle index the successor's first decision is for: one past the last decision
    this launcher saw (``seen``), or past every cycle the state dir has a record of (the
    lost host may have decided one more that this launcher never read): a cycle number
    is never used twice."""
    recorded = cyclecount.read_next_cycle(cfg.state, books.io) - first_cycle
    return max(seen + 1, recorded, 0)


class FenceJob:
    """The fence of the lost host, run on a thread while the successor waits for the joins;
    its first decision waits for it (bounded)."""

    def __init__(self, run: Callable[[], Fenced]) -> None:
        self._run = run
        self._result: Fenced | None = None
        self._thread = threading.Thread(target=self._body, name="slurm-ft-fence", daemon=True)
        self._thread.start()

    def _body(self) -> None:
        self._result = self._run()

    def result(self, timeout: float = FENCE_WAIT_S) -> Fenced | None:
        """The fence's result; None when it did not finish within ``timeout``."""
        self._thread.join(timeout)
        return self._result


def start_fence(cfg: AgentConfig, lost_node: str, cycles: list[int], run_uuid: str) -> FenceJob:
    """SIGKILL what the lost host recorded: through Slurm inside a job step (``step_killer``
    is set only there), on this host for simulated nodes."""
    from slurm_ft.launch.succession.fence import fence  # only a successor fences: not on every launch's start

    via_srun = bool(cfg.step_killer)
    return FenceJob(lambda: fence(cfg.state, lost_node, cycles, run_uuid, cfg.job.job_id, via_srun=via_srun))


@dataclass(frozen=True)
class Led:
    client: Client
    coordinator: Coordinator
    base: Base


def lead(
    cfg: AgentConfig,
    keys: Keys,
    sealer: Sealer,
    books: Bookkeeper,
    events: EventLog,
    base: Base,
    last: Decision,
    lost_host: int,
    *,
    clock: Callable[[], float],
    given: EpochStore | None = None,
    snapshot_step: Callable[[], int | None] | None = None,
) -> Led:
    """The successor: the next epoch's store (the first free port of the job's sequence on
    this host) and the coordinator's role, with the lost host's memory restored.

    The port is noted once the store holds the run (``take_over`` publishes it last): a
    follower that read the note before found a store without the run, gave up on that
    connection after its slice, probed every port of the sequence and connected again,
    which at 4,096 nodes the successor's one store thread took while it prepared 8,192 keys
    (in the scale harness, the note before the run: a succession of 5.38, 4.41 s; after:
    4.79, 4.33 s)."""
    if given is not None:
        client = given(keys, True).rekeyed(keys, sealer)
    else:
        client = open_store(cfg, keys, sealer, events)
    coordinator = Coordinator(cfg, client, books, events, clock=clock, snapshot_step=snapshot_step)
    coordinator.take_over(base, last, lost_host)
    if given is None:
        try:
            rule.publish_port(cfg.state.succession_port(cfg.run_id, keys.epoch), client.port)
        except OSError as exc:
            events.event(f"could not note the store's port for the followers ({exc}); they scan for it")
    books.is_node0 = True
    return Led(client, coordinator, base)


def follow(
    cfg: AgentConfig,
    keys: Keys,
    sealer: Sealer,
    leader: int,
    run_uuid: str,
    *,
    abort: Callable[[], bool],
    sleep: Callable[[float], None],
    given: EpochStore | None = None,
) -> tuple[Client, Base]:
    """A follower: the successor's store, found as a peer finds node 0's (the port
    sequence on the leader's host, the port the leader noted first), holding this run in
    this epoch; StoreLost when none does within the join timeout."""
    launch = cfg.settings.launch
    deadline = time.monotonic() + launch.join_timeout

    def ours(base: Base) -> bool:
        return base.run_uuid == run_uuid and base.epoch == keys.epoch and base.host == leader

    if given is not None:
        client = given(keys, False).rekeyed(keys, sealer)
        found = client.wait_base(deadline=deadline, abort=abort)
        if found is None or not ours(found):
            raise StoreLost(f"the successor's store (epoch {keys.epoch}) does not hold this run")
        return client, found
    address = cfg.job.hosts[leader] if leader < len(cfg.job.hosts) else cfg.topo.master_addr
    noted = rule.await_port(
        cfg.state.succession_port(cfg.run_id, keys.epoch),
        cfg.rdzv_ports,
        until=min(deadline, time.monotonic() + rule.PORT_WAIT_S),
        abort=abort,
        look=rule.look_period(cfg.num_nodes),
        sleep=sleep,
    )
    return find_run(
        address,
        rule.ports_to_try(cfg.rdzv_ports, noted),
        keys,
        sealer,
        deadline=deadline,
        op_timeout=launch.heartbeat_timeout,
        abort=abort,
        sleep=sleep,
        accept=ours,
        noted=noted,
    )
