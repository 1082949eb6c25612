"""Node 0's memory of the done marks it read: an outsider that deletes keys faster than
their writers set them again kept node 0 from ever seeing every mark at one moment, and
the end of a finished job hung."""

from slurm_ft.launch.rendezvous.donemarks import FEW_MARKS, DoneMarks


def test_a_mark_once_read_stays_read_and_the_own_mark_needs_no_reading():
    marks = DoneMarks()
    marks.own(3, 0)
    assert marks.to_ask(3, [0, 1, 2]) == [[1], [2]]  # the last few one by one
    marks.saw(3, [1], [True])
    marks.saw(3, [2], [None])  # missing or forged: not read
    assert not marks.all_read(3, [0, 1, 2]) and marks.to_ask(3, [0, 1, 2]) == [[2]]
    marks.saw(3, [2], [True])
    assert marks.all_read(3, [0, 1, 2]) and marks.to_ask(3, [0, 1, 2]) == []
    assert marks.own_in == 3 and not marks.all_read(4, [0, 1, 2])  # a new cycle starts afresh


def test_many_unread_marks_are_one_request():
    marks = DoneMarks()
    many = list(range(FEW_MARKS + 1))
    assert marks.to_ask(0, many) == [many]
