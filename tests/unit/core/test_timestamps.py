"""Unit and property tests for crossfeed.core.timestamps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.partitions import TopicPartition as TP
from crossfeed.core.timestamps import (
    MAX_TS,
    ResolvedTracker,
    commit_interval_ms,
    commit_ts_us,
    consistency_ts,
    parse_commit_ts,
)
from crossfeed.wire.headers import COMMIT_TS

pytestmark = pytest.mark.unit


class TestCommitTs:
    def test_header_wins(self) -> None:
        assert commit_ts_us([("u", b"x"), (COMMIT_TS, b"1700000000123456")], 5) == 1700000000123456

    def test_falls_back_to_record_timestamp_in_microseconds(self) -> None:
        assert commit_ts_us([("u", b"x")], 1_700_000_000_123) == 1_700_000_000_123_000

    def test_zero_is_valid(self) -> None:
        assert commit_ts_us([(COMMIT_TS, b"0")], 5) == 0

    def test_max(self) -> None:
        assert commit_ts_us([(COMMIT_TS, str(MAX_TS).encode())], 0) == MAX_TS

    @pytest.mark.parametrize(
        "value",
        [
            b"",
            b"abc",
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"1.5",
            b"1e6",
            str(MAX_TS + 1).encode(),
            b"\xff",
        ],
    )
    def test_malformed_header_raises(self, value: bytes) -> None:
        with pytest.raises(
            ValueError, match=r"crossfeed-commit-ts header .* is not a commit timestamp"
        ):
            commit_ts_us([(COMMIT_TS, value)], 5)

    def test_header_without_value_raises(self) -> None:
        with pytest.raises(ValueError, match="has no value"):
            commit_ts_us([(COMMIT_TS, None)], 5)

    def test_conflicting_headers_raise(self) -> None:
        with pytest.raises(ValueError, match="conflicting"):
            commit_ts_us([(COMMIT_TS, b"1"), (COMMIT_TS, b"2")], 5)

    def test_agreeing_duplicates_accepted(self) -> None:
        assert commit_ts_us([(COMMIT_TS, b"7"), (COMMIT_TS, b"7")], 5) == 7

    def test_record_without_timestamp_raises(self) -> None:
        with pytest.raises(ValueError, match="no timestamp"):
            commit_ts_us([], -1)


@given(st.integers(0, MAX_TS))
def test_commit_ts_round_trip(ts: int) -> None:
    assert parse_commit_ts(str(ts).encode()) == ts


@given(st.integers(0, 2**40))
def test_fallback_is_ms_times_1000(ms: int) -> None:
    assert commit_ts_us([], ms) == ms * 1000


class TestConsistencyTs:
    def test_min_over_tasks(self) -> None:
        assert consistency_ts({"t1": 50, "t2": 30, "t3": 90}, 10) == 30

    def test_never_backwards(self) -> None:
        assert consistency_ts({"t1": 50, "t2": 30}, 40) == 40

    def test_no_tasks(self) -> None:
        assert consistency_ts({}, 77) == 77


@given(st.lists(st.dictionaries(st.sampled_from("abcd"), st.integers(0, 1000)), max_size=20))
def test_consistency_ts_is_monotonic_and_bounded(rounds: list[dict[str, int]]) -> None:
    ts = 0
    for checkpoints in rounds:
        new = consistency_ts(checkpoints, ts)
        assert new >= ts
        if checkpoints:
            assert new == max(ts, min(checkpoints.values()))
        else:
            assert new == ts
        ts = new


class TestResolvedTracker:
    def test_none_until_every_partition_resolved(self) -> None:
        tracker: ResolvedTracker[TP] = ResolvedTracker([TP("t", 0), TP("t", 1)])
        assert tracker.global_resolved() is None
        tracker.advance(TP("t", 0), 100)
        assert tracker.global_resolved() is None
        assert tracker.pending() == [TP("t", 1)]
        tracker.advance(TP("t", 1), 50)
        assert tracker.global_resolved() == 50
        assert tracker.pending() == []

    def test_empty_is_none(self) -> None:
        assert ResolvedTracker[str]().global_resolved() is None

    def test_partition_never_goes_backwards(self) -> None:
        tracker: ResolvedTracker[str] = ResolvedTracker(["p"])
        assert tracker.advance("p", 100) == 100
        assert tracker.advance("p", 80) == 100
        assert tracker.resolved("p") == 100

    def test_register_does_not_reset(self) -> None:
        tracker: ResolvedTracker[str] = ResolvedTracker()
        tracker.advance("p", 5)
        tracker.register("p")
        assert tracker.resolved("p") == 5
        tracker.register("q")
        assert tracker.global_resolved() is None

    def test_remove_releases_the_global_ts(self) -> None:
        tracker: ResolvedTracker[str] = ResolvedTracker(["p", "q"])
        tracker.advance("p", 5)
        tracker.remove("q")
        assert tracker.global_resolved() == 5
        assert tracker.resolved("q") is None


@given(st.lists(st.tuples(st.sampled_from(["p0", "p1", "p2"]), st.integers(0, 1000)), max_size=40))
def test_global_resolved_is_min_of_per_partition_max(marks: list[tuple[str, int]]) -> None:
    tracker: ResolvedTracker[str] = ResolvedTracker(["p0", "p1", "p2"])
    best: dict[str, int] = {}
    previous_global: int | None = None
    for partition, ts in marks:
        tracker.advance(partition, ts)
        best[partition] = max(best.get(partition, ts), ts)
        current = tracker.global_resolved()
        if len(best) < 3:
            assert current is None
        else:
            assert current == min(best.values())
            assert previous_global is None or current >= previous_global
            previous_global = current


class TestCommitInterval:
    def test_keeping_up_commits_at_the_short_interval(self) -> None:
        assert commit_interval_ms(False, 1_000, 1_050, keep_up_ms=100, backlog_ms=1000) == 100
        assert commit_interval_ms(True, 1_000, 1_300, keep_up_ms=100, backlog_ms=1000) == 100

    def test_a_full_batch_of_old_records_grows_the_transaction_with_the_lag(self) -> None:
        assert commit_interval_ms(True, 1_000, 2_000, keep_up_ms=100, backlog_ms=1000) == 250
        assert commit_interval_ms(True, 1_000, 3_000, keep_up_ms=100, backlog_ms=1000) == 500
        assert commit_interval_ms(True, 0, 3_600_000, keep_up_ms=100, backlog_ms=1000) == 1000

    def test_old_records_in_a_partial_batch_are_no_backlog(self) -> None:
        """Large transactions upstream make every record old: the reader must still leave."""
        assert commit_interval_ms(False, 1_000, 90_000, keep_up_ms=100, backlog_ms=1000) == 100

    def test_fresh_skewed_or_missing_timestamps_are_no_backlog(self) -> None:
        assert commit_interval_ms(True, 5_000, 2_000, keep_up_ms=100, backlog_ms=1000) == 100
        assert commit_interval_ms(True, -1, 2_000_000, keep_up_ms=100, backlog_ms=1000) == 100

    @given(
        full=st.booleans(),
        ts=st.integers(-1, 10**13),
        now=st.integers(0, 10**13),
        keep_up=st.integers(1, 10_000),
        extra=st.integers(0, 100_000),
    )
    def test_always_between_the_two_intervals_and_monotonic_in_the_lag(
        self, full: bool, ts: int, now: int, keep_up: int, extra: int
    ) -> None:
        backlog = keep_up + extra
        got = commit_interval_ms(full, ts, now, keep_up_ms=keep_up, backlog_ms=backlog)
        assert keep_up <= got <= backlog
        older = commit_interval_ms(full, ts - 1_000, now, keep_up_ms=keep_up, backlog_ms=backlog)
        assert ts < 1_000 or older >= got
