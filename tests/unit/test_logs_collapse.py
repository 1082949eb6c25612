"""--collapse: lines ranks printed alike fold into one with their rank set and count;
=numbers folds lines that differ only in numbers and shows each number's spread."""

from __future__ import annotations

import random
from collections import Counter

from slurm_ft import logline
from slurm_ft.logs import collapse

WORLD = 1024
WIDTH = logline.rank_width(WORLD)


def line(rank: int, text: str, mark: bytes = logline.LINE_MARK) -> bytes:
    return logline.rank_prefix(rank, WIDTH, mark) + text.encode()


def folded(lines: list[bytes], mode: collapse.Mode = collapse.Mode.EXACT, **kw: int) -> list[str]:
    c = collapse.Collapser(WORLD, mode, **kw)
    c.feed([b"".join(x + b"\n" for x in lines)])
    return b"".join(b for w in c.finish() for b in collapse.render(w)).decode().splitlines()


def test_a_warning_every_rank_printed_becomes_one_line_with_the_rank_set():
    lines = [line(r, "UserWarning: x") for r in range(WORLD) if r != 512]
    lines += [line(r, "UserWarning: x") for r in range(4)]  # printed twice by 0-3
    assert folded(lines) == ["   1027 0-511,513-1023: UserWarning: x"]


def test_groups_come_in_the_order_of_their_first_line_and_singles_stay_as_written():
    lines = [
        line(5, "only five"),
        line(1, "alike"),
        line(7, "only seven"),
        line(2, "alike"),
        line(7, "only seven"),
        line(3, "last"),
    ]
    assert folded(lines) == [
        f"      1 {' ' * (WIDTH - 1)}5: only five",
        "      2 1-2: alike",
        f"      2 {' ' * (WIDTH - 1)}7: only seven",
        f"      1 {' ' * (WIDTH - 1)}3: last",
    ]


def test_notes_and_continuations_do_not_fold_with_lines():
    lines = [line(0, "x"), line(1, "x", logline.NOTE_MARK), line(2, "x", logline.NOTE_MARK)]
    assert folded(lines) == [f"      1 {' ' * (WIDTH - 1)}0: x", "      2 1-2! x"]


def test_numbers_mode_shows_the_spread_of_each_number():
    lines = [
        line(r, f"step {s} loss {1.5 + r / 100:.2f} time {200 + s}ms") for s in (10, 11) for r in range(4)
    ]
    lines.append(line(9, "other"))
    assert folded(lines, collapse.Mode.NUMBERS) == [
        "      8 0-3: step [10..11] loss [1.50..1.53] time [210..211]ms",
        "      1 9: other",
    ]


def test_numbers_mode_keeps_a_number_that_does_not_vary_as_it_is():
    lines = [line(r, f"epoch 3 step {r}") for r in range(3)]
    assert folded(lines, collapse.Mode.NUMBERS) == ["      3 0-2: epoch 3 step [0..2]"]


def test_lines_without_a_rank_prefix_are_kept():
    lines = [b"garbage line", b"garbage line", line(1, "ok")]
    out = folded(lines)
    assert "      2 garbage line" in out and any(o.endswith("1: ok") for o in out)


def test_counts_and_rank_sets_agree_with_a_plain_count():
    rnd = random.Random(4)
    texts = [f"text {k}" for k in range(30)]
    lines = [line(rnd.randrange(WORLD), rnd.choice(texts)) for _ in range(5000)]
    c = collapse.Collapser(WORLD)
    c.feed([b"".join(x + b"\n" for x in lines[:2500]), b"".join(x + b"\n" for x in lines[2500:])])
    groups = {g.text.decode(): g for w in c.finish() for g in w.groups()}
    expected = Counter(logline.split_line(x)[2].decode() for x in lines)
    assert {t: g.count for t, g in groups.items()} == dict(expected)
    for text, g in groups.items():
        assert g.ranks == {logline.split_line(x)[0] for x in lines if x.endswith(text.encode())}


def test_a_log_of_more_distinct_lines_than_the_table_holds_is_collapsed_window_by_window():
    lines = [line(r % 8, f"unique {r}") for r in range(50)] + [line(r, "same") for r in range(8)]
    c = collapse.Collapser(WORLD, max_distinct=20)
    for k in range(0, len(lines), 5):
        c.feed([b"".join(x + b"\n" for x in lines[k : k + 5])])
    windows = c.take() + c.finish()
    assert len(windows) >= 3 and all(w.more for w in windows[:-1]) and not windows[-1].more
    total = sum(g.count for w in windows for g in w.groups())
    assert total == len(lines)
    text = b"".join(b for w in windows for b in collapse.render(w, limit=20)).decode()
    assert "-- more than 20 distinct lines" in text


def test_a_line_a_rank_repeats_counts_every_time_in_its_group():
    # rank 3 prints "x" five times, ranks 0-2 once: the group holds 8 lines, and a
    # single rank's repeated line keeps its own count (pairs seen more than once)
    lines = [line(r, "x") for r in range(3)] + [line(3, "x")] * 5 + [line(9, "alone")] * 4
    assert folded(lines) == ["      8 0-3: x", f"      4 {' ' * (WIDTH - 1)}9: alone"]


def test_a_window_flush_keeps_repeated_lines_counted_in_their_window():
    # the table fills (4 distinct) after u2: window 1 is same x3, u0-u2; window 2 u3, same x2
    lines = [line(0, "same")] * 3 + [line(r, f"u{r}") for r in range(4)] + [line(1, "same")] * 2
    c = collapse.Collapser(WORLD, max_distinct=4)
    c.feed([x + b"\n" for x in lines])
    windows = c.take() + c.finish()
    total = sum(g.count for w in windows for g in w.groups())
    assert total == len(lines)
    same = [g for w in windows for g in w.groups() if g.text == b"same"]
    assert sorted(g.count for g in same) == [2, 3]


def test_a_nul_byte_in_a_text_does_not_fold_with_a_number_at_its_place():
    # the numbers template replaces each number by a NUL byte: a text with a NUL byte of
    # its own folded with one that has a number there (and failed on differing counts)
    lines = [line(0, "a\0b"), line(1, "a5b"), line(2, "x\0 7"), line(3, "x5 \0"), line(4, "a\0b")]
    assert folded(lines, collapse.Mode.NUMBERS) == [
        "      2 0,4: a\0b",
        "      1 1: a5b",
        "      1 2: x\0 7",
        "      1 3: x5 \0",
    ]


def test_numbers_mode_folds_unranked_lines_among_themselves_only():
    lines = [b"torn 5", line(1, "torn 6"), b"torn 7", line(2, "torn 8")]
    assert folded(lines, collapse.Mode.NUMBERS) == ["      2 ?: torn [5..7]", "      2 1-2: torn [6..8]"]


def test_an_unranked_line_among_shared_texts_is_shown_whole_and_as_json_without_ranks():
    lines = [line(0, "x"), line(1, "x"), b"garbage", line(2, "y")]
    c = collapse.Collapser(WORLD)
    c.feed([b"".join(x + b"\n" for x in lines)])
    windows = c.finish()
    text = b"".join(b for w in windows for b in collapse.render(w)).decode()
    assert text.splitlines() == ["      2 0-1: x", "      1 garbage", f"      1 {' ' * (WIDTH - 1)}2: y"]
    docs = [g.to_json() for w in windows for g in w.groups()]
    assert [(d["ranks"], d["kind"], d["text"]) for d in docs] == [
        ("0-1", "line", "x"),
        ("", "line", "garbage"),
        ("2", "line", "y"),
    ]
    assert [g.unranked for w in windows for g in w.groups()] == [0, 1, 0]


def test_numbers_mode_shows_each_end_of_a_spread_as_its_first_line_wrote_it():
    lines = [line(0, "t 1.00 of -0"), line(1, "t 2 of 0"), line(2, "t 1.0 of 0.0"), line(3, "t 2.0 of -0.0")]
    assert folded(lines, collapse.Mode.NUMBERS) == ["      4 0-3: t [1.00..2] of -0"]


def test_numbers_mode_on_an_empty_log_shows_nothing():
    assert folded([], collapse.Mode.NUMBERS) == []
