"""Rank sets for slurm-ft-logs: parsing, the hostlist-style form, and the prefix regex
that finds a set's lines (checked against a plain per-line reading)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft import logline
from slurm_ft.logs import ranks


def test_a_list_with_ranges_is_read():
    assert ranks.parse("0,17,100-103") == {0, 17, 100, 101, 102, 103}
    assert ranks.parse(" 5 , 3-4,") == {3, 4, 5}
    assert ranks.parse("7-7") == {7}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no ranks"),
        (",", "no ranks"),
        ("a", "not a rank"),
        ("1-", "not a rank"),
        ("-3", "not a rank"),
        ("5-3", "runs backwards"),
        ("1,2-x", "not a rank"),
        ("0-99999999", "beyond any job"),
    ],
)
def test_a_bad_list_is_refused_with_a_reason(text, fragment):
    with pytest.raises(ranks.RankSetError, match=fragment):
        ranks.parse(text)


def test_sets_are_written_as_short_ranges():
    assert ranks.format_set(list(range(512)) + list(range(513, 1024))) == "0-511,513-1023"
    assert ranks.format_set([5, 3, 4, 9, 9]) == "3-5,9"
    assert ranks.format_set([]) == ""


@given(st.lists(st.sets(st.integers(0, 40), max_size=24), max_size=30))
def test_many_sets_are_written_as_each_one_alone(sets):
    # small sets go together (neighbours found across the whole list), large ones alone
    lists = [list(s) for s in sets]
    assert ranks.format_sets(lists) == [ranks.format_set(s).encode() for s in sets]


def test_many_sets_with_neighbours_at_their_ends_and_across_them():
    sets = [[4, 2], [3], [7, 8], [9], [1], list(range(100))]
    assert ranks.format_sets(sets) == [b"2,4", b"3", b"7-8", b"9", b"1", b"0-99"]


def test_many_sets_of_ranks_beyond_the_table_of_written_ranks():
    sets = [[9_999_999, 70_000], [65_535, 65_536, 3]]
    assert ranks.format_sets(sets) == [b"70000,9999999", b"3,65535-65536"]


@given(st.sets(st.integers(0, 300)))
def test_format_and_parse_round_trip(values):
    text = ranks.format_set(values)
    assert (ranks.parse(text) if text else frozenset()) == frozenset(values)


def _block(world: int) -> bytes:
    width = logline.rank_width(world)
    lines = []
    for r in range(world):
        for mark in logline.MARKS:
            lines.append(logline.rank_prefix(r, width, mark) + f"text of {r} with 17: 3".encode())
    return b"\n" + b"\n".join(lines) + b"\n"


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 1200), st.data())
def test_the_finder_finds_exactly_the_lines_of_the_set(world, data):
    chosen = data.draw(st.sets(st.integers(0, world - 1), max_size=40))
    width = logline.rank_width(world)
    block = _block(world)
    found = [m.group()[1:] for m in ranks.line_finder(chosen, width).finditer(block)]
    expected = [line for line in block.split(b"\n")[1:-1] if logline.split_line(line)[0] in chosen]
    assert found == expected


def test_the_pattern_of_a_range_is_built_digit_by_digit():
    pattern = ranks.prefix_pattern(range(100, 132), 4)
    assert pattern.startswith(r"\ 1(?:[0-2][0-9]|3[0-1])"), pattern


def test_an_empty_set_matches_nothing():
    assert ranks.line_finder(set(), 3).search(_block(20)) is None


def test_log_lines_are_split_into_rank_mark_and_text():
    assert logline.split_line(b"  17: hello: x") == (17, b": ", b"hello: x")
    assert logline.split_line(b"3+ rest") == (3, b"+ ", b"rest")
    assert logline.split_line(b"12! note") == (12, b"! ", b"note")
    assert logline.split_line(b"no prefix here") is None
    assert logline.split_line(b"ab: x") is None
