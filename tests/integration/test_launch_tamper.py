"""No value anyone writes to the launchers' store may stop the job (issue 29).

A job of two simulated nodes with a job secret trains (torch-free workers that wait for
the test's go, then write their steps) while a client without the secret, on the store's
port, does its worst for the whole run: overwrites every key of one family of the key
table with values of several shapes over and over (empty, garbage, huge, numeric,
sealed-looking, another key's sealed value replayed), deletes keys, sends random bytes,
holds half-open and idle connections. Both launchers must finish the training and exit 0
with no internal error, and the records must stay readable by ``slurm-ft-report``.

The two snapshot families (a launcher's holdings, node 0's plan part for it) are written
only by launchers whose workers snapshot: their test runs a DDP trainer that does, with a
rank that fails between its optimizer step and its snapshot, so the next cycle needs the
plan to resume every rank from one step.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV
from slurm_ft.launch.rendezvous.sealing import TAG, Sealer
from tests.integration.launch_cluster import SimJob, clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(150)

SECRET = "4b1d0e6c2a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170605"
STEPS = 3
BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05", "--no-python"]
# Say it started, wait for the go, then "train": every step on stdout and in a file.
WORKER = (
    'touch "$0/started.$RANK"; while [ ! -e "$0/go" ]; do sleep 0.05; done; '
    f'for s in $(seq 1 {STEPS}); do echo "rank $RANK step $s"; echo "step $s" >> "$0/train.$RANK"; done'
)
ENV = {
    SECRET_ENV: SECRET,
    "SLURM_FT_LAUNCH_RESULT_LINGER_TIMEOUT": "4",
    "SLURM_FT_LAUNCH_JOIN_TIMEOUT": "40",
}
ROUND_S = 0.15  # the outsider's pause between two rounds over the keys
REPORT = [sys.executable, "-m", "slurm_ft.cli.report"]


def _raw_store(port: int):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=5), use_libuv=True)


def _warm_torch() -> None:
    """torch imported before the job starts: a first import takes seconds on a loaded host,
    which the outsider must not spend while the job runs."""
    import torch.distributed  # noqa: F401


def _shapes(rng: random.Random, replay: Callable[[], bytes | None]) -> itertools.cycle[Callable[[], bytes]]:
    return itertools.cycle(
        [
            lambda: b"",
            lambda: rng.randbytes(48),
            lambda: rng.randbytes(200_000),
            lambda: str(rng.choice([0, 1, -5, 7, 2**63, 10**30])).encode(),
            lambda: f"{TAG}{rng.randbytes(32).hex()}:{rng.choice(['1', '0', '{}'])}".encode(),
            lambda: replay() or b"{}",
        ]
    )


class Outsider(threading.Thread):
    """A client without the secret, doing ``act`` once per round until stopped."""

    def __init__(self, job: SimJob, act: Callable[[object, list[str]], None]) -> None:
        super().__init__(daemon=True)
        self.job = job
        self.act = act
        self.stopped = threading.Event()
        self.rounds = 0
        self.touched: set[str] = set()
        self.error: BaseException | None = None
        self.port: int | None = None  # node 0's, once it listens

    def run(self) -> None:
        try:
            store = None
            while store is None and not self.stopped.is_set():
                self.port = _store_port(self.job)
                try:  # only once node 0 listens: a TCPStore client retries for seconds
                    if self.port is None:
                        raise OSError("node 0 does not listen yet")
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    store = _raw_store(self.port)
                except (OSError, RuntimeError):
                    time.sleep(0.05)
            while not self.stopped.wait(ROUND_S):
                try:
                    self.act(store, list(store.list_keys()))
                except RuntimeError:  # node 0 gone (the job ended): stop; else reconnect
                    # Never a connect to a port nobody serves any more: it blocks for the
                    # client's 5 s, and a thread still in torch's constructor when pytest
                    # exits aborts the whole run ("terminate called", seen under load).
                    if self.stopped.is_set() or self.job.node(0).proc.poll() is not None:
                        return
                    try:
                        store = _raw_store(self.port)
                    except RuntimeError:
                        return
                self.rounds += 1
        except BaseException as exc:  # a broken test helper must show
            self.error = exc


def _store_port(job: SimJob) -> int | None:
    """The port node 0 listens on, as its log says: the first of the job's port sequence,
    or the next one when that was taken (on a loaded host torch's own connect to a new
    store can time out, and node 0 then moves on, as the peers do)."""
    m = re.search(r"rendezvous store listening on port (\d+)", job.node(0).err())
    return int(m.group(1)) if m else None


def _keys(job: SimJob) -> proto.Keys:
    return proto.Keys(f"{job.job_id}-a0", Sealer(SECRET.encode()).namespace)


def _overwrite(
    job: SimJob, family: str | None, outsider: list[Outsider]
) -> Callable[[object, list[str]], None]:
    """Overwrite every key of ``family`` (None: every key listed) at each round."""
    rng = random.Random(family)
    keys = _keys(job)
    seen: dict[str, bytes] = {}  # other keys' (sealed) values, for the replay

    def replay() -> bytes | None:
        return rng.choice(list(seen.values())) if seen else None

    shapes = _shapes(rng, replay)
    # Keys that live only for the last moments of the run (node 0 leaves once the peer's
    # ack is there): the outsider writes them before their writers do, as anyone who has
    # seen the other keys' names could, and over them afterwards.
    ahead = {
        "c<i>/halt": [keys.halt(0)],
        "c<i>/done/<node>": [keys.done_by(0, 0), keys.done_by(0, 1)],
        "c<i>/result": [keys.result(0)],
        "ack/<node>": [keys.ack(1)],
    }.get(family, [])

    def act(store, listed: list[str]) -> None:
        for key in {*listed, *ahead}:
            if family is None or proto.family(keys, key) == family:
                store.set(key, next(shapes)())
                outsider[0].touched.add(key)
            elif len(seen) < 8 and proto.family(keys, key) is not None:
                seen[key] = store.get(key)

    return act


def _delete(job: SimJob, outsider: list[Outsider]) -> Callable[[object, list[str]], None]:
    keys = _keys(job)

    def act(store, listed: list[str]) -> None:
        for key in listed:
            if proto.family(keys, key) is not None:
                store.delete_key(key)
                outsider[0].touched.add(key)

    return act


def _run(tmp_path: Path, make_act, *, join_under_attack: bool = False) -> tuple[SimJob, Outsider]:
    """``join_under_attack``: node 1 starts only once the outsider has made its first rounds,
    so that the join is made under them (else only a loaded host delays it that far)."""
    job = SimJob(tmp_path, 2, BASE, ["/bin/sh", "-c", WORKER, str(tmp_path)], extra_env=dict(ENV))
    holder: list[Outsider] = []
    outsider = Outsider(job, make_act(job, holder))
    holder.append(outsider)
    _warm_torch()
    try:
        job.start(only=[0] if join_under_attack else None)
        outsider.start()
        if join_under_attack:
            wait_until(lambda: outsider.rounds >= 5 or outsider.error, 60, message="rounds before the join")
            job.start(only=[1])
        started = [tmp_path / f"started.{r}" for r in (0, 1)]
        try:
            wait_until(lambda: all(p.exists() for p in started), 60, message="both workers started")
        except AssertionError:
            raise AssertionError(job.dump()) from None
        begun = outsider.rounds
        wait_until(
            lambda: outsider.rounds >= begun + 5 or outsider.error, 30, message="rounds while training"
        )
        (tmp_path / "go").touch()
        codes = job.wait(60)
    finally:
        outsider.stopped.set()
        job.kill()
    outsider.join(30)
    assert not outsider.is_alive(), "the outsider thread outlived its job"
    assert outsider.error is None, repr(outsider.error)
    assert codes == [0, 0], job.dump()
    return job, outsider


def _assert_whole(job: SimJob, tmp_path: Path) -> None:
    """Training complete, no internal error anywhere, records readable by the report."""
    for rank in (0, 1):
        assert (tmp_path / f"train.{rank}").read_text().split("\n")[:STEPS] == [
            f"step {s}" for s in range(1, STEPS + 1)
        ]
    texts = [job.node(k).err() + job.node(k).out() for k in (0, 1)]
    texts += [p.read_text(errors="replace") for p in job.state.rglob("*.json")]
    assert not [t for t in texts if "internal error" in t or "Traceback" in t], job.dump()
    assert job.outcome()["exit_code"] == 0
    report = subprocess.run(
        [*REPORT, "--state-dir", str(job.state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    assert '"cycles"' in report.stdout


# Written only by launchers whose workers snapshot, and the job above never does: the test
# of these two families runs its own job (test_forged_snapshot_keys_...).
SNAPSHOT_FAMILIES = ("c<i>/snap/<node>", "c<i>/snapplan/<node>")
# Written only for jobs of more than 64 nodes (roster.INLINE_MAX): its tamper case is
# tests/unit/test_launch_protocol.py's (every key overwritten and deleted under every read)
# and tests/unit/test_decision_roster.py's (a forged placement is never used).
BIG_JOB_FAMILIES = ("c<i>/placement",)


@pytest.mark.parametrize(
    "family", [f for f in proto.FAMILIES if f not in SNAPSHOT_FAMILIES + BIG_JOB_FAMILIES]
)
def test_overwriting_every_key_of_a_family_never_stops_the_job(tmp_path, family):
    job, outsider = _run(tmp_path, lambda j, holder: _overwrite(j, family, holder))
    _assert_whole(job, tmp_path)
    touched = sorted(outsider.touched)
    if family != "c<i>/unhealthy":  # no node is unhealthy: nobody writes that key
        assert touched, f"the outsider found no key of {family} in {outsider.rounds} rounds"
    # every key that a launcher read while it held a bad value is named once in its log
    # and in the outcome record (node 0's): a job that was tampered with says so
    ignored = job.outcome()["store_values_ignored"]
    assert set(ignored) <= set(touched)
    for k in (0, 1):
        lines = [ln for ln in job.node(k).err().splitlines() if "ignored a value of store key" in ln]
        assert len(lines) == len(set(lines)), lines


def test_overwriting_every_key_it_can_list_never_stops_the_job(tmp_path):
    """The report of issue 29 as it came: every key listed, each overwritten at every round."""
    job, outsider = _run(tmp_path, lambda j, holder: _overwrite(j, None, holder))
    _assert_whole(job, tmp_path)
    assert len(outsider.touched) >= 10


def test_deleting_every_key_never_stops_the_job(tmp_path):
    """The join is made while the keys are deleted: node 0 once read its own join record
    back from the store, and needed it there at the same moment as the peer's, which the
    outsider's rounds seldom left (1 join timeout in 8 runs, 3 more joins of 27-34 s)."""
    job, outsider = _run(tmp_path, _delete, join_under_attack=True)
    _assert_whole(job, tmp_path)
    assert outsider.touched


def _wire_attack(job: SimJob, holder: list[Outsider]) -> Callable[[object, list[str]], None]:
    """Each round: a connection that sends random bytes; one that sends half a request
    and stays open; 20 more idle connections, held to the end (200 in all over a run)."""
    rng = random.Random(7)
    held: list[socket.socket] = []

    def act(store, listed: list[str]) -> None:
        port = holder[0].port
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(rng.randbytes(rng.choice([1, 7, 64, 4096])))
        half = socket.create_connection(("127.0.0.1", port), timeout=2)
        half.sendall(bytes([rng.randrange(256)]) + rng.randbytes(3))  # a header cut short
        held.append(half)
        if len(held) < 200:
            held.extend(socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(20))
        holder[0].touched.add(f"{len(held)} connections")

    return act


def test_random_bytes_and_held_connections_on_the_port_never_stop_the_job(tmp_path):
    job, outsider = _run(tmp_path, _wire_attack)
    _assert_whole(job, tmp_path)
    assert outsider.rounds >= 1


def test_the_outsider_sees_every_family_it_overwrites():
    """The parametrisation above covers the whole key table (a new family must be added
    to ``protocol.FAMILIES``, or this fails)."""
    keys = proto.Keys("1-a0", "ns")
    made = [
        keys.base,
        keys.heartbeat(1),
        keys.activity(1),
        keys.join(0, 1),
        keys.unhealthy(0),
        keys.decision(0),
        keys.placement(0),
        keys.failure(0),
        keys.halt(0),
        keys.done_by(0, 1),
        keys.result(0),
        keys.ack(1),
        keys.snapshots(0, 1),
        keys.snapshot_part(0, 1),
    ]
    assert [proto.family(keys, k) for k in made] == list(proto.FAMILIES)
    methods = {
        n
        for n, v in vars(proto.Keys).items()
        if (not n.startswith("_") and callable(v)) or isinstance(v, property)
    }
    assert len(methods) == len(proto.FAMILIES), sorted(methods)


TRAINER = Path(__file__).with_name("ddp_snapshot_trainer.py")
CRASH_AFTER, SNAPSHOT_STEPS = 4, 10
TORCH_BASE = [
    "--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05",
    "--preload", "none", "--max-restarts", "6",
]  # fmt: skip


def _overwrite_snapshot_family(
    job: SimJob, family: str, outsider: list[Outsider]
) -> Callable[[object, list[str]], None]:
    """Every key of ``family`` overwritten at each round, and its keys of the first cycles
    before their writers write them; half the values are the launchers' own sealed values
    of another key of the family (another node's part or holdings, another cycle's): what
    an outsider who cannot seal could best replay."""
    rng = random.Random(family)
    keys = _keys(job)
    ahead = [
        k
        for i in range(4)
        for n in (0, 1)
        for k in (keys.snapshots(i, n), keys.snapshot_part(i, n))
        if proto.family(keys, k) == family
    ]
    genuine: dict[str, bytes] = {}
    ours: set[str] = set()  # digests of what the outsider wrote
    shapes = _shapes(rng, lambda: None)

    def digest(raw: bytes) -> str:
        return hashlib.sha256(raw).hexdigest()

    def forged(key: str) -> bytes:
        others = [v for k, v in genuine.items() if k != key]
        value = rng.choice(others) if others and rng.random() < 0.5 else next(shapes)()
        ours.add(digest(value))
        return value

    def act(store, listed: list[str]) -> None:
        for key in {*listed, *ahead}:
            if proto.family(keys, key) != family:
                continue
            if key in listed:
                raw = store.get(key)
                if raw.startswith(TAG.encode()) and digest(raw) not in ours:
                    genuine[key] = raw
            store.set(key, forged(key))
            outsider[0].touched.add(key)

    return act


def _events(out: Path, rank: int) -> list[dict]:
    path = out / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _resumes(log: dict[int, list[dict]]) -> Iterable[tuple[int, list[dict]]]:
    """Each cycle in which both ranks restored, with their two resume events."""
    cycles = sorted({e["cycle"] for e in log[0] if e["event"] == "resume"})
    for c in cycles:
        both = [[e for e in log[r] if e["event"] == "resume" and e["cycle"] == c] for r in (0, 1)]
        if all(both):
            yield c, [both[0][0], both[1][0]]


@pytest.mark.torch
@pytest.mark.timeout(240)
@pytest.mark.parametrize("family", SNAPSHOT_FAMILIES)
def test_forged_snapshot_keys_never_make_a_rank_resume_from_a_wrong_state(tmp_path, family):
    """Rank 1 fails after its optimizer step of step 4 and before that step's snapshot:
    node 0 holds step 4, node 1 step 3. Resuming each rank from its own newest would mix
    them; node 0's plan (sealed) lifts node 1 to step 4 from node 0's memory. An outsider
    overwrites the family's keys all along, with garbage and with other keys' sealed
    values. The seal names the key (run id, cycle, node), so no forged, replayed or
    deleted value is taken: a node whose holdings cannot be read counts as holding
    nothing, a node whose plan cannot be read starts no worker and ends the cycle. Every
    cycle's ranks resume from one step with a state the job had at that step, and the job
    finishes."""
    out = tmp_path / "out"
    out.mkdir()
    work = [
        str(TRAINER), "--out", str(out), "--steps", str(SNAPSHOT_STEPS), "--step-time", "0.1",
        "--crash-rank", "1", "--crash-after", str(CRASH_AFTER),
    ]  # fmt: skip
    # A job id of its own: the snapshot areas in /dev/shm are named by it, and other tests
    # on this host may run a job 4242 at the same time.
    job_id = f"4403{SNAPSHOT_FAMILIES.index(family)}"
    job = SimJob(tmp_path, 2, TORCH_BASE, work, extra_env=dict(ENV), job_id=job_id)
    holder: list[Outsider] = []
    outsider = Outsider(job, _overwrite_snapshot_family(job, family, holder))
    holder.append(outsider)
    _warm_torch()
    try:
        job.start()
        outsider.start()
        codes = job.wait(200)
    finally:
        outsider.stopped.set()
        job.kill()
    outsider.join(30)
    assert not outsider.is_alive(), "the outsider thread outlived its job"
    assert outsider.error is None, repr(outsider.error)
    assert codes == [0, 0], job.dump()
    assert outsider.touched, f"the outsider found no key of {family} in {outsider.rounds} rounds"
    log = {r: _events(out, r) for r in (0, 1)}
    assert [e["step"] for e in log[1] if e["event"] == "crash"] == [CRASH_AFTER]
    resumed = list(_resumes(log))
    assert resumed and resumed[0][0] == 0, resumed
    for cycle, (r0, r1) in resumed[1:]:
        assert (r0["step"], r0["hash"]) == (r1["step"], r1["hash"]), (cycle, r0, r1)  # never a mix
        if r0["step"] > 0:  # a state the job had at that step, not another job's or step's
            steps = [e for r in (0, 1) for e in log[r] if e["event"] == "step" and e["cycle"] < cycle]
            had = {e["hash"] for e in steps if e["step"] == r0["step"]}
            assert r0["hash"] in had, (cycle, r0, had)
    assert all(any(e["event"] == "done" and e["step"] == SNAPSHOT_STEPS for e in log[r]) for r in (0, 1))
    said = (job.node(0).err() + job.node(1).err()).splitlines()  # a worker's lines start [rank<R>]
    assert not [ln for ln in said if ln.startswith("Traceback") or "internal error" in ln], job.dump()
    assert job.outcome()["exit_code"] == 0
