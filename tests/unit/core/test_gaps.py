"""Unit and property tests for crossfeed.core.gaps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.gaps import (
    Gap,
    Position,
    acknowledge,
    acknowledged,
    carried,
    carry,
    classify,
    gap_at,
    parse_key,
)
from crossfeed.core.partitions import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition("orders", 3)
offsets = st.integers(0, 2**40)


@given(offsets, offsets, st.integers(0, 2**20))
def test_every_position_is_a_gap_readable_or_beyond_the_end(
    position: int, log_start: int, length: int
) -> None:
    log_end = log_start + length
    where = classify(position, log_start, log_end)
    if position < log_start:
        assert where is Position.GAP
        gap = gap_at(TP, position, log_start)
        assert (gap.first, gap.end) == (position, log_start)
        assert gap.count == log_start - position >= 1
        assert gap.last == log_start - 1
    elif position <= log_end:
        assert where is Position.READABLE
    else:
        assert where is Position.BEYOND_END


def test_known_cases() -> None:
    assert classify(120, 200, 250) is Position.GAP
    assert classify(200, 200, 250) is Position.READABLE
    assert classify(250, 200, 250) is Position.READABLE  # the log end: nothing to read yet
    assert classify(251, 200, 250) is Position.BEYOND_END
    assert gap_at(TP, 120, 200).count == 80


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (0, -1), (5, 4)])
def test_not_a_log(start: int, end: int) -> None:
    with pytest.raises(ValueError):
        classify(0, start, end)


@pytest.mark.parametrize(("first", "end"), [(5, 5), (6, 5), (-1, 3)])
def test_an_empty_or_negative_gap_is_refused(first: int, end: int) -> None:
    with pytest.raises(ValueError):
        Gap(TP, first, end)


@given(offsets, st.integers(1, 2**20), st.integers(0, 2**20))
def test_the_key_does_not_move_with_the_log_start(first: int, count: int, more: int) -> None:
    assert Gap(TP, first, first + count).key == Gap(TP, first, first + count + more).key
    assert parse_key(Gap(TP, first, first + count).key) == (TP, first)


def test_the_report_says_range_count_policy_and_the_command() -> None:
    gap = Gap(TP, 120, 200)
    line = gap.describe("orders-feed", "continue")
    assert "orders/3: offsets 120-199 (80 records) were deleted at the source" in line
    assert "copying went on from offset 200" in line
    assert "crossfeed changefeed ack-gap orders-feed orders/3@120" in line
    waiting = gap.describe("orders-feed", "stop")
    assert "waits (gap.policy=stop)" in waiting and "ack-gap orders-feed orders/3@120" in waiting
    done = gap.describe("orders-feed", "stop", acknowledged=True)
    assert done.endswith("(acknowledged)") and "ack-gap" not in done


@given(st.lists(st.sampled_from(["a/0@1", "a/1@5", "b.c/12@0", "x/y/3@42"]), max_size=6))
def test_acknowledging_keeps_every_key_and_is_idempotent(keys: list[str]) -> None:
    once = acknowledge(None, keys)
    assert acknowledged(once) == frozenset(keys)
    assert acknowledge(once, keys) == once
    assert acknowledged(acknowledge(once, ["z/9@9"])) == frozenset([*keys, "z/9@9"])


@pytest.mark.parametrize("bad", ["orders/3", "orders@3", "orders/3@", "orders/3@x", "@1"])
def test_a_key_not_as_reported_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        acknowledge(None, [bad])


@given(st.lists(st.tuples(offsets, st.integers(1, 2**20)), max_size=5))
def test_the_gaps_a_mark_carries_read_back(spans: list[tuple[int, int]]) -> None:
    tp = TopicPartition("orders.eu", 3)
    found = [Gap(tp, first, first + count) for first, count in spans]
    text = carry(found)
    if not found:
        assert text == ""  # a mark without gaps carries no header
        return
    assert carried(tp, text) == sorted(set(found))
    assert carry(carried(tp, text)) == text


@pytest.mark.parametrize("bad", ["5", "5-", "-5", "a-b", "5-3", "1-2;3-4"])
def test_a_carried_text_carry_never_writes_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        carried(TopicPartition("t", 0), bad)
