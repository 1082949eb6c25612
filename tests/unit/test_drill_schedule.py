"""The drill's plans as data: schedule files, mixes, seeded plans, --at, fault names."""

from __future__ import annotations

import pytest

from slurm_ft.drill import faults, schedule
from slurm_ft.drill.faults import Fault
from slurm_ft.drill.schedule import Planned, ScheduleError


def test_a_schedule_file_is_parsed_in_time_order_with_targets_and_comments() -> None:
    text = "# warm-up first\n90 hang\n30   kill rank=1   # a GPU falls off\n\n"
    text += "2.5m lose-node node=2\n45s preempt\n"
    assert schedule.parse_schedule(text) == [
        Planned(30.0, Fault.KILL, rank=1),
        Planned(45.0, Fault.PREEMPT),
        Planned(90.0, Fault.HANG),
        Planned(150.0, Fault.LOSE_NODE, node=2),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("30 explode", "line 1: unknown fault 'explode'"),
        ("10 kill\nsoon kill", "line 2: not a time in seconds: 'soon'"),
        ("30 kill rank=x", "line 1: expected rank=R or node=N"),
        ("30 lose-node rank=1", "line 1: lose-node cannot be aimed with rank="),
        ("30 preempt node=1", "line 1: preempt cannot be aimed with node="),
        ("30 kill rank=1 now", "line 1: too many words"),
        ("-5 kill", "line 1: not a time in seconds: '-5'"),
        ("30", "line 1: expected AT FAULT"),
        ("# nothing\n", "no faults in the schedule"),
        ("30 nic-down", "line 1: nic-down cannot be injected honestly here"),
    ],
)
def test_a_schedule_that_does_not_parse_names_the_line(text: str, problem: str) -> None:
    with pytest.raises(ScheduleError) as info:
        schedule.parse_schedule(text)
    assert str(info.value).startswith(problem)


def test_fault_names_the_machine_cannot_honour_are_refused_with_the_reason() -> None:
    with pytest.raises(faults.FaultError, match="slow-storage cannot be injected honestly"):
        faults.parse("slow-storage")
    with pytest.raises(faults.FaultError, match=r"unknown fault 'sigsegv' \(known: crash, kill"):
        faults.parse("sigsegv")


def test_a_mix_is_weights_by_fault_and_llama3_is_the_papers_table() -> None:
    assert schedule.parse_mix("kill=3, hang=1,kill") == {Fault.KILL: 4.0, Fault.HANG: 1.0}
    llama = schedule.parse_mix("llama3")
    assert llama[Fault.KILL] == 64.0 and sum(llama.values()) == 100.0
    for bad in ("kill=x", "kill=-1", "kill=0", "teleport=1", "kill=inf"):
        with pytest.raises(ScheduleError, match="mix"):
            schedule.parse_mix(bad)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    mix = schedule.parse_mix("llama3")
    one = schedule.seeded(120, mix, 7, 1200, world_size=6, num_nodes=3)
    assert one == schedule.seeded(120, dict(reversed(list(mix.items()))), 7, 1200, 6, 3)  # order-free
    assert one != schedule.seeded(120, mix, 8, 1200, 6, 3)
    assert all(0 < p.at < 1200 for p in one)
    assert [p.at for p in one] == sorted(p.at for p in one)
    for p in one:
        if p.fault in (Fault.KILL, Fault.CRASH, Fault.HANG):
            assert p.rank is not None and 0 <= p.rank < 6 and p.node is None
        elif p.fault is Fault.LOSE_NODE:
            assert p.node is not None and 0 <= p.node < 3 and p.rank is None
        else:
            assert p.rank is None and p.node is None


def test_seeded_plans_average_the_asked_rate_and_follow_the_mix() -> None:
    plan = schedule.seeded(10, {Fault.KILL: 3, Fault.HANG: 1}, 1, 100_000, 4, 2)
    assert 9000 < len(plan) < 11000  # a Poisson process of rate 1/10 s over 100,000 s
    kills = sum(p.fault is Fault.KILL for p in plan)
    assert 0.72 < kills / len(plan) < 0.78


def test_a_seeded_plan_is_pinned_across_python_versions() -> None:
    # Only Random.random() is used: this exact plan must never change.
    plan = schedule.seeded(120, {Fault.KILL: 1}, 42, 600, 4, 2)
    assert [p.describe() for p in plan] == PINNED_42


PINNED_42 = [
    "122.407 kill rank=1",
    "152.718 kill rank=2",
    "419.992 kill rank=1",
    "423.622 kill rank=2",
    "426.849 kill rank=2",
    "521.329 kill rank=2",
]


def test_seeded_refuses_nonsense() -> None:
    with pytest.raises(ScheduleError, match="--every"):
        schedule.seeded(0, {Fault.KILL: 1}, 1, 10, 1, 1)


def test_at_is_seconds_from_now_or_a_clock_time_today() -> None:
    now, midnight = 50_000.0, 43_200.0  # 01:53:20 local
    assert schedule.parse_at("30", now, midnight) == now + 30
    assert schedule.parse_at("+2m", now, midnight) == now + 120
    assert schedule.parse_at("02:00", now, midnight) == midnight + 7200
    assert schedule.parse_at("02:00:30", now, midnight) == midnight + 7230
    for bad, problem in (
        ("01:00", "has passed"),
        ("25:00", "not a time of day"),
        ("1:2:3:4", "HH:MM"),
        ("x", "not a time"),
    ):
        with pytest.raises(ScheduleError, match=problem):
            schedule.parse_at(bad, now, midnight)
