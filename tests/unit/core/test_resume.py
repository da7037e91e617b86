"""Where a mirror task resumes when its marks and its copies disagree (crossfeed/core/resume.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.resume import resume_offset

pytestmark = pytest.mark.unit


def test_marks_and_copies_agree_the_marks_win() -> None:
    assert resume_offset(100, 99, []) == 100
    # the newest records were filtered (no copy): the marks, not the last copy
    assert resume_offset(100, 90, []) == 100
    # a later transaction's copies, aborted: above the marks, nothing to redo
    assert resume_offset(100, 99, [100, 101, 102]) == 100


def test_marks_committed_without_their_copies_resume_at_the_first_lost_copy() -> None:
    # what a CI stress run showed: marks 55591, copies up to 55510 committed, 55511..55800
    # aborted (this transaction's and the next one's)
    assert resume_offset(55591, 55510, range(55511, 55801)) == 55511


def test_copies_committed_without_their_marks_are_not_copied_again() -> None:
    assert resume_offset(820, 855, []) == 856


def test_nothing_committed_in_the_target_yet() -> None:
    assert resume_offset(0, None, []) == 0
    assert resume_offset(50, None, range(10, 60)) == 10
    assert resume_offset(50, None, []) == 50


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[tuple[int, int, list[int]]], int, int]:
    """Transactions over consecutive source ranges, each with the offsets it copies
    (the others filtered); how many of them have committed copies (a prefix: once a
    target partition's commit is lost the task restarts) and committed marks (a prefix
    of the changes partition)."""
    txns = []
    start = draw(st.integers(0, 50))
    for _ in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 8))
        copied = [o for o in range(start, start + size) if draw(st.booleans())]
        txns.append((start, start + size, copied))
        start += size
    copies_committed = draw(st.integers(0, len(txns)))
    marks_committed = draw(st.integers(0, len(txns)))
    return txns, copies_committed, marks_committed


@given(histories())
def test_every_copy_ends_up_in_the_target_exactly_once(
    history: tuple[list[tuple[int, int, list[int]]], int, int],
) -> None:
    txns, c, m = history
    first = txns[0][0]
    marked = txns[m - 1][1] if m else first
    committed = [o for _, _, copied in txns[:c] for o in copied]
    aborted = [o for _, _, copied in txns[c:] for o in copied]
    resumed = resume_offset(marked, max(committed) if committed else None, aborted)
    should_copy = {o for _, _, copied in txns for o in copied}
    # copied again from `resumed` on: together with what is committed, every record once
    again = {o for o in should_copy if o >= resumed}
    assert not again & set(committed), "a committed copy would be copied twice"
    assert set(committed) | again == should_copy, "a record would never be copied"
