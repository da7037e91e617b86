"""The windows a partition's end is read back in (crossfeed/kafka/tails.backwards)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crossfeed.kafka.tails import backwards


def test_windows_grow_four_times_until_the_start() -> None:
    assert list(backwards(0, 10_000, 256)) == [9_744, 8_976, 5_904, 0]


def test_windows_stop_at_the_most_records_asked_for() -> None:
    assert list(backwards(0, 1_000_000, 256, most=4_096)) == [999_744, 998_976, 995_904]


def test_an_empty_range_is_read_once() -> None:
    assert list(backwards(50, 50, 256)) == [50]


@given(
    low=st.integers(0, 10**6),
    span=st.integers(0, 10**7),
    first=st.integers(1, 5_000),
    most=st.one_of(st.none(), st.integers(1, 10**6)),
)
def test_windows_only_grow_and_stay_in_the_partition(
    low: int, span: int, first: int, most: int | None
) -> None:
    end = low + span
    starts = list(backwards(low, end, first, most))
    assert starts, "at least one window is read"
    assert all(low <= s <= end for s in starts)
    assert starts == sorted(starts, reverse=True)
    assert len(set(starts)) == len(starts), "no window is read twice"
    last = starts[-1]
    # It ends at the partition's start, or once a window spans at least `most` records.
    assert last == low or (most is not None and end - last >= min(most, end - low))
