"""Store succession: the launchers' store is a role, not a place.

When the launcher that hosts the store (node 0, or a successor of it) is lost or frozen,
the surviving launchers of the last decision agree on a successor without a vote:

* **the order** (:func:`candidates`): the launchers of the last decision (placed, or
  usable spares), without the lost host, in hostlist order. Each survivor computes it
  from the same sealed decision, so all agree on it.
* **the turn** (:func:`may_claim`): the p-th candidate may claim the next epoch once p
  turns (``turn`` seconds each, counted from its own finding of the loss) passed without
  a claim; normally the lowest survivor claims at once.
* **the proof** (:func:`claim`): a claim is one file per epoch in the state dir, made with
  link semantics (a complete file or none, never replaced). Only the launcher whose
  claim is in place opens a store; a candidate that loses the race (two candidates at
  once, a slow one whose turn came) reads the winner's claim and follows it. The turn
  only orders who tries first: it is the claim, not the clock, that rules out two leaders.
* **the join**: the successor opens a store on the first free port of the job's sequence
  on its own host, with the keys of the next epoch and the same job secret, and
  publishes the same run (first cycle number, run uuid); a follower joins only a store
  that holds its own run (sealed with the job secret, when there is one). The successor
  then notes its port beside the claim (:func:`publish_port`), once its store holds the
  run, so the note never leads a follower to a store without it: a follower tries that port
  first (:func:`await_port`), so it never spends a connection slice on a port where the
  frozen host's listener still accepts and never answers (on simulated nodes, and on a
  successor that shares a host with the lost one). The note only orders the ports: a
  wrong one costs a slice, never a wrong join.

The state dir is what makes the claim a proof, so succession needs one shared by all
launchers: a launcher that could not see the store host's records of this run in its
state dir takes no part (:func:`why_not`).

What is read from where: from the last decision every survivor holds (in memory, sealed
when it was read): the cycle index, the first cycle number and the run uuid, the node
names, the placement (active and spare launchers), the retired launchers and why, the
restart budget replacements spent, the suspect streak; from the state dir: the claim, the
cycle records and counter (the next cycle number: never one that was used), the ledger
(the progress guard and learned hang timeouts), and ``nodes/<node>/processes.jsonl``
(the lost host's pids, for the fence); from the lost store: nothing.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import atomicfile, privatefiles
from slurm_ft.launch.rendezvous.protocol import Decision
from slurm_ft.records import SuccessionClaim, node_name
from slurm_ft.statedir import StateDir

CLAIM_POLL_S = 0.02  # a follower's look for the claim of the next epoch (and the port)
LOOK_MAX_S = 1.0  # the longest such look period, whatever the job's size
LOOKS_PER_S = 2048  # all survivors' looks at the claim and port files together, a second
PORT_WAIT_S = 2.0  # how long a follower waits for the successor's port before it scans


def look_period(survivors: int) -> float:
    """How often a survivor looks at the claim and port files: every 20 ms in jobs of up
    to 40 nodes, then stretched so that all survivors together read the shared state dir
    at most ``LOOKS_PER_S`` times a second (every look a file open: at 4,096 nodes and
    20 ms, 200,000 a second, which kept this machine's two cores busy for a minute and
    more), at most once a second (what a follower may lose learning the port)."""
    return min(LOOK_MAX_S, max(CLAIM_POLL_S, survivors / LOOKS_PER_S))


def candidates(decision: Decision, launchers: int, host: int) -> tuple[int, ...]:
    """The launchers that may host the next store, in the order they may claim it: the
    launchers of ``decision`` (placed or usable spares; every launcher for a decision
    without placement) but the lost ``host``, in hostlist order.

    One list, sorted in place: a launcher is placed or a spare, never both (node 0's
    placement), and a decision that named one twice would name it twice here for every
    survivor alike. A set of all N was a table of 128-256 KB made and freed by each
    survivor: at 4,096 nodes 0.09 ms alone (the list: 0.04 ms), and in the scale harness's
    peer processes, where 128 launchers faulted in fresh pages for theirs at once, 0.53 ms,
    the survivors' other steps slower with it (their CPU 3.04, 3.13 ms -> 2.63, 2.36)."""
    if not decision.active:
        if 0 <= host < launchers:
            return (*range(host), *range(host + 1, launchers))
        return tuple(range(launchers))
    pool = [*decision.active, *decision.spares]
    pool.sort()
    del pool[bisect.bisect_left(pool, host) : bisect.bisect_right(pool, host)]
    return tuple(pool[bisect.bisect_left(pool, 0) : bisect.bisect_left(pool, launchers)])


def is_candidate(decision: Decision, launchers: int, host: int, me: int) -> bool:
    """Whether ``me`` is one of :func:`candidates`, without ordering them all."""
    if me == host or not 0 <= me < launchers:
        return False
    return not decision.active or me in decision.active or me in decision.spares


ORDER_NAMED = 8  # the candidates a line names (:func:`named_order`)


def named_order(decision: Decision, order: tuple[int, ...]) -> str:
    """The order for the event log: its first :data:`ORDER_NAMED` nodes and how many more. The
    whole order of a 4,096-node job was a line of 40-60 KB in every launcher's event log at
    every succession, and naming each node cost each launcher a few milliseconds."""
    names = ", ".join(node_name(decision.nodes, k) for k in order[:ORDER_NAMED])
    more = len(order) - ORDER_NAMED
    return f"{names} and {more:,} more" if more > 0 else names


def may_claim(order: tuple[int, ...], me: int, waited: float, turn: float) -> bool:
    """Whether launcher ``me`` may try to claim the next epoch, ``waited`` seconds after it
    found the store lost with no claim made: the p-th of ``order`` after p turns. ``order``
    is sorted (:func:`candidates`), so ``me`` is found by bisection: a scan for it, twice a
    look, was 4,096 comparisons for each of a big job's survivors waiting for the claim."""
    p = bisect.bisect_left(order, me)
    return p < len(order) and order[p] == me and waited >= p * turn


def give_up_after(order: tuple[int, ...], turn: float, join_timeout: float) -> float:
    """How long a survivor looks for a claim before the succession counts as failed: every
    candidate's turn, plus the time a claimant may take to open its store."""
    return len(order) * turn + join_timeout


def why_not(
    *,
    launchers: int,
    spare_nodes: int,
    decision: Decision | None,
    me: int,
    host: int,
    shared_state: bool,
    unhealthy: str | None,
) -> str | None:
    """Why this launcher cannot take part in a succession (None: it can). Pure: each
    reason is one line of the outcome when the attempt ends as it did without succession."""
    if launchers < 2:
        return "a single node has no successor"
    if spare_nodes < 1:
        return "no spare node for the store host's ranks (--spare-nodes 0)"
    if decision is None:
        return "the store host was lost before its first decision"
    if not decision.run:
        return "the store host had decided to stop"
    if not is_candidate(decision, launchers, host, me):
        return "this launcher is retired"
    if unhealthy:
        return f"this node is unhealthy ({unhealthy})"
    if not shared_state:
        return "the state dir is not shared with the store host (no record of this run in it)"
    return None


def lost_ranks_fillable(decision: Decision, host: int) -> str | None:
    """Whether the lost host's node rank (if it held one) can move: None when it can."""
    if host in decision.active and not decision.spares:
        return f"no spare left for node rank {decision.active.index(host)} (the store host's)"
    return None


# ----------------------------------------------------------------------- the claim


def read_claim(path: Path) -> SuccessionClaim | None:
    """The claim in place (None: none yet). ValueError for a file that is no claim: the
    epoch is then taken by someone who is not a launcher of this job, and no one leads."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{path} is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} is not a JSON object")
    return SuccessionClaim.from_json(doc)


def claim(path: Path, mine: SuccessionClaim) -> SuccessionClaim:
    """Make ``mine`` the claim of its epoch unless one is in place; the claim in place
    afterwards (``mine`` when it won). A complete temp file is hard-linked to ``path``:
    the link either succeeds or finds the other's complete file, whatever the timing,
    on a local disk as on NFS or Lustre."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = privatefiles.create_file(path.parent, f".{path.name}.")
    try:
        os.write(fd, (json.dumps(mine.to_json(), sort_keys=True) + "\n").encode())
        os.fsync(fd)
        os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    found = read_claim(path)
    if found is None:
        raise ValueError(f"{path} vanished right after it was claimed")
    return found


def superseded(state: StateDir, run_id: str, epoch: int) -> SuccessionClaim | None:
    """The claim of the epoch after ``epoch`` when there is one: a store host that finds it
    was succeeded (it froze and thawed) and must write nothing more for the job."""
    try:
        return read_claim(state.succession_claim(run_id, epoch + 1))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Wait:
    """How a survivor waits for the next epoch's claim (monotonic ``clock``)."""

    order: tuple[int, ...]
    turn: float
    give_up: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @property
    def look(self) -> float:
        return look_period(len(self.order))


def settle(path: Path, mine: SuccessionClaim, wait: Wait, abort: Callable[[], bool]) -> SuccessionClaim | str:
    """The claim of ``mine.epoch``: found, or made when this launcher's turn came and no
    one had claimed it; the reason (a line) when no claim came within ``wait.give_up``.
    ``abort`` (a signal) ends the wait with that reason too."""
    start = wait.clock()
    while True:
        try:
            found = read_claim(path)
        except (OSError, ValueError) as exc:
            return f"the claim of epoch {mine.epoch} cannot be read: {exc}"
        if found is not None:
            return found
        waited = wait.clock() - start
        if may_claim(wait.order, mine.launcher, waited, wait.turn):
            try:
                return claim(path, mine)
            except (OSError, ValueError) as exc:
                return f"could not claim epoch {mine.epoch} in the state dir: {exc}"
        if abort():
            return "a signal arrived during the succession"
        if waited >= wait.give_up:
            return f"no launcher claimed epoch {mine.epoch} within {wait.give_up:.0f} s"
        wait.sleep(wait.look)


# ----------------------------------------------------------------------- the port


def publish_port(path: Path, port: int) -> None:
    """Note the port the successor's store listens on, for :func:`await_port`. OSError is
    the caller's to report: without the note the followers scan the sequence as for node 0."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomicfile.write_bytes(path, f"{port}\n".encode())


def await_port(
    path: Path,
    ports: tuple[int, ...],
    *,
    until: float,
    abort: Callable[[], bool],
    look: float = CLAIM_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:
    """The successor's noted port, once it is there (by ``until``, monotonic), looked for
    every ``look`` s (:func:`look_period`); None when none came, or the note is not a port
    of the job's sequence: then the follower scans."""
    while True:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = None
        except OSError:
            return None
        if text is not None:
            try:
                port = int(text.strip())
            except ValueError:
                return None
            return port if port in ports else None
        if abort() or clock() >= until:
            return None
        sleep(look)


def ports_to_try(ports: tuple[int, ...], first: int | None) -> tuple[int, ...]:
    """The job's port sequence with the noted port (when there is one) tried first."""
    return ports if first is None else (first, *(p for p in ports if p != first))
