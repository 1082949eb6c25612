"""Store succession (``launch.succession.rule``): the rule as data, the claim as a race, and the
cycle over in-memory stores: the store host (played by the test, or a launcher of the test)
is lost, the lowest surviving launcher opens the next epoch's store, node 0's ranks move to
the spare and the job goes on."""

from __future__ import annotations

import json
import threading

import pytest

from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import (
    Action,
    Base,
    Decision,
    JoinInfo,
    Keys,
    decode,
    encode,
    family,
    next_epoch,
)
from slurm_ft.launch.spares import SpareBook, Why
from slurm_ft.launch.succession import rule
from slurm_ft.records import Failure, FailureKind, SuccessionClaim
from tests.support.waiting import wait_until
from tests.unit.test_launch_cycle import Cycle

NAMES = ("node0", "node1", "node2", "node3")


def run_decision(**kw: object) -> Decision:
    fields: dict[str, object] = {
        "master_port": 1,
        "nodes": NAMES,
        "active": (0, 1, 2),
        "spares": (3,),
        "master_addr": "127.0.1.1",
    }
    fields.update(kw)
    return Decision(Action.RUN, 0, **fields)  # type: ignore[arg-type]


# ----------------------------------------------------------------------- the rule


def test_candidates_are_the_last_decisions_launchers_but_the_lost_host_in_hostlist_order():
    assert rule.candidates(run_decision(), 4, 0) == (1, 2, 3)
    # a retired launcher (neither placed nor a usable spare) is no candidate
    assert rule.candidates(run_decision(active=(3, 1, 2), spares=()), 4, 1) == (2, 3)
    # a decision without placement: every launcher
    assert rule.candidates(Decision(Action.RUN, 0), 3, 0) == (1, 2)
    # a launcher the job does not have is none (a decision is sealed, but checked all the same)
    assert rule.candidates(run_decision(active=(-1, 5, 2, 0), spares=(4, 1)), 4, 0) == (1, 2)


def test_a_launcher_is_a_candidate_exactly_when_the_order_holds_it():
    """``why_not`` asks :func:`rule.is_candidate` instead of ordering all N a second time."""
    decisions = [
        run_decision(),
        run_decision(active=(3, 1, 2), spares=()),
        Decision(Action.RUN, 0),
        run_decision(active=(-1, 5, 2, 0), spares=(4, 1)),
        run_decision(active=(2, 0), spares=(3,)),
        run_decision(active=(1, 0, 2), spares=(0,)),  # never made by node 0: the host named twice
    ]
    for d in decisions:
        for launchers in (3, 4):
            for host in (-1, 0, 1, 3, 4):
                order = rule.candidates(d, launchers, host)
                assert list(order) == sorted(order)
                for me in range(-1, 6):
                    found = rule.is_candidate(d, launchers, host, me)
                    assert found == (me in order), (d, launchers, host, me)


def test_the_event_line_names_the_first_candidates_and_counts_the_rest() -> None:
    names = tuple(f"node{k}" for k in range(4096))
    d = run_decision(nodes=names, active=tuple(range(4095)), spares=(4095,))
    order = rule.candidates(d, 4096, 0)
    assert rule.named_order(d, order) == ", ".join(names[1:9]) + " and 4,087 more"
    assert rule.named_order(run_decision(), rule.candidates(run_decision(), 4, 0)) == ", ".join(NAMES[1:4])


def test_the_p_th_candidate_may_claim_after_p_turns():
    order = (1, 2, 3)
    assert rule.may_claim(order, 1, 0.0, 5.0)
    assert not rule.may_claim(order, 2, 4.9, 5.0) and rule.may_claim(order, 2, 5.0, 5.0)
    assert not rule.may_claim(order, 3, 9.9, 5.0) and rule.may_claim(order, 3, 10.0, 5.0)
    assert not rule.may_claim(order, 0, 100.0, 5.0)  # the lost host, or a retired launcher
    assert not rule.may_claim(order, 4, 100.0, 5.0) and not rule.may_claim((1, 3), 2, 100.0, 5.0)
    assert rule.may_claim((1, 3), 3, 5.0, 5.0) and not rule.may_claim((), 1, 100.0, 5.0)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"launchers": 1}, "a single node has no successor"),
        ({"spare_nodes": 0}, "no spare node for the store host's ranks (--spare-nodes 0)"),
        ({"decision": None}, "the store host was lost before its first decision"),
        ({"decision": Decision(Action.STOP, 0)}, "the store host had decided to stop"),
        ({"me": 0}, "this launcher is retired"),
        ({"unhealthy": "storage: /x"}, "this node is unhealthy (storage: /x)"),
        (
            {"shared_state": False},
            "the state dir is not shared with the store host (no record of this run in it)",
        ),
    ],
)
def test_why_not_names_each_case_where_no_succession_can_be(change, why):
    args: dict[str, object] = {
        "launchers": 4,
        "spare_nodes": 1,
        "decision": run_decision(),
        "me": 1,
        "host": 0,
        "shared_state": True,
        "unhealthy": None,
    }
    assert rule.why_not(**args) is None  # type: ignore[arg-type]
    args.update(change)
    assert rule.why_not(**args) == why  # type: ignore[arg-type]


def test_no_spare_left_for_the_store_hosts_ranks_is_named():
    assert rule.lost_ranks_fillable(run_decision(), 0) is None
    used = run_decision(active=(3, 1, 2), spares=())
    assert rule.lost_ranks_fillable(used, 3) == "no spare left for node rank 0 (the store host's)"
    assert rule.lost_ranks_fillable(used, 0) is None  # the host was a spare, or retired


# ----------------------------------------------------------------------- the claim


def claim_of(launcher: int, epoch: int = 1) -> SuccessionClaim:
    return SuccessionClaim(epoch, launcher, f"node{launcher}", "uuid", "node0", 100 + launcher, 1.0)


def test_two_candidates_claiming_at_once_both_follow_one_leader(tmp_path):
    path = tmp_path / "succession" / "77-a0.epoch1.json"
    for _round in range(20):
        if path.exists():
            path.unlink()
        start = threading.Barrier(4)
        got: dict[int, SuccessionClaim] = {}

        def race(k: int, barrier: threading.Barrier = start, got: dict = got) -> None:
            barrier.wait()
            got[k] = rule.claim(path, claim_of(k))

        threads = [threading.Thread(target=race, args=(k,)) for k in (1, 2, 3, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        leaders = {c.launcher for c in got.values()}
        assert len(got) == 4 and len(leaders) == 1, got  # one claim in place; everyone read it
        assert rule.read_claim(path) == got[1]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_settle_claims_in_turn_and_a_later_turn_follows_the_claim(tmp_path):
    path = tmp_path / "c.json"
    now = [0.0]
    wait = rule.Wait((1, 2), 5.0, 30.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert rule.settle(path, claim_of(1), wait, lambda: False) == claim_of(1)
    # launcher 2 finds launcher 1's claim at once (its own turn never comes)
    assert rule.settle(path, claim_of(2), wait, lambda: False) == claim_of(1)


def test_settle_gives_the_next_candidate_its_turn_and_gives_up_in_the_end(tmp_path):
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    wait = rule.Wait((1, 2), 5.0, 12.0, clock=lambda: now[0], sleep=sleep)
    got = rule.settle(tmp_path / "a.json", claim_of(2), wait, lambda: False)
    assert got == claim_of(2) and 5.0 <= now[0] < 5.5  # launcher 1 never claimed: 2's turn came
    now[0] = 0.0
    late = rule.Wait((1, 2), 5.0, 12.0, clock=lambda: now[0], sleep=sleep)
    assert rule.settle(tmp_path / "b.json", claim_of(3), late, lambda: False) == (
        "no launcher claimed epoch 1 within 12 s"
    )


def test_a_file_that_is_no_claim_takes_the_epoch_from_everyone(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1, 2]")
    wait = rule.Wait((1,), 1.0, 1.0)
    got = rule.settle(path, claim_of(1), wait, lambda: False)
    assert isinstance(got, str) and got.startswith("the claim of epoch 1 cannot be read: ")


def test_superseded_sees_the_next_epochs_claim(tmp_path):
    from slurm_ft.statedir import StateDir

    state = StateDir(tmp_path)
    assert rule.superseded(state, "77-a0", 0) is None
    rule.claim(state.succession_claim("77-a0", 1), claim_of(1))
    assert rule.superseded(state, "77-a0", 0) == claim_of(1)
    assert rule.superseded(state, "77-a0", 1) is None


def test_a_follower_tries_the_successors_noted_port_first(tmp_path):
    from slurm_ft.statedir import StateDir

    path = StateDir(tmp_path).succession_port("77-a0", 1)
    rule.publish_port(path, 29402)
    ports = (29400, 29401, 29402, 29403)
    noted = rule.await_port(path, ports, until=0.0, abort=lambda: False, clock=lambda: 1.0)
    assert noted == 29402
    assert rule.ports_to_try(ports, noted) == (29402, 29400, 29401, 29403)
    assert rule.ports_to_try(ports, None) == ports


def test_the_noted_port_is_awaited_until_it_comes(tmp_path):
    path = tmp_path / "s" / "e1.port"
    looks: list[float] = []

    def sleep(_: float) -> None:
        looks.append(1.0)
        if len(looks) == 3:
            rule.publish_port(path, 29401)

    noted = rule.await_port(
        path, (29400, 29401), until=10.0, abort=lambda: False, clock=lambda: float(len(looks)), sleep=sleep
    )
    assert noted == 29401 and len(looks) == 3


def test_survivors_look_at_the_claim_every_20_ms_in_small_jobs_and_together_at_most_2048_times_a_second():
    assert rule.look_period(2) == rule.look_period(40) == 0.02
    assert rule.look_period(1024) == 0.5
    assert rule.look_period(2047) == pytest.approx(2047 / 2048)
    assert rule.look_period(4095) == rule.look_period(16383) == 1.0  # never more than a second
    for n in (41, 64, 512, 2047):
        assert n / rule.look_period(n) == pytest.approx(2048)


def test_a_survivor_of_a_big_job_sleeps_its_stretched_look_between_looks_at_the_claim(tmp_path):
    now, slept = [0.0], []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    order = tuple(range(1, 1025))
    wait = rule.Wait(order, 30.0, 40.0, clock=lambda: now[0], sleep=sleep)
    got = rule.settle(tmp_path / "c.json", claim_of(2), wait, lambda: False)
    assert got == claim_of(2) and set(slept) == {0.5}  # 1,024 survivors: a look every 0.5 s


@pytest.mark.parametrize("text", ["", "http\n", "80\n", "29400.5\n"])
def test_a_note_that_is_no_port_of_the_job_means_a_scan(tmp_path, text):
    path = tmp_path / "e1.port"
    path.write_text(text)
    assert rule.await_port(path, (29400, 29401), until=99.0, abort=lambda: False) is None


def test_no_note_by_the_deadline_or_a_signal_means_a_scan(tmp_path):
    path = tmp_path / "e1.port"
    clock = iter([0.0, 1.0, 2.5])
    got = rule.await_port(
        path, (29400,), until=2.0, abort=lambda: False, clock=lambda: next(clock), sleep=lambda _: None
    )
    assert got is None
    assert rule.await_port(path, (29400,), until=99.0, abort=lambda: True) is None


# ----------------------------------------------------------------------- what carries over


def test_keys_of_a_new_epoch_share_nothing_with_the_old_and_keep_their_families():
    old = Keys("77-a0", "ns")
    new = next_epoch(old)
    assert new.epoch == 1 and old.decision(3) != new.decision(3)
    assert new.decision(3) == "slurm_ft/ns/77-a0/e1/c3/decision"
    assert old.decision(3) == "slurm_ft/ns/77-a0/c3/decision"  # epoch 0: the keys as before
    assert family(new, new.join(2, 1)) == "c<i>/join/<node>" and family(new, old.join(2, 1)) is None


def test_a_base_of_a_successor_reads_back_and_an_old_one_still_parses():
    base = Base(5, "u", epoch=2, host=1, index=3)
    assert decode(Base, encode(base).encode()) == base
    assert decode(Base, b'{"first_cycle": 5, "run_uuid": "u"}') == Base(5, "u")


def test_the_spare_book_comes_back_from_the_last_decision():
    book = SpareBook.for_job(5, 2, 1, 2)
    joins = [None, *(JoinInfo(k, f"node{k}", "h", 1) for k in range(1, 5))]
    book.note_roster(joins, [])  # launcher 0 missing: retired
    book.plan(1)
    book.note_failure(Failure(FailureKind.WORKER, "node1", 1, 0.0), explained=False)
    retired, charged, streak = book.memory()
    decision = run_decision(
        active=book.active, spares=book.spares, retired=retired, charged=charged, streak=streak
    )
    again = SpareBook.restored(decision, 5, 1, 2)
    assert again.retired == book.retired and again.retired[0].why is Why.MISSING
    assert (again.active, again.charged, again.spares) == (book.active, book.charged, book.spares)
    assert again.memory() == book.memory() and streak == (1, 1)
    # what is not what memory() writes is left out
    odd = SpareBook.restored(run_decision(retired=("x:lost:", "1:nope:", "9:lost:")), 4, 1, 2)
    assert odd.retired == {}


# ----------------------------------------------------------------------- the cycle

SLEEP_THEN_FINISH = '[ "$SLURM_FT_CYCLE" = 0 ] && exec sleep 30; exit 0'


def play_node0(c: Cycle, uuid: str = "uuid-0") -> Client:
    """The test is node 0: it publishes the run and cycle 0's decision (node 0 and two more
    active, launcher 3 a spare) and writes cycle 0's record, as node 0 does."""
    host = Client(c.store.connect(), Keys("77-a0"))
    host.prepare(4, Base(0, uuid))
    wait_until(lambda: host.joined(0, [1, 2, 3]), 10, message="launchers 1-3 joined")
    c.state.cycles_dir.mkdir(parents=True, exist_ok=True)
    c.state.cycle_record(0).write_text(json.dumps({"cycle": 0, "run_uuid": uuid}))
    host.publish_decision(0, run_decision())
    return host


def test_node0_lost_the_lowest_survivor_leads_and_node0s_ranks_move_to_the_spare(tmp_path):
    c = Cycle(tmp_path, 4, SLEEP_THEN_FINISH, **{"launch.spare_nodes": 1}).start(only=[1, 2, 3])
    play_node0(c)
    wait_until(lambda: c.in_watch(1) and c.in_watch(2), 10, message="launchers 1 and 2 watching")
    c.store.shutdown()  # node 0 and its store are gone
    assert c.finish() == [0, 0, 0], c.node(1).events()
    out = c.outcome()  # written by the successor, into the shared state dir
    assert (out["exit_code"], out["cycles"]) == (0, 2), out
    assert out["store_successions"] == ["epoch 1: node1 hosts the store after node0 was lost in cycle 0"]
    assert out["lost_nodes"] == ["node0"] and out["unfenced"] == []
    rec = json.loads(c.state.cycle_record(1).read_text())
    assert rec["active_nodes"] == ["node3", "node1", "node2"] and rec["master_addr"] == "127.0.1.4"
    assert rec["replacements"][0].startswith("node rank 0: node0 -> node3 (lost")
    lost = json.loads(c.state.cycle_record(0).read_text())  # the successor closed the lost cycle
    assert lost["outcome"] == "lost" and lost["first_failure"]["kind"] == "lost-node"
    assert lost["first_failure"]["node"] == "node0"
    claim = json.loads(c.state.succession_claim("77-a0", 1).read_text())
    assert (claim["launcher"], claim["lost"]) == (1, "node0")
    assert "store succession: epoch 1: node1 hosts the store" in c.node(3).events()
    assert "fence of node0: no record of its processes" in c.node(1).events()


def test_two_candidates_at_once_one_leads_and_the_job_goes_on(tmp_path, monkeypatch):
    """Every candidate believes its turn has come at once: the claim decides."""
    monkeypatch.setattr(rule, "may_claim", lambda order, me, waited, turn: True)
    c = Cycle(tmp_path, 4, SLEEP_THEN_FINISH, **{"launch.spare_nodes": 1}).start(only=[1, 2, 3])
    play_node0(c)
    wait_until(lambda: c.in_watch(1) and c.in_watch(2), 10, message="launchers 1 and 2 watching")
    c.store.shutdown()
    assert c.finish() == [0, 0, 0]
    leader = json.loads(c.state.succession_claim("77-a0", 1).read_text())["launcher"]
    assert set(c.epochs) == {0, 1}  # one successor store
    led = [k for k in (1, 2, 3) if c.node(k).agent.coordinator is not None]
    assert led == [leader], led
    assert c.outcome()["store_successions"][0].startswith(f"epoch 1: node{leader} hosts the store")


def test_without_a_spare_the_attempt_ends_as_before_and_says_why(tmp_path):
    c = Cycle(tmp_path, 2, "exec sleep 30").start(only=[1])
    host = Client(c.store.connect(), Keys("77-a0"))
    host.prepare(2, Base(0, "u"))
    wait_until(lambda: host.joined(0, [1]), 10, message="node 1 joined")
    host.publish_decision(0, Decision(Action.RUN, 0, master_port=1, nodes=("node0", "node1")))
    wait_until(lambda: c.in_watch(1), 10, message="node 1 watching")
    c.store.shutdown()
    assert c.finish() == [1]
    reason = c.outcome()["reason"]
    assert reason.startswith("lost node 0: ") and reason.endswith(
        "; no successor: no spare node for the store host's ranks (--spare-nodes 0)"
    )


def test_a_state_dir_not_shared_with_the_store_host_means_no_succession(tmp_path):
    c = Cycle(tmp_path, 4, SLEEP_THEN_FINISH, **{"launch.spare_nodes": 1}).start(only=[1, 2, 3])
    host = play_node0(c)
    wait_until(lambda: c.in_watch(1) and c.in_watch(2), 10, message="launchers 1 and 2 watching")
    c.state.cycle_record(0).unlink()  # as if node 0 wrote its records elsewhere
    for k in (1, 2, 3):
        c.node(k).agent.books.private_records = None
    c.store.shutdown()
    assert c.finish() == [1, 1, 1]
    assert not c.state.succession_claim("77-a0", 1).exists()
    assert "no successor: the state dir is not shared with the store host" in c.node(2).events()
    del host


def test_the_store_host_lost_twice_in_a_row_while_spares_last(tmp_path):
    c = Cycle(tmp_path, 5, SLEEP_THEN_FINISH.replace("= 0", "!= 2"), **{"launch.spare_nodes": 2})
    c.start(only=[1, 2, 3, 4])
    host = Client(c.store.connect(), Keys("77-a0"))
    host.prepare(5, Base(0, "u"))
    wait_until(lambda: host.joined(0, [1, 2, 3, 4]), 10, message="launchers 1-4 joined")
    c.state.cycles_dir.mkdir(parents=True, exist_ok=True)
    c.state.cycle_record(0).write_text(json.dumps({"cycle": 0, "run_uuid": "u"}))
    names = ("node0", "node1", "node2", "node3", "node4")
    host.publish_decision(0, run_decision(nodes=names, spares=(3, 4)))
    wait_until(lambda: c.in_watch(1) and c.in_watch(2), 10, message="cycle 0 running")
    c.store.shutdown()
    wait_until(lambda: 1 in c.epochs and c.in_watch(2, 1), 20, message="cycle 1 under the successor")
    c.epochs[1].shutdown()  # the successor's host goes too (its launcher loses its own store)
    codes = c.finish(30)
    assert sorted(codes) == [0, 0, 0, 1], [n.events()[-600:] for n in c.nodes]
    out = c.outcome()
    assert out["exit_code"] == 0 and len(out["store_successions"]) == 2, out
    assert out["store_successions"][1].startswith("epoch 2: node2 hosts the store after node1")
    rec = json.loads(c.state.cycle_record(2).read_text())
    assert rec["active_nodes"] == ["node3", "node4", "node2"], rec
