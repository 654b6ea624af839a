"""Counts in what poolkit prints (poolkit.wording): "1 epoch", not "1 epochs" (issue 33)."""

from poolkit.wording import counted


def test_a_count_of_one_takes_the_singular_and_others_the_plural():
    assert [counted(n, "epoch") for n in (0, 1, 2, 1500)] == ["0 epochs", "1 epoch", "2 epochs", "1,500 epochs"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"
